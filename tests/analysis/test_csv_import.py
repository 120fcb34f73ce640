"""The CSV importer reads long and wide tables and refuses a bad one in one line that names
the file, line and column, writing nothing."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from analysis.sources.tidy import from_csv, paired
from evaluator.cli.main import main
from evaluator.core.errors import UserError

LONG = "model,testset,metric,value\n"
GOOD_LONG = [f"m{i},squad-test,f1,{80 + i}\nm{i},reddit,f1,{60 + 2 * i}\n" for i in range(4)]

# (name, table text, extra options, what the one line must say)
BAD_TABLES = [
    ("non-numeric score", LONG + "a,squad-test,f1,80\na,reddit,f1,abc\n", [],
     "line 3, column value: 'abc' is not a number"),
    ("score above 100", LONG + "a,squad-test,f1,80\na,reddit,f1,180\n", [],
     "line 3, column value: 180 is outside [0, 100]"),
    ("fractions", "model,squad-test_f1,reddit_f1\na,0.8,0.6\nb,0.7,0.5\n", [],
     "line 2, column squad-test_f1: every squad-test f1 score is in [0, 1]: these look like "
     "fractions"),
    ("duplicate model row", LONG + "a,squad-test,f1,80\na,reddit,f1,60\na,reddit,f1,61\n", [],
     "line 4, column model: duplicate row for 'a' on reddit f1 (first on line 3)"),
    ("duplicate model in wide form", "model,squad-test_f1,reddit_f1\na,80,60\na,81,61\n", [],
     "line 3, column model: duplicate row for 'a' on squad-test f1 (first on line 2)"),
    ("missing reference rows", LONG + "a,reddit,f1,60\nb,reddit,f1,50\n", [],
     "line 1: no squad-test scores, the reference (original-set) rows"),
    ("missing reference column", "model,new-wiki_f1,reddit_f1\na,80,60\nb,70,50\n",
     ["--reference", "squad-dev"], "line 1: no squad-dev scores, the reference (original-set) "
     "column"),
    ("unknown test set", LONG + "a,squad-test,f1,80\na,redit,f1,60\n", [],
     "line 3, column testset: unknown test set 'redit' (did you mean 'reddit'?)"),
    ("EM figure without EM data", LONG + "a,squad-test,f1,80\na,reddit,f1,60\n",
     ["--metric", "em"], "line 1: EM figures requested, but the table has no em scores"),
]


@pytest.mark.parametrize("name,text,options,message", BAD_TABLES,
                         ids=[b[0] for b in BAD_TABLES])
def test_a_bad_table_is_refused_in_one_line_and_nothing_is_written(tmp_path, name, text,
                                                                    options, message):
    table, out = tmp_path / "bad.csv", tmp_path / "figures"
    table.write_text(text)
    result = CliRunner().invoke(main, ["figures", "--source", str(table), "--out", str(out),
                                       "--bootstrap", "0", *options])
    assert result.exit_code != 0
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {table}: ") and message in line, line
    assert not out.exists()


def test_scores_this_tool_wrote_may_all_be_below_one_percent(tmp_path):
    """A study table names the scorer of each row: a set every system nearly fails (an
    ablation) is percentages there, not fractions; the same rows typed by hand are refused."""
    rows = ["a,squad-test,em,40.0,", "b,squad-test,em,30.0,",
            "a,squad-dev-heldout-empty-question,em,0.0183,",
            "b,squad-dev-heldout-empty-question,em,0.0,"]
    written = tmp_path / "study.csv"
    written.write_text("model,testset,metric,value,scorer_version\n"
                       + "".join(f"{r}squad-v1.1\n" for r in rows))
    low = from_csv(written).query("testset == 'squad-dev-heldout-empty-question'")
    assert sorted(low["value"]) == [0.0, 0.0183]
    typed = tmp_path / "typed.csv"
    typed.write_text("model,testset,metric,value,scorer_version\n"
                     + "".join(f"{r}\n" for r in rows))
    with pytest.raises(UserError, match="line 4, column value: every "
                       "squad-dev-heldout-empty-question em score is in \\[0, 1\\]"):
        from_csv(typed)


def test_long_and_wide_forms_give_the_same_frame(tmp_path):
    long, wide = tmp_path / "long.csv", tmp_path / "wide.csv"
    long.write_text(LONG + "".join(GOOD_LONG))
    wide.write_text("model,squad-test_f1,reddit_f1\n"
                    + "".join(f"m{i},{80 + i},{60 + 2 * i}\n" for i in range(4)))
    a, b = paired(from_csv(long), "reddit", "f1"), paired(from_csv(wide), "reddit", "f1")
    assert a[["model", "x", "y"]].equals(b[["model", "x", "y"]]) and len(a) == 4


def test_reference_names_the_original_set_column(tmp_path):
    wide = tmp_path / "wide.csv"
    wide.write_text("model,kind,squad-dev_em,new-wiki_em\n"
                    + "".join(f"m{i},model,{70 + i},{65 + i}\n" for i in range(4))
                    + "Human 1,human,90,88\n")
    df = from_csv(wide, reference="squad-dev")
    pairs = paired(df, "new-wiki", "em")
    assert set(pairs["x_testset"]) == {"squad-dev"} and len(pairs) == 5
    assert pairs.set_index("model").at["Human 1", "kind"] == "human"
    result = CliRunner().invoke(main, ["fit", "--source", str(wide), "--reference",
                                       "squad-dev", "--metric", "em"])
    assert result.exit_code == 0 and "new-wiki" in result.output and "f1" not in result.output
