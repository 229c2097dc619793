"""Tests of course_lib.plotting: figures are built, labelled, and reject bad shapes."""

from __future__ import annotations

import io

import pytest
import torch
from matplotlib.figure import Figure

from course_lib.plotting import (plot_accuracy_vs_length, plot_attention, plot_kernel_regression,
                                 plot_loss_curves)
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
