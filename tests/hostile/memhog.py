"""Allocate (and touch) 64 MiB at a time until something stops it."""
import sys

held = []
while True:
    held.append(b"x" * (64 << 20))
    print(f"holding {len(held) * 64} MiB", flush=True)
    sys.stdout.flush()
