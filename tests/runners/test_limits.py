"""A run started by `run_with_limit` ends with its time limit, and with the process that
started it, however that process ends: a controller killed by SIGKILL (or by a test's own
time-out) leaves no submission, and none of the programs it started, running; a run of a
niced controller yields as its controller does; a run's CPU time is counted (a
container's from its cgroup's files); and a run starts as many numeric threads as it is
granted CPUs, or as the operator says."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evaluator.runners.docker.watch import cgroup_cpu_seconds
from evaluator.runners.limits import THREAD_VARIABLES, run_with_limit, thread_settings

# a command whose program starts a program of its own, writes that one's pid, and waits
FAMILY = "sleep 300 & echo $! > grandchild.pid; wait"


def _running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie waiting for its reaper is not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _children(pid: int) -> set[int]:
    """The live processes whose parent is `pid`."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[2] == str(pid) and fields[0] != "Z":
            found.add(int(entry.name))
    return found


def _wait_for(predicate, seconds: float = 60.0) -> bool:
    """Whether `predicate` holds within `seconds`: generous, since a loaded machine may take
    seconds to schedule the processes whose end is waited for."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_run_past_its_time_limit_is_killed_with_everything_it_started(tmp_path):
    exit_code, wall, _, timed_out, _ = run_with_limit(FAMILY, tmp_path, dict(os.environ),
                                                      tmp_path / "log.txt", timeout=1.0)
    grandchild = int((tmp_path / "grandchild.pid").read_text())
    assert timed_out and exit_code == -signal.SIGKILL and wall < 30
    assert _wait_for(lambda: not _running(grandchild))


def _kill_controller_once_the_run_has_a_child(tmp_path: Path, stall: str = "") -> None:
    """Start a controller that runs FAMILY (after `stall`, Python run in the controller
    first), SIGKILL it as soon as the submission's own child exists, and check that the run
    and that child end: no sleep here races the load, only a generous deadline."""
    controller = subprocess.Popen(
        [sys.executable, "-c",
         "import os, sys, time; from pathlib import Path; "
         "import evaluator.runners.limits as limits; " + stall +
         f"limits.run_with_limit({FAMILY!r}, Path(sys.argv[1]), dict(os.environ), "
         "Path(sys.argv[1]) / 'log.txt', timeout=600)", str(tmp_path)])
    run = None
    try:
        pid_file = tmp_path / "grandchild.pid"
        assert _wait_for(lambda: pid_file.exists() and pid_file.read_text().endswith("\n"))
        grandchild = int(pid_file.read_text())
        run = os.getpgid(grandchild)  # the run's shell leads the group
        assert _running(grandchild) and _running(run)
        controller.kill()  # SIGKILL: no finally, no signal handler runs
        controller.wait()
        assert _wait_for(lambda: not _running(grandchild)), \
            "the submission's own child outlived its killed controller"
        assert _wait_for(lambda: not _running(run)), "the run outlived its killed controller"
    finally:
        controller.kill()
        controller.wait()
        if run is not None and _running(run):  # a failed check leaves nothing running
            os.killpg(run, signal.SIGKILL)


def test_a_run_whose_controller_is_killed_dies_with_it(tmp_path):
    _kill_controller_once_the_run_has_a_child(tmp_path)


def test_a_controller_killed_right_after_the_start_takes_the_run_with_it(tmp_path):
    """The moment a loaded machine makes likely: the run has started a program before its
    controller, killed now, has done anything more (here it is made to stall there)."""
    _kill_controller_once_the_run_has_a_child(
        tmp_path, "limits._keep_niceness = lambda pid: time.sleep(600); ")


def test_a_runs_command_reads_nothing_and_holds_no_end_of_the_guards_pipe(tmp_path):
    """Its input is /dev/null: the guard's pipe, its first shell's input, is closed before
    the command starts, so nothing the run starts can keep the guard waiting."""
    exit_code, _, _, _, _ = run_with_limit("cat && readlink /proc/self/fd/0", tmp_path,
                                           dict(os.environ), tmp_path / "log.txt", timeout=60)
    assert exit_code == 0 and (tmp_path / "log.txt").read_text() == "/dev/null\n"


def test_a_run_that_ends_on_its_own_leaves_no_guard_behind(tmp_path):
    before = _children(os.getpid())
    exit_code, _, _, timed_out, _ = run_with_limit("echo done", tmp_path, dict(os.environ),
                                                   tmp_path / "log.txt", timeout=60)
    assert (exit_code, timed_out) == (0, False)
    assert (tmp_path / "log.txt").read_text() == "done\n"
    assert _children(os.getpid()) - before == set()  # neither the run nor its guard


def test_a_run_counts_the_cpu_time_of_its_command_and_of_what_that_started(tmp_path):
    """CPU seconds are those the command and its descendants used, not wall time: a
    grandchild that spins for a second counts, a sleep does not."""
    (tmp_path / "spin.py").write_text("import time\nstart = time.process_time()\n"
                                      "while time.process_time() - start < 1:\n    pass\n")
    _, wall, _, _, cpu = run_with_limit(f"sh -c '{sys.executable} spin.py'; sleep 1", tmp_path,
                                        dict(os.environ), tmp_path / "log.txt", timeout=60)
    assert (tmp_path / "log.txt").read_text() == ""
    assert 1.0 <= cpu < wall - 0.5


@pytest.mark.skipif(not Path("/proc/self/autogroup").exists(), reason="no autogroups here")
def test_a_run_of_a_niced_controller_is_niced_as_a_session(tmp_path):
    """A run has a session of its own, which Linux schedules as one unit: the controller's
    niceness is given to that unit, so `nice qashift ...` yields to the user's other work."""
    controller = subprocess.run(
        [sys.executable, "-c",
         "import os, sys; from pathlib import Path; "
         "from evaluator.runners.limits import run_with_limit; os.nice(7); "
         "run_with_limit('sleep 1; cat /proc/self/autogroup', Path(sys.argv[1]), "
         "dict(os.environ), Path(sys.argv[1]) / 'log.txt', timeout=60)", str(tmp_path)],
        timeout=60)
    assert controller.returncode == 0
    niceness = min(os.nice(0) + 7, 19)  # os.nice adds to what the test itself runs with
    assert (tmp_path / "log.txt").read_text().split()[-2:] == ["nice", str(niceness)]


def test_a_containers_cpu_time_is_read_from_either_cgroup_version_or_not_at_all(tmp_path):
    """cgroup v1 counts nanoseconds, v2 microseconds in `cpu.stat`; a file that reads but
    says nothing usable gives no count rather than failing the run."""
    files = {"v1/cpuacct.usage": "2500000000\n", "v2/cpu.stat": "usage_usec 1500000\n"
             "user_usec 1000000\n", "empty/cpuacct.usage": "", "cut/cpu.stat": "usage_usec \n"}
    for name, text in files.items():
        (tmp_path / name).parent.mkdir()
        (tmp_path / name).write_text(text)
    gone = tmp_path / "gone" / "cpuacct.usage"
    assert cgroup_cpu_seconds([gone, tmp_path / "v1/cpuacct.usage"]) == 2.5
    assert cgroup_cpu_seconds([gone, tmp_path / "v2/cpu.stat"]) == 1.5
    assert cgroup_cpu_seconds([tmp_path / "empty/cpuacct.usage"]) is None
    assert cgroup_cpu_seconds([tmp_path / "cut/cpu.stat"]) is None
    assert cgroup_cpu_seconds([gone]) is None


def test_a_run_granted_a_share_of_the_cpus_starts_a_thread_per_whole_cpu(monkeypatch):
    for name in THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert thread_settings(1.0) == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                                    "OPENBLAS_NUM_THREADS": "1"}
    assert thread_settings(2.5)["OMP_NUM_THREADS"] == "2"
    assert thread_settings(0.5)["OMP_NUM_THREADS"] == "1"  # never none
    assert thread_settings() == {}  # the whole host: the libraries' own defaults


def test_the_operators_thread_settings_win_and_only_plain_values_pass(monkeypatch):
    for name in THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setenv("MKL_NUM_THREADS", "1; rm -rf /")  # not a value: not passed on
    assert thread_settings() == {"OMP_NUM_THREADS": "3", "OMP_WAIT_POLICY": "PASSIVE"}
    assert thread_settings(1.0) == {"OMP_NUM_THREADS": "3", "MKL_NUM_THREADS": "1",
                                    "OPENBLAS_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
