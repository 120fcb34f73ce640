"""Give the same question id twice (json.dump cannot, so write the text by hand)."""
import json
import sys

doc = json.load(open(sys.argv[1]))
first = doc["data"][0]["paragraphs"][0]["qas"][0]["id"]
with open(sys.argv[2], "w") as out:
    out.write("{" + f"{json.dumps(first)}: \"one\", {json.dumps(first)}: \"two\"" + "}")
