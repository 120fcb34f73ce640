"""Try to reach the outside world and the host; exit 3 if every attempt failed."""
import json
import os
import socket
import sys

targets = json.load(open("targets.json")) if os.path.exists("targets.json") else {}
attempts = [("1.1.1.1", 53), ("8.8.8.8", 443), ("172.17.0.1", 2375), ("deb.debian.org", 80)]
attempts += [tuple(t) for t in targets.get("connect", [])]
results = {}
for host, port in attempts:
    try:
        socket.create_connection((host, port), timeout=3).close()
        results[f"{host}:{port}"] = "connected"
    except OSError as exc:
        results[f"{host}:{port}"] = f"{type(exc).__name__}: {exc.strerror or exc}"
interfaces = sorted(os.listdir("/sys/class/net"))
print(json.dumps({"attempts": results, "interfaces": interfaces}), flush=True)
if any(r == "connected" for r in results.values()):
    doc = json.load(open(sys.argv[1]))
    ids = [q["id"] for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]]
    json.dump({i: "CONNECTED" for i in ids}, open(sys.argv[2], "w"))
    sys.exit(0)
print(f"network blocked: {len(results)} attempts failed; interfaces {interfaces}")
sys.exit(3)
