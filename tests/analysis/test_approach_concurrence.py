"""Approach-level concurrence from Liu et al.'s own tables: the committed tables round-trip to
the paper's layout, and every value the specification derives from them (the notes' section
3.4, the text's two correlations, the tie variants, the knee residuals) is recomputed here.
The notes are the reference; the code under test reads only the committed tables."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd
import pytest

from analysis.studies import approach_concurrence as ac
from tests.conftest import REPO

NOTES = Path(__file__).resolve().parents[3] / "shared" / "notes" / "concurrence.md"


@pytest.fixture(scope="module")
def notes() -> list[str]:
    if not NOTES.is_file():
        pytest.skip(f"{NOTES} is not beside the repository")
    return NOTES.read_text(encoding="utf-8").split("\n")


@pytest.fixture(scope="module")
def m() -> ac.ScoreMatrix:
    return ac.published()


def section(lines: list[str], start: str, end: str) -> list[str]:
    i = next(k for k, line in enumerate(lines) if line.startswith(start))
    j = next(k for k in range(i + 1, len(lines)) if lines[k].startswith(end))
    return lines[i:j]


def markdown_tables(lines: list[str]) -> list[list[list[str]]]:
    """Every pipe table in `lines`, as rows of stripped cells (separator rows left out)."""
    out, current = [], []
    for line in [*lines, ""]:
        if line.startswith("|"):
            if not re.fullmatch(r"\|(---\|)+", line):
                current.append([c.strip() for c in line.strip("|").split("|")])
        elif current:
            out.append(current)
            current = []
    return out


def test_the_tables_round_trip_to_the_papers_layout_character_for_character(notes):
    block = "\n".join(section(notes, "### 3.3", "### 3.4"))
    printed = "**Table 1:" + block.split("**Table 1:")[1].rstrip("\n") + "\n"
    assert ac.render() == printed
    assert ac.render().count("\n**Table ") == 15  # Tables 1 and 5-19


def test_the_score_matrix_is_20_approaches_by_44_benchmarks_and_tables_1s_two(m):
    assert m.scores.shape == (20, 46) and m.mode == "approach-level"
    assert list(m.groups.value_counts().sort_index()) == [10, 10]
    reproduced = m.scores["SQuAD 1.1 Dev. EM — Our Reproduction"]
    assert all(round(v, 1) == pytest.approx(reproduced[a])
               for a, v in m.scores[ac.SQUAD].items())
    assert m.scores["SQuAD 1.1 Dev. EM — Published"].isna().sum() == 5  # "-" in Table 1


def test_the_texts_two_correlations(m):
    fuzzy = ac.concur(m, ac.SQUAD, "Synthetic Fuzzy Pattern-Matching", "non-pretrained")
    assert (round(fuzzy["r"], 2), round(fuzzy["tau"], 2)) == (0.95, 0.78)
    wiki = ac.concur(m, ac.SQUAD, "English Wikipedia Synthetic Fuzzy Pattern-Matching")
    assert (round(wiki["r"], 2), round(wiki["tau"], 2)) == (-0.49, -0.19)
    assert fuzzy["mode"] == "approach-level" and fuzzy["n"] == 10 and wiki["n"] == 20


def test_tie_variants_and_undefined_correlations(m):
    babi = m.scores["bAbI QA #1"]
    assert [round(ac.kendall(m.scores[ac.SQUAD], babi, v), 3) for v in "abc"] == \
        [-0.142, -0.322, -0.202]
    babi12 = m.scores["bAbI QA #12"]
    assert [round(ac.kendall(m.scores[ac.SQUAD], babi12, v), 3) for v in "abc"] == \
        [-0.179, -0.336, -0.227]
    wikidata = m.scores["Synthetic Wikidata"]
    assert {round(ac.kendall(m.scores[ac.SQUAD], wikidata, v), 3) for v in "abc"} == {0.863}
    undefined = ac.concur(m, ac.SQUAD, "bAbI QA #1", "non-pretrained")
    assert undefined["r"] is None and undefined["tau"] is None  # every one scores 100.0
    with pytest.raises(ValueError, match="a, b or c"):
        ac.kendall([1, 2], [2, 1], "d")


def _cell(text: str) -> float | None:
    return None if text == "n/a" else float(text.replace("−", "-"))


def _column(m: ac.ScoreMatrix, name: str) -> str:
    """The notes' short benchmark names -> the tables' column names."""
    for prefix in ("SQuAD All",):
        if name == prefix:
            return ac.SQUAD
    if name.startswith("SQuAD ") and name.endswith("Examples"):
        return "SQuAD 1.1 — " + name.removeprefix("SQuAD ")
    return name if name in m.scores.columns else f"MRQA {name}"


def test_every_value_of_the_vs_squad_table_overall_and_per_group(notes, m):
    [table] = markdown_tables(section(notes, "#### 3.4.1", "#### 3.4.2"))
    header, *rows = table
    assert len(rows) == 43
    got = ac.versus_reference(m).set_index("benchmark")
    for row in rows:
        benchmark = _column(m, row[0])
        for k, key in enumerate(["r (all)", "tau (all)", "r (non-pretrained)",
                                 "tau (non-pretrained)", "r (pre-trained)",
                                 "tau (pre-trained)"]):
            want, value = _cell(row[k + 1]), got.at[benchmark, key]
            if want is None:
                assert value is None or (isinstance(value, float) and math.isnan(value)), \
                    (benchmark, key)
            else:
                assert round(value, 2) == pytest.approx(want, abs=1e-9), (benchmark, key)


def test_every_value_of_the_vs_human_set_matrices(notes, m):
    tau_table, r_table = markdown_tables(section(notes, "#### 3.4.2", "**Minimal code"))
    for table, statistic in ((tau_table, "tau"), (r_table, "r")):
        header, *rows = table
        columns = [_column(m, "SQuAD All" if h == "SQuAD" else h) for h in header[1:]]
        names = [_column(m, r[0]) for r in rows]
        got = ac.all_pairs(m, columns, names, statistic)
        for r, row in zip(names, rows, strict=True):
            for c, text in zip(columns, row[1:], strict=True):
                assert round(got.at[r, c], 2) == pytest.approx(_cell(text), abs=1e-9), (r, c)
    assert round(ac.concur(m, "MRQA NewsQA", "MRQA HotpotQA")["tau"], 2) == 0.92
    assert ac.concurs(0.92) is True and ac.concurs(0.69) is False and ac.concurs(None) is None
    assert ac.concurs(1.0, n=2) is None  # two approaches: tau is +-1 whatever they score


def test_the_knee_view_names_the_largest_residuals(m):
    knee = ac.knee(m, ac.SQUAD, "CNN (100K Examples)")
    [(first, r1), (second, r2)] = knee["largest_residuals"]
    assert (first, round(r1, 2)) == ("DocumentReader (no external features)", -3.81)
    assert (second, round(r2, 2)) == ("DocumentReader", -3.73)
    assert set(knee["lines"]) == {"all", "non-pretrained", "pre-trained"}
    assert all(line["n"] == 10 for k, line in knee["lines"].items() if k != "all")


def test_a_user_predicate_selects_approaches(m):
    strong = m.subset(lambda s: s[ac.SQUAD] > 76.24)  # above SAN, as the paper's ReCoRD note
    assert strong == list(m.groups.index[m.groups == "pre-trained"])
    assert ac.concur(m, ac.SQUAD, "ReCoRD", lambda s: s[ac.SQUAD] > 76.24)["n"] == 10


def test_the_bootstrap_is_labelled_seeded_and_centred_on_the_point_estimate(m):
    one = ac.concur(m, ac.SQUAD, "Synthetic Fuzzy Pattern-Matching", "non-pretrained",
                    n_boot=500, seed=7)
    two = ac.concur(m, ac.SQUAD, "Synthetic Fuzzy Pattern-Matching", "non-pretrained",
                    n_boot=500, seed=7)
    assert one == two and round(one["tau"], 2) == 0.78
    assert one["tau_lo"] <= one["tau"] <= one["tau_hi"]
    assert "addition" in one["interval"] and "approaches" in one["interval"]


@pytest.mark.parametrize("variant", ["a", "b", "c"])
def test_the_bootstrap_resamples_the_variant_it_reports(m, variant):
    babi = "bAbI QA #1"
    one = ac.concur(m, ac.SQUAD, babi, "all", variant, n_boot=1000, seed=0)
    assert one["tau"] == pytest.approx(ac.kendall(m.scores[ac.SQUAD], m.scores[babi], variant))
    assert one["tau_lo"] <= one["tau"] <= one["tau_hi"]
    assert f"tau-{variant}," in one["interval"]


def test_mixing_approach_level_and_system_level_scores_is_refused(m):
    frozen = ac.ScoreMatrix(pd.DataFrame({"new-wiki": [1.0] * 20}, index=m.scores.index),
                            m.groups, "system-level")
    with pytest.raises(ac.ModeError, match="cannot mix approach-level and system-level"):
        ac.combine(m, frozen)
    with pytest.raises(ValueError, match="mode must be one of"):
        ac.ScoreMatrix(m.scores, m.groups, "per-question")


def test_the_command_names_its_mode_and_refuses_bad_input_in_one_line():
    from click.testing import CliRunner

    from evaluator.cli.main import main

    run = CliRunner().invoke
    report = run(main, ["concurrence", "--subset", "non-pretrained"])
    assert report.exit_code == 0, report.output
    assert report.stdout.startswith("mode: approach-level")
    fuzzy = next(line for line in report.stdout.splitlines()
                 if line.strip().startswith("Synthetic Fuzzy Pattern-Matching"))
    assert fuzzy.split()[-4:] == ["10", "0.95", "0.78", "no"]
    assert run(main, ["concurrence", "--layout"]).stdout == ac.render()
    for args in ([], ["--bootstrap", "50"], ["--versus", "MRQA NewsQA"],
                 ["--scores", str(REPO / "results" / "approach-matrix.csv"), "--paper",
                  str(REPO / "studies" / "approach-level.yaml"), "--reference", "squad"]):
        wide = run(main, ["concurrence", *args])  # a block per subset: within 120 columns
        assert wide.exit_code == 0 and max(map(len, wide.stdout.splitlines())) <= 120, args
    for args in (["--subset", "SQuAD 1.1 — All>x"], ["--reference", "SQuAD 2.0"],
                 ["--subset", "everyone"]):
        bad = run(main, ["concurrence", *args])
        assert bad.exit_code == 1 and len(bad.stderr.strip().splitlines()) == 1, args


def _table(path, m, columns, *, edit=None, mode=None):
    import csv

    with open(path, "w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle)
        out.writerow(["approach", "group", *(["mode"] if mode else []), *columns])
        for k, a in enumerate(m.scores.index):
            row = [a, m.groups[a], *([mode[k % len(mode)]] if mode else []),
                   *(f"{m.scores.at[a, c]:.2f}" for c in columns)]
            if edit and k == 3:
                row[edit[0]] = edit[1]
            out.writerow(row)
    return path


def test_a_score_table_of_ones_own_gives_the_same_concurrence(m, tmp_path):
    from click.testing import CliRunner

    from evaluator.cli.main import main

    columns = [ac.SQUAD, "Synthetic Fuzzy Pattern-Matching"]
    own = ac.read_scores(_table(tmp_path / "s.csv", m, columns))
    assert own.mode == "approach-level" and own.scores.shape == (20, 2)
    got = ac.concur(own, *columns, "non-pretrained")
    assert (round(got["r"], 2), round(got["tau"], 2)) == (0.95, 0.78)
    report = CliRunner().invoke(main, ["concurrence", "--scores", str(tmp_path / "s.csv")])
    assert report.exit_code == 0 and "mode: approach-level" in report.stdout


@pytest.mark.parametrize("edit, mode, message", [
    ((3, ""), None, "line 5, column Synthetic Fuzzy Pattern-Matching: no score for approach"),
    ((2, "seventy"), None, "line 5, column SQuAD 1.1 — All: 'seventy' is not a number"),
    ((2, "0.7"), None, None),  # a fraction is still a number in [0, 100]
    ((1, "pretrained"), None, "line 5, column group: 'pretrained' is not one of"),
    (None, ["approach-level", "system-level"], "mixes approach-level and system-level"),
])
def test_a_bad_score_table_is_one_line(m, tmp_path, edit, mode, message):
    from click.testing import CliRunner

    from evaluator.cli.main import main

    path = _table(tmp_path / "bad.csv", m, [ac.SQUAD, "Synthetic Fuzzy Pattern-Matching"],
                  edit=edit, mode=mode)
    result = CliRunner().invoke(main, ["concurrence", "--scores", str(path)])
    if message is None:
        assert result.exit_code == 0
        return
    assert result.exit_code == 1
    [line] = result.stderr.strip().splitlines()
    assert message in line and str(path) in line


def test_a_table_of_one_benchmark_or_paper_without_scores_is_one_line_and_prints_nothing(
        m, tmp_path):
    from click.testing import CliRunner

    from evaluator.cli.main import main

    path = _table(tmp_path / "one.csv", m, [ac.SQUAD])
    result = CliRunner().invoke(main, ["concurrence", "--scores", str(path)])
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.strip() == (f"error: {path}: concurrence compares benchmarks, and "
                                     f"this table has 1 benchmark column besides approach, "
                                     f"group: give at least two")
    plan = tmp_path / "plan.yaml"
    plan.write_text("benchmarks: []\n")
    result = CliRunner().invoke(main, ["concurrence", "--paper", str(plan)])
    assert result.exit_code == 1 and result.stdout == ""
    assert "--paper compares a score table (--scores)" in result.stderr


def test_a_study_plan_puts_its_benchmarks_beside_the_papers_of_the_same_kind(m, tmp_path):
    """`--paper PLAN`: each benchmark that names a paper column gets its own concurrence
    with the reference beside the paper's with SQuAD (fuzzy over non-pretrained: 0.78)."""
    import csv

    from click.testing import CliRunner
    from scipy.stats import kendalltau

    from evaluator.cli.main import main

    rows = [("a", "non-pretrained", 60, 20, 50), ("b", "non-pretrained", 40, 30, 45),
            ("c", "non-pretrained", 30, 10, 20), ("d", "pre-trained", 80, 60, 40),
            ("e", "pre-trained", 85, 70, 90)]
    table = tmp_path / "mine.csv"
    with open(table, "w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["approach", "group", "squad", "fuzzy-uniform", "babi-1"])
        out.writerows(rows)
    plan = tmp_path / "plan.yaml"
    plan.write_text("benchmarks:\n"
                    "  - {name: squad, train: x, test: y, paper: \"SQuAD 1.1 — All\"}\n"
                    "  - {name: fuzzy-uniform, train: x, test: y, paper: \"Synthetic Fuzzy "
                    "Pattern-Matching\"}\n  - babi-1\n")
    sides = ac.side_by_side(ac.read_scores(table), {"squad": ac.SQUAD, "fuzzy-uniform":
                                                    "Synthetic Fuzzy Pattern-Matching"},
                            "squad")
    [row] = sides.to_dict("records")
    assert row["paper's benchmark"] == "Synthetic Fuzzy Pattern-Matching"
    assert round(row["tau paper (non-pretrained)"], 2) == 0.78
    assert row["tau here (all)"] == pytest.approx(
        kendalltau([r[2] for r in rows], [r[3] for r in rows]).statistic)
    assert row["n here (pre-trained)"] == 2

    report = CliRunner().invoke(main, ["concurrence", "--scores", str(table), "--paper",
                                       str(plan)])
    assert report.exit_code == 0, report.output
    assert "beside Liu et al." in report.stdout and "Synthetic Fuzzy" in report.stdout
    plan.write_text("benchmarks:\n  - {name: babi-1, train: x, test: y, paper: \"bAbI 99\"}\n")
    bad = CliRunner().invoke(main, ["concurrence", "--scores", str(table), "--paper",
                                    str(plan)])
    assert bad.exit_code == 1 and "unknown column of Liu et al.'s tables: 'bAbI 99'" in \
        bad.stderr and len(bad.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_the_report_is_written_once_and_kept_while_its_inputs_do_not_change(tmp_path):
    """`--out DIR`: the vs-reference table (with its mode), the knee lines and residuals, a
    panel per benchmark and the tau figure; the same inputs again rewrite nothing."""
    from click.testing import CliRunner

    from evaluator.cli.main import main

    out = tmp_path / "report"
    first = CliRunner().invoke(main, ["concurrence", "--out", str(out)])
    assert first.exit_code == 0, first.output
    names = {"versus-reference.csv", "knee.csv", "knee.png", "tau.png", ac.REPORT_KEY}
    assert {p.name for p in out.iterdir()} == names
    versus = pd.read_csv(out / "versus-reference.csv")
    assert set(versus["mode"]) == {"approach-level"}
    fuzzy = versus[(versus["benchmark"] == "Synthetic Fuzzy Pattern-Matching")
                   & (versus["subset"] == "non-pretrained")].iloc[0]
    assert (round(fuzzy["r"], 2), round(fuzzy["tau"], 2), fuzzy["concurs"]) == (0.95, 0.78,
                                                                               False)
    knee = pd.read_csv(out / "knee.csv")
    cnn = knee[(knee["benchmark"] == "CNN (100K Examples)") & (knee["line"] == "all")].iloc[0]
    assert cnn["largest_residuals"].startswith("DocumentReader (no external features) -3.81")
    assert set(knee.loc[knee["benchmark"] == "MRQA DROP", "line"]) == {"all", *ac.GROUPS}

    times = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    again = CliRunner().invoke(main, ["concurrence", "--out", str(out)])
    assert again.exit_code == 0 and "is current" in again.stderr
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == times
    other = CliRunner().invoke(main, ["concurrence", "--kendall", "a", "--out", str(out)])
    assert other.exit_code == 0 and "wrote" in other.stderr
    assert (out / "versus-reference.csv").stat().st_mtime_ns != times["versus-reference.csv"]


def test_a_study_report_puts_the_paper_beside_it_and_a_bad_table_writes_nothing(m, tmp_path):
    from click.testing import CliRunner

    from evaluator.cli.main import main

    columns = [ac.SQUAD, "Synthetic Fuzzy Pattern-Matching", "bAbI QA #1"]
    table = _table(tmp_path / "s.csv", m, columns)
    plan = tmp_path / "plan.yaml"
    plan.write_text("benchmarks:\n" + "".join(
        f"  - {{name: \"{c}\", train: x, test: y, paper: \"{c}\"}}\n" for c in columns))
    out = tmp_path / "report"
    done = CliRunner().invoke(main, ["concurrence", "--scores", str(table), "--paper",
                                     str(plan), "--out", str(out)])
    assert done.exit_code == 0, done.output
    sides = pd.read_csv(out / "side-by-side.csv").set_index("benchmark")
    assert sides.at["Synthetic Fuzzy Pattern-Matching", "tau here (non-pretrained)"] == \
        pytest.approx(sides.at["Synthetic Fuzzy Pattern-Matching", "tau paper (non-pretrained)"],
                      abs=0.01)
    assert math.isnan(sides.at["bAbI QA #1", "tau here (non-pretrained)"])  # constant: undefined

    bad = _table(tmp_path / "bad.csv", m, columns, edit=(3, "lots"))
    refused = CliRunner().invoke(main, ["concurrence", "--scores", str(bad), "--out",
                                        str(tmp_path / "nothing")])
    assert refused.exit_code == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "nothing").exists()
