"""Answer only every other question, and three that do not exist."""
import json
import sys

doc = json.load(open(sys.argv[1]))
answers = {q["id"]: p["context"].split()[0]
           for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]}
kept = dict(list(answers.items())[::2])
kept.update({"no-such-id-1": "x", "no-such-id-2": "y", "no-such-id-3": "z"})
json.dump(kept, open(sys.argv[2], "w"))
