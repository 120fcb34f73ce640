"""Search every readable file for a canary planted in a hidden test set's gold answers; answer
every question with the paths where it was found ("nothing found" when none)."""
import json
import os
import sys

targets = json.load(open("targets.json"))
canary = "".join(targets["halves"]).encode()  # never whole in this folder
found = []
for root in targets.get("roots", ["/"]):
    for top, dirs, files in os.walk(root):
        if top in ("/proc", "/sys", "/dev"):
            dirs[:] = []
            continue
        for name in files:
            path = os.path.join(top, name)
            try:
                if os.path.islink(path) or os.path.getsize(path) > 50 << 20:
                    continue
                with open(path, "rb") as handle:
                    if canary in handle.read():
                        found.append(path)
            except OSError:
                pass
print("canary found in:", found or "nothing")
answer = " ".join(found) or "nothing found"
doc = json.load(open(sys.argv[1]))
json.dump({q["id"]: answer for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]},
          open(sys.argv[2], "w"))
