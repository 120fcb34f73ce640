"""Stop what this controller started when it is interrupted (Ctrl-C) or terminated (SIGTERM).

Runners register a cleanup (kill this process's containers or process groups); the first
registration from the main thread chains the cleanups in front of Python's default SIGINT and
SIGTERM behaviour. A parallel matrix runs cells in worker threads, where KeyboardInterrupt
never arrives, and its main thread may be blocked on a lock that a signal does not wake; the
wakeup fd is written whichever thread gets the signal, so a watcher thread cleans up at once.
A SIGKILL leaves no handler to run: a later start of the same cell stops the leftovers.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

from evaluator.core.errors import Terminated

_CLEANUPS: list[Callable[[], object]] = []
_INSTALLED = False
_STOPPING = threading.Event()


def stop() -> None:
    """Mark this controller as stopping: no runner starts anything after this, and a run cut
    short by it ends as cancelled (KeyboardInterrupt), not as a recorded failure."""
    _STOPPING.set()


def stopping() -> bool:
    return _STOPPING.is_set()


def cleanup_all() -> None:
    stop()
    for cleanup in list(_CLEANUPS):
        cleanup()


def on_interrupt(cleanup: Callable[[], object]) -> None:
    """Run `cleanup` when this process is interrupted or terminated (once registered, kept)."""
    if cleanup not in _CLEANUPS:
        _CLEANUPS.append(cleanup)
    _install()


def _install() -> None:
    """Only from the main thread and only where a handler is still Python's default, so an
    application's own handlers are left alone."""
    global _INSTALLED
    if _INSTALLED or threading.current_thread() is not threading.main_thread():
        return
    _INSTALLED = True
    watched = set()
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        def interrupted(signum, frame):
            cleanup_all()
            signal.default_int_handler(signum, frame)

        signal.signal(signal.SIGINT, interrupted)
        watched.add(signal.SIGINT)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        def terminated(signum, frame):
            cleanup_all()
            raise Terminated(signum)

        signal.signal(signal.SIGTERM, terminated)
        watched.add(signal.SIGTERM)
    if watched:
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        previous = signal.set_wakeup_fd(write_end)
        if previous != -1:  # someone else's (e.g. asyncio's): put it back, do without
            signal.set_wakeup_fd(previous)
            os.close(read_end)
            os.close(write_end)
            return
        threading.Thread(target=_watch, args=(read_end, watched), daemon=True,
                         name="qashift-interrupts").start()


def _watch(fd: int, watched: set[int]) -> None:
    while data := os.read(fd, 64):
        if watched & set(data):
            cleanup_all()
