"""A results store that is corrupt, read-only or full: one line saying what is wrong and how
to recover, a non-zero exit, nothing half-written left behind; `qashift store check` finds
the damage and `qashift store repair` rebuilds what it can from the store's own objects,
believing no row object further than it can check it."""

from __future__ import annotations

import json
import math
import os
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from evaluator.cli.main import evaluate_cmd, main
from evaluator.core.hashing import canonical_json, sha256_bytes
from evaluator.store import check as store_check
from evaluator.store.rows import result_key
from evaluator.store.schema import ROW_MARK
from evaluator.store.store import Store
from tests.conftest import FIRST_WORD, tiny_registry
from tests.support.stores import raw_object

needs_mounts = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")


@pytest.fixture
def registry(tmp_path, small_dev, monkeypatch, workspace):
    tiny_registry(tmp_path, monkeypatch, {"toy": small_dev}, {
        "honest": FIRST_WORD, "second": FIRST_WORD.replace("split()[0]", "split()[-1]"),
        "silent": FIRST_WORD.replace('p["context"].split()[0]', '""')})
    return {"workspace": workspace}


def evaluate(*bundle_ids: str):
    args = [x for b in bundle_ids for x in ("-b", b)]
    return CliRunner().invoke(evaluate_cmd, [*args, "-t", "toy", "--runner", "local", "--json"])


def one_line_error(result) -> str:
    assert result.exit_code == 1, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    return lines[0]


@pytest.fixture
def tmpfs(tmp_path):
    """A 2 MiB file system of its own, for full-disk and read-only stores."""
    where = tmp_path / "small"
    where.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(where)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=False)


def partial_files(workspace: Path) -> list[Path]:
    return list(workspace.rglob(".partial-*"))


def test_a_corrupt_index_is_one_line_and_repair_rebuilds_it(registry):
    ws = registry["workspace"]
    assert evaluate("honest", "second").exit_code == 0
    before = {r["key"]: (r["em"], r["f1"]) for r in Store(ws).results()}
    (ws / "results.sqlite").write_bytes(b"this is not a database" * 100)
    for extra in ("results.sqlite-wal", "results.sqlite-shm"):
        (ws / extra).unlink(missing_ok=True)
    line = one_line_error(evaluate("honest"))
    assert "is corrupt" in line and "qashift store repair" in line
    runner = CliRunner()
    checked = runner.invoke(main, ["store", "check"])
    assert checked.exit_code == 1 and "index: CORRUPT" in checked.output
    repaired = runner.invoke(main, ["store", "repair"])
    assert repaired.exit_code == 0
    assert "rebuilt the index from 2 stored result rows and 0 trained" in repaired.output
    assert runner.invoke(main, ["store", "check"]).exit_code == 0
    after = {r["key"]: (r["em"], r["f1"]) for r in Store(ws).results()}
    assert after == before
    again = evaluate("honest", "second")
    assert again.exit_code == 0
    assert all(r["cached"] for r in json.loads(again.stdout)["results"])


def corrupt_index(ws: Path) -> None:
    (ws / "results.sqlite").write_bytes(b"this is not a database" * 100)
    for extra in ("results.sqlite-wal", "results.sqlite-shm"):
        (ws / extra).unlink(missing_ok=True)


def plant(store: Store, row: dict) -> None:
    """A row object in objects/ that no run wrote (runs cannot: see below)."""
    raw_object(store, canonical_json({ROW_MARK: 1, "row": row}))


@pytest.mark.parametrize("older_store", [False, True])
def test_repair_restores_a_cell_without_an_interval_after_the_index_became_a_csv(
        registry, older_store):
    """A cell whose every question scores F1 0 has no F1 interval (NULL in the index, NaN in
    its row object): it is a genuine row, and the rebuild restores it with the others."""
    ws = registry["workspace"]
    assert evaluate("honest", "silent").exit_code == 0
    before = {r["key"]: r for r in Store(ws).results()}
    silent = next(r for r in before.values() if r["bundle"] == "silent")
    assert (silent["f1"], silent["f1_lo"], silent["f1_hi"]) == (0.0, None, None)
    store = Store(ws)
    if older_store:  # its row object as earlier versions wrote it: NaN bounds
        store.object_path(sha256_bytes(canonical_json({ROW_MARK: 1, "row": silent}))).unlink()
        nan = canonical_json({ROW_MARK: 1, "row": dict(silent, f1_lo=math.nan,
                                                          f1_hi=math.nan)})
        assert b"NaN" in nan
        raw_object(store, nan)
    (ws / "results.sqlite").write_text("bundle,testset,em,f1\nhonest,toy,1.0,2.0\n")
    for extra in ("results.sqlite-wal", "results.sqlite-shm"):
        (ws / extra).unlink(missing_ok=True)
    repaired = CliRunner().invoke(main, ["store", "repair"])
    assert repaired.exit_code == 0, repaired.output
    assert "rebuilt the index from 2 stored result rows" in repaired.output, repaired.output
    assert {r["key"]: r for r in Store(ws).results()} == before
    assert CliRunner().invoke(main, ["store", "check"]).exit_code == 0
    again = evaluate("honest", "silent")
    assert again.exit_code == 0 and all(r["cached"] for r in json.loads(again.stdout)["results"])


def test_what_a_run_writes_is_never_kept_as_a_row_object(registry):
    """A log or generations file written to be a row object is kept behind a `#`: a rebuilt
    index never reads it as a row."""
    assert evaluate("honest").exit_code == 0
    store = Store(registry["workspace"])
    [row] = store.results()
    forged = dict(row, em=100.0, f1=100.0, created_at=row["created_at"] + 60)
    plain = canonical_json({ROW_MARK: 1, "row": forged})
    escaped = plain.replace(b"qashift-result-row", b"qashift\\u002dresult-row")
    for written in (plain, escaped, plain.decode().encode("utf-16"), b" \n" + plain):
        assert store_check.row_record(written) is not None  # what the rebuild would read
        kept = store.get_object(store.put_object(written))
        assert kept.startswith(b"#") and store_check.row_record(kept) is None
    store.close()
    corrupt_index(registry["workspace"])
    done = store_check.repair(store)
    assert any("rebuilt the index from 1 stored result rows" in line and "left out" not in line
               for line in done), done
    assert store.results() == [row]


def test_repair_rebuilds_no_row_scored_by_another_scorer_than_this_machines(registry):
    """Nothing here can score such a row again, so its own per-question scores would be all
    that vouched for it: it is left out, and the cell keeps the row that was stored."""
    assert evaluate("honest").exit_code == 0
    store = Store(registry["workspace"])
    [row] = store.results()
    forged = dict(row, scorer_version="bogus/1", created_at=row["created_at"] + 60)
    plant(store, dict(forged, key=result_key(forged)))
    store.close()
    corrupt_index(registry["workspace"])
    done = store_check.repair(store)
    assert any("1 row objects left out" in line for line in done), done
    assert store.results() == [row]


def test_repair_rebuilds_no_row_object_whose_predictions_do_not_score_as_stated(registry):
    """A newer row object of the cell's key (as a run's log could be one), every question
    claimed right in its per-question scores and its totals alike: the rebuild scores its
    predictions on the gold here and keeps the row that was stored."""
    ws = registry["workspace"]
    assert evaluate("honest").exit_code == 0
    store = Store(ws)
    [row] = store.results()
    doc = json.loads(store.get_object(row["scores_sha256"]))
    doc["units"] = [[u[0], 1, 1.0, u[3], u[4], 0] for u in doc["units"]]
    forged = dict(row, em=100.0, f1=100.0, scores_sha256=store.put_object(canonical_json(doc)),
                  created_at=row["created_at"] + 60)
    plant(store, forged)
    store.close()
    corrupt_index(ws)
    done = store_check.repair(store)
    assert any("rebuilt the index from 1 stored result rows" in line and
               "1 row objects left out" in line for line in done), done
    assert store.results() == [row]


def test_a_row_stored_while_the_index_is_rebuilt_is_never_replaced(registry, monkeypatch):
    ws = registry["workspace"]
    assert evaluate("honest").exit_code == 0
    [row] = Store(ws).results()
    corrupt_index(ws)
    meanwhile = dict(row, run_record=json.dumps({"stored": "meanwhile"}))
    read = store_check._row_object

    def while_rebuilding(path):  # a controller stores the cell into the new index
        if not Store(ws).get(row["key"]):
            Store(ws).put(meanwhile)
        return read(path)

    monkeypatch.setattr(store_check, "_row_object", while_rebuilding)
    store_check.repair(Store(ws))
    assert Store(ws).get(row["key"]) == meanwhile


def test_a_corrupt_object_is_found_quarantined_and_its_cell_recomputed(registry):
    ws = registry["workspace"]
    assert evaluate("honest").exit_code == 0
    [row] = Store(ws).results()
    scores = Store(ws).object_path(row["scores_sha256"])
    scores.write_bytes(b"tampered")
    checked = CliRunner().invoke(main, ["store", "check"])
    assert checked.exit_code == 1 and "1 corrupt" in checked.output
    repaired = CliRunner().invoke(main, ["store", "repair"])
    assert "moved 1 corrupt objects" in repaired.output and "dropped 1 results" in \
        repaired.output
    assert (ws / "quarantine" / row["scores_sha256"]).read_bytes() == b"tampered"
    rerun = evaluate("honest")
    assert rerun.exit_code == 0 and not json.loads(rerun.stdout)["results"][0]["cached"]


@needs_mounts
def test_a_read_only_store_is_one_line(registry, tmpfs, monkeypatch):
    monkeypatch.setenv("QASHIFT_WORKSPACE", str(tmpfs / "ws"))
    assert evaluate("honest").exit_code == 0
    read_only = tmpfs.parent / "read-only-ws"  # the same store, seen through a read-only mount
    read_only.mkdir()
    subprocess.run(["mount", "--bind", str(tmpfs / "ws"), str(read_only)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(read_only)], check=True)
        monkeypatch.setenv("QASHIFT_WORKSPACE", str(read_only))
        line = one_line_error(evaluate("second"))
    finally:
        subprocess.run(["umount", "-l", str(read_only)], check=False)
    assert "is not writable" in line and "--workspace" in line


@needs_mounts
def test_a_full_disk_is_one_line_and_leaves_no_partial_object(registry, tmpfs, monkeypatch):
    ws = tmpfs / "ws"
    monkeypatch.setenv("QASHIFT_WORKSPACE", str(ws))
    assert evaluate("honest").exit_code == 0
    filler = tmpfs / "filler"  # fill the file system to the last block
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k"], capture_output=True)
    line = one_line_error(evaluate("second"))
    assert "no space left" in line and "finished cells are kept" in line
    assert partial_files(ws) == []
    filler.unlink()
    assert [r["bundle"] for r in Store(ws).results()] == ["honest"]


def test_an_object_noted_intact_is_read_again_only_once_its_file_has_changed(
        tmp_path, monkeypatch):
    """A cached cell's objects are hashed once, then trusted while their files stay the ones
    hashed; a change, even of the same size with its times set back, is found."""
    from evaluator.core import hashing
    from evaluator.store import files

    monkeypatch.setattr(hashing, "SETTLED_NS", 0)  # no wait for a just-written file to settle
    store = Store(tmp_path / "ws")
    sha = store.put_object(b"the answers of a run")
    reads = []
    read = files.get_object
    monkeypatch.setattr(files, "get_object", lambda *a: reads.append(a) or read(*a))
    assert store.intact(sha) and len(reads) == 1  # hashed once
    assert store.intact(sha) and len(reads) == 1  # then trusted: not read again
    path = store.object_path(sha)
    before = path.stat()
    time.sleep(0.05)  # past the file system's clock tick
    path.chmod(0o644)
    path.write_bytes(b"the answerz of a run")  # same size
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))  # its times set back
    assert not store.intact(sha) and len(reads) == 2
    assert not store.intact("0" * 64)  # a missing object
