"""The analysis is layered (sources, stats, figures, report | studies, site; the
analysis-layers contract of .importlinter), and the report hands the site its tables as
published, so the site reads back none of the files it has just written."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd

from analysis import report, site
from analysis.site import export as site_export
from analysis.sources.tidy import from_csv

ROOT = Path(__file__).resolve().parents[2] / "analysis"
LAYERS = {"sources", "stats", "figures", "report", "studies", "site"}


def test_the_analysis_holds_its_layers_and_no_loose_modules():
    assert sorted(p.name for p in ROOT.glob("*.py")) == ["__init__.py"]
    assert {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()} == LAYERS


def _frame(tmp_path: Path) -> pd.DataFrame:
    """Six models on SQuAD test, New-Wiki and Reddit, F1 with more digits than a table keeps."""
    rows = ["model,testset,metric,value"]
    for i in range(6):
        x = 70 + 3.1234567891 * i + (i % 2) * 0.7654321
        rows += [f"m{i},squad-test,f1,{x}", f"m{i},new-wiki,f1,{x - 4.12345678 - 0.3 * i}",
                 f"m{i},reddit,f1,{x - 11.987654321 - (i % 3) * 1.1111111}"]
    path = tmp_path / "scores.csv"
    path.write_text("\n".join(rows) + "\n")
    return from_csv(path, "squad-test", ["f1"])


def test_the_site_renders_the_tables_the_report_hands_it_as_their_files_hold_them(
        tmp_path, monkeypatch):
    df = _frame(tmp_path)
    read_csv, write = pd.read_csv, report.write
    made = []

    def text_only(source, *args, **kwargs):
        assert isinstance(source, io.StringIO), f"the site read {source} back"
        return read_csv(source, *args, **kwargs)

    def kept(*args, **kwargs):
        made.append(write(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(pd, "read_csv", text_only)
    monkeypatch.setattr(report, "write", kept)
    site.build(df, tmp_path / "site", source="test", n_boot=10)
    monkeypatch.undo()
    data, [handed] = tmp_path / "site" / "data", made
    assert not list((tmp_path / "site" / "figures").glob("*.csv"))
    assert sorted(handed.tables) == ["concurrence", "effective_robustness", "fits", "gaps",
                                     "gaps_mean", "rank_changes"]
    for name, table in handed.tables.items():
        assert (f"data/{name}.csv" in {f"{p.parent.name}/{p.name}" for p in handed.written})
        pd.testing.assert_frame_equal(table, pd.read_csv(data / f"{name}.csv"))
        assert json.loads((data / f"{name}.json").read_text()) == [
            {k: site_export.plain(v) for k, v in r.items()} for r in table.to_dict("records")]
    slope = handed.tables["fits"]["slope"].iat[0]
    assert slope == float(f"{slope:.6g}")  # the published precision, not the fit's own
