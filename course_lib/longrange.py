r"""Why attention: a long-range dependency task and four ways to mix information across positions.

Taught in chapter 2, section 5. A layer that mixes a sequence ``X`` (``T x d``) can be

1. a fixed linear mixing ``Y = W X`` of per-token features: every output is the same weighted
   sum over positions, whatever the tokens contain (:class:`LinearMixer`);
2. a recurrent network, a Markov chain of states ``h_t = f(h_{t-1}, x_t)``: everything about the
   past must fit through one state vector (:class:`GRUModel`);
3. a (dilated) convolution: local windows, widened layer by layer, so ``T`` positions need
   ``log_k T`` layers (:class:`DilatedCNN`);
4. attention, a pairwise interaction ``y_i = \sum_j \mathrm{softmax}_j(q_i \cdot k_j) v_j``: any
   position reaches any other in one step, and *which* one depends on the content
   (:class:`AttentionModel`).

The task, associative recall (:func:`make_recall_batch`): a sequence holds key-value pairs
scattered among filler tokens and ends with a query key; the answer is the value stored with that
key, ``distance`` positions back. It is the shape of "check the program log to see whether the
backup *ran*" against "check the battery log: it *ran* down": what the last word means depends
on a word far away. Everything is generated from a seed, offline.
"""

from __future__ import annotations

import math
from abc import ABCMeta, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.checks import check_float_tensor, check_tensor
from course_lib.multihead import MultiHeadAttention


@dataclass(frozen=True)
class RecallConfig:
    """The associative recall task.

    Attributes:
        n_keys: size of the key vocabulary; the keys of one sequence are distinct.
        n_values: size of the value vocabulary (the number of classes; chance is 1/n_values).
        length: tokens per sequence, the query included.
        n_pairs: key-value pairs per sequence, at random positions; the rest is filler.
    """

    n_keys: int = 16      # keys 0..n_keys-1; id n_keys is the filler key
    n_values: int = 16    # values 0..n_values-1; id n_values marks filler, n_values+1 the query
    length: int = 64      # the query is the last token
    n_pairs: int = 8      # pairs among the length-1 positions before the query

    def __post_init__(self) -> None:
        if not 1 <= self.n_pairs <= min(self.n_keys, self.length - 1):
            raise ValueError(f"n_pairs={self.n_pairs} must be between 1 and min(n_keys="
                             f"{self.n_keys}, length-1={self.length - 1})")

    @property
    def filler_key(self) -> int:
        return self.n_keys

    @property
    def filler_value(self) -> int:
        return self.n_values

    @property
    def query_value(self) -> int:
        return self.n_values + 1


@dataclass(frozen=True)
class RecallBatch:
    """A batch of the recall task.

    Attributes:
        keys: ``(B, T)`` key ids (``filler_key`` at filler positions; the query key last).
        values: ``(B, T)`` value ids (``filler_value`` at filler, ``query_value`` last).
        target: ``(B,)`` the value stored with the query key.
        distance: ``(B,)`` positions from the matching pair to the query (``1 .. T-1``).
    """

    keys: torch.Tensor
    values: torch.Tensor
    target: torch.Tensor
    distance: torch.Tensor

    def to(self, device: torch.device | str) -> RecallBatch:
        return RecallBatch(self.keys.to(device), self.values.to(device),
                           self.target.to(device), self.distance.to(device))


def make_recall_batch(config: RecallConfig, batch_size: int,
                      generator: torch.Generator) -> RecallBatch:
    """Sample a batch of associative recall sequences (deterministic given the generator).

    Args:
        config: the task.
        batch_size: ``B``.
        generator: a CPU ``torch.Generator``; the batch is built on the CPU.

    Returns:
        A :class:`RecallBatch`; the query asks for a uniformly chosen pair, so distances spread
        over ``1 .. T-1``.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> b = make_recall_batch(RecallConfig(length=10, n_pairs=3), 2, g)
        >>> b.keys.shape, b.target.shape
        (torch.Size([2, 10]), torch.Size([2]))
    """
    c, B, T = config, batch_size, config.length
    device = generator.device  # the batch is made where its randomness comes from
    keys = torch.full((B, T), c.filler_key, dtype=torch.long, device=device)
    values = torch.full((B, T), c.filler_value, dtype=torch.long, device=device)
    # Distinct keys and distinct positions per row: argsort of uniform noise is a random
    # permutation.
    pair_keys = torch.rand(B, c.n_keys, generator=generator, device=device).argsort(-1)
    pair_keys = pair_keys[:, : c.n_pairs]
    positions = torch.rand(B, T - 1, generator=generator, device=device).argsort(-1)
    positions = positions[:, : c.n_pairs]
    pair_values = torch.randint(0, c.n_values, (B, c.n_pairs), generator=generator,
                                device=device)
    keys.scatter_(1, positions, pair_keys)
    values.scatter_(1, positions, pair_values)
    asked = torch.randint(0, c.n_pairs, (B,), generator=generator, device=device)
    rows = torch.arange(B, device=device)
    keys[:, -1] = pair_keys[rows, asked]
    values[:, -1] = c.query_value
    target = pair_values[rows, asked]
    distance = (T - 1) - positions[rows, asked]
    return RecallBatch(keys, values, target, distance)


class _RecallModel(nn.Module, metaclass=ABCMeta):
    """Shared parts: the token embedding (key + value) and the readout at the query.

    Subclasses differ only in :meth:`mix`, the way information moves across positions.
    """

    def __init__(self, config: RecallConfig, d_model: int) -> None:
        super().__init__()
        self.config = config
        self.d_model = d_model
        self.key_embedding = nn.Embedding(config.n_keys + 1, d_model)
        self.value_embedding = nn.Embedding(config.n_values + 2, d_model)
        self.readout = nn.Sequential(nn.Linear(d_model, d_model), nn.ReLU(),
                                     nn.Linear(d_model, config.n_values))

    def embed(self, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """``(B, T, d)``; a ``ValueError`` unless ``keys`` and ``values`` are ``(B, T)`` ids."""
        config = self.config
        for name, ids, size in (("keys", keys, config.n_keys + 1),
                                ("values", values, config.n_values + 2)):
            if ids.dim() != 2 or ids.dtype != torch.long:
                raise ValueError(f"{name} must be (batch, length) token ids of dtype torch.long, "
                                 f"got {tuple(ids.shape)} {ids.dtype}")
            if ids.numel() and not bool(((ids >= 0) & (ids < size)).all()):
                raise ValueError(f"{name} ids must lie in 0..{size - 1}, got "
                                 f"{int(ids.min())}..{int(ids.max())}")
        if keys.shape != values.shape:
            raise ValueError(f"keys and values must have the same shape, got {tuple(keys.shape)} "
                             f"and {tuple(values.shape)}")
        x: torch.Tensor = self.key_embedding(keys) + self.value_embedding(values)  # (B, T, d)
        return x

    @abstractmethod
    def mix(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, T, d)`` to the representation of the query, ``(B, d)``."""

    def forward(self, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, n_values)`` for the value asked by the last token."""
        logits: torch.Tensor = self.readout(self.mix(self.embed(keys, values)))
        return logits


class LinearMixer(_RecallModel):
    r"""Fixed linear mixing over positions: :math:`y = \sum_t w_t\, g(x_t)`, ``w`` learned.

    What it can represent, precisely: the weights :math:`w_t` depend on the position only, never
    on the content; the per-token features :math:`g(x_t) = \mathrm{ReLU}(W(e_{k_t} + e_{v_t}) +
    b)` see a key and its value together, so they can encode the *pair* (a conjunction of the
    two), and :math:`y` is a weighted bag of bound pairs, a memory of the same kind as the fast
    weights of Ba et al. (2016), which sum outer products :math:`v k^\top`. The query enters
    :math:`y` as one more summand and cannot choose what is summed: the readout MLP must find the
    asked value in a ``d_model``-dimensional sum, so what limits this model is the capacity of
    that sum and of the readout, not an impossibility.
    """

    def __init__(self, config: RecallConfig, d_model: int = 64) -> None:
        super().__init__(config, d_model)
        self.token_mlp = nn.Sequential(nn.Linear(d_model, d_model), nn.ReLU())
        self.mixing = nn.Parameter(torch.full((config.length,), 1.0 / config.length))

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("t,btd->bd", self.mixing, self.token_mlp(x))  # (B, d)


class GRUModel(_RecallModel):
    """A recurrent model: the query is read from the last GRU state, which must hold every pair."""

    def __init__(self, config: RecallConfig, d_model: int = 64, n_layers: int = 1) -> None:
        super().__init__(config, d_model)
        self.gru = nn.GRU(d_model, d_model, num_layers=n_layers, batch_first=True)

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        states: torch.Tensor = self.gru(x)[0]  # (B, T, d)
        return states[:, -1]                   # (B, d)


class DilatedCNN(_RecallModel):
    r"""Causal convolutions of width 2 with dilations 1, 2, 4, ...: ``ceil(log2 T)`` layers see it
    all.

    Layer ``l`` (dilation :math:`r = 2^l`) computes :math:`h_t \leftarrow h_t +
    \mathrm{ReLU}(W_0 h_{t-r} + W_1 h_t + b)`, a width-2 convolution written as one linear map of
    the two taps (positions before the start read zeros).
    """

    def __init__(self, config: RecallConfig, d_model: int = 64) -> None:
        super().__init__(config, d_model)
        n_layers = max(1, math.ceil(math.log2(config.length)))
        self.dilations = [2 ** i for i in range(n_layers)]
        self.taps = nn.ModuleList(nn.Linear(2 * d_model, d_model) for _ in self.dilations)
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in self.dilations)

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        h = x  # (B, T, d)
        for r, taps, norm in zip(self.dilations, self.taps, self.norms):
            past = F.pad(h, (0, 0, r, 0))[:, : h.shape[1]]  # h_{t-r}, zeros before the start
            h = norm(h + F.relu(taps(torch.cat([past, h], dim=-1))))  # (B, T, d)
        return h[:, -1]  # (B, d)


class AttentionModel(_RecallModel):
    """One multi-head attention layer from the query token to the whole sequence.

    No positional information is needed: the query finds its pair by content.
    """

    def __init__(self, config: RecallConfig, d_model: int = 64, n_heads: int = 4) -> None:
        super().__init__(config, d_model)
        self.attention = MultiHeadAttention(d_model, n_heads)

    def mix(self, x: torch.Tensor) -> torch.Tensor:
        return self.attend(x)[0]

    def attend(self, x: torch.Tensor, need_weights: bool = False,
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
        query = x[:, -1:]  # (B, 1, d)
        out, weights = self.attention(query, x, x, need_weights=need_weights)
        return (query + out)[:, 0], weights  # (B, d), (B, h, 1, T)

    def attention_weights(self, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """The query's attention weights ``(B, h, T)`` on an input."""
        _, weights = self.attend(self.embed(keys, values), need_weights=True)
        if weights is None:
            raise RuntimeError("the attention returned no weights though need_weights=True")
        return weights[:, :, 0]


MODELS: dict[str, Callable[..., _RecallModel]] = {
    "linear mixing": LinearMixer,
    "GRU": GRUModel,
    "dilated CNN": DilatedCNN,
    "attention": AttentionModel,
}


@dataclass(frozen=True)
class TrainConfig:
    """How :func:`train_recall` trains a model."""

    steps: int = 600        # optimizer steps
    batch_size: int = 64    # fresh sequences per step
    lr: float = 3e-3        # Adam learning rate
    seed: int = 0           # seeds the data stream (the model is seeded by whoever builds it)


def train_recall(model: _RecallModel, train: TrainConfig = TrainConfig(),
                 progress: bool = False) -> list[float]:
    """Train ``model`` on fresh batches of its task with Adam and cross-entropy.

    Args:
        model: one of :data:`MODELS`, on any device.
        train: steps, batch size, learning rate and the data seed.
        progress: show a tqdm progress bar.

    Returns:
        The training loss of every step.

    Example:
        >>> model = AttentionModel(RecallConfig(length=8, n_pairs=2), d_model=16)
        >>> len(train_recall(model, TrainConfig(steps=3, batch_size=4)))
        3
    """
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(train.seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=train.lr)
    steps: Iterable[int] = range(train.steps)
    if progress:
        from tqdm.auto import tqdm
        steps = tqdm(steps, desc=type(model).__name__, leave=False)
    losses = []
    model.train()
    for _ in steps:
        batch = make_recall_batch(model.config, train.batch_size, generator).to(device)
        loss = F.cross_entropy(model(batch.keys, batch.values), batch.target)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    return losses


@torch.no_grad()
def accuracy_by_distance(model: _RecallModel, batch: RecallBatch,
                         bins: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Accuracy of ``model`` on ``batch``, grouped by the distance of the asked pair.

    Args:
        model: a trained model.
        batch: evaluation sequences.
        bins: ``(n + 1,)`` increasing bin edges; bin ``i`` holds ``edges[i] <= distance <
            edges[i+1]``.

    Returns:
        ``(centres, accuracy, counts)``, each ``(n,)``; accuracy is NaN in an empty bin.

    Example:
        >>> config = RecallConfig(length=8, n_pairs=2)
        >>> batch = make_recall_batch(config, 10, torch.Generator().manual_seed(0))
        >>> centres, acc, counts = accuracy_by_distance(LinearMixer(config, 8), batch,
        ...                                             torch.tensor([1, 4, 8]))
        >>> centres.tolist(), int(counts.sum())
        ([2.5, 6.0], 10)
    """
    check_tensor("bins", bins, ndim=1, shape="(n + 1,)")
    if bins.numel() < 2 or not bool((bins[1:] > bins[:-1]).all()):
        raise ValueError(f"bins must be at least two increasing edges, got {bins.tolist()}")
    device = next(model.parameters()).device
    model.eval()
    correct = (model(batch.keys.to(device), batch.values.to(device)).argmax(-1).cpu()
               == batch.target).double()
    which = torch.bucketize(batch.distance, bins, right=True) - 1  # bin index per sequence
    n = bins.numel() - 1
    counts = torch.bincount(which.clamp(0, n - 1), minlength=n).double()
    hits = torch.bincount(which.clamp(0, n - 1), weights=correct, minlength=n)
    accuracy = torch.where(counts > 0, hits / counts.clamp(min=1), torch.full_like(hits, math.nan))
    centres = (bins[:-1] + bins[1:]).double() / 2
    return centres, accuracy, counts


def layers_to_connect(make_layer: Callable[[], nn.Module], length: int, d: int = 4,
                      max_layers: int = 1024) -> int:
    """Measure how many stacked layers it takes until the last output depends on the first input.

    The maximum path length of Vaswani et al. (2017, table 1), measured: stack copies of a layer
    mapping ``(1, T, d)`` to ``(1, T, d)`` until ``d y_{T-1} / d x_0`` is non-zero.

    Args:
        make_layer: builds one layer (random weights).
        length: ``T``.
        d: feature size of the probe.
        max_layers: give up after this many.

    Returns:
        The number of layers; for a recurrent layer 1 (its path is ``T - 1`` steps inside it).

    Example:
        >>> layers_to_connect(lambda: CausalConvLayer(4, kernel_size=3), 9)
        4
    """
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for n in range(1, max_layers + 1):
        layers.append(make_layer())
        x = torch.randn(1, length, d, dtype=torch.float64, requires_grad=True)
        h = x
        for layer in layers:
            h = layer.double()(h)
        (grad,) = torch.autograd.grad(h[0, -1].sum(), x)
        if grad[0, 0].abs().sum() > 0:
            return n
    raise RuntimeError(f"the last output does not depend on the first input after {max_layers} "
                       "layers")


class CausalConvLayer(nn.Module):
    """A causal 1-D convolution layer on ``(B, T, d)`` (for measuring path lengths)."""

    def __init__(self, d: int, kernel_size: int = 3, dilation: int = 1) -> None:
        super().__init__()
        self.pad = (kernel_size - 1) * dilation
        self.conv = nn.Conv1d(d, d, kernel_size, dilation=dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_float_tensor("x", x, ndim=3, shape="(B, T, d)")
        h = self.conv(F.pad(x.transpose(1, 2), (self.pad, 0)))  # (B, d, T)
        return torch.tanh(h).transpose(1, 2)  # (B, T, d)
