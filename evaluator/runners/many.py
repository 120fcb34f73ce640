"""Several runs of one Python predict command in one interpreter: the systems of one approach
scored on one input, each by the approach's own program, unchanged, as `python3 SCRIPT ARGS`
would run it, but paying the interpreter's start and the imports of its libraries (torch,
its encoders) once for all of them.

    python3 many.py PLAN.json

PLAN is `{"script": "approach.py", "runs": [{"argv": [...], "log": PATH}, ...],
"timings": PATH}`. Each run's Python-level output goes to its own log; after each run,
`timings` holds one entry per finished run: its exit status and its CPU and wall seconds
(this process's, between its start and its end), so a runner can charge each system its
own time and split the shared start among them, and knows how far a killed group got.

This file is run by the child's Python, not imported by the service: it uses the standard
library only.
"""

import gc
import json
import os
import runpy
import sys
import time
import traceback


def _status(code: object) -> int:
    """What `python3 SCRIPT` exits with when SCRIPT raises SystemExit(code)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _run(script: str, argv: list, log_path: str) -> int:
    with open(log_path, "w", encoding="utf-8", errors="replace") as log:
        sys.stdout = sys.stderr = log
        try:
            sys.argv = [script, *argv]
            runpy.run_path(script, run_name="__main__")
            return 0
        except SystemExit as exc:
            return _status(exc.code)
        except Exception:  # noqa: BLE001 - the run failed as `python3 SCRIPT` would
            traceback.print_exc()
            return 1
        finally:
            log.flush()
            sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__


def main(plan_path: str) -> int:
    with open(plan_path, encoding="utf-8") as handle:
        plan = json.load(handle)
    script = plan["script"]
    # as `python3 SCRIPT`: the script's folder first on the path, not this file's
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    timings = []
    for run in plan["runs"]:
        cpu, wall = time.process_time(), time.perf_counter()
        status = _run(script, run["argv"], run["log"])
        gc.collect()  # the last system's model goes before the next one loads
        timings.append({"exit": status, "cpu_s": time.process_time() - cpu,
                        "wall_s": time.perf_counter() - wall})
        partial = plan["timings"] + ".partial"
        with open(partial, "w", encoding="utf-8") as handle:
            json.dump(timings, handle)
        os.replace(partial, plan["timings"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
