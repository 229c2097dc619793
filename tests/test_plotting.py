"""Tests of course_lib.plotting: figures are built, labelled, and reject bad shapes."""

from __future__ import annotations

import io

import pytest
import torch
from matplotlib.figure import Figure

from course_lib.plotting import (
    plot_accuracy_vs_length,
    plot_attention,
    plot_kernel_regression,
    plot_loss_curves,
)
from course_lib.training import History


def renders(fig: Figure) -> bool:
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.tell() > 1000


def test_loss_curves_for_several_runs() -> None:
    a = History(steps=[1, 2, 3], train_loss=[3.0, 2.0, 1.0], val_steps=[3], val={"acc": [0.5]})
    b = History(steps=[1, 2], train_loss=[2.5, 2.4])
    fig = plot_loss_curves({"a": a, "b": b}, smooth=2, val_metric="acc")
    ax = fig.axes[0]
    assert "step" in ax.get_xlabel() and "nats" in ax.get_ylabel()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "a (acc)", "b"]
    assert renders(fig)
    assert isinstance(plot_loss_curves(a), Figure)


def test_attention_heatmap_labels_and_shape_check() -> None:
    w = torch.softmax(torch.randn(3, 5), -1)
    fig = plot_attention(w, ["1", "2", "3"], list("abcde"), title="t")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == list("abcde")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1", "2", "3"]
    assert "key" in ax.get_xlabel() and "query" in ax.get_ylabel()
    assert len(fig.axes) == 2  # the colour bar
    assert renders(fig)
    with pytest.raises(ValueError, match="labels"):
        plot_attention(w, ["1"], list("abcde"))
    assert fig.axes[0].images[0].get_clim() == (0.0, 1.0)  # comparable across heatmaps
    diffuse = plot_attention(w / 4, ["1", "2", "3"], list("abcde"), vmax=None)
    assert diffuse.axes[0].images[0].get_clim()[1] == pytest.approx(float(w.max()) / 4)


def test_accuracy_vs_length_in_percent() -> None:
    fig = plot_accuracy_vs_length({"attention": {5: 1.0, 10: 0.9}, "none": {5: 0.8, 10: 0.2}},
                                  train_range=(5, 10))
    ax = fig.axes[0]
    assert "%" in ax.get_ylabel() and "length" in ax.get_xlabel()
    ys = ax.get_lines()[1].get_ydata()
    assert list(ys) == [80.0, 20.0]
    assert renders(fig)


def test_kernel_regression_plot() -> None:
    x = torch.linspace(0, 5, 20)
    fig = plot_kernel_regression(x, x.sin(), x, {"h=0.5": x.sin()}, truth=x.sin())
    assert "query" in fig.axes[0].get_xlabel() and renders(fig)


# The colour-blind-safe style, set once in course_lib.plotting.

OKABE_ITO = {"#000000", "#E69F00", "#56B4E9", "#009E73", "#F0E442", "#0072B2", "#D55E00", "#CC79A7"}


def _luminance(hex_colour: str) -> float:
    """WCAG relative luminance of ``#RRGGBB``."""
    channels = [int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def test_palette_is_okabe_ito_and_series_differ_without_colour() -> None:
    from course_lib.plotting import LINESTYLES, MARKERS, PALETTE, series_style

    assert set(PALETTE) == OKABE_ITO and len(PALETTE) == 8
    styles = [series_style(i) for i in range(len(PALETTE))]
    # On a greyscale print every series keeps its own line style and its own marker.
    assert len({str(s["linestyle"]) for s in styles}) == len(styles) == len(LINESTYLES)
    assert len({s["marker"] for s in styles}) == len(styles) == len(MARKERS)
    assert series_style(8) == series_style(0)
    # Every colour a series gets early is readable on white (WCAG contrast at least 2:1);
    # yellow, the faintest, comes seventh.
    contrast = [1.05 / (_luminance(c) + 0.05) for c in PALETTE]
    assert all(ratio >= 2.0 for ratio in contrast[:6]) and contrast[6] < 2.0


def test_plots_tell_series_apart_by_style() -> None:
    from course_lib.plotting import PALETTE

    fig = plot_accuracy_vs_length({name: {5: 0.9, 10: 0.5} for name in "abcd"})
    lines = fig.axes[0].get_lines()
    assert [line.get_color() for line in lines] == list(PALETTE[:4])
    assert len({(line.get_linestyle(), line.get_marker()) for line in lines}) == 4
    runs = {name: History(steps=list(range(50)), train_loss=[1.0] * 50) for name in "ab"}
    curves = [line for line in plot_loss_curves(runs).axes[0].get_lines()
              if line.get_label() in "ab"]
    assert {line.get_linestyle() for line in curves} == {"-", "--"}


def test_course_style_sets_pyplot_defaults() -> None:
    import matplotlib as mpl

    from course_lib.plotting import PALETTE, course_rc, use_course_style

    with mpl.rc_context():
        use_course_style()
        cycle = mpl.rcParams["axes.prop_cycle"].by_key()
        assert cycle["color"] == list(PALETTE) and len(set(map(str, cycle["linestyle"]))) == 8
        assert mpl.rcParams["image.cmap"] == "viridis"
        assert mpl.rcParams["axes.prop_cycle"] == course_rc()["axes.prop_cycle"]
