"""Plots of the course: loss curves, attention heatmaps, accuracy against input length.

Taught in chapter 1; reused by every chapter that trains a model or shows attention weights.

Every function returns a ``matplotlib.figure.Figure`` built without pyplot's global state (a
notebook shows it when it is the cell's last value; a script saves it with ``fig.savefig``), or
draws into the ``ax`` it is given and returns that axes' figure. Axes carry labels with units.

**Colours, set once here.** Series are told apart by colour *and* by line style and marker, so a
figure reads on a greyscale print and for the common colour-vision deficiencies: the colours are
the Okabe-Ito palette (Okabe and Ito, 2008, "Color Universal Design"), designed to stay distinct
under protanopia, deuteranopia and tritanopia; heatmaps use viridis, whose lightness rises
monotonically. :func:`series_style` gives the ``i``-th series its colour, line style and marker;
:func:`use_course_style` makes them pyplot's defaults too (chapters 5 and 8, which draw with
their own ``ax.plot`` and ``ax.bar`` calls, call it in their imports cell, so those follow the
same cycle).

**Text sizes, set once here.** Plots are read on phones too: the course website shows a plot as
wide as the screen (390 px on a common phone) and checks that its smallest text stays at 9 px or
more. Text is drawn at :data:`FONT_PT` (11 pt, matplotlib's default is 10): a 6-inch figure, the
course's usual width, then needs 360 px. :func:`course_text_rc` gives these sizes, which the
website's build applies to every chapter it executes (``_ext/course_pages.py``), and
:func:`course_rc` includes them.

Example:
    >>> fig = plot_attention(torch.eye(3), ["a", "b", "c"], ["x", "y", "z"])
    >>> fig.axes[0].get_xlabel()
    'source token (key)'
    >>> series_style(1)
    {'color': '#D55E00', 'linestyle': '--', 'marker': 's'}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import matplotlib as mpl
import numpy as np
import torch
from cycler import cycler
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from course_lib.checks import check_tensor
from course_lib.training import History

if TYPE_CHECKING:  # matplotlib.typing.RcKeyType is new in 3.11; Colab runs 3.10
    from matplotlib.typing import RcKeyType

#: Okabe-Ito colours, in the order series use them (black and yellow last: black is kept for
#: references such as "true function", yellow is faint on white).
PALETTE: tuple[str, ...] = ("#0072B2",  # blue
                            "#D55E00",  # vermillion
                            "#009E73",  # bluish green
                            "#CC79A7",  # reddish purple
                            "#E69F00",  # orange
                            "#56B4E9",  # sky blue
                            "#F0E442",  # yellow
                            "#000000")  # black
#: Line styles and markers that tell the series apart without colour (same length as PALETTE).
LINESTYLES: tuple[Any, ...] = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (8, 2)),
                               (0, (1, 3)), (0, (3, 1, 1, 1)))
MARKERS: tuple[str, ...] = ("o", "s", "^", "D", "v", "P", "X", "*")
#: The colour map of heatmaps: perceptually uniform, monotonic in lightness, colour-blind safe.
HEATMAP_CMAP = "viridis"


def series_style(i: int) -> dict[str, Any]:
    """Colour, line style and marker of the ``i``-th series of a plot (cycling after 8)."""
    k = i % len(PALETTE)
    return {"color": PALETTE[k], "linestyle": LINESTYLES[k], "marker": MARKERS[k]}


#: The size (points) of a plot's text: tick labels and legends at this size, axis labels too,
#: titles larger (matplotlib's relative sizes). 11 pt keeps a 6-inch figure's text at 9 px or
#: more when a phone shows it 360 px wide or wider (6 in x 9 px / 11 pt x 72 pt/in).
FONT_PT = 11.0


def course_text_rc() -> dict[RcKeyType, Any]:
    """The rcParams of the course style's text sizes (every text scales with ``font.size``).

    Example:
        >>> course_text_rc()
        {'font.size': 11.0}
    """
    return {"font.size": FONT_PT}


def course_rc() -> dict[RcKeyType, Any]:
    """The rcParams of the course style: the palette with its line styles as the property cycle,
    and the text sizes of :func:`course_text_rc`.

    Markers are not cycled by default (a training curve of 1000 steps would be a smear of them);
    the course's plot functions add them where points are sparse.
    """
    return {"axes.prop_cycle": cycler(color=list(PALETTE)) + cycler(linestyle=list(LINESTYLES)),
            "image.cmap": HEATMAP_CMAP, **course_text_rc()}


#: rcParams of the texts a plot draws (axis labels, tick labels, legends, titles).
TEXT_SIZES: tuple[str, ...] = ("axes.labelsize", "xtick.labelsize", "ytick.labelsize",
                               "legend.fontsize", "axes.titlesize", "figure.titlesize")


def smallest_text_pt(rc: Mapping[str, Any] | None = None) -> float:
    """The smallest text (points) of a plot drawn with ``rc`` (default: the course style).

    The website checks with it that a plot's text stays readable on a phone's screen.

    Example:
        >>> smallest_text_pt({"font.size": 10, "xtick.labelsize": "small"}) < 10
        True
    """
    from matplotlib.font_manager import font_scalings

    # matplotlib's defaults, then the course style's, then ``rc``'s.
    params: dict[str, Any] = {str(k): v for layer in (mpl.rcParams, course_rc(), rc or {})
                              for k, v in layer.items()}
    base = float(params["font.size"])

    def points(size: Any) -> float:
        """A size in points: a number, or a name ("small", ...) relative to font.size."""
        return base * font_scalings[size] if isinstance(size, str) else float(size)

    return min(points(params[key]) for key in TEXT_SIZES)


def use_course_style() -> None:
    """Make the course style matplotlib's defaults (for ``plt.plot`` and ``ax.plot`` in notebooks).

    Called by each chapter's setup cell; :func:`plot_loss_curves` and the other functions here
    use :func:`series_style` whether or not it was called.
    """
    mpl.rcParams.update(course_rc())


def _new_axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    if ax is not None:
        return ax.figure, ax  # type: ignore[return-value]
    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


def _moving_average(values: Sequence[float], window: int) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if window <= 1 or len(array) < window:
        return array
    kernel = np.ones(window) / window
    # "valid" part, padded at the start with the running mean so the curve keeps its length.
    head = np.cumsum(array[:window - 1]) / np.arange(1, window)
    return np.concatenate([head, np.convolve(array, kernel, mode="valid")])


def plot_loss_curves(histories: History | Mapping[str, History], ax: Axes | None = None,
                     smooth: int = 20, log_scale: bool = True,
                     ylabel: str = "cross-entropy (nats per token)",
                     val_metric: str | None = None) -> Figure:
    """Training loss against step for one or several runs (raw in a faint line, smoothed on top).

    Args:
        histories: one :class:`~course_lib.training.History` or ``{label: History}``.
        ax: draw here instead of a new figure.
        smooth: moving-average window of the bold curve (1: none).
        log_scale: logarithmic loss axis (losses of good models span decades).
        ylabel: the loss axis label (with its unit).
        val_metric: also draw this validation metric of each run as markers (same axis).

    Returns:
        The figure.
    """
    if isinstance(histories, History):
        histories = {"training loss": histories}
    fig, ax = _new_axes(ax, (6.0, 3.5))
    for i, (label, hist) in enumerate(histories.items()):
        style = series_style(i)
        if not hist.train_loss:
            continue
        ax.plot(hist.steps, hist.train_loss, color=style["color"], alpha=0.25, linewidth=0.8)
        ax.plot(hist.steps, _moving_average(hist.train_loss, smooth), label=label,
                markevery=max(1, len(hist.steps) // 8), markersize=4, **style)
        if val_metric is not None and val_metric in hist.val:
            ax.plot(hist.val_steps, hist.val[val_metric], color=style["color"], linestyle="--",
                    marker=style["marker"], markerfacecolor="white",
                    label=f"{label} ({val_metric})")
    if log_scale:
        ax.set_yscale("log")
    ax.set_xlabel("training step (batches)")
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return fig


def plot_attention(weights: torch.Tensor | np.ndarray, query_labels: Sequence[str],
                   key_labels: Sequence[str], ax: Axes | None = None, title: str | None = None,
                   ylabel: str = "output token (query)",
                   xlabel: str = "source token (key)", vmax: float | None = 1.0) -> Figure:
    """Heatmap of attention weights: one row per output (query), one column per source (key).

    Args:
        weights: ``(T_q, T_k)``, each row a distribution over the keys (values in [0, 1]).
        query_labels: ``T_q`` row labels (the output tokens).
        key_labels: ``T_k`` column labels (the source tokens).
        ax: draw here instead of a new figure.
        title: the title.
        ylabel, xlabel: axis labels.
        vmax: the weight drawn brightest; 1 (default) keeps heatmaps comparable, ``None`` uses
            the largest weight (for diffuse weights).

    Returns:
        The figure, with a colour bar of the weights.
    """
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().cpu().float().numpy()
    w = np.asarray(weights)
    if w.ndim != 2:
        raise ValueError(f"weights must be 2-D (queries, keys), got shape {w.shape}")
    if w.shape != (len(query_labels), len(key_labels)):
        raise ValueError(f"weights of shape {w.shape} need {w.shape[0]} query labels and "
                         f"{w.shape[1]} key labels, got {len(query_labels)} and {len(key_labels)}")
    fig, ax = _new_axes(ax, (min(10.0, 0.3 * w.shape[1] + 2.5), min(8.0, 0.3 * w.shape[0] + 1.8)))
    image = ax.imshow(w, cmap=HEATMAP_CMAP, vmin=0.0, vmax=vmax, aspect="auto")
    ax.set_xticks(range(w.shape[1]), [repr(k)[1:-1] if k == " " else k for k in key_labels],
                  rotation=90 if max((len(k) for k in key_labels), default=0) > 1 else 0)
    ax.set_yticks(range(w.shape[0]), list(query_labels))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    label = "attention weight (0 to 1)" if vmax == 1.0 else "attention weight"
    fig.colorbar(image, ax=ax, label=label)
    return fig


def plot_accuracy_vs_length(results: Mapping[str, Mapping[int, float]], ax: Axes | None = None,
                            xlabel: str = "input length (tokens)",
                            ylabel: str = "exact-match accuracy (%)",
                            train_range: tuple[int, int] | None = None) -> Figure:
    """Accuracy against input length for several models on one plot (Bahdanau et al., 2014, Fig. 2).

    Args:
        results: ``{model name: {input length: accuracy in [0, 1]}}``.
        ax: draw here instead of a new figure.
        xlabel, ylabel: axis labels with units (accuracies are drawn in percent).
        train_range: shade the lengths seen in training, ``(shortest, longest)``.

    Returns:
        The figure.
    """
    fig, ax = _new_axes(ax, (6.0, 3.5))
    for i, (name, by_length) in enumerate(results.items()):
        lengths = sorted(by_length)
        ax.plot(lengths, [100.0 * by_length[n] for n in lengths], label=name, markersize=4,
                **series_style(i))
    if train_range is not None:
        ax.axvspan(train_range[0], train_range[1], color="grey", alpha=0.1,
                   label="lengths seen in training")
    ax.set_ylim(-2, 102)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return fig


def plot_kernel_regression(x_train: torch.Tensor, y_train: torch.Tensor, x_query: torch.Tensor,
                           predictions: Mapping[str, torch.Tensor],
                           truth: torch.Tensor | None = None, ax: Axes | None = None) -> Figure:
    """Nadaraya-Watson regression: the noisy samples (keys, values) and the predicted curves.

    Args:
        x_train, y_train: ``(n,)`` the samples: keys and values.
        x_query: ``(m,)`` where the curves are evaluated (the queries).
        predictions: ``{label: (m,) predictions}``, e.g. one per kernel width.
        truth: ``(m,)`` the noiseless function, drawn dashed.
        ax: draw here instead of a new figure.
    """
    check_tensor("x_train", x_train, ndim=1, shape="(n,)")
    check_tensor("y_train", y_train, ndim=1, shape="(n,)")
    if x_train.shape != y_train.shape:
        raise ValueError(f"x_train and y_train must be the n samples' keys and values, got "
                         f"shapes {tuple(x_train.shape)} and {tuple(y_train.shape)}")
    check_tensor("x_query", x_query, ndim=1, shape="(m,)")
    curves = {f"predictions[{label!r}]": pred for label, pred in predictions.items()}
    curves.update({} if truth is None else {"truth": truth})
    for name, curve in curves.items():
        if check_tensor(name, curve).shape != x_query.shape:
            raise ValueError(f"{name} must have the shape of x_query {tuple(x_query.shape)}, got "
                             f"{tuple(curve.shape)}")
    fig, ax = _new_axes(ax, (6.0, 3.5))
    ax.scatter(x_train.cpu(), y_train.cpu(), s=12, color="grey", alpha=0.6,
               label="samples (keys, values)")
    if truth is not None:
        ax.plot(x_query.cpu(), truth.cpu(), "k--", linewidth=1, label="true function")
    for i, (label, pred) in enumerate(predictions.items()):
        style = series_style(i)
        ax.plot(x_query.cpu(), pred.detach().cpu(), color=style["color"],
                linestyle=style["linestyle"], label=label)
    ax.set_xlabel("x (query / key, no unit)")
    ax.set_ylabel("y (value, no unit)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return fig
