"""A fork bomb: every process forks forever. The parent reports what it saw, then exits 5."""
import os
import time


def bomb():
    while True:
        try:
            os.fork()
        except OSError:
            time.sleep(0.01)


errors, peak = 0, 0
deadline = time.time() + 4
while time.time() < deadline:
    try:
        if os.fork() == 0:
            bomb()
    except OSError:
        errors += 1
    peak = max(peak, sum(1 for d in os.listdir("/proc") if d.isdigit()))
    time.sleep(0.02)
print(f"fork bomb contained: at most {peak} processes, {errors} fork errors", flush=True)
os._exit(5)
