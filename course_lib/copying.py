r"""Why Transformers copy and fixed-state models do not: Jelassi et al. (2024), measured here.

Taught in chapter 4 (language models), section "Why Transformers copy". Jelassi, Brandfonbrener,
Kakade and Malach (2024), "Repeat After Me: Transformers are Better than State Space Models at
Copying" (ICML 2024, arXiv:2402.01032), train Transformers and generalised state-space models
(GSSMs) of the same size to copy random strings and find that the Transformers copy strings far
longer than those they were trained on, while the fixed-state models fail, already inside the
training lengths and more so beyond them.

**The task** (:func:`make_copy_batch`): a string ``s`` of ``n`` symbols drawn uniformly from an
alphabet of ``A`` symbols, shown as ``BOS s SEP`` and then repeated; the model reads the sequence
left to right and is scored on the ``n`` next-token predictions that make up the copy. Accuracy
is *exact match*: the fraction of strings whose every copied symbol is the model's most likely
token. Reading the copy with teacher forcing gives the same verdict as greedy decoding
(:func:`greedy_copy`): the two agree up to the first wrong symbol, and a string counts only when
there is none.

**The state-size argument.** A recurrent model reads the string into a state of a fixed size and
must then write the copy out of that state alone. The string holds :math:`n \log_2 A` bits, so a
state of :math:`m` bits cannot tell apart all :math:`A^n` strings once :math:`n \log_2 A > m`
(the paper's lower bound for GSSMs). :class:`CopyGRU`'s state is ``hidden_size``
floats whatever ``n`` is. A float32 has 32 bits, so the hard limit is
:math:`n \le 32\,H / \log_2 A` (800 symbols of a 16-letter alphabet for :math:`H = 100`); a
trained network stores far fewer bits per unit than that (it needs margins against its own
noise), and its accuracy falls long before the bound. A Transformer keeps every token: its
key-value cache grows with the string (``2 d`` floats per token and layer), and attention can
look back at any of them. The paper's construction (a two-layer Transformer that copies strings
of exponential length) works by *n-gram lookup*: to write the next symbol, find where the last
few symbols written occur in the input and copy the symbol that follows them there.

**The models.** Both read the same input features (:class:`WindowEmbedding`): each token's
embedding plus those of the ``window - 1`` tokens before it, a causal convolution over the
tokens like the short convolutions of H3 and Mamba. That gives each position its n-gram, which is
what the paper's local attention heads ("hard ALiBi") learn to build; here it is given, so that a
small model learns the task in seconds on a CPU. Then

* :class:`CopyTransformer`: blocks of :class:`course_lib.gpt.Block` (pre-norm causal
  self-attention and MLP) with **no position embedding** (NoPE): it sees tokens and their
  windows, not their positions, so the lookup it learns refers to no absolute position and
  applies at lengths it never saw. The n-gram lookup is one attention head matching the
  query's last ``window - 1`` tokens against each key's ``window - 1`` predecessors.
* :class:`CopyGRU`: a GRU whose ``hidden_size`` floats are the whole state, with about the same
  number of parameters (:func:`count_params`).

Both are trained on the same batches (lengths ``1..train_max_length``) with the same number of
steps (:func:`train_copy`, each with its own learning rate) and evaluated at lengths up to and
beyond the training lengths (:func:`copy_accuracy`). :func:`compare_copying` runs the whole
experiment and returns accuracy against length, the figure the chapter plots.

**Measured** (full mode, :class:`CopyingSetup`: 16 symbols, windows of 6 tokens, 300 steps of
32 strings of lengths 1..32; 58,624 parameters for the Transformer, 59,015 for the GRU with 100
state floats; 200 test strings per length; one CPU thread: 17.5 s for seed 0 at load average
1.2 on a 2-core machine, 18.2 s of CPU time for seed 1 under load). Exact-match accuracy,
seed 0 / seed 1:

=========  =============  =============  =============  =============  =============
length     4              8              16             32             64
=========  =============  =============  =============  =============  =============
GRU        0.420 / 0.385  0.010 / 0.000  0.000 / 0.000  0.000 / 0.000  0.000 / 0.000
Trans.     1.000 / 1.000  1.000 / 1.000  0.995 / 0.985  0.955 / 0.960  0.925 / 0.760
=========  =============  =============  =============  =============  =============

The GRU copies 2 symbols (8 bits) almost always and 4 symbols (16 bits) less than half the
time, out of a state of 100 floats, in this training budget. Three times the steps (900, seed 0)
move its curve only a little: 0.92 at 3 symbols, 0.69 at 4, 0.21 at 8, 0.00 at 12. The bound
above is what no training can pass. The Transformer is near-perfect up to the
training length; beyond it the copies degrade gradually, not at once: its errors come late in
long copies, where the right key must win the softmax against twice as many others as in
training (attention dilution, not repeated n-grams, which are rare at these lengths). The paper,
with larger models trained far longer, reports Transformers that generalise to longer strings
than they were trained on, and GSSMs that do not.

Example:
    >>> task = CopyTask(alphabet_size=4)
    >>> generator = torch.Generator().manual_seed(0)
    >>> batch = make_copy_batch(task, length=3, batch_size=2, generator=generator)
    >>> batch.inputs.shape, batch.targets.shape  # BOS s SEP s, shifted by one: 2 n + 1 tokens
    (torch.Size([2, 7]), torch.Size([2, 7]))
    >>> batch.loss_mask[0].int().tolist()  # scored: the n predictions of the copy, from SEP on
    [0, 0, 0, 0, 1, 1, 1]
    >>> torch.equal(batch.targets[:, 4:], batch.inputs[:, 1:4])  # the copy is the string
    True
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

from course_lib.checks import check_tensor
from course_lib.gpt import Block, GPTConfig
from course_lib.training import TrainConfig, train
from course_lib.utils import quick_mode


@dataclass(frozen=True)
class CopyTask:
    """The copying task's vocabulary.

    Token ids: ``0..A-1`` the symbols, then ``BOS``, ``SEP`` (the end of the string, "now copy")
    and ``PAD`` (before the start of the sequence, in :class:`WindowEmbedding`'s windows).
    """

    alphabet_size: int = 16  # A: symbols of the random strings

    def __post_init__(self) -> None:
        if isinstance(self.alphabet_size, bool) or not isinstance(self.alphabet_size, int):
            raise TypeError(f"alphabet_size must be an int, got "
                            f"{type(self.alphabet_size).__name__}")
        if self.alphabet_size < 2:
            raise ValueError(f"alphabet_size must be at least 2 (one symbol carries no "
                             f"information to copy), got {self.alphabet_size}")

    @property
    def bos(self) -> int:
        return self.alphabet_size

    @property
    def sep(self) -> int:
        return self.alphabet_size + 1

    @property
    def pad(self) -> int:
        return self.alphabet_size + 2

    @property
    def vocab_size(self) -> int:
        return self.alphabet_size + 3


@dataclass(frozen=True)
class CopyBatch:
    """A batch of copying sequences ``BOS s SEP s``, padded at the end to the longest.

    Attributes:
        inputs: ``(B, 2N+1)`` the sequences without their last token; ``N`` is the longest
            string, and a row with a shorter string ends with ``PAD`` tokens.
        targets: ``(B, 2N+1)`` the sequences without their first token (each input's next token).
        loss_mask: ``(B, 2N+1)`` bool, True at the ``n_b`` positions of row ``b`` that predict
            its copy (from its ``SEP`` on).
        lengths: ``(B,)`` the string length ``n_b`` of each row.
    """

    inputs: torch.Tensor
    targets: torch.Tensor
    loss_mask: torch.Tensor
    lengths: torch.Tensor

    def to(self, device: torch.device | str) -> CopyBatch:
        return CopyBatch(self.inputs.to(device), self.targets.to(device),
                         self.loss_mask.to(device), self.lengths.to(device))


def _check_length(length: int, name: str = "length") -> None:
    if isinstance(length, bool) or not isinstance(length, int):
        raise TypeError(f"{name} must be an int, got {type(length).__name__}")
    if length < 1:
        raise ValueError(f"{name} must be at least 1 (a string to copy), got {length}")


def make_copy_batch(task: CopyTask, length: int, batch_size: int, generator: torch.Generator,
                    *, min_length: int | None = None) -> CopyBatch:
    """``batch_size`` random strings, laid out for copying: ``BOS s SEP s``.

    The symbols are independent and uniform over ``task.alphabet_size``, drawn from
    ``generator`` (a CPU ``torch.Generator``), so a seed fixes the batch.

    Args:
        task: the vocabulary.
        length: the string length ``n >= 1`` (the longest, with ``min_length``).
        batch_size: the number of strings ``B >= 1``.
        generator: the source of randomness.
        min_length: when given, each string's length is uniform in ``min_length..length``
            (shorter rows padded at the end); by default every string has ``length`` symbols.

    Returns:
        A :class:`CopyBatch` on the generator's device (the CPU for ``torch.Generator()``).
    """
    _check_length(length)
    _check_length(batch_size, "batch_size")
    device = generator.device
    if min_length is None:
        lengths = torch.full((batch_size,), length, device=device)
    else:
        _check_length(min_length, "min_length")
        if min_length > length:
            raise ValueError(f"min_length={min_length} exceeds length={length}")
        lengths = torch.randint(min_length, length + 1, (batch_size,), generator=generator,
                                device=device)
    strings = torch.randint(task.alphabet_size, (batch_size, length), generator=generator,
                            device=device)
    N = length
    position = torch.arange(2 * N + 2, device=device)  # (2N+2,)
    n = lengths[:, None]  # (B, 1)
    # Row b: BOS at 0, s at 1..n, SEP at n+1, s again at n+2..2n+1, PAD after.
    first = strings.gather(1, (position - 1).clamp(0, N - 1).expand(batch_size, -1))
    second = strings.gather(1, (position - n - 2).clamp(0, N - 1))
    sequence = torch.where(position <= n, first, second)  # (B, 2N+2)
    sequence = torch.where(position == 0, task.bos, sequence)
    sequence = torch.where(position == n + 1, task.sep, sequence)
    sequence = torch.where(position > 2 * n + 1, task.pad, sequence)
    target_position = position[1:]  # target t is sequence position t+1
    loss_mask = (target_position >= n + 2) & (target_position <= 2 * n + 1)  # (B, 2N+1)
    return CopyBatch(sequence[:, :-1], sequence[:, 1:], loss_mask, lengths)


class WindowEmbedding(nn.Module):
    r"""Each token's embedding plus those of the ``window - 1`` tokens before it.

    .. math:: e_t = \sum_{o=0}^{w-1} E_o[x_{t-o}], \qquad x_{t-o} = \mathrm{PAD} \text{ for } t < o

    One table per offset ``o``, so the sum is a causal convolution of width ``w`` over one-hot
    tokens: position ``t`` sees its n-gram ``x_{t-w+1..t}`` and nothing later.

    Shapes: ``(B, T)`` ids -> ``(B, T, d)``.
    """

    def __init__(self, vocab_size: int, d_model: int, window: int, pad_id: int) -> None:
        super().__init__()
        _check_length(window, "window")
        self.window, self.pad_id = window, pad_id
        tables = [nn.Embedding(vocab_size, d_model) for _ in range(window)]
        for table in tables:
            nn.init.normal_(table.weight, mean=0.0, std=0.02)
        self.tables = nn.ModuleList(tables)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        _check_ids(ids, cast(nn.Embedding, self.tables[0]).num_embeddings)  # tables: Embeddings
        T = ids.shape[1]
        padded = F.pad(ids, (self.window - 1, 0), value=self.pad_id)  # (B, w-1+T)
        out: torch.Tensor = self.tables[0](ids)  # (B, T, d)
        for offset in range(1, self.window):
            start = self.window - 1 - offset
            out = out + self.tables[offset](padded[:, start:start + T])  # x_{t-offset}
        return out


def _check_ids(ids: torch.Tensor, vocab_size: int, name: str = "ids") -> None:
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2 or ids.dtype != torch.long:
        shape = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"{name} must be a (batch, length) long tensor, got {shape}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(f"{name}: token ids must lie in [0, {vocab_size}), got "
                         f"[{int(ids.min())}, {int(ids.max())}]")


class CopyTransformer(nn.Module):
    """A small GPT without position embeddings (NoPE) over :class:`WindowEmbedding` features.

    ``(B, T)`` ids -> :class:`WindowEmbedding` ``(B, T, d)`` -> ``n_layer`` ×
    :class:`course_lib.gpt.Block` (causal self-attention, ``n_head`` heads; MLP) -> LayerNorm ->
    linear head ``(B, T, V)``. One head of width ``d`` can match a whole n-gram (``window - 1``
    symbols, one-hot-like in ``d`` dimensions); narrower heads can match only parts of it.

    Example:
        >>> model = CopyTransformer(CopyTask(alphabet_size=4), d_model=8)
        >>> model(torch.zeros(2, 5, dtype=torch.long)).shape
        torch.Size([2, 5, 7])
    """

    def __init__(self, task: CopyTask, d_model: int = 64, n_layer: int = 1, n_head: int = 1,
                 window: int = 6) -> None:
        super().__init__()
        self.task = task
        config = GPTConfig(vocab_size=task.vocab_size, block_size=1, n_layer=n_layer,
                           n_head=n_head, n_embd=d_model)  # block_size unused: no wpe here
        self.embed = WindowEmbedding(task.vocab_size, d_model, window, task.pad)
        self.blocks = nn.ModuleList(Block(config) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        # No bias, as GPT-2's head: with one, the copies of strings longer than the training
        # strings were far less often exact (64 symbols: 50% against 86%, measured).
        self.head = nn.Linear(d_model, task.vocab_size, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        _check_ids(ids, self.task.vocab_size)
        x = self.embed(ids)  # (B, T, d)
        for block in self.blocks:
            x = block(x)  # (B, T, d)
        logits: torch.Tensor = self.head(self.ln_f(x))  # (B, T, V)
        return logits


class CopyGRU(nn.Module):
    """A GRU over :class:`WindowEmbedding` features: its state is ``hidden_size`` floats.

    ``(B, T)`` ids -> :class:`WindowEmbedding` ``(B, T, d)`` -> GRU (state ``(B, H)`` carried
    left to right) ``(B, T, H)`` -> linear head ``(B, T, V)``.

    Example:
        >>> model = CopyGRU(CopyTask(alphabet_size=4), d_model=8, hidden_size=6)
        >>> model(torch.zeros(2, 5, dtype=torch.long)).shape, model.state_floats
        (torch.Size([2, 5, 7]), 6)
    """

    def __init__(self, task: CopyTask, d_model: int = 64, hidden_size: int = 100,
                 window: int = 6) -> None:
        super().__init__()
        _check_length(hidden_size, "hidden_size")
        self.task = task
        self.embed = WindowEmbedding(task.vocab_size, d_model, window, task.pad)
        self.rnn = nn.GRU(d_model, hidden_size, batch_first=True)
        self.head = nn.Linear(hidden_size, task.vocab_size)

    @property
    def state_floats(self) -> int:
        """The size of the state that carries the string: ``hidden_size`` floats."""
        return self.rnn.hidden_size * self.rnn.num_layers

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        _check_ids(ids, self.task.vocab_size)
        states, _ = self.rnn(self.embed(ids))  # (B, T, H)
        logits: torch.Tensor = self.head(states)  # (B, T, V)
        return logits


def count_params(model: nn.Module) -> int:
    """The number of trainable parameters.

    Example:
        >>> count_params(nn.Linear(3, 2))
        8
    """
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def copy_loss(model: nn.Module, batch: CopyBatch) -> torch.Tensor:
    """Mean cross-entropy (nats per symbol) of the copy's ``n`` predictions per string."""
    logits = model(batch.inputs)  # (B, 2n+1, V)
    return F.cross_entropy(logits[batch.loss_mask], batch.targets[batch.loss_mask])


def copy_batches(task: CopyTask, max_length: int, batch_size: int,
                 generator: torch.Generator) -> Iterator[CopyBatch]:
    """An endless stream of batches of strings of lengths uniform in ``1..max_length``.

    Every batch mixes lengths (rather than one length per batch): in short runs, a Transformer
    trained so copies longer strings more reliably.
    """
    _check_length(max_length, "max_length")
    while True:
        yield make_copy_batch(task, max_length, batch_size, generator, min_length=1)


def train_copy(model: nn.Module, task: CopyTask, *, max_length: int, steps: int,
               batch_size: int = 64, lr: float = 3e-3, seed: int = 0,
               progress: bool = False) -> list[float]:
    """Train ``model`` to copy strings of lengths ``1..max_length``; return the loss per step.

    AdamW with ``lr``, a linear warm-up over the first 10% of the steps and a cosine decay to 10%
    (:func:`course_lib.training.train`), gradients clipped to norm 1. The batches come from a
    generator seeded with ``seed``: two models trained with the same seed see the same strings.
    """
    _check_length(max_length, "max_length")
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    batches = copy_batches(task, max_length, batch_size, torch.Generator().manual_seed(seed))
    config = TrainConfig(steps=steps, lr=lr, warmup_steps=max(1, steps // 10), schedule="cosine",
                         grad_clip=1.0, seed=seed, progress=progress, desc="copying")
    return train(model, batches, copy_loss, config).train_loss


@torch.no_grad()
def copy_accuracy(model: nn.Module, task: CopyTask, length: int, n_strings: int = 200,
                  seed: int = 0, batch_size: int = 500) -> float:
    """Exact-match accuracy at one string length: the fraction of strings copied without error.

    A string counts when the model's most likely next token is right at each of its ``n`` copy
    positions (teacher forcing; the same verdict as :func:`greedy_copy`). The strings come from a
    generator seeded with ``seed`` and ``length``, so each length has its own fixed test set.
    """
    _check_length(length)
    _check_length(n_strings, "n_strings")
    generator = torch.Generator().manual_seed(seed * 1_000_003 + length)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    correct = 0
    for start in range(0, n_strings, batch_size):
        batch = make_copy_batch(task, length, min(batch_size, n_strings - start), generator)
        batch = batch.to(device)
        predicted = model(batch.inputs).argmax(-1)  # (B, 2n+1)
        right = (predicted == batch.targets) | ~batch.loss_mask
        correct += int(right.all(dim=1).sum())
    model.train(was_training)
    return correct / n_strings


def max_copy_length(state_floats: int, bits_per_float: int, alphabet_size: int) -> int:
    r"""The longest string length a state of ``state_floats`` floats can always copy (a bound).

    The state holds :math:`S` = ``state_floats * bits_per_float`` bits, so it takes at most
    :math:`2^S` values; copying every string of length :math:`n` over :math:`A` symbols needs
    :math:`A^n` different states. The largest :math:`n` with :math:`A^n \le 2^S`, that is
    :math:`n \log_2 A \le S` (Jelassi et al., 2024, the lower bound for models of fixed state),
    computed with exact integers.

    Example:
        >>> max_copy_length(100, 32, 16)  # the chapter's GRU: 3,200 bits, 4 bits per symbol
        800
        >>> max_copy_length(1, 8, 10)  # 256 states: 10**2 = 100 strings fit, 10**3 do not
        2
    """
    for name, value in (("state_floats", state_floats), ("bits_per_float", bits_per_float)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    if isinstance(alphabet_size, bool) or not isinstance(alphabet_size, int) or alphabet_size < 2:
        raise ValueError(f"alphabet_size must be an int >= 2, got {alphabet_size!r}")
    states = 2 ** (state_floats * bits_per_float)
    n = int(state_floats * bits_per_float / math.log2(alphabet_size))  # a guess, then exact
    while alphabet_size ** n > states:
        n -= 1
    while alphabet_size ** (n + 1) <= states:
        n += 1
    return n


@torch.no_grad()
def attention_map(model: CopyTransformer, ids: torch.Tensor, layer: int = 0) -> torch.Tensor:
    """The causal attention weights of one block of a :class:`CopyTransformer` on ``ids``.

    Recomputed from the block's own input (after its first LayerNorm) and ``c_attn``: the
    weights that block's attention applies, ``softmax(q k^T / sqrt(d_head))`` under the causal
    mask.

    Args:
        model: a (trained) :class:`CopyTransformer`.
        ids: ``(B, T)`` token ids, e.g. ``BOS s SEP s``.
        layer: which block.

    Returns:
        ``(B, n_head, T, T)``: row ``i`` is how query position ``i`` spreads its attention over
        the positions ``0..i``.

    Example:
        >>> model = CopyTransformer(CopyTask(alphabet_size=4), d_model=8)
        >>> w = attention_map(model, torch.zeros(1, 5, dtype=torch.long))
        >>> w.shape, bool(torch.allclose(w.sum(-1), torch.ones(1, 1, 5)))
        (torch.Size([1, 1, 5, 5]), True)
    """
    _check_ids(ids, model.task.vocab_size)
    attn = cast(Block, model.blocks[layer]).attn  # blocks holds gpt.Blocks
    seen: list[torch.Tensor] = []
    handle = attn.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    try:
        model(ids)
    finally:
        handle.remove()
    x = seen[0]  # (B, T, d): the block's input to attention, after ln_1
    B, T, d = x.shape
    q, k, _ = attn.c_attn(x).split(d, dim=-1)
    q, k = (t.view(B, T, attn.n_head, d // attn.n_head).transpose(1, 2) for t in (q, k))
    scores = q @ k.transpose(-2, -1) / math.sqrt(d // attn.n_head)  # (B, h, T, T)
    causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    weights: torch.Tensor = scores.masked_fill(~causal, float("-inf")).softmax(-1)
    return weights


@torch.no_grad()
def greedy_copy(model: nn.Module, task: CopyTask, strings: torch.Tensor) -> torch.Tensor:
    """The model's copy of each string, decoded greedily one token at a time.

    Args:
        model: ``(B, T)`` ids -> ``(B, T, V)`` logits.
        task: the vocabulary.
        strings: ``(B, n)`` symbols in ``0..A-1``.

    Returns:
        ``(B, n)`` the tokens the model writes after ``BOS s SEP`` (any of the ``V`` ids).
    """
    if check_tensor("strings", strings).dim() != 2 or strings.shape[1] < 1:
        raise ValueError(f"strings must be (batch, n) with n >= 1, got {tuple(strings.shape)}")
    _check_ids(strings, task.alphabet_size, "strings")
    B, n = strings.shape
    device = next(model.parameters()).device
    strings = strings.to(device)
    bos = torch.full((B, 1), task.bos, device=device)
    sep = torch.full((B, 1), task.sep, device=device)
    tokens = torch.cat([bos, strings, sep], dim=1)  # (B, n+2)
    for _ in range(n):
        next_token = model(tokens)[:, -1].argmax(-1, keepdim=True)  # (B, 1)
        tokens = torch.cat([tokens, next_token], dim=1)
    return tokens[:, n + 2:]


@dataclass(frozen=True)
class CopyingSetup:
    """The experiment of :func:`compare_copying` (full mode; quick mode shortens it)."""

    alphabet_size: int = 16
    window: int = 6  # the n-gram each position sees: itself and the 5 tokens before it
    d_model: int = 64
    hidden_size: int = 100  # the GRU's state: 100 floats (~ the Transformer's parameter count)
    train_max_length: int = 32
    lengths: tuple[int, ...] = (1, 2, 4, 8, 12, 16, 24, 32, 48, 64)
    steps: int = 300
    batch_size: int = 32
    lr_transformer: float = 3e-3
    lr_gru: float = 1e-2  # the GRU learns far more slowly at 3e-3; 1e-2 is its best of the two
    n_strings: int = 200  # test strings per length


QUICK_SETUP = CopyingSetup(lengths=(1, 4, 16, 32, 64), steps=40, n_strings=50)


def compare_copying(*, seed: int = 0, device: torch.device | str | None = None,
                    quick: bool | None = None) -> dict[str, Any]:
    """Train a Transformer and a GRU of about the same size to copy; accuracy against length.

    Both models are built, trained on the same batches and tested on the same strings
    (:class:`CopyingSetup` lists every setting). The caller's random state is left as it was.

    Args:
        seed: fixes the initialisation, the training strings and the test strings.
        device: where to train (default the CPU); the result does not depend on it beyond
            floating-point rounding.
        quick: a short run (a few seconds); default :func:`course_lib.utils.quick_mode`.

    Returns:
        ``{"lengths": [n, ...], "train_max_length": L, "accuracy": {"transformer": [...],
        "gru": [...]}, "params": {"transformer": N_t, "gru": N_g}, "state_floats": {"gru": H},
        "steps": S, "models": {"transformer": ..., "gru": ...}}``, accuracies as fractions in
        ``[0, 1]`` per length, the training steps and the two trained models.

    Example:
        >>> result = compare_copying(quick=True)
        >>> result["lengths"][-1] > result["train_max_length"]  # tested beyond the training lengths
        True
        >>> result["accuracy"]["transformer"][0] >= result["accuracy"]["gru"][-1]
        True
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    quick = quick_mode() if quick is None else bool(quick)
    setup = QUICK_SETUP if quick else CopyingSetup()
    device = torch.device("cpu") if device is None else torch.device(device)
    task = CopyTask(setup.alphabet_size)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        transformer = CopyTransformer(task, setup.d_model, window=setup.window).to(device)
        gru = CopyGRU(task, setup.d_model, setup.hidden_size, window=setup.window).to(device)
        accuracy: dict[str, list[float]] = {}
        for name, model, lr in (("transformer", transformer, setup.lr_transformer),
                                ("gru", gru, setup.lr_gru)):
            train_copy(model, task, max_length=setup.train_max_length, steps=setup.steps,
                       batch_size=setup.batch_size, lr=lr, seed=seed)
            accuracy[name] = [copy_accuracy(model, task, n, setup.n_strings, seed=seed)
                              for n in setup.lengths]
    return {
        "lengths": list(setup.lengths),
        "train_max_length": setup.train_max_length,
        "accuracy": accuracy,
        "params": {"transformer": count_params(transformer), "gru": count_params(gru)},
        "state_floats": {"gru": gru.state_floats},
        "steps": setup.steps,
        "models": {"transformer": transformer, "gru": gru},
    }
