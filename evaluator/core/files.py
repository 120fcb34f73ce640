"""Atomic file writes (bytes, JSON, CSV): a reader sees the whole new file or the old one,
never a torn one. And the one reader of the CSV tables they write.

Data goes to a temporary file beside the target (`.partial-*`, same file system), is flushed
and fsync'ed, then renamed over the target; on any error the temporary file is removed.
The temporary file is private (0600) and the target keeps that mode unless the writer gives
another: a file written for people (a CSV table, an export) is `READABLE` (0644), as files a
user writes are; the store's objects and caches stay private. A rename replaces the name
at the target: a link there is replaced, never followed.

Where a command may write a file a user names (`--diff`, `--out`, `--table`, ...) is
`check_output_path`: never inside the workspace, never a link, never over a file that is not
the command's own table. Text cells of CSV tables for people go through `safe_cell`.
"""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from evaluator.core import settings
from evaluator.core.errors import UserError
from evaluator.core.owner import pid_alive

PARTIAL_PREFIX = ".partial-"
READABLE = 0o644  # a file written for people: theirs to change, everyone's to read


@contextmanager
def atomic_file(target: Path, mode: int | None = None) -> Iterator[tuple[BinaryIO, Path]]:
    """(open binary handle, its temporary path): write, and the target appears on success,
    with `mode` where given (else private: 0600)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=PARTIAL_PREFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle, Path(tmp)
            handle.flush()
            if mode is not None:
                os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(target: Path, data: bytes, mode: int | None = None) -> None:
    """`data` to `target` atomically, with `mode` where given (else private: 0600)."""
    with atomic_file(target, mode) as (handle, _):
        handle.write(data)


def write_json_atomic(target: Path, obj: object) -> None:
    """JSON with sorted keys, written atomically."""
    write_atomic(target, json.dumps(obj, sort_keys=True).encode())


def write_csv_atomic(target: Path, columns: Sequence[str], rows: Iterable[Mapping],
                     mode: int = READABLE, *, for_people: bool = False) -> None:
    """A CSV table: the header, then one line per row ("\\n" line ends), written atomically;
    a table is for people to read: READABLE unless `mode` says otherwise. `for_people`: text
    a spreadsheet would run as a formula is neutralised (`safe_cell`): only for tables that
    people open, never for tables the analysis reads back."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    if for_people:
        rows = ({k: safe_cell(v) for k, v in row.items()} for row in rows)
    writer.writerows(rows)
    write_atomic(target, buffer.getvalue().encode(), mode)


FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")  # OWASP's CSV injection: what starts a formula
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def safe_cell(value: object) -> object:
    """A CSV cell for people: text a spreadsheet would run as a formula (it starts with =, +,
    -, @, a tab or a carriage return) gets a leading `'`, so it is shown, not run; numbers,
    and text that is a plain number (-1.5), are left as they are."""
    if isinstance(value, str) and value.startswith(FORMULA_LEADS) \
            and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def check_output_path(path: Path, *, what: str, columns: Sequence[str] | None = None,
                      folder: bool = False) -> Path:
    """`path`, if a command may write there what a user asked for; else a one-line UserError.
    Refused: a path inside the workspace (the results store and its objects are qashift's
    alone), a link (a write never goes where a link points), and anything the command did not
    make: a `folder` must be a folder (the command writes its own file names in it); a file
    that exists is replaced only when it is a table this command writes (an empty file, or a
    CSV whose header has every one of `columns`), never another kind of file."""
    path = Path(path)
    workspace = settings.workspace_dir()
    try:
        inside = path.resolve().is_relative_to(workspace.resolve())
    except (OSError, RuntimeError):  # a loop of links
        raise UserError(f"{what} {path}: cannot be resolved (a loop of links?)") from None
    if inside:
        raise UserError(f"{what} {path} is inside the workspace {workspace} (the results "
                        f"store); choose a path outside it")
    if path.is_symlink():
        raise UserError(f"{what} {path} is a link; name the file or folder itself")
    if not path.exists():
        return path
    if folder:
        if not path.is_dir():
            raise UserError(f"{what} {path} exists and is not a folder")
        return path
    if not path.is_file():
        raise UserError(f"{what} {path} exists and is not a file")
    if columns is None:
        raise UserError(f"{what} {path} already exists; move it away or choose a new path")
    missing = _missing_column(path, columns)
    if missing:
        raise UserError(f"{what} {path} already exists and is not a table this command writes "
                        f"(no column {missing}); move it away or choose a new path")
    return path


def _missing_column(path: Path, columns: Sequence[str]) -> str | None:
    """The first of `columns` that the header of the CSV table at `path` lacks (None when it
    has them all, or the file is empty: there is nothing in it to lose)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(64 * 1024)
    except OSError:  # unreadable: not known to be the command's
        return columns[0]
    if not head:
        return None
    line = head.split(b"\n", 1)[0].decode("utf-8-sig", errors="replace")
    try:
        header = {h.strip() for h in next(csv.reader([line]), [])}
    except csv.Error:
        header = set()
    return next((c for c in columns if c not in header), None)


def read_csv_table(path: Path, columns: Sequence[str], what: str) -> list[dict]:
    """The rows of a CSV table written earlier (none if there is no file or an empty one);
    one line saying it is not `what` if it cannot be read or lacks one of `columns`."""
    path = Path(path)
    if not path.is_file():
        return []
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:  # a spreadsheet's BOM too
            reader = csv.DictReader(handle)
            found, header = list(reader), reader.fieldnames or []
    except (UnicodeDecodeError, csv.Error) as error:
        raise UserError(f"{path}: not {what} ({error})") from None
    missing = sorted(set(columns) - set(header))
    if missing and (header or found):
        raise UserError(f"{path}: not {what} (no column {missing[0]})")
    return found


@contextmanager
def exclusive(lock_path: Path, waiting: Callable[[], None] = lambda: None) -> Iterator[None]:
    """Hold an exclusive lock on `lock_path` (created if missing) while the block runs; other
    processes asking for the same lock wait (`waiting` is called once if they must). The lock
    goes with the process, even on kill -9. A lock that cannot be taken (a read-only folder,
    a file system without locks) is a one-line UserError."""
    lock_path = Path(lock_path)
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as error:
        raise UserError(f"cannot create the lock {lock_path}: {error.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            waiting()
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as error:
            raise UserError(f"cannot lock {lock_path}: {error.strerror}") from None
        yield
    finally:
        os.close(fd)


def remove_tree(folder: Path) -> None:
    """Remove a folder and everything in it, read-only parts included (a frozen copy)."""
    folder = Path(folder)
    if folder.is_symlink():
        folder.unlink()  # the link, never what it points to
        return
    if not folder.exists():
        return
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    shutil.rmtree(folder)


def run_tempdir(kind: str) -> tempfile.TemporaryDirectory:
    """A private temporary folder for one run, named `qashift-<kind>-<pid>-*` so that the
    folders of a killed process can be found and removed (`remove_stale_tempdirs`)."""
    return tempfile.TemporaryDirectory(prefix=f"qashift-{kind}-{os.getpid()}-")


def remove_stale_tempdirs() -> list[Path]:
    """Remove the run folders of processes of this host that no longer exist."""
    removed = []
    for folder in Path(tempfile.gettempdir()).glob("qashift-*-*-*"):
        match = _TEMPDIR.fullmatch(folder.name)
        if match is None or not folder.is_dir() or pid_alive(int(match.group(1))):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


_TEMPDIR = re.compile(r"qashift-[a-z]+-(\d+)-[A-Za-z0-9_]+")
