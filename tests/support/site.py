"""The static sites that the site tests read, built once per test session (cached under
pytest's session temp folder, since the published one renders every figure), and an HTML
reader for their tables."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

from click.testing import CliRunner

from evaluator.cli.figures import report_command
from tests.conftest import REPO, write_command_bundle, write_testset

SETS = ("new-wiki", "nyt", "reddit", "amazon")

FIRST_WORDS = """import json, sys
doc = json.load(open(sys.argv[1]))
out = {q["id"]: " ".join(p["context"].split()[:N])
       for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]}
json.dump(out, open(sys.argv[2], "w"))
"""
CRASHES = """import sys
print("loading weights from /models/crash.bin", flush=True)
sys.stderr.write("RuntimeError: CUDA driver not found\\n")
sys.exit(3)
"""


# ------------------------------------------------------------------------ site builders

def _env(root: Path, shared_data: Path) -> dict:
    return {**os.environ, "QASHIFT_WORKSPACE": str(root / "workspace"),
            "QASHIFT_CACHE": str(root / "cache"), "QASHIFT_DATA_DIR": str(shared_data),
            "QASHIFT_SUBMISSIONS": str(root / "submissions"),
            "QASHIFT_TESTSETS": str(root / "testsets")}


def _evaluate(env: dict, *args: str) -> subprocess.CompletedProcess:
    code = "from evaluator.cli.main import evaluate_command; evaluate_command()"
    return subprocess.run([sys.executable, "-c", code, "--runner", "local", *args], env=env,
                          capture_output=True, text=True, timeout=300)


def build_store_site(tmp_path_factory, shared_data: Path) -> tuple[Path, dict]:
    """A real store made by `evaluate`, and the site `qashift report` builds from it.

    bert-ensemble (stored leaderboard predictions) on SQuAD dev; sliding-window and two
    command bundles on two small sets cut from SQuAD dev (tiny-shift compared against
    tiny-orig, so there are gaps, ranks and a fit); one bundle that crashes (a failure with a
    log, and a failed `--limit` sample, which is no failure of its cell). Returns (site
    folder, environment with the store's location).
    """
    root = tmp_path_factory.getbasetemp() / "store-site"
    env = _env(root, shared_data)
    if (root / "done").exists():
        return root / "site", env
    shutil.rmtree(root, ignore_errors=True)
    subs, sets = root / "submissions", root / "testsets"
    for bundle in ("bert-ensemble", "sliding-window"):
        shutil.copytree(REPO / "submissions" / bundle, subs / bundle)
    shutil.copytree(REPO / "testsets" / "squad-dev", sets / "squad-dev")
    write_command_bundle(subs, "first-words", FIRST_WORDS.replace("N", "3"))
    write_command_bundle(subs, "first-word", FIRST_WORDS.replace("N", "1"))
    write_command_bundle(subs, "crashes", CRASHES)
    dev = json.loads((shared_data / "squad-v1.1" / "dev-v1.1.json").read_text())
    write_testset(sets, "tiny-orig", {"version": "1.1", "data": dev["data"][:1]})
    shift = write_testset(sets, "tiny-shift", {"version": "1.1", "data": dev["data"][1:2]})
    yaml = shift / "testset.yaml"
    yaml.write_text(yaml.read_text().replace("reference: squad-dev", "reference: tiny-orig"))

    runs = [_evaluate(env, "-b", "bert-ensemble", "-t", "squad-dev"),
            _evaluate(env, "-b", "sliding-window", "-b", "first-words", "-b", "first-word",
                      "-t", "tiny-orig", "-t", "tiny-shift"),
            _evaluate(env, "-b", "crashes", "-t", "tiny-shift"),
            _evaluate(env, "-b", "crashes", "-t", "tiny-orig", "--limit", "3")]  # a sample
    for r in runs[:2]:
        assert r.returncode == 0, r.stdout + r.stderr
    for r in runs[2:]:
        assert r.returncode == 1 and "nonzero-exit" in r.stderr, r.stderr
    result = CliRunner().invoke(report_command, ["--source", "store", "--out",
                                                 str(root / "site")], env=env)
    assert result.exit_code == 0, result.output
    (root / "done").write_text("")
    return root / "site", env


def build_published_site(tmp_path_factory, shared_data: Path) -> Path:
    """The site of the published SQuADShifts results (every figure, every table)."""
    root = tmp_path_factory.getbasetemp() / "published-site"
    if (root / "done").exists():
        return root / "site"
    shutil.rmtree(root, ignore_errors=True)
    result = CliRunner().invoke(report_command, [
        "--source", "squadshifts-published", "--data-dir", str(shared_data),
        "--out", str(root / "site")])
    assert result.exit_code == 0, result.output
    (root / "done").write_text("")
    return root / "site"


def store_rows(env: dict) -> list[dict]:
    """The result rows as the store holds them (the numbers the site must show)."""
    from evaluator.store.store import Store

    return Store(Path(env["QASHIFT_WORKSPACE"])).results()


# ------------------------------------------------------------------------- HTML reading

class Tables(HTMLParser):
    """Every <table>: id, caption, header cells (with scope) and body rows (cell texts)."""

    def __init__(self):
        super().__init__()
        self.tables, self.links, self.imgs, self._cell, self._stack = [], [], [], None, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            self.tables.append({"id": a.get("id"), "caption": "", "head": [], "rows": [],
                                "row_attrs": [], "_in": None})
        t = self.tables[-1] if self.tables else None
        if tag == "a" and "href" in a:
            self.links.append(a["href"])
        if tag == "img":
            self.imgs.append(a)
        if t is None:
            return
        if tag in ("thead", "tbody", "caption"):
            t["_in"] = tag
        elif tag == "tr" and t["_in"] == "tbody":
            t["rows"].append([])
            t["row_attrs"].append(a)
        elif tag in ("th", "td"):
            self._cell = {"tag": tag, "attrs": a, "text": ""}

    def handle_endtag(self, tag):
        t = self.tables[-1] if self.tables else None
        if t is None:
            return
        if tag in ("th", "td") and self._cell is not None:
            self._cell["text"] = " ".join(self._cell["text"].split())
            (t["head"] if t["_in"] == "thead" else t["rows"][-1]).append(self._cell)
            self._cell = None
        elif tag in ("thead", "tbody", "caption"):
            t["_in"] = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["text"] += data
        elif self.tables and self.tables[-1]["_in"] == "caption":
            self.tables[-1]["caption"] += data


def parse(path: Path) -> Tables:
    p = Tables()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def table(page: Tables, table_id: str) -> dict:
    return next(t for t in page.tables if t["id"] == table_id)


def bundle_names(env: dict) -> dict[str, str]:
    from evaluator.bundles import spec as bundles

    root = Path(env["QASHIFT_SUBMISSIONS"])
    return {b: bundles.from_folder(root / b).name for b in bundles.available(root)}


def by_header(board: dict) -> list[dict]:
    """Body rows as {header text: cell}."""
    head = [c["text"] for c in board["head"]]
    return [dict(zip(head, r)) for r in board["rows"]]
