"""Run a shell command in its own process group with a time limit, a captured log and its
peak memory: what the local and hf-qa runners share. Process groups started here are
remembered, so a Ctrl-C of a matrix can kill them all (`cancel_all`), and each has a guard
that kills it when this process dies without cleaning up (SIGKILL, a test's timeout)."""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from evaluator.runners import interrupts

_ACTIVE: set[int] = set()  # process groups of running submissions, for cancel_all()
_ACTIVE_LOCK = threading.RLock()  # held from start to registration: cancel_all misses none

# The guard reads a pipe held open by this process: first the run's process group, then end
# of file, which means this process closed the pipe (the run is over) or died; either way the
# group is killed. The run writes its group itself (`_ANNOUNCE`) before its command starts,
# so the guard knows it before the run can start anything: this process may be killed right
# after the start, before it could write anything (on a loaded machine, by a test's time-out).
_GUARD = ("import os, signal, sys\n"
          "group = sys.stdin.buffer.readline().strip()\n"
          "sys.stdin.buffer.read()\n"
          "try:\n"
          "    os.killpg(int(group), signal.SIGKILL)\n"
          "except (ValueError, ProcessLookupError, PermissionError):\n"
          "    pass\n")

# The run's first shell, whose standard input is the guard's pipe: it writes its pid (its new
# session's process group) there, then becomes the command with /dev/null as input, so the
# command holds no end of the pipe. A guard that is gone costs the run only its safety net.
_ANNOUNCE = "(trap '' PIPE; echo $$ >&0) 2>/dev/null; exec /bin/sh -c \"$1\" </dev/null"


# How many threads a run's numeric libraries start (OpenMP, as torch uses it, MKL, OpenBLAS)
# and whether OpenMP's idle threads spin. Each starts one thread per core it sees by default,
# and its threads spin while they wait: a run held to one CPU's time but seeing more cores, or
# two runs side by side each starting a thread per core, then runs several times slower
# (benchmarks/thread_oversubscription.py measures it).
THREAD_COUNTS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
THREAD_VARIABLES = (*THREAD_COUNTS, "OMP_WAIT_POLICY")
_THREAD_VALUE = re.compile(r"[A-Za-z0-9]{1,16}")


def thread_settings(cpus: float | None = None) -> dict[str, str]:
    """The thread variables a run gets: one thread per CPU it is granted (`cpus`, for a run
    held to a share of the host's time), and over that whatever the operator set in this
    process's environment (values that are short words or numbers only)."""
    settings = {name: str(max(1, math.floor(cpus))) for name in THREAD_COUNTS} if cpus else {}
    settings.update({name: value for name in THREAD_VARIABLES
                     if _THREAD_VALUE.fullmatch(value := os.environ.get(name, ""))})
    return settings


def cancel_all() -> int:
    """Kill every process group this process started, and start no more (this process is
    stopping); how many there were."""
    with _ACTIVE_LOCK:
        interrupts.stop()
        pids = list(_ACTIVE)
    for pid in pids:
        kill_group(pid)
    return len(pids)


def run_with_limit(command: str, cwd: Path, env: dict, log_path: Path, timeout: float,
                   pid_file: Path | None = None, cpus: tuple[int, ...] = ()
                   ) -> tuple[int, float, int | None, bool, float]:
    """(exit code, wall seconds, peak RSS bytes, timed out, CPU seconds) of `/bin/sh -c
    command`, held to `cpus` (its CPU affinity, which its children inherit) where given. The
    CPU seconds are user plus system time of the command and every descendant it waited for."""
    timed_out = threading.Event()
    pinned = ["taskset", "-c", ",".join(map(str, cpus))] if cpus else []
    with open(log_path, "wb") as log:
        start = time.perf_counter()
        guard, guard_pipe = _start_guard()
        try:
            with _ACTIVE_LOCK:
                if interrupts.stopping():
                    raise KeyboardInterrupt("cancelled: this controller is stopping")
                proc = subprocess.Popen([*pinned, "/bin/sh", "-c", _ANNOUNCE, "sh", command],
                                        cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=guard_pipe, start_new_session=True)
                _ACTIVE.add(proc.pid)
            _keep_niceness(proc.pid)
            status, usage = _wait(proc, timeout, timed_out, pid_file)
        finally:
            os.close(guard_pipe)
            guard.wait()
        wall = time.perf_counter() - start
    if interrupts.stopping():  # killed by cancel_all: a stopped run, not a failed one
        raise KeyboardInterrupt("cancelled: this controller is stopping")
    exit_code = os.waitstatus_to_exitcode(status)
    cpu = usage.ru_utime + usage.ru_stime
    return exit_code, wall, usage.ru_maxrss * 1024, timed_out.is_set(), cpu


def _keep_niceness(pid: int) -> None:
    """Give the run's new session this process's niceness as a whole. Linux schedules each
    session (autogroup) as one unit and applies a process's niceness only within its own
    group, so a cell of `nice -n 19 qashift study run` would otherwise take an equal share of
    the CPU beside everything else the user runs."""
    niceness = os.nice(0)
    if niceness > 0:
        try:
            Path(f"/proc/{pid}/autogroup").write_text(f"{niceness}\n")
        except OSError:  # no autogroups here (another OS, a kernel without them)
            pass


def _wait(proc: subprocess.Popen, timeout: float, timed_out: threading.Event,
          pid_file: Path | None) -> tuple[int, object]:
    """Wait status and resource usage of `proc`, its group killed after `timeout` seconds
    (setting `timed_out`) and when the wait ends, however it ends."""
    def kill() -> None:
        timed_out.set()
        kill_group(proc.pid)

    if pid_file is not None:  # so a later start can stop it if this process is killed
        pid_file.write_text(str(proc.pid))
    timer = threading.Timer(timeout, kill)
    timer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE.discard(proc.pid)
        timer.cancel()
        kill_group(proc.pid)  # leftovers, and on Ctrl-C the whole group
        proc.returncode = 0  # reaped by wait4; keep Popen from waiting again
    return status, usage


def _start_guard() -> tuple[subprocess.Popen, int]:
    """A process, in a session of its own (a terminal's Ctrl-C does not reach it), that kills
    the process group written to the returned pipe once every writer has closed it: this
    process, by closing it or by dying, and the run, once it has written its group."""
    read_end, write_end = os.pipe()  # not inheritable: no other child holds the write end
    try:
        guard = subprocess.Popen([sys.executable, "-I", "-S", "-c", _GUARD],
                                 stdin=read_end, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
    except BaseException:
        os.close(write_end)
        raise
    finally:
        os.close(read_end)
    return guard, write_end


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
