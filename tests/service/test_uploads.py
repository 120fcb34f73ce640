"""A bundle folder uploaded as an archive: unpacked member by member and walked by the gate;
a link, a hard link, a FIFO, a `..` or absolute name, or a bomb refuses the whole archive in
one line and leaves nothing behind; over HTTP, an uploaded folder is scored like any bundle."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import httpx
import pytest

from evaluator.service import uploads
from tests.conftest import FIRST_WORD, tiny_registry, write_command_bundle
from tests.service.test_service import DEADLINE_S, start_server, worker


def tar_of(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w:gz") as tar:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return packed.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, data: bytes | None = b"x",
           target: str = "") -> tuple[tarfile.TarInfo, bytes | None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, data if kind == tarfile.REGTYPE else None


BUNDLE_YAML = b"id: up\nname: up\nkind: command\ncommand: python3 program.py {input} {output}\n"
GOOD = [member("up/bundle.yaml", data=BUNDLE_YAML), member("up/program.py", data=b"pass\n")]


@pytest.mark.parametrize("bad, why", [
    (member("up/evil", tarfile.SYMTYPE, target="/etc/passwd"), "is a link"),
    (member("up/hard", tarfile.LNKTYPE, target="up/program.py"), "is a link"),
    (member("up/fifo", tarfile.FIFOTYPE), "is a FIFO"),
    (member("up/dev", tarfile.CHRTYPE), "a device or another special file"),
    (member("up/../../escape.py"), "climbs out of the archive with '..'"),
    (member("/etc/cron.d/evil"), "has an absolute name"),
], ids=["symlink", "hardlink", "fifo", "device", "dotdot", "absolute"])
def test_an_archive_with_anything_but_files_and_folders_is_refused_whole(
        tmp_path, bad, why):
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(tar_of([*GOOD, bad]))
    with pytest.raises(uploads.Rejected, match=why) as refused:
        uploads.store_upload(archive, tmp_path / "ws")
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "ws" / "uploads").exists()  # nothing of it stays
    assert not (tmp_path.parent / "escape.py").exists()


def test_a_zip_with_a_link_or_a_climbing_name_is_refused(tmp_path):
    for name, attr, why in (("up/evil", 0o120777 << 16, "not a file or a folder"),
                            ("../up/x.py", 0o100644 << 16, "climbs out")):
        archive = tmp_path / "a.zip"
        with zipfile.ZipFile(archive, "w") as zipped:
            zipped.writestr("up/bundle.yaml", BUNDLE_YAML)
            info = zipfile.ZipInfo(name)
            info.external_attr = attr
            zipped.writestr(info, b"/etc/passwd")
        with pytest.raises(uploads.Rejected, match=why):
            uploads.store_upload(archive, tmp_path / "ws")


def test_a_bomb_is_refused_as_it_unpacks_not_as_it_declares(tmp_path, monkeypatch):
    monkeypatch.setattr(uploads, "UNPACKED_CAP", 1 << 20)
    archive = tmp_path / "bomb.tar.gz"
    archive.write_bytes(tar_of([*GOOD, member("up/zeros", data=bytes(4 << 20))]))
    assert archive.stat().st_size < 64 << 10  # four MiB of zeros, packed small
    with pytest.raises(uploads.Rejected, match="unpacks to more than 1 MiB"):
        uploads.store_upload(archive, tmp_path / "ws")


def test_a_good_archive_becomes_a_bundle_under_its_digest(tmp_path):
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(tar_of(GOOD))
    bundle = uploads.store_upload(archive, tmp_path / "ws")
    assert bundle.id == "up" and bundle.folder.parent.parent == tmp_path / "ws" / "uploads"
    again = uploads.store_upload(archive, tmp_path / "ws")  # the same bytes: one copy
    assert again.folder == bundle.folder and again.digest == bundle.digest
    assert (bundle.folder / "program.py").stat().st_mode & 0o222 == 0  # read-only, 0444


@pytest.mark.slow  # it starts a server or a worker process
def test_an_uploaded_folder_is_scored_over_http_and_a_bad_archive_is_a_422(
        database, tmp_path, monkeypatch, small_dev, workspace):
    url, token = database
    tiny_registry(tmp_path, monkeypatch, {"tiny": small_dev}, {})
    folder = write_command_bundle(tmp_path / "mine", "first-word", FIRST_WORD)
    proc, base = start_server(url)
    running = worker()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "evaluator", "remote", "submit", str(folder), "-t", "tiny",
             "--wait", "--json", "--server", base, "--token", token],
            env=os.environ.copy(), capture_output=True, text=True, timeout=DEADLINE_S * 3)
        bad = httpx.post(f"{base}/v1/bundles", content=tar_of([*GOOD, member(
            "up/evil", tarfile.SYMTYPE, target="/etc/passwd")]), trust_env=False,
            headers={"Authorization": f"Bearer {token}"}, timeout=DEADLINE_S)
    finally:
        running.send_signal(signal.SIGTERM)
        running.wait(timeout=30)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    assert done.returncode == 0, done.stderr
    [result] = json.loads(done.stdout)["results"]
    assert result["bundle"] == "first-word" and result["n"] > 0
    assert bad.status_code == 422
    assert bad.json()["detail"] == "member 'up/evil' is a link; only files and folders are taken"
    checked = subprocess.run([sys.executable, "-m", "evaluator", "store", "check"],
                             env=os.environ.copy(), capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert Path(workspace / "uploads").is_dir()
