"""A bundle uploaded as an archive (tar, tar.gz or zip; the server caps its size as it
receives it, ARCHIVE_CAP): unpacked
member by member into a private folder, then walked by the store's gate into
`<workspace>/uploads/<digest>/<bundle id>/`, read-only.

Nothing of an archive is trusted: a member that is a link (symbolic or hard), a device, a
FIFO or anything but a file or a folder, a name that is absolute or climbs out with `..`,
more members than the gate takes, or content that unpacks past the cap (a bomb: counted as
it is written, not as the archive declares) refuses the whole archive in one line, and
nothing of it stays. The folder is then a bundle like any other: its `bundle.yaml` is read by
the registry's strict reader and checked against the operator's policy.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import zipfile
from pathlib import Path, PurePosixPath

from evaluator.bundles import spec as bundles
from evaluator.bundles.spec import Bundle
from evaluator.core.errors import ConfigError, UserError
from evaluator.core.files import run_tempdir
from evaluator.core.folders import read_yaml
from evaluator.core.gate import Limits, Refused, walk

ARCHIVE_CAP = 256 << 20  # bytes of an uploaded archive
UNPACKED_CAP = 1 << 30  # bytes it may unpack to, all members together
MEMBERS = 10_000
CHUNK = 1 << 20


class Rejected(UserError):
    """An upload refused: one line saying which member and why."""


def _checked_name(name: str) -> PurePosixPath:
    path = PurePosixPath(name.replace("\\", "/"))
    if path.is_absolute() or name.startswith("/"):
        raise Rejected(f"member {name!r} has an absolute name")
    if ".." in path.parts:
        raise Rejected(f"member {name!r} climbs out of the archive with '..'")
    if not path.parts or path.parts == (".",):
        raise Rejected(f"member {name!r} has no name")
    return path


def _copy(source, target: Path, budget: list[int], name: str) -> None:
    """Write one member's bytes, counting them against what is left of the cap."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target, "xb") as out:
        while chunk := source.read(CHUNK):
            budget[0] -= len(chunk)
            if budget[0] < 0:
                raise Rejected(f"the archive unpacks to more than {UNPACKED_CAP >> 20} MiB "
                               f"(at member {name!r})")
            out.write(chunk)


def unpack(archive: Path, into: Path) -> None:
    """Unpack a tar (plain or compressed) or zip archive into the empty folder `into`, every
    member checked (see the module's docstring)."""
    budget = [UNPACKED_CAP]
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zipped:
            members = zipped.infolist()
            if len(members) > MEMBERS:
                raise Rejected(f"the archive holds more than {MEMBERS} members")
            for info in members:
                path = _checked_name(info.filename)
                kind = (info.external_attr >> 16) & 0o170000
                if kind not in (0, 0o100000, 0o040000):
                    raise Rejected(f"member {info.filename!r} is not a file or a folder "
                                   f"(a link, a device or a FIFO)")
                if info.is_dir():
                    (into / path).mkdir(parents=True, exist_ok=True)
                    continue
                with zipped.open(info) as source:
                    _copy(source, into / path, budget, info.filename)
        return
    try:
        tarred = tarfile.open(archive, mode="r:*")
    except tarfile.TarError:
        raise Rejected("not a tar, tar.gz or zip archive") from None
    with tarred:
        count = 0
        for member in tarred:
            count += 1
            if count > MEMBERS:
                raise Rejected(f"the archive holds more than {MEMBERS} members")
            path = _checked_name(member.name)
            if not (member.isfile() or member.isdir()):
                what = "a link" if member.issym() or member.islnk() else \
                    "a FIFO" if member.isfifo() else "a device or another special file"
                raise Rejected(f"member {member.name!r} is {what}; only files and folders "
                               f"are taken")
            if member.isdir():
                (into / path).mkdir(parents=True, exist_ok=True)
                continue
            source = tarred.extractfile(member)
            if source is None:
                raise Rejected(f"member {member.name!r} cannot be read")
            with source:
                _copy(source, into / path, budget, member.name)


def store_upload(archive: Path, workspace: Path) -> Bundle:
    """The uploaded bundle, unpacked, walked by the gate into the workspace's uploads (by
    digest: the same folder uploaded twice is one copy) and read as a bundle."""
    with run_tempdir("upload") as tmp:
        unpacked = Path(tmp) / "unpacked"
        unpacked.mkdir()
        try:
            unpack(archive, unpacked)
        except (OSError, EOFError, zipfile.BadZipFile, tarfile.TarError) as exc:
            raise Rejected(f"the archive cannot be unpacked: {type(exc).__name__}: "
                           f"{str(exc)[:200]}") from None
        root = _bundle_root(unpacked)
        try:
            walked = walk(root, limits=Limits(files=MEMBERS, total_bytes=UNPACKED_CAP),
                          label="the uploaded bundle")
        except Refused as exc:
            raise Rejected(str(exc)) from None
        try:
            bundle_id = read_yaml(root / "bundle.yaml").get("id")
        except ConfigError as exc:
            raise Rejected(str(exc)) from None
        if not isinstance(bundle_id, str) or not bundle_id or "/" in bundle_id or \
                bundle_id.startswith("."):
            raise Rejected("bundle.yaml names no usable id")
        target = workspace / "uploads" / walked.digest / bundle_id
        if not target.is_dir():
            partial = target.with_name(f".{bundle_id}.partial")
            shutil.rmtree(partial, ignore_errors=True)
            partial.parent.mkdir(parents=True, exist_ok=True)
            try:
                walk(root, target=partial, limits=Limits(files=MEMBERS,
                                                         total_bytes=UNPACKED_CAP),
                     label="the uploaded bundle")
            except Refused as exc:
                raise Rejected(str(exc)) from None
            os.replace(partial, target)
    try:
        return bundles.from_folder(target)
    except ConfigError as exc:
        raise Rejected(str(exc)) from None


def _bundle_root(unpacked: Path) -> Path:
    """The folder holding bundle.yaml: the archive's top, or its one top folder."""
    if (unpacked / "bundle.yaml").is_file():
        return unpacked
    tops = list(unpacked.iterdir())
    if len(tops) == 1 and tops[0].is_dir() and (tops[0] / "bundle.yaml").is_file():
        return tops[0]
    raise Rejected("no bundle.yaml at the archive's top (or in its one top folder)")
