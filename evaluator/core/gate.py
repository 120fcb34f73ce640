"""The one gate for folders that enter the store, and the one bounded reader.

A folder that a container wrote (a trained system's weights, its checkpoints), that another
store hands over (an imported model) or that names a submission (a bundle folder) is walked
once, with `lstat` and directory file descriptors, never following a link: links, hard links,
FIFOs, sockets, devices, sparse or oversized files, names that are not UTF-8, files that change
while they are read and too many files and folders are refused with one line naming the path.
The same walk hashes each file and, when a target is given, copies the very bytes it hashed
(a folder only as the parent of a copied file), so what is stored is exactly what the digest
names.

A file the controller reads that a container or a submission wrote (progress, predictions, a
run record, a log) goes through `read_bounded`: a regular file, opened without following a
link and without blocking on a FIFO, its size capped before a byte is parsed; `read_json`
turns any parse failure, nesting too deep included, into a refusal of that file.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import re
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

from evaluator.core.errors import RunFailure

CHUNK = 1 << 20
DIGEST = re.compile(r"[0-9a-f]{64}")
WEIGHTS_IGNORED = ("training.json",)  # training notes beside a checkpoint, not weights


class Refused(RunFailure):
    """Something handed in did not pass the gate or the bounded reader (one line why)."""

    def __init__(self, message: str):
        super().__init__("refused-files", _shown(message))


@dataclass(frozen=True)
class Limits:
    """What one walk takes in. `files` bounds the entries walked, files and folders alike:
    an empty folder costs a listing and a copy as a file does."""

    files: int = 20_000
    file_bytes: int = 4 << 30
    total_bytes: int = 16 << 30
    depth: int = 32


@dataclass(frozen=True)
class Walked:
    digest: str
    files: tuple[tuple[str, str, int], ...]  # (path relative to the folder, sha256, size)
    executable: frozenset[str] = frozenset()  # with_mode: the files hashed as executable

    @property
    def total_bytes(self) -> int:
        return sum(size for _, _, size in self.files)


def is_digest(text: object) -> bool:
    """A sha256 written as 64 lower-case hex characters (never a path)."""
    return isinstance(text, str) and DIGEST.fullmatch(text) is not None


def walk(folder: Path, *, target: Path | None = None, limits: Limits = Limits(),
         with_mode: bool = False, flat: bool = False,
         skip: Callable[[str, bool], bool] = lambda _name, _is_dir: False,
         label: str = "", links_within: Path | None = None) -> Walked:
    """Walk `folder` through the gate: its digest and files, and with `target` (a folder that
    must not exist yet) a copy of exactly the walked bytes, files 0444. The copy holds a
    sub-folder only as the parent of a copied file: the digest does not cover empty folders.

    The digest is sha256 over (relative path, [executable bits,] content sha256) in path
    order. `flat` takes the files directly in `folder` only; `skip(name, is_dir)` leaves an
    entry out of the walk. `links_within` (the operator's own Hugging Face cache, whose
    snapshots link into its blobs) lets a link to a regular file inside that folder be read
    as the file. Raises Refused for anything the gate does not let in."""
    folder = Path(folder)
    label = label or str(folder)
    try:
        info = os.lstat(folder)
    except OSError as error:
        raise Refused(f"{label}: cannot be read ({error.strerror})") from None
    if stat.S_ISLNK(info.st_mode):
        raise Refused(f"{label} is a link (to {os.readlink(folder)}); links are refused")
    if not stat.S_ISDIR(info.st_mode):
        raise Refused(f"{label} is not a folder")
    walker = _Walker(limits, with_mode, flat, skip, label,
                     Path(os.path.realpath(links_within)) if links_within else None, folder)
    fd = _open_dir(folder, None, label)
    if target is not None:
        Path(target).mkdir(parents=True)
    try:
        walker.visit(fd, (), target)
    finally:
        os.close(fd)
    if target is not None:
        _seal(Path(target))
    return Walked(walker.digest.hexdigest(), tuple(walker.files), frozenset(walker.executable))


def files_digest(files: Mapping[str, str]) -> str:
    """The digest `walk` gives a folder that holds exactly `files` (relative path -> content
    sha256), its files in the order the walk visits them: what a table of files, a frozen
    system's manifest say, hashes to without the folder at hand."""
    digest = hashlib.sha256()
    for rel in sorted(files, key=lambda rel: rel.split("/")):
        digest.update(_file_entry(rel, files[rel]))
    return digest.hexdigest()


def _file_entry(rel: str, sha: str, mode: str | None = None) -> bytes:
    """One file's part of a folder's digest: its relative path, its executable bits (octal,
    where the digest holds modes), and its content's sha256, NUL between them."""
    head = rel if mode is None else f"{rel}\0{mode}"
    return head.encode() + b"\0" + bytes.fromhex(sha)


def folder_digest(folder: Path, *, with_mode: bool = False) -> str:
    """The digest of everything under `folder` (a bundle, a build context), byte-code caches
    left out; a link or special file in it is refused."""
    return walk(folder, with_mode=with_mode, skip=no_byte_code).digest


def no_byte_code(name: str, is_dir: bool) -> bool:
    """A `skip` for source folders: Python's byte-code caches are not part of them."""
    return is_dir and name == "__pycache__"


def weights_sha256(folder: Path) -> str:
    """The digest of a checkpoint: the files directly in `folder` that determine its answers.
    A snapshot of a Hugging Face cache (`.../snapshots/<revision>`) may link into its blobs."""
    folder = Path(folder)
    cache = folder.parent.parent if folder.parent.name == "snapshots" else None
    return walk(folder, flat=True, links_within=cache,
                skip=lambda name, is_dir: name in WEIGHTS_IGNORED or name.endswith(".lock"),
                ).digest


class _Walker:
    def __init__(self, limits: Limits, with_mode: bool, flat: bool,
                 skip: Callable[[str, bool], bool], label: str, links_within: Path | None,
                 root: Path):
        self.limits, self.with_mode, self.flat, self.skip = limits, with_mode, flat, skip
        self.label, self.links_within, self.root = label, links_within, root
        self.digest = hashlib.sha256()
        self.files: list[tuple[str, str, int]] = []
        self.executable: set[str] = set()
        self.total = 0
        self.entries = 0

    def refuse(self, rel: str, why: str) -> None:
        raise Refused(f"{self.label}: {rel} {why}; refused at the gate")

    def admit(self, rel: str, kind: str) -> None:
        """Count one more file or folder against the limit; its path must be UTF-8, as the
        digest hashes it so."""
        try:
            rel.encode()
        except UnicodeEncodeError:
            self.refuse(rel, "has a name that is not valid UTF-8")
        if self.entries >= self.limits.files:
            self.refuse(rel, f"is one {kind} more than the {self.limits.files:,} files and "
                             f"folders allowed")
        self.entries += 1

    def visit(self, dir_fd: int, parts: tuple[str, ...], target: Path | None) -> None:
        if len(parts) > self.limits.depth:
            self.refuse("/".join(parts), f"is nested deeper than {self.limits.depth} folders")
        try:
            names = sorted(os.listdir(dir_fd))
        except OSError as error:
            self.refuse("/".join(parts) or ".", f"cannot be listed ({error.strerror})")
        for name in names:
            rel = "/".join((*parts, name))
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except OSError as error:
                self.refuse(rel, f"cannot be read ({error.strerror})")
            mode = info.st_mode
            if stat.S_ISLNK(mode):
                if self.flat and self.links_within is not None and not self.skip(name, False):
                    self.cached_blob(rel, name, dir_fd)
                    continue
                self.refuse(rel, f"is a link (to {_link_target(name, dir_fd)})")
            if stat.S_ISDIR(mode):
                if self.flat or self.skip(name, True):
                    continue
                self.admit(rel, "folder")
                sub = _open_dir(name, dir_fd, f"{self.label}: {rel}")
                try:
                    self.visit(sub, (*parts, name), None if target is None else target / name)
                finally:
                    os.close(sub)
            elif stat.S_ISREG(mode):
                if not self.skip(name, False):
                    self.file(dir_fd, name, rel, info, target)
            else:
                self.refuse(rel, f"is a {_kind(mode)}")

    def cached_blob(self, rel: str, name: str, dir_fd: int) -> None:
        """A snapshot's link into its own cache's blobs, read as the blob it names."""
        real = Path(os.path.realpath(self.root / rel))
        if self.links_within not in real.parents:
            self.refuse(rel, f"is a link out of its cache (to {_link_target(name, dir_fd)})")
        parent = _open_dir(real.parent, None, f"{self.label}: {rel}")
        try:
            info = os.stat(real.name, dir_fd=parent, follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode):
                self.refuse(rel, "links to something that is not a regular file")
            self.file(parent, real.name, rel, info, None)
        finally:
            os.close(parent)

    def file(self, dir_fd: int, name: str, rel: str, info: os.stat_result,
             target: Path | None) -> None:
        limits = self.limits
        self.admit(rel, "file")
        if info.st_nlink > 1:
            self.refuse(rel, f"is a hard link ({info.st_nlink} names for one file)")
        if info.st_size > limits.file_bytes:
            self.refuse(rel, f"holds {info.st_size:,} bytes, over the {limits.file_bytes:,} "
                             f"allowed per file")
        if info.st_size > 1 << 20 and info.st_blocks * 512 < info.st_size // 2:
            self.refuse(rel, "is a sparse file")
        if self.total + info.st_size > limits.total_bytes:
            self.refuse(rel, f"brings the folder over its {limits.total_bytes:,} bytes")
        sha, size = _copy_hashing(dir_fd, name, info, None if target is None else target / name,
                                  lambda why: self.refuse(rel, why))
        self.total += size
        mode = f"{info.st_mode & 0o111:o}" if self.with_mode else None
        if mode is not None and info.st_mode & 0o111:
            self.executable.add(rel)
        self.digest.update(_file_entry(rel, sha, mode))
        self.files.append((rel, sha, size))


_SEEN: dict[tuple, str] = {}  # a file hashed once in this process, while it stays the same
SETTLED_NS = 2_000_000_000  # file times tick coarsely: a file changed this recently may
# change again under the same times, so it is not remembered yet


def _copy_hashing(dir_fd: int, name: str, info: os.stat_result, target: Path | None,
                  refuse: Callable[[str], None]) -> tuple[str, int]:
    """(sha256, size) of the regular file `name`, copied to `target` as it is read; the size
    is always the one `info` gave, which the caps were checked against."""
    key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    settled = time.time_ns() - max(info.st_mtime_ns, info.st_ctime_ns) >= SETTLED_NS
    if target is None and settled and key in _SEEN:
        return _SEEN[key], info.st_size
    sha, size = _copy_once(dir_fd, name, info, target, refuse)
    if settled:
        _SEEN[key] = sha
    return sha, size


def _copy_once(dir_fd: int, name: str, info: os.stat_result, target: Path | None,
               refuse: Callable[[str], None]) -> tuple[str, int]:
    """Read at most the size `info` gave and one byte more, so that a file another process
    writes to while it is read can neither take the walk past its caps nor be half stored:
    one that grows, shrinks or is written to is refused."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as error:
        refuse(f"cannot be opened ({error.strerror})")
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != (info.st_dev,
                                                                           info.st_ino):
            refuse("was replaced while it was read")
        expected, digest, size = info.st_size, hashlib.sha256(), 0
        if target is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
        out = open(target, "xb") if target is not None else None
        try:
            while chunk := _read(fd, min(CHUNK, expected + 1 - size), refuse):
                size += len(chunk)
                if size > expected:
                    refuse(f"changed while it was read (grew past the {expected:,} bytes it "
                           f"held when listed)")
                digest.update(chunk)
                if out is not None:
                    out.write(chunk)
        finally:
            if out is not None:
                out.close()
        if size < expected:
            refuse(f"changed while it was read (shrank from {expected:,} to {size:,} bytes)")
        after = os.fstat(fd)
        if (after.st_size, after.st_mtime_ns) != (info.st_size, info.st_mtime_ns):
            refuse("changed while it was read (its size or time changed)")
        return digest.hexdigest(), size
    finally:
        os.close(fd)


def _read(fd: int, count: int, refuse: Callable[[str], None]) -> bytes:
    try:
        return os.read(fd, count)
    except OSError as error:
        refuse(f"cannot be read ({error.strerror})")
        raise


def _open_dir(name: str | Path, dir_fd: int | None, label: str) -> int:
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as error:
        raise Refused(f"{label}: cannot be opened as a folder ({error.strerror}); "
                      f"refused at the gate") from None


def _seal(folder: Path) -> None:
    """Files 0444, folders 0555: a stored copy is never changed in place."""
    for path in sorted(folder.rglob("*"), reverse=True):
        path.chmod(0o555 if path.is_dir() else 0o444)
    folder.chmod(0o555)


def _shown(text: str) -> str:
    """`text` on one printable line: bytes of a name that are not UTF-8 as `\\xff`, control
    characters (a newline in a file name) as escapes, so a refusal names its entry."""
    try:
        text = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode()
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in text)


def _link_target(name: str, dir_fd: int) -> str:
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return "?"


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


# the bounded reader ---------------------------------------------------------------------

def read_bounded(path: Path, cap: int, label: str = "") -> bytes:
    """The bytes of a regular file at `path`, at most `cap` of them: never through a link,
    never blocking on a FIFO or device. Refused otherwise, with one line naming the file."""
    with open_bounded(path, cap, label) as read:
        return b"".join(iter(read, b""))


@contextlib.contextmanager
def open_bounded(path: Path, cap: int, label: str = "") -> Iterator[Callable[[], bytes]]:
    """Reads of at most CHUNK bytes of the regular file at `path`, b"" at its end, for a
    reader that streams (hashing, unpacking) what `read_bounded` would hold whole: the same
    refusals, and more than `cap` bytes, however the file grows while read, is one."""
    label = label or str(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        if error.errno == errno.ELOOP:  # the last part is a link
            raise Refused(f"{label} is a link; links are refused") from None
        raise Refused(f"{label} cannot be opened ({error.strerror})") from None
    size = 0

    def read() -> bytes:
        nonlocal size
        try:
            chunk = os.read(fd, min(CHUNK, cap + 1 - size))
        except OSError as error:
            raise Refused(f"{label} cannot be read ({error.strerror})") from None
        size += len(chunk)
        if size > cap:
            raise Refused(f"{label} grew over the {cap:,} bytes allowed while it was read")
        return chunk

    try:
        try:
            info = os.fstat(fd)
        except OSError as error:
            raise Refused(f"{label} cannot be read ({error.strerror})") from None
        if not stat.S_ISREG(info.st_mode):
            raise Refused(f"{label} is a {_kind(info.st_mode)}, not a regular file")
        if info.st_size > cap:
            raise Refused(f"{label} holds {info.st_size:,} bytes, over the {cap:,} allowed")
        yield read
    finally:
        os.close(fd)


JSON_DEPTH = 64  # arrays and objects inside each other; a SQuAD file needs 7


class _Constant(ValueError):
    """NaN, Infinity or -Infinity, which strict JSON does not have."""


def _no_constant(name: str) -> object:
    raise _Constant(name)


def _finite_float(text: str) -> float:
    """A JSON number with a fraction or exponent; one too large for a float (1e400), which
    Python would read as an infinity, is refused as the infinities are."""
    value = float(text)
    if not math.isfinite(value):
        raise _Constant(f"{text[:20]} (an infinity as a float)")
    return value


def parse_json(data: bytes | str, label: str, *, depth: int = JSON_DEPTH,
               allow_nan: bool = False, **options) -> object:
    """JSON from bytes a submission (or anyone but this process) wrote; any failure is a
    refusal naming the file, in one line: syntax, bytes that are not UTF-8, nesting deeper
    than `depth` (found by a linear scan, before the recursive parser sees it), NaN and the
    infinities (unless `allow_nan`: no score, count or size is one), and a string holding a
    lone surrogate (no UTF-8 writer can write it back)."""
    try:
        if isinstance(data, str):
            data.encode("utf-8")
        else:
            data = bytes(data).decode("utf-8")
    except UnicodeError as error:
        raise Refused(f"{label} is not valid JSON (not UTF-8: character {error.start:,} "
                      f"cannot be {'de' if isinstance(error, UnicodeDecodeError) else 'en'}"
                      f"coded)") from None
    if _deeper_than(data, depth):
        raise Refused(f"{label} is nested too deeply (more than {depth} levels of arrays "
                      f"and objects)")
    if not allow_nan:
        options.setdefault("parse_constant", _no_constant)
        options.setdefault("parse_float", _finite_float)
    try:
        doc = json.loads(data, **options)
    except _Constant as constant:
        raise Refused(f"{label} holds {constant}, which is not a JSON number") from None
    except RecursionError:
        raise Refused(f"{label} is nested too deeply to be read") from None
    except (ValueError, TypeError) as error:
        raise Refused(f"{label} is not valid JSON ({str(error).splitlines()[0]})") from None
    if _lone_surrogate(data):
        raise Refused(f"{label} holds a lone surrogate escape (a \\uD800-\\uDFFF without "
                      f"its pair), which is no text")
    return doc


_ESCAPE = re.compile(r"\\.", re.DOTALL)
# A string once its escapes are gone, or an unterminated one to the end: a match never fails
# once it has started, so no start is tried again inside a string, and no repeated group
# keeps state per character: linear in time and memory (an unterminated string is invalid
# JSON, which the parser refuses anyway).
_STRING = re.compile(r'"[^"]*"?')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _deeper_than(text: str, depth: int) -> bool:
    """Whether arrays and objects nest deeper than `depth` in `text`, brackets inside strings
    not counted: regular expressions and a running sum, linear in the text, never recursive.
    Escapes go first, left to right as the parser reads them, so an escaped quote ends no
    string."""
    if text.count("[") + text.count("{") <= depth:
        return False
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", _ESCAPE.sub("", text)))
    return len(brackets) > depth and max(accumulate(map(_STEP.__getitem__, brackets))) > depth


_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
# every escape, left to right as the parser reads them: a high-low pair, a surrogate alone
# (group 1), or any other escape (an escaped backslash among them, so that `\\ud800` is a
# backslash and letters)
_ESCAPES = re.compile(r"\\(?:u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"
                      r"|(u[dD][89a-fA-F][0-9a-fA-F]{2})|.)", re.DOTALL)


def _lone_surrogate(text: str) -> bool:
    """Whether valid JSON `text` escapes a surrogate outside a high-low pair."""
    if not _SURROGATE.search(text):
        return False
    return any(match.group(1) for match in _ESCAPES.finditer(text))


def read_json(path: Path, cap: int, label: str = "", **options) -> object:
    """A JSON file that a container or a submission wrote, through the bounded reader and the
    bounded parser (`parse_json`, whose options it takes)."""
    label = label or str(path)
    return parse_json(read_bounded(path, cap, label), label, **options)
