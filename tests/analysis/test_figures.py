"""Figures are deterministic and show what the spec lists."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from analysis.figures import FORMATS, concurrence_heatmap, panel_grid, save, scatter_panel
from analysis.sources.tidy import METRICS, from_squadshifts_published, new_testsets
from analysis.stats.fits import SCALES, fit_panel, to_scale


@pytest.fixture(scope="module")
def published(shared_data):
    return from_squadshifts_published(shared_data)


def render(df, stem):
    fits = {(k := ("amazon", "em", s)): fit_panel(df, *k, n_boot=100) for s in ("linear",
                                                                               "probit")}
    return save(panel_grid(df, list(fits), fits), stem)


def test_rendering_twice_gives_identical_bytes(published, tmp_path):
    first = render(published, tmp_path / "a" / "amazon-em")
    second = render(published, tmp_path / "b" / "amazon-em")
    assert [p.suffix for p in first] == [f".{f}" for f in FORMATS]
    for p, q in zip(first, second):
        assert p.read_bytes() == q.read_bytes(), p.name
    assert b"CreationDate" not in first[1].read_bytes()


def test_panel_has_diagonal_fit_band_humans_and_raw_probit_ticks(published):
    f = fit_panel(published, "amazon", "f1", "probit", n_boot=50)
    fig, ax = plt.subplots()
    scatter_panel(ax, published, "amazon", "f1", "probit", fit=f)
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels[0] == "y = x" and any(lab.startswith("probit fit") for lab in labels)
    assert any(lab.startswith("humans (3)") for lab in labels)
    assert "90" in [t.get_text() for t in ax.get_xticklabels()]
    assert any("no intervals" in t.get_text() for t in ax.texts)
    plt.close(fig)


def test_heatmap_prints_values():
    import pandas as pd

    m = pd.DataFrame([[1.0, 0.5], [0.5, 1.0]], index=["a", "b"], columns=["a", "b"])
    fig = concurrence_heatmap(m, "t")
    assert "0.50" in [t.get_text() for t in fig.axes[0].texts]
    plt.close(fig)


def test_humans_are_drawn_at_their_own_original_scores_in_every_panel(published):
    own = {"f1": [94.9, 94.9, 95.6], "em": [89.1, 88.7, 90.5]}  # Miller et al. Tables 5, 11
    drawn = 0
    for testset in new_testsets(published):
        for metric in METRICS:
            for scale in SCALES:
                fig, ax = plt.subplots()
                scatter_panel(ax, published, testset, metric, scale)
                humans = [c for c in ax.collections if c.get_label().startswith("humans")]
                if testset != "addonesent":  # the paper prints no human on AddOneSent
                    (points,) = humans
                    assert sorted(points.get_offsets()[:, 0]) == pytest.approx(
                        sorted(to_scale(own[metric], scale))), (testset, metric, scale)
                    drawn += 1
                plt.close(fig)
    assert drawn == 16


def small_report(df, out, monkeypatch) -> dict[str, set[str]]:
    """`report.write` of `df`'s F1 (Amazon and Reddit against the SQuAD test) into `out`;
    the figures it drew rather than took from the cache, by kind."""
    from analysis import figures, report

    drawn: dict[str, set[str]] = {"grids": set(), "heatmaps": set()}
    grid, heatmap = figures.panel_grid, figures.concurrence_heatmap

    def counted_grid(frame, panels, *args, **kwargs):
        drawn["grids"].add(" ".join(sorted({f"{t}-{m}" for t, m, _ in panels})))
        return grid(frame, panels, *args, **kwargs)

    def counted_heatmap(matrix, title, *args, **kwargs):
        drawn["heatmaps"].add(title.split(",")[0].removeprefix("Concurrence ("))  # the metric
        return heatmap(matrix, title, *args, **kwargs)

    monkeypatch.setattr(figures, "panel_grid", counted_grid)
    monkeypatch.setattr(figures, "concurrence_heatmap", counted_heatmap)
    report.write(df[df["testset"].isin(["amazon", "reddit", "squad-test"])], out, n_boot=50,
                 metrics=("f1",))
    return drawn


def figure_bytes(out) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())
            if p.suffix in (".png", ".pdf", ".svg")}


def test_a_report_of_an_unchanged_table_draws_no_figure_and_gives_the_same_bytes(
        published, tmp_path, workspace, monkeypatch):
    first = small_report(published, tmp_path / "first", monkeypatch)
    assert first == {"grids": {"amazon-f1", "reddit-f1", "amazon-f1 reddit-f1"},
                     "heatmaps": {"F1"}}
    again = small_report(published, tmp_path / "again", monkeypatch)
    assert again == {"grids": set(), "heatmaps": set()}
    assert figure_bytes(tmp_path / "again") == figure_bytes(tmp_path / "first")
    assert len(figure_bytes(tmp_path / "first")) == 5 * len(FORMATS)  # 2 sets, 2 grids, a map


def test_the_same_scores_from_another_table_draw_no_figure_but_a_new_family_does(
        published, tmp_path, workspace, monkeypatch):
    """A copy of a table under another name (its rows name it as their source) shows the
    same figures; a column a panel draws (a model's family colours its dot) does not."""
    small_report(published, tmp_path / "first", monkeypatch)
    copied = published.assign(source="elsewhere/my-copy.csv", wall_s="12.5")
    assert small_report(copied, tmp_path / "copy", monkeypatch) == {"grids": set(),
                                                                    "heatmaps": set()}
    assert figure_bytes(tmp_path / "copy") == figure_bytes(tmp_path / "first")
    families = published.assign(family=published["model"].str.len().mod(2).map(
        {0: "even", 1: "odd"}))
    drawn = small_report(families, tmp_path / "families", monkeypatch)
    assert drawn["grids"] == {"amazon-f1", "reddit-f1", "amazon-f1 reddit-f1"}


def test_a_changed_score_redraws_the_figures_that_show_it_and_no_other(
        published, tmp_path, workspace, monkeypatch):
    small_report(published, tmp_path / "first", monkeypatch)
    changed = published.copy()
    row = (changed["testset"] == "amazon") & (changed["metric"] == "f1")
    changed.loc[changed.index[row][0], "value"] -= 5.0
    drawn = small_report(changed, tmp_path / "changed", monkeypatch)
    # Amazon's panels, the grids (both sets on one figure); the heat map only where a rank
    # moved
    assert drawn["grids"] == {"amazon-f1", "amazon-f1 reddit-f1"}
    assert drawn["heatmaps"] <= {"F1"}
    before, after = figure_bytes(tmp_path / "first"), figure_bytes(tmp_path / "changed")
    assert before["amazon-f1.svg"] != after["amazon-f1.svg"]
    assert before["reddit-f1.svg"] == after["reddit-f1.svg"]


def test_a_figure_is_drawn_again_when_a_set_label_or_the_drawing_code_changes(
        published, tmp_path, workspace, monkeypatch):
    from analysis import figures

    small_report(published, tmp_path / "first", monkeypatch)
    label = figures._label
    monkeypatch.setattr(figures, "_label", lambda t: "Reddit (new)" if t == "reddit" else
                        label(t))
    drawn = small_report(published, tmp_path / "relabelled", monkeypatch)
    assert drawn == {"grids": {"reddit-f1", "amazon-f1 reddit-f1"}, "heatmaps": {"F1"}}
    assert b"Reddit (new)" in (tmp_path / "relabelled" / "reddit-f1.svg").read_bytes()
    monkeypatch.setattr(figures, "_drawing_code", lambda: {"files": ["another version"]})
    assert len(small_report(published, tmp_path / "redrawn", monkeypatch)["grids"]) == 3
