"""Fill the output folder: 2 GiB of junk files next to the predictions, then predictions."""
import json
import os
import sys

out_dir = os.path.dirname(sys.argv[2])
chunk = b"z" * (1 << 20)
for i in range(2048):
    with open(os.path.join(out_dir, f"junk-{i // 64}.bin"), "ab") as handle:
        handle.write(chunk)
doc = json.load(open(sys.argv[1]))
ids = [q["id"] for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]]
json.dump({i: "" for i in ids}, open(sys.argv[2], "w"))
