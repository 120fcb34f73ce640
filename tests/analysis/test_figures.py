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
