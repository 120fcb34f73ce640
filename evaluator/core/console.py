"""One console for every command: progress, warnings and errors go through Python `logging`
(logger `qashift`), to stderr as plain lines and, with --log-file, to a file with times.
Default: progress and warnings; -q: errors only; -v: also debug detail. On a terminal, a
progress report (`progress`) rewrites one line in place, a bar of sorts; in logs, pipes and
CI every report stays a plain line. Results (tables, JSON) are the command's output on
stdout and never go through here."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

LOGGER = logging.getLogger("qashift")
_HANDLERS: list[logging.Handler] = []


def setup(verbose: int = 0, quiet: bool = False, log_file: Path | str | None = None) -> None:
    """(Re)configure the console for one command run; earlier handlers are removed."""
    for handler in _HANDLERS:
        LOGGER.removeHandler(handler)
        handler.close()
    _HANDLERS.clear()
    level = logging.ERROR if quiet else logging.DEBUG if verbose else logging.INFO
    screen = _Screen(_Stderr())
    screen.setLevel(level)
    screen.setFormatter(logging.Formatter("%(message)s"))
    _HANDLERS.append(screen)
    if log_file is not None:
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        to_file = logging.FileHandler(log_file, encoding="utf-8")
        to_file.setLevel(logging.DEBUG)
        to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        _HANDLERS.append(to_file)
    for handler in _HANDLERS:
        LOGGER.addHandler(handler)
    LOGGER.setLevel(logging.DEBUG)
    LOGGER.propagate = False


class _Screen(logging.StreamHandler):
    """stderr; a progress record on a terminal overwrites the previous progress line."""

    pending = False  # a progress line is on screen without its newline

    def emit(self, record: logging.LogRecord) -> None:
        live = getattr(record, "progress", False) and _on_terminal()
        if _Screen.pending and not live:
            self.stream.write("\n")
        _Screen.pending = live
        if live:
            self.stream.write("\r\x1b[K" + self.format(record))
            self.flush()
            return
        super().emit(record)


def _on_terminal() -> bool:
    isatty = getattr(sys.stderr, "isatty", None)
    return bool(isatty and isatty())


class _Stderr:
    """The current sys.stderr at each write (a test runner swaps it per invocation)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def say(message: str) -> None:
    """Progress a user wants to see unless -q."""
    LOGGER.info(message)


def progress(message: str) -> None:
    """A report that the next one supersedes (a cell done of N, an epoch of M)."""
    LOGGER.info(message, extra={"progress": True})


def duration(seconds: float) -> str:
    """A time left or taken as a person reads it: '42 s', '17 min', '13 h 36 min'; '?'
    for what is no time (NaN, an infinity, a negative number)."""
    if not (0 <= seconds < float("inf")):
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    if minutes < 90:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def finish() -> None:
    """End a progress line left on a terminal (before a command's own output)."""
    if _Screen.pending:
        sys.stderr.write("\n")
        _Screen.pending = False


def warn(message: str) -> None:
    LOGGER.warning(f"warning: {message}")


def error(message: str) -> None:
    LOGGER.error(f"error: {message}")


def debug(message: str) -> None:
    """Detail shown with -v, always kept in --log-file."""
    LOGGER.debug(message)


if not LOGGER.handlers:
    setup()  # a library user gets plain progress on stderr until a command configures it
