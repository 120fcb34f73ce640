"""The store's copies of trained weights: one read-only folder per weights digest."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess

from evaluator.core.gate import folder_digest
from evaluator.store import files as store_files
from evaluator.store.store import Store


def test_two_controllers_freezing_the_same_weights_both_get_them(workspace, tmp_path,
                                                                  monkeypatch):
    """The store keeps one read-only copy per weights digest. A controller that finds the
    copy made by another one while it was copying keeps that one and removes its own; the
    leftover copy of a freeze that was killed is removed by the next one."""
    store = Store.open_default()
    weights = tmp_path / "model"
    weights.mkdir()
    (weights / "reader.safetensors").write_bytes(b"weights")
    digest = folder_digest(weights)
    models = store.model_path(digest).parent
    models.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    host = socket.gethostname()
    stale = models / f".partial-{host}:{dead.pid}-killed"
    live = models / f".partial-{host}:{os.getpid()}-copying"  # still at work
    odd = models / ".partial-not-a-copy"
    for folder in (stale, live, odd):
        folder.mkdir()
        (folder / "reader.safetensors").write_bytes(b"half")
        folder.chmod(0o555)
    walk = store_files.walk

    def copied_while_another_froze(src, **kwargs):
        out = walk(src, **kwargs)
        shutil.copytree(src, store.model_path(digest))  # the other controller's rename lands
        return out  # first

    monkeypatch.setattr(store_files, "walk", copied_while_another_froze)
    assert store.put_model(weights) == digest
    assert (store.model_path(digest) / "reader.safetensors").read_bytes() == b"weights"
    assert sorted(p.name for p in models.iterdir()) == sorted([digest, live.name, odd.name])
