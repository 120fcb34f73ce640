"""The static site, read as files: what `qashift report` writes from the store and from the
published SQuADShifts results. tests/analysis/test_site_browser.py reads the same sites in Chromium.

Both sites are built once per test session (helpers below, cached under pytest's session
temp folder) because the published one renders every figure (~20 s of CPU).
"""

from __future__ import annotations

import hashlib
import json
import re

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from analysis import site as site_mod
from analysis.site import content as site_content
from analysis.site import render as site_render
from analysis.sources.tidy import from_records
from analysis.studies import approach_concurrence as ac
from analysis.studies import trend
from evaluator.cli.figures import report_command
from tests.conftest import REPO
from tests.support.site import (
    SETS,
    build_published_site,
    build_store_site,
    bundle_names,
    by_header,
    parse,
    store_rows,
    table,
)

# ------------------------------------------------------------------------------- tests

@pytest.mark.slow
def test_published_site_lists_every_model_and_human_on_every_set(tmp_path_factory,
                                                                 shared_data):
    site = build_published_site(tmp_path_factory, shared_data)
    results = json.loads((shared_data / "squadshifts" / "results.json").read_text())
    for t in SETS:
        page = parse(site / "testsets" / f"{t}.html")
        models = {m["name"] for m in results[t]["models"]}
        humans = {m["name"] for m in results[t]["humans"]}
        assert len(models) >= 97 and len(humans) == 3
        for metric in ("f1", "em"):
            board = table(page, f"board-{metric}")
            names = [r[1]["attrs"]["data-sort"] for r in board["rows"]]
            assert sorted(names) == sorted(models | humans), (t, metric)
            human_rows = [a for a in board["row_attrs"] if a.get("class") == "human"]
            assert len(human_rows) == 3
            shown = {r[1]["attrs"]["data-sort"]: float(r[3]["text"]) for r in board["rows"]}
            for m in results[t]["models"] + results[t]["humans"]:
                assert shown[m["name"]] == pytest.approx(float(m[f"{t}_{metric}"]), abs=5e-4)
    # new-wiki: 105 models + 3 humans, as in the paper
    assert len(table(parse(site / "testsets" / "new-wiki.html"), "board-f1")["rows"]) == 108


@pytest.mark.slow
def test_published_leaderboard_columns_rank_gap_and_rank_change(tmp_path_factory, shared_data):
    site = build_published_site(tmp_path_factory, shared_data)
    board = table(parse(site / "testsets" / "new-wiki.html"), "board-f1")
    head = [c["text"] for c in board["head"]]
    assert head == ["Rank", "Model", "F1 original", "F1 on this set", "95% interval",
                    "Gap", "Rank change"]
    assert all(c["attrs"].get("scope") == "col" for c in board["head"])
    assert all(r[1]["tag"] == "th" and r[1]["attrs"]["scope"] == "row" for r in board["rows"])
    assert "No intervals" in board["caption"]  # published F1 totals have none
    values = [float(r[3]["text"]) for r in board["rows"]]
    assert values == sorted(values, reverse=True)
    ranked = [r for r, a in zip(board["rows"], board["row_attrs"]) if a.get("class") != "human"]
    assert [int(r[0]["text"]) for r in ranked][:3] == [1, 2, 3]
    lb = json.loads((site / "data" / "leaderboards.json").read_text())
    nw = {r["model"]: r for r in lb if r["testset"] == "new-wiki" and r["metric"] == "f1"}
    for r in ranked:
        row = nw[r[1]["attrs"]["data-sort"]]
        if row["original"] is None:
            assert r[2]["text"] == "–" and r[5]["text"] == "–"
            continue
        assert float(r[5]["text"].replace("−", "-")) == pytest.approx(
            row["original"] - row["value"], abs=0.006)
        assert row["rank_change"] == row["rank_original"] - row["rank_new"]
    em = table(parse(site / "testsets" / "new-wiki.html"), "board-em")
    assert "No intervals" not in em["caption"] and em["rows"][0][4]["text"].startswith("[")


@pytest.mark.slow
def test_published_site_pages_data_and_accessibility(tmp_path_factory, shared_data):
    site = build_published_site(tmp_path_factory, shared_data)
    index = parse(site / "index.html")
    assert {f"testsets/{t}.html" for t in SETS} <= set(index.links)
    assert len(index.imgs) == 4 and all(len(i["alt"]) > 80 for i in index.imgs)
    for img in index.imgs:
        assert (site / img["src"]).stat().st_size > 10_000
    assert re.search(r"New Wikipedia: \d+ of \d+ models score lower", index.imgs[0]["alt"])
    analysis = parse(site / "analysis.html")
    assert len(table(analysis, "fits-table")["rows"]) == 18  # 16 + AddOneSent EM (2 scales)
    assert {i["src"] for i in analysis.imgs} == {"figures/concurrence-f1.png",
                                                 "figures/concurrence-em.png"}
    for name in ("results", "leaderboards", "fits", "gaps", "gaps_mean", "concurrence",
                 "rank_changes", "effective_robustness"):
        assert (site / "data" / f"{name}.csv").exists() and (site / "data" / f"{name}.json")
    assert (site / "data" / "coverage.txt").exists()
    models = list((site / "models").glob("*.html"))
    assert len(models) == len(table(parse(site / "models.html"), "models")["rows"]) > 110
    # small: no page carries inline data or remote assets
    for page in [site / "index.html", *sorted((site / "testsets").glob("*.html"))]:
        html = page.read_text()
        assert len(html) < 200_000 and "http://" not in html.replace("http://www", "")
        assert not re.search(r"<(script|link|img)[^>]+(src|href)=\"https?:", html)


@pytest.mark.slow
def test_store_site_shows_the_stores_numbers(tmp_path_factory, shared_data):
    site, env = build_store_site(tmp_path_factory, shared_data)
    rows, names = store_rows(env), bundle_names(env)
    assert len(rows) == 7
    for row in rows:
        page = parse(site / "testsets" / f"{row['testset']}.html")
        for metric, label in (("em", "EM"), ("f1", "F1")):
            board = by_header(table(page, f"board-{metric}"))
            (cells,) = [c for c in board if c["Model"]["attrs"]["data-sort"]
                        == names[row["bundle"]]]
            (score,) = [v for k, v in cells.items() if k.startswith(f"{label} on ")]
            assert score["text"] == f"{row[metric]:.3f}"
            assert float(score["attrs"]["data-sort"]) == row[metric]  # full precision
            lo, hi = row[f"{metric}_lo"], row[f"{metric}_hi"]
            assert cells["95% interval"]["text"] == f"[{lo:.2f}, {hi:.2f}]"
    (bert,) = [r for r in rows if r["bundle"] == "bert-ensemble"]
    scores = by_header(table(parse(site / "models" / "bert-ensemble.html"), "scores"))
    assert [scores[0][k]["text"] for k in ("EM", "EM 95% interval", "F1", "Questions")] == [
        f"{bert['em']:.3f}", f"[{bert['em_lo']:.2f}, {bert['em_hi']:.2f}]",
        f"{bert['f1']:.3f}", str(bert["n"])]


@pytest.mark.slow
def test_store_site_shows_environment_failures_and_logs(tmp_path_factory, shared_data):
    site, env = build_store_site(tmp_path_factory, shared_data)
    rows = store_rows(env)
    (bert,) = [r for r in rows if r["bundle"] == "bert-ensemble"]
    html = (site / "models" / "bert-ensemble.html").read_text()
    for field, value in (("runner", "frozen"), ("device", "cpu"),
                         ("bundle-digest", bert["bundle_digest"])):
        assert re.search(rf'<dd class="{field}">(<code class="digest">)?{value}<', html), field
    assert '<dd class="image-digest"><span class="none">none</span>' in html
    sw = [r for r in rows if r["bundle"] == "sliding-window"]
    html = (site / "models" / "sliding-window-baseline-richardson-et-al-2013-span-extractio"
            ".html").read_text()
    for r in sw:
        assert r["log_sha256"] and f'href="../logs/{r["log_sha256"]}.txt"' in html
        assert (site / "logs" / f"{r['log_sha256']}.txt").exists()
    failures = by_header(table(parse(site / "models" / "crashes.html"), "failures"))
    assert [[f[k]["text"] for k in ("Test set", "Failure")] for f in failures] == [
        ["tiny-shift", "nonzero-exit"]]  # its failed sample on tiny-orig is not listed
    crash = (site / "models" / "crashes.html").read_text()
    log = re.search(r'href="\.\./logs/([0-9a-f]{64})\.txt"', crash).group(1)
    assert "CUDA driver not found" in (site / "logs" / f"{log}.txt").read_text()
    data = json.loads((site / "data" / "failures.json").read_text())
    assert len(data) == 1
    assert data[0]["failure_class"] == "nonzero-exit" and data[0]["log_sha256"] == log
    runs = json.loads((site / "data" / "runs.json").read_text())
    assert sorted((r["bundle"], r["testset"]) for r in runs) == sorted(
        (r["bundle"], r["testset"]) for r in rows)


@pytest.mark.slow
def test_store_site_leaderboard_compares_against_the_reference_set(tmp_path_factory,
                                                                   shared_data):
    site, env = build_store_site(tmp_path_factory, shared_data)
    rows = {(r["bundle"], r["testset"]): r for r in store_rows(env)}
    names = {v: k for k, v in bundle_names(env).items()}
    board = table(parse(site / "testsets" / "tiny-shift.html"), "board-f1")
    assert len(board["rows"]) == 3  # the crashed bundle has no score, so no row
    lb = [r for r in json.loads((site / "data" / "leaderboards.json").read_text())
          if r["testset"] == "tiny-shift"]
    assert len(lb) == 6
    for r in lb:
        bundle = names[r["model"]]
        new, orig = rows[(bundle, "tiny-shift")], rows[(bundle, "tiny-orig")]
        assert (r["value"], r["original"], r["original_testset"]) == (
            new[r["metric"]], orig[r["metric"]], "tiny-orig")
        assert r["gap"] == pytest.approx(orig[r["metric"]] - new[r["metric"]])
    assert (site / "figures" / "tiny-shift-f1.png").exists()


@pytest.mark.slow
def test_same_input_gives_byte_identical_site(tmp_path_factory, shared_data, tmp_path):
    site, env = build_store_site(tmp_path_factory, shared_data)
    again = tmp_path / "again"  # drawn again, not copied from the first build's figure cache
    result = CliRunner().invoke(report_command, ["--out", str(again)],
                                env={**env, "QASHIFT_CACHE": str(tmp_path / "cache")})
    assert result.exit_code == 0, result.output

    def files(root):
        return {p.relative_to(root): p.read_bytes() for p in sorted(root.rglob("*"))
                if p.is_file()}
    assert files(site) == files(again)


@pytest.mark.slow
def test_report_refuses_a_folder_it_did_not_write(tmp_path, tmp_path_factory, shared_data):
    _, env = build_store_site(tmp_path_factory, shared_data)
    (tmp_path / "notes.txt").write_text("mine")
    result = CliRunner().invoke(report_command, ["--out", str(tmp_path)], env=env)
    assert result.exit_code == 1 and "not empty" in result.output
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.slow
def test_a_population_site_names_systems_readably_with_approach_family_and_provenance(
        tmp_path):
    """From a slice of the committed population table: each system shown by approach, size,
    seed and the settings that vary (its id as the link's title), with approach and family
    columns; the navigation groups the sets by kind; every page names the tool's version,
    commit and the sha256 of the results table it shows; with the committed approach matrix,
    a concurrence page with every benchmark's tau against the reference."""
    table_rows = pd.read_csv(REPO / "results" / "population.csv", dtype=str,
                             keep_default_na=False)
    keep = table_rows[table_rows["approach"].isin(["fusionnet", "logreg-rajpurkar"])
                      & table_rows["testset"].isin(["squad-dev-heldout", "reddit-test",
                                                    "addsent-heldout"])]
    source = tmp_path / "slice.csv"
    keep.to_csv(source, index=False)
    out = tmp_path / "site"
    matrix = REPO / "results" / "approach-matrix.csv"
    result = CliRunner().invoke(report_command, ["--source", str(source), "--out", str(out),
                                                 "--bootstrap", "50", "--concurrence",
                                                 str(matrix), "--concurrence-reference",
                                                 "squad"])
    assert result.exit_code == 0, result.output
    html = (out / "testsets" / "reddit-test.html").read_text()
    board = by_header(table(parse(out / "testsets" / "reddit-test.html"), "board-f1"))
    assert len(board) == keep["model"].nunique()
    system = "fusionnet@squad-dev-train~1000/s0/hcb148620"
    rows = [r for r in board if r["Model"]["text"].startswith("fusionnet · 1,000 q · seed 0 · ")]
    assert rows and all(r["Approach"]["text"] == "fusionnet" and
                        r["Family"]["text"] == "non-pretrained" for r in rows)
    assert f'title="{system}"' in html
    assert re.search(r'Original:</span>\s*<ul>\s*<li><a href="\.\./testsets/'
                     r'squad-dev-heldout.html"', html)
    assert "Natural shift:" in html and "Adversarial:" in html
    digest = hashlib.sha256((out / "data" / "results.csv").read_bytes()).hexdigest()
    for page in ("index.html", "models.html", "testsets/reddit-test.html", "concurrence.html"):
        assert digest in (out / page).read_text()
        assert str(tmp_path) not in (out / page).read_text()  # the table by its name alone
    scores = ac.read_scores(matrix)
    versus = by_header(table(parse(out / "concurrence.html"), "versus-table"))
    assert [r["Benchmark"]["text"] for r in versus] == [
        b for b in scores.scores.columns if b != "squad"]
    (reddit,) = [r for r in versus if r["Benchmark"]["text"] == "reddit"]
    tau = ac.concur(scores, "squad", "reddit")["tau"]
    assert reddit["tau (all)"]["text"].startswith(f"{tau:.2f} [")
    assert 'href="concurrence.html"' in (out / "index.html").read_text()
    for stem in ("approach-level-tau", "approach-level-matrix"):
        assert (out / "figures" / f"{stem}.png").stat().st_size > 10_000
        assert f"figures/{stem}.png" in (out / "concurrence.html").read_text()


def test_a_test_set_id_that_is_a_path_writes_nothing_outside_the_site(tmp_path):
    """An id such as a hostile store's row could carry: its page and its figures would be
    written beside the site, so the site refuses it before it writes anything."""
    escape = "x/../../../escape"
    df = from_records([{"name": f"m{i}", "bundle": f"m{i}", "testset": t, "n": 100,
                        "em": 60.0 - 3 * i - j, "f1": 70.0 - 3 * i - j}
                       for i in range(4) for j, t in enumerate(("squad-dev", escape))],
                      references={escape: "squad-dev"})
    with pytest.raises(site_mod.SiteError, match="is not an id"):
        site_mod.build(df, tmp_path / "a" / "b" / "site", source="test", n_boot=10)
    assert list(tmp_path.rglob("*")) == []


def test_a_model_page_places_it_against_the_trend_of_the_others(tmp_path):
    """Each model's page: per new set, its effective robustness against the linear trend of
    the other models, with the interval and rank `trend.land` gives, and a plot of the others
    with its point marked."""
    rng = np.random.default_rng(1)
    xs = rng.uniform(20, 80, size=8)
    records = []
    for i, x in enumerate(xs):
        y = 0.8 * x - 5 + rng.normal(0, 2)
        for t, v in (("squad-dev", x), ("reddit", y)):
            records.append({"name": f"m{i}", "bundle": f"m{i}", "testset": t, "n": 1000,
                            "em": v - 8, "f1": v, "f1_lo": v - 1.5, "f1_hi": v + 1.5})
    df = from_records(records, references={"reddit": "squad-dev"})
    out = tmp_path / "site"
    site_mod.build(df, out, source="test", n_boot=10)
    others, own = df[df["model"] != "m3"], df[df["model"] == "m3"]
    [expected] = trend.land(others, own, ["reddit"]).to_dict("records")
    page = by_header(table(parse(out / "models" / "m3.html"), "trend"))
    assert len(page) == 1
    row = page[0]
    assert row["Effective robustness"]["text"] == \
        f"{expected['effective_robustness']:+.2f}".replace("-", "−")
    assert row["95% interval"]["text"] == "[{}, {}]".format(
        *(f"{expected[k]:+.2f}".replace("-", "−") for k in ("er_lo", "er_hi")))
    assert row["Rank"]["text"] == f"{expected['rank']} of 8"
    html = (out / "models" / "m3.html").read_text()
    assert html.count('class="other"') == 7 and html.count('class="own"') == 1


def test_the_original_sets_come_before_generated_ones_on_the_site():
    """A store with bAbI runs beside SQuAD's: the index and the navigation start with the
    original set, not with the alphabet's first (babi-*)."""
    df = from_records([{"name": f"m{i}", "bundle": f"m{i}", "testset": t, "n": 100,
                        "em": 50.0 - i, "f1": 60.0 - i}
                       for i in range(3) for t in ("babi-1", "babi-11", "squad-dev", "reddit")],
                      references={"reddit": "squad-dev"})
    assert site_content.testset_order(df) == ["squad-dev", "babi-1", "babi-11", "reddit"]


def test_a_report_that_fails_keeps_the_earlier_site_whole(tmp_path, monkeypatch):
    """The site is written beside the folder and moved in only when whole: a failure leaves
    the earlier site as it was, no half-written folder, and the next report succeeds."""
    df = from_records([{"name": f"m{i}", "bundle": f"m{i}", "testset": t, "n": 100,
                        "em": 60.0 - 3 * i - j, "f1": 70.0 - 3 * i - j}
                       for i in range(4) for j, t in enumerate(("squad-dev", "reddit"))],
                      references={"reddit": "squad-dev"})
    out = tmp_path / "site"
    site_mod.build(df, out, source="first", n_boot=10)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def fail(*args, **kwargs):
        raise RuntimeError("the disk filled up")
    with monkeypatch.context() as m:
        m.setattr(site_render, "environment", fail)  # after the figures and tables are written
        with pytest.raises(RuntimeError):
            site_mod.build(df, out, source="second", n_boot=10)
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["site"]
    site_mod.build(df, out, source="third", n_boot=10)
    assert "third" in (out / "index.html").read_text()


@pytest.mark.parametrize("testset", ["new-wiki", "squad-dev-heldout-sentence-order-shuffled",
                                     "tiny-set-1.0"])
def test_a_test_sets_page_is_named_by_its_id_inside_the_testsets_folder(testset):
    assert site_mod.testset_page(testset) == f"testsets/{testset}.html"


@pytest.mark.parametrize("testset", ["x/../../../tmp/PWNED", "..", ".", "a\\b", "a\x00b", "",
                                     "tiny set"])
def test_a_test_set_id_that_is_no_id_names_no_page(testset):
    with pytest.raises(site_mod.SiteError):
        site_mod.testset_page(testset)
