"""Write 1 GiB to stdout, then valid (empty) predictions."""
import json
import sys

line = b"flood " + b"y" * 57 + b"\n"  # 64 bytes
chunk = line * (1 << 14)  # 1 MiB
out = sys.stdout.buffer
for _ in range(1024):
    out.write(chunk)
out.write(b"flood done\n")
out.flush()
doc = json.load(open(sys.argv[1]))
ids = [q["id"] for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]]
json.dump({i: "" for i in ids}, open(sys.argv[2], "w"))
