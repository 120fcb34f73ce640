"""The one gate and the one bounded reader: what a container or another store hands in is
walked with lstat, never through a link, hashed and copied in the same pass; what the
controller reads that a submission wrote is a capped regular file or a refusal of one line."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from evaluator.core import gate
from evaluator.core.gate import (
    Limits,
    Refused,
    files_digest,
    folder_digest,
    is_digest,
    read_bounded,
    read_json,
    walk,
)


def weights(folder: Path) -> Path:
    (folder / "sub").mkdir(parents=True)
    (folder / "reader.safetensors").write_bytes(b"\x01" * 1000)
    (folder / "reader.json").write_text('{"hidden": 4}')
    (folder / "sub" / "vocab.txt").write_text("a\nb\n")
    return folder


def digest_by_the_definition(folder: Path) -> str:
    """sha256 over (relative path, NUL, the file's sha256) in path order, written out here
    from the contract rather than taken from the code under test."""
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    outer = hashlib.sha256()
    for path in files:
        outer.update(path.relative_to(folder).as_posix().encode() + b"\0")
        outer.update(hashlib.sha256(path.read_bytes()).digest())
    return outer.hexdigest()


def refused(folder: Path, pattern: str, **options) -> str:
    with pytest.raises(Refused, match=pattern) as info:
        walk(folder, **options)
    assert "\n" not in str(info.value) and info.value.failure_class == "refused-files"
    return str(info.value)


def test_the_walk_hashes_by_the_contract_and_copies_exactly_what_it_hashed(tmp_path):
    source = weights(tmp_path / "w")
    walked = walk(source, target=tmp_path / "copy")
    assert walked.digest == digest_by_the_definition(source) == folder_digest(source)
    assert is_digest(walked.digest)
    assert walked.total_bytes == 1000 + 13 + 4
    assert digest_by_the_definition(tmp_path / "copy") == walked.digest
    assert stat.S_IMODE(os.stat(tmp_path / "copy" / "reader.json").st_mode) == 0o444
    assert stat.S_IMODE(os.stat(tmp_path / "copy" / "sub").st_mode) == 0o555


def test_a_table_of_files_hashes_as_the_walk_of_a_folder_that_holds_them(tmp_path):
    """A manifest's table of files gives the folder's digest without the folder, in the
    walk's order: component by component (sub/ before sub.json), not by the path's text."""
    source = weights(tmp_path / "w")
    (source / "sub.json").write_text("{}")
    (source / "sub" / "deeper").mkdir()
    (source / "sub" / "deeper" / "x.npy").write_bytes(b"\x00" * 3)
    walked = walk(source)
    table = {rel: sha for rel, sha, _ in walked.files}
    assert [rel for rel, _, _ in walked.files] != sorted(table)  # the trap is there
    assert files_digest(table) == walked.digest == digest_by_the_definition(source)
    assert files_digest(dict(reversed(table.items()))) == walked.digest
    table["sub.json"] = hashlib.sha256(b"[]").hexdigest()
    assert files_digest(table) != walked.digest


@pytest.mark.parametrize("make, pattern", [
    (lambda f, out: (f / "gold.json").symlink_to(out), r"gold.json is a link \(to .*secret"),
    (lambda f, out: (f / "sub" / "env").symlink_to("/proc/self/environ"),
     r"sub/env is a link \(to /proc/self/environ\)"),
    (lambda f, out: (f / "data").symlink_to(out.parent, target_is_directory=True),
     r"data is a link"),
    (lambda f, out: os.link(f / "reader.json", f / "again.json"), r"is a hard link"),
    (lambda f, out: os.mkfifo(f / "pipe"), r"pipe is a FIFO"),
    (lambda f, out: _socket(f / "sock"), r"sock is a socket"),
])
def test_links_hard_links_and_special_files_are_refused_naming_them(tmp_path, make, pattern):
    secret = tmp_path / "host" / "secret.json"
    secret.parent.mkdir()
    secret.write_text('{"gold": "answers"}')
    folder = weights(tmp_path / "w")
    make(folder, secret)
    refused(folder, pattern, target=tmp_path / "copy")
    assert not any(p.name == "secret.json" for p in (tmp_path / "copy").rglob("*"))


def _socket(path: Path) -> None:
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.close()


def test_a_device_node_is_refused(tmp_path):
    folder = weights(tmp_path / "w")
    try:
        os.mknod(folder / "zero", stat.S_IFCHR | 0o666, os.makedev(1, 5))
    except PermissionError:
        pytest.skip("creating a device node needs root")
    refused(folder, r"zero is a device")


def test_the_folder_itself_may_not_be_a_link(tmp_path):
    real = weights(tmp_path / "w")
    (tmp_path / "alias").symlink_to(real, target_is_directory=True)
    refused(tmp_path / "alias", r"alias is a link")


def test_sizes_counts_depth_and_sparse_files_are_bounded(tmp_path):
    folder = weights(tmp_path / "w")
    refused(folder, r"reader.safetensors holds 1,000 bytes, over the 999 allowed",
            limits=Limits(file_bytes=999))
    refused(folder, r"over its 1,010 bytes", limits=Limits(total_bytes=1010))
    refused(folder, r"sub is one folder more than the 2 files and folders allowed",
            limits=Limits(files=2))
    refused(folder, r"sub/vocab.txt is one file more than the 3 files and folders allowed",
            limits=Limits(files=3))
    assert walk(folder, limits=Limits(files=4)).digest == digest_by_the_definition(folder)
    deep = tmp_path / "deep"
    (deep / "a" / "b" / "c").mkdir(parents=True)
    (deep / "a" / "b" / "c" / "f").write_text("x")
    refused(deep, r"nested deeper than 2 folders", limits=Limits(depth=2))
    sparse = tmp_path / "sparse"
    sparse.mkdir()
    with open(sparse / "hole.bin", "wb") as handle:
        handle.truncate(64 << 20)  # 64 MiB that occupy no blocks
    refused(sparse, r"hole.bin is a sparse file")


def test_a_refused_copy_leaves_nothing_that_looks_stored(tmp_path):
    folder = weights(tmp_path / "w")
    os.mkfifo(folder / "sub" / "z-pipe")
    with pytest.raises(Refused):
        walk(folder, target=tmp_path / "copy")
    # the caller removes the partial target; the walk never sealed it as a finished copy
    assert not (tmp_path / "copy" / "sub" / "z-pipe").exists()


def test_a_name_that_is_not_utf8_is_refused_in_one_line_naming_it(tmp_path):
    """The digest hashes paths as UTF-8: a name that is not is a refusal like any other,
    never an encoding error that escapes the callers' handling of refusals."""
    folder = weights(tmp_path / "w")
    with open(os.path.join(os.fsencode(folder), b"w\xff.json"), "wb") as handle:
        handle.write(b"{}")
    message = refused(folder, r"w\\xff\.json has a name that is not valid UTF-8",
                      target=tmp_path / "copy")
    message.encode()  # printable as it is, no lone surrogate left in it
    nested = weights(tmp_path / "nested")
    os.mkdir(os.path.join(os.fsencode(nested), b"d\xfe"))
    refused(nested, r"d\\xfe has a name that is not valid UTF-8")


def test_a_refusal_names_an_entry_with_a_newline_on_one_line(tmp_path):
    folder = weights(tmp_path / "w")
    os.mkfifo(folder / "a\npipe")
    assert "a\\npipe is a FIFO" in refused(folder, r"is a FIFO")


def test_empty_folders_count_toward_the_limit_and_are_not_copied(tmp_path):
    """Folders are not in the digest, so a copy holds a folder only as the parent of a copied
    file, and each one counts against the limit as a file does."""
    many = weights(tmp_path / "many")
    for index in range(50):
        (many / f"empty-{index:02}").mkdir()
    refused(many, r"empty-05 is one folder more than the 5 files and folders allowed",
            limits=Limits(files=5), target=tmp_path / "refused")

    folder = weights(tmp_path / "w")
    (folder / "empty" / "deeper").mkdir(parents=True)
    (folder / "a" / "b" / "c").mkdir(parents=True)
    (folder / "a" / "b" / "c" / "f.txt").write_text("x")
    (folder / "code" / "__pycache__").mkdir(parents=True)
    (folder / "code" / "__pycache__" / "m.pyc").write_bytes(b"\0")
    walked = walk(folder, target=tmp_path / "copy", skip=gate.no_byte_code)
    copied = sorted(p.relative_to(tmp_path / "copy").as_posix()
                    for p in (tmp_path / "copy").rglob("*"))
    assert copied == ["a", "a/b", "a/b/c", "a/b/c/f.txt", "reader.json", "reader.safetensors",
                      "sub", "sub/vocab.txt"]
    assert walked.digest == digest_by_the_definition(tmp_path / "copy")
    assert stat.S_IMODE(os.stat(tmp_path / "copy" / "a" / "b").st_mode) == 0o555


def while_read(monkeypatch, path: Path, when, change) -> None:
    """Run `change` once, inside the gate's read of `path`, at its first read of `when(count)`
    bytes: the file changes between its lstat and the end of its read, every time."""
    original, inode, done = gate._read, path.stat().st_ino, []

    def read(fd: int, count: int, refuse):
        if not done and os.fstat(fd).st_ino == inode and when(count):
            done.append(change())
        return original(fd, count, refuse)

    monkeypatch.setattr(gate, "_read", read)


def append(path: Path, data: bytes):
    return lambda: path.open("ab").write(data)


def test_a_file_that_grows_while_it_is_read_is_refused(tmp_path, monkeypatch):
    folder = weights(tmp_path / "w")
    grown = folder / "reader.safetensors"
    while_read(monkeypatch, grown, lambda count: True, append(grown, b"A" * (8 << 20)))
    message = refused(folder, r"reader.safetensors changed while it was read",
                      target=tmp_path / "copy", limits=Limits(total_bytes=2000))
    assert "1,000 bytes" in message
    copy = tmp_path / "copy" / "reader.safetensors"
    assert not copy.exists() or copy.stat().st_size <= 1000  # the cap held on bytes written


def test_a_file_that_grows_after_its_last_byte_was_read_is_refused(tmp_path, monkeypatch):
    """The read asks for one byte past the size lstat gave: growth just at the end shows."""
    folder = tmp_path / "w"
    folder.mkdir()
    big = folder / "big.bin"
    big.write_bytes(b"\1" * (3 * gate.CHUNK))
    while_read(monkeypatch, big, lambda count: count == 1, append(big, b"A"))
    refused(folder, r"big.bin changed while it was read \(grew past the 3,145,728 bytes",
            target=tmp_path / "copy")
    assert (tmp_path / "copy" / "big.bin").stat().st_size == 3 * gate.CHUNK


def test_a_file_that_shrinks_while_it_is_read_is_refused(tmp_path, monkeypatch):
    folder = weights(tmp_path / "w")
    shrunk = folder / "reader.safetensors"
    while_read(monkeypatch, shrunk, lambda count: True, lambda: os.truncate(shrunk, 10))
    refused(folder, r"reader.safetensors changed while it was read \(shrank from 1,000 to 10")


def test_a_file_written_to_in_place_while_it_is_read_is_refused(tmp_path, monkeypatch):
    """Same size, new time: the file was written to between its lstat and the end of its
    read, so what was hashed may be half of one version and half of another."""
    folder = weights(tmp_path / "w")
    target = folder / "reader.safetensors"
    listed = target.stat()

    def rewrite():
        with target.open("r+b") as handle:
            handle.write(b"\2" * 1000)
        os.utime(target, ns=(listed.st_atime_ns, listed.st_mtime_ns + 1_000_000_000))

    while_read(monkeypatch, target, lambda count: count == 1, rewrite)
    refused(folder, r"reader.safetensors changed while it was read \(its size or time changed")


# -- the bounded reader --------------------------------------------------------------------
def finishes(action, seconds: float = 10.0):
    """Run `action` in a thread; fail the test (instead of hanging it) if it blocks."""
    box: dict = {}

    def target():
        try:
            box["value"] = action()
        except BaseException as exc:  # noqa: BLE001  (handed back to the test)
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the reader blocked"
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_the_reader_never_blocks_on_a_fifo_nor_follows_a_link(tmp_path):
    os.mkfifo(tmp_path / "progress.json")
    with pytest.raises(Refused, match=r"progress.json is a FIFO, not a regular file"):
        finishes(lambda: read_bounded(tmp_path / "progress.json", 1000))
    (tmp_path / "secret").write_text("gold")
    (tmp_path / "link.json").symlink_to(tmp_path / "secret")
    with pytest.raises(Refused, match=r"link.json is a link"):
        finishes(lambda: read_bounded(tmp_path / "link.json", 1000))
    with pytest.raises(Refused, match=r"is a device"):
        finishes(lambda: read_bounded(Path("/dev/zero"), 1000))


def test_the_reader_caps_the_size_before_parsing_and_any_parse_error_is_a_refusal(tmp_path):
    path = tmp_path / "record.json"
    path.write_text(json.dumps({"epoch": 1, "loss": 0.5}))
    assert read_json(path, 1000) == {"epoch": 1, "loss": 0.5}
    with pytest.raises(Refused, match=r"holds 25 bytes, over the 10 allowed"):
        read_json(path, 10)
    path.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(Refused, match=r"nested too deeply"):
        read_json(path, 1 << 20)
    path.write_bytes(b"\xff\xfe{")
    with pytest.raises(Refused, match=r"is not valid JSON"):
        read_json(path, 1 << 20)


@pytest.mark.parametrize("data", [b"[" * 1_000_000, b"[" * 200_000 + b"]" * 200_000,
                                  b'{"a": ' * 65 + b"1" + b"}" * 65,
                                  b"[" * 500 + b"]" * 500],
                         ids=["million-open", "200k-deep", "65-objects", "500-deep"])
def test_nesting_past_the_limit_is_refused_before_the_parser_sees_it(data):
    """A linear scan counts the depth first: a million `[` (a RecursionError, an internal
    error, in the recursive parser) and 500 levels (which it parses, and which every
    recursive walk after it may not) are one line naming the file."""
    with pytest.raises(Refused, match=r"^the reply is nested too deeply \(more than 64 levels "
                                      r"of arrays and objects\)$") as refused:
        gate.parse_json(data, "the reply")
    assert refused.value.failure_class == "refused-files"


def test_the_depth_scan_ends_on_a_megabyte_of_escaped_quotes_in_an_open_string():
    """Deep enough to be scanned, then one string that never closes, made of escaped quotes: a
    scan that tries each quote again as a string's start takes hours on this megabyte (the
    reply cap of an endpoint; a predictions file may hold 512 MiB of it); the linear one ends
    at once, and the parser refuses the text in one line."""
    data = b"[" * 70 + b'"' + b'\\"' * 500_000
    done = threading.Event()

    def parse() -> None:
        with pytest.raises(Refused, match=r"^the reply is "):
            gate.parse_json(data, "the reply")
        done.set()

    worker = threading.Thread(target=parse, daemon=True)
    worker.start()
    worker.join(120)  # not a speed check: the quadratic scan would not end today
    assert done.is_set()


def test_the_depth_limit_counts_arrays_and_objects_and_not_brackets_in_strings():
    deepest = b"[" * 64 + b'"]]]] [[[[ \\" {{{{"' + b"]" * 64
    assert gate.parse_json(deepest, "x") == json.loads(deepest)
    text = json.dumps({"context": "[" * 10_000 + "{" * 10_000, "qas": [[[]]]}).encode()
    assert gate.parse_json(text, "x")["qas"] == [[[]]]
    assert gate.parse_json(b"[" * 10 + b"]" * 10, "x", depth=10)
    with pytest.raises(Refused, match=r"more than 9 levels"):
        gate.parse_json(b"[" * 10 + b"]" * 10, "x", depth=9)


@pytest.mark.parametrize("data, why", [
    (b'{"f1": NaN}', r"^x holds NaN, which is not a JSON number$"),
    (b"[1, Infinity]", r"^x holds Infinity, which is not a JSON number$"),
    (b"-Infinity", r"^x holds -Infinity, which is not a JSON number$"),
    (b'{"answer": "caf\xe9"}', r"^x is not valid JSON \(not UTF-8: character 15 cannot be "
                               r"decoded\)$"),
    (b'{"a": "\\ud800"}', r"^x holds a lone surrogate escape"),
    (b'{"\\udfff": "a"}', r"^x holds a lone surrogate escape"),
    (b'["\\\\\\ud83d"]', r"^x holds a lone surrogate escape"),  # a backslash, then \ud83d
    (b'["\\ude00\\ud83d"]', r"^x holds a lone surrogate escape"),  # a pair the wrong way round
    (b'["\\ud83d\\ude00\\ude00"]', r"^x holds a lone surrogate escape"),
    # two lone halves with an escaped backslash between them: no pair once it is read
    (b'["\\ud800\\\\\\udc00"]', r"^x holds a lone surrogate escape"),
    (b"[1e400]", r"^x holds 1e400 \(an infinity as a float\), which is not a JSON number$"),
    (b'{"f1": -1e999}', r"^x holds -1e999 \(an infinity as a float\)"),
], ids=["nan", "infinity", "minus-infinity", "latin-1", "high", "low-key", "after-backslash",
        "reversed", "pair-and-one", "halves-around-a-backslash", "overflow", "minus-overflow"])
def test_values_that_no_writer_can_write_back_are_refused_in_one_line(data, why):
    """NaN and the infinities are no JSON (a score, a count, a size is never one), bytes that
    are not UTF-8 are no text, and a lone surrogate parses to a str that every UTF-8 writer
    after it fails on (UnicodeEncodeError): each is one line naming the file."""
    with pytest.raises(Refused, match=why) as refused:
        gate.parse_json(data, "x")
    assert "\n" not in str(refused.value)


def test_text_that_only_looks_like_a_surrogate_and_nan_by_request_are_read(tmp_path):
    assert gate.parse_json(b'["\\ud83d\\ude00", "\\\\ud800", "\\u00e9", "NaN"]', "x") == \
        ["\U0001f600", "\\ud800", "é", "NaN"]
    assert gate.parse_json('["\u00e9"]', "x") == ["é"]
    assert gate.parse_json(b"[NaN]", "x", allow_nan=True)[0] != 0
    (tmp_path / "progress.json").write_bytes(b'{"loss": NaN}')
    with pytest.raises(Refused, match=r"progress.json holds NaN"):
        read_json(tmp_path / "progress.json", 1 << 20)
    assert read_json(tmp_path / "progress.json", 1 << 20, allow_nan=True)["loss"] != 0
