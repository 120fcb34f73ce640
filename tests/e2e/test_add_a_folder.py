"""Adding a test set is adding a folder: a SQuAD-format file and a short testset.yaml work
with `evaluate` and with the figures, with no code change."""

from __future__ import annotations

import json

from click.testing import CliRunner

from evaluator.cli.main import main
from tests.conftest import write_command_bundle

PROGRAM = """
import json, sys
doc = json.load(open(sys.argv[1]))
json.dump({{q["id"]: " ".join(p["context"].split()[{start}:{start} + {width}])
           for a in doc["data"] for p in a["paragraphs"] for q in p["qas"]}},
          open(sys.argv[2], "w"))
"""


def test_a_dropped_folder_is_evaluated_and_plotted(tmp_path, monkeypatch, workspace, dev_raw):
    sets, subs = tmp_path / "sets", tmp_path / "subs"
    folder = sets / "my-shift"
    folder.mkdir(parents=True)
    data = {"version": "1.1", "data": dev_raw["data"][5:8]}
    (folder / "my-data.json").write_text(json.dumps(data))
    n = sum(len(p["qas"]) for a in data["data"] for p in a["paragraphs"])
    (folder / "testset.yaml").write_text(
        "id: my-shift\nname: My shifted set\nversion: '1'\nkind: natural-shift\n"
        f"reference: squad-dev\nquestions: {n}\nscorer: squad-v1.1\ncluster: paragraph\n"
        "license: CC BY-SA 4.0\ncitation: A user of qashift (2026)\nfile: my-data.json\n")
    for i, (start, width, f1) in enumerate([(0, 1, 60.0), (1, 3, 70.0), (2, 6, 80.0),
                                            (0, 12, 90.0)]):
        bundle = write_command_bundle(subs, f"toy-{i}", PROGRAM.format(start=start,
                                                                       width=width))
        with open(bundle / "bundle.yaml", "a") as handle:
            handle.write(f"reference_scores: {{testset: squad-test, em: {f1 - 10}, "
                         f"f1: {f1}, source: test}}\n")
    monkeypatch.setenv("QASHIFT_TESTSETS", str(sets))
    monkeypatch.setenv("QASHIFT_SUBMISSIONS", str(subs))
    runner = CliRunner()
    result = runner.invoke(main, ["evaluate", "-b", "all", "-t", "my-shift", "--runner",
                                  "local", "--json"])
    assert result.exit_code == 0, result.output
    cells = json.loads(result.stdout)["results"]
    assert len(cells) == 4 and all(c["n"] == n for c in cells)
    out = tmp_path / "figures"
    result = runner.invoke(main, ["figures", "--source", "store", "--out", str(out),
                                  "--bootstrap", "50"])
    assert result.exit_code == 0, result.output
    for suffix in ("png", "svg", "pdf"):
        assert (out / f"my-shift-f1.{suffix}").stat().st_size > 1000
    fits = (out / "fits.csv").read_text()
    assert "my-shift" in fits
