r"""GRU encoder-decoders, without attention and with Bahdanau attention.

Taught in chapter 1, sections 1-3 and 5 (Cho et al., 2014; Sutskever et al., 2014; Bahdanau et
al., 2014).

Both models read the source with the same bidirectional GRU :class:`Encoder`; they differ in what
the decoder sees of it:

* :class:`Seq2Seq` squeezes the source into one vector :math:`c` (the encoder's final states) and
  the decoder sees only :math:`c`, at every step (Cho et al., 2014): the fixed-vector bottleneck.
* :class:`AttentionSeq2Seq` keeps every annotation :math:`h_j` and, at each output step, looks
  back at them with additive attention (:func:`attention_decoder_step`).

Both are trained with teacher forcing (the decoder reads the true previous token) and the
cross-entropy of the next token, ignoring padding (:func:`sequence_loss`):

.. math:: \mathcal{L} = -\frac{1}{N} \sum_{b, t:\, y_{b,t} \ne \text{pad}}
          \log p_\theta(y_{b,t} \mid y_{b,<t}, x_b)

Both expose ``make_step(src, src_mask) -> step``, the ``step(tokens) -> logits`` interface of
:mod:`course_lib.decoding`, so greedy and beam search work on either (and on chapter 3's
Transformer), and :func:`exact_match` scores any of them.

Example:
    >>> cfg = Seq2SeqConfig(src_vocab_size=10, tgt_vocab_size=7)
    >>> model = AttentionSeq2Seq(cfg)
    >>> src, mask = torch.randint(4, 10, (2, 5)), torch.ones(2, 5, dtype=torch.bool)
    >>> tgt_in = torch.ones(2, 3, dtype=torch.long)
    >>> logits, weights = model(src, mask, tgt_in, return_attention=True)
    >>> logits.shape, weights.shape
    (torch.Size([2, 3, 7]), torch.Size([2, 3, 5]))
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from course_lib.attention import masked_softmax
from course_lib.checks import check_bool_tensor, check_float_tensor, check_ids
from course_lib.data import Batch, Pair, Vocab, collate, group_by_length
from course_lib.decoding import StepFn, greedy_decode


@dataclass(frozen=True)
class Seq2SeqConfig:
    """Sizes of an encoder-decoder (the same for both models, so they compare fairly)."""

    src_vocab_size: int  # source vocabulary, specials included
    tgt_vocab_size: int  # target vocabulary, specials included
    emb_dim: int = 32  # token embedding size, source and target
    hidden_dim: int = 64  # decoder state; the encoder has hidden_dim // 2 per direction
    attn_dim: int = 64  # d_a, the hidden layer of the additive score
    pad_id: int = 0  # the padding id of both vocabularies
    bos_id: int = 1  # the start token of the target
    eos_id: int = 2  # the end token of the target


class Seq2SeqModel(Protocol):
    """What :func:`exact_match` and the decoders need of a model (chapter 3's too)."""

    def make_step(self, src: torch.Tensor, src_mask: torch.Tensor) -> StepFn: ...


def sequence_loss(logits: torch.Tensor, targets: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    r"""Mean next-token cross-entropy over the real (non-pad) target positions.

    .. math:: \mathcal{L} = -\frac{1}{|\{(b,t): y_{bt} \ne \mathrm{pad}\}|}
              \sum_{(b,t):\, y_{bt} \ne \mathrm{pad}} \log \operatorname{softmax}(z_{bt})_{y_{bt}}

    Args:
        logits: ``(B, T, V)`` the decoder's scores :math:`z_{bt}` (teacher forced).
        targets: ``(B, T)`` long, the tokens to predict (``tgt_out``), padded with ``pad_id``.
        pad_id: the id whose positions do not count.

    Returns:
        A 0-d tensor in nats per token (in the dtype of ``logits``).

    Example:
        >>> sequence_loss(torch.zeros(1, 2, 4), torch.tensor([[3, 0]]))  # uniform over 4: log 4
        tensor(1.3863)
    """
    check_float_tensor("logits", logits, ndim=3, shape="(B, T, V)")
    check_ids("targets", targets, logits.shape[-1], dtypes=(torch.long, torch.uint8))
    if logits.dim() != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(f"logits must be (B, T, V) and targets (B, T); got {tuple(logits.shape)} "
                         f"and {tuple(targets.shape)}")
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           ignore_index=pad_id)  # (B*T, V) against (B*T,)


def collision_loss_bound(targets: Sequence[str]) -> float:
    r"""The lowest total cross-entropy a decoder that reads only :math:`c` reaches on sources that
    share one :math:`c`: :math:`m\,H` nats, the entropy of the targets' empirical distribution.

    Every source of the group gives the decoder the same :math:`c`, so the decoder defines one
    distribution :math:`p` over whole output sequences for all of them (the autoregressive
    factorisation can represent any such :math:`p`; teacher forcing only decides what it is
    trained on). The summed loss of the :math:`m` pairs is :math:`-\sum_i \log p(y_i)`; with
    :math:`n_j` copies of the distinct target :math:`j`, it is lowest at
    :math:`p(j) = n_j / m`:

    .. math:: \min_p -\sum_i \log p(y_i) = -\sum_j n_j \log \frac{n_j}{m}.

    It depends on how many targets are equal, not on their lengths or on where they differ
    (``<eos>`` ends each, so a target that is a prefix of another is a different sequence).

    Args:
        targets: the ``m >= 1`` target strings of the sources that share :math:`c`.

    Returns:
        The bound in nats (0 when every target is the same).

    Example:
        >>> round(collision_loss_bound(["2021-03-02", "2012-03-02"]), 4)  # 2 ln 2
        1.3863
    """
    if isinstance(targets, str) or not isinstance(targets, Sequence) or not targets:
        raise ValueError("targets must be a non-empty list of target strings")
    if not all(isinstance(t, str) for t in targets):
        raise TypeError("targets must hold strings")
    m = len(targets)
    counts = Counter(targets).values()
    return float(sum(n * math.log(m / n) for n in counts))


def offset_attention(offset: int, n: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Additive-attention parameters with ``d_a = 2`` under which query ``i`` attends to key
    ``i + offset``, the queries and keys holding positions only: :math:`q_i = (i, 1)`,
    :math:`k_j = (j, 1)`, scores :math:`v^\top \tanh(W_q q_i + W_k k_j)`, softmax over the keys.

    One :math:`\tanh` is monotone in the key's position, so one hidden unit can only favour an
    end of the source. Two units make a bump: with :math:`d = j - i - \text{offset}`,

    .. math:: a(i, j) = L\,\big[\tanh(s d + c) - \tanh(s d - c)\big],

    which is :math:`2 L \tanh c` at :math:`d = 0` and close to 0 for :math:`|d| \ge 1` when
    :math:`s \gg c`. With :math:`L = 20`, :math:`c = 5`, :math:`s = 15` the peak beats every other
    score by about 40, enough for a weight above 0.99 on any source of fewer than
    :math:`10^{15}` positions; ``n`` is not needed.

    Example:
        >>> W_q, W_k, v = offset_attention(2, 10)
        >>> pos = torch.stack([torch.arange(10.0), torch.ones(10)], -1).double()  # (i, 1)
        >>> w = torch.softmax(torch.tanh((pos @ W_q.T)[:, None] + pos @ W_k.T) @ v, dim=-1)
        >>> bool(w[3, 5] > 0.99)
        True
    """
    if not isinstance(offset, int) or not isinstance(n, int) or n < 1:
        raise ValueError("offset must be an int and n a positive int")
    L, c, s = 20.0, 5.0, 15.0
    W_q = torch.tensor([[-s, c - s * offset], [-s, -c - s * offset]], dtype=torch.float64)
    W_k = torch.tensor([[s, 0.0], [s, 0.0]], dtype=torch.float64)
    v = torch.tensor([L, -L], dtype=torch.float64)
    return W_q, W_k, v


class Encoder(nn.Module):
    r"""Bidirectional GRU over the source: annotations :math:`h_j = [\overrightarrow{h}_j;
    \overleftarrow{h}_j]` and a summary of the whole source.

    Shapes: ``forward(src (B, S), src_mask (B, S))`` -> ``(annotations (B, S, H), final (B, H))``
    with ``H = hidden_dim``; ``final`` joins the forward state after the last real token and the
    backward state after the first. Padding is skipped (packed sequences), so a padded source
    encodes exactly as the same source alone.
    """

    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__()
        if config.hidden_dim % 2:
            raise ValueError(f"hidden_dim must be even (two directions), got {config.hidden_dim}")
        self.embedding = nn.Embedding(config.src_vocab_size, config.emb_dim,
                                      padding_idx=config.pad_id)
        self.rnn = nn.GRU(config.emb_dim, config.hidden_dim // 2, batch_first=True,
                          bidirectional=True)

    def forward(self, src: torch.Tensor,
                src_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        check_ids("src", src, self.embedding.num_embeddings, ndim=2, shape="(B, S)")
        check_bool_tensor("src_mask", src_mask, shape="(B, S)")
        if src_mask.shape != src.shape:
            raise ValueError(f"src_mask must have the shape of src {tuple(src.shape)}, got "
                             f"{tuple(src_mask.shape)}")
        lengths = src_mask.sum(dim=1)
        if bool((lengths == 0).any()):
            raise ValueError("every source needs at least one real token (a row of src_mask is "
                             "all False)")
        packed = pack_padded_sequence(self.embedding(src), lengths.cpu(), batch_first=True,
                                      enforce_sorted=False)
        out, last = self.rnn(packed)  # last: (2, B, H/2), forward and backward
        annotations, _ = pad_packed_sequence(out, batch_first=True, total_length=src.shape[1])
        return annotations, torch.cat([last[0], last[1]], dim=-1)  # (B, S, H), (B, H)


def _expand_to(x: torch.Tensor, batch: int) -> torch.Tensor:
    """Repeat a batch-of-one encoding for ``batch`` hypotheses (beam search)."""
    if x.shape[0] == batch:
        return x
    if x.shape[0] != 1:
        raise ValueError(f"the step got {batch} prefixes for {x.shape[0]} encoded sources")
    return x.expand(batch, *x.shape[1:])


class Seq2Seq(nn.Module):
    r"""GRU encoder-decoder without attention: the source reaches the decoder as one vector.

    .. math:: c = \tanh(W_c\, [\overrightarrow{h}_S; \overleftarrow{h}_1]), \quad
              s_0 = c, \quad s_t = \mathrm{GRU}([e(y_{t-1}); c], s_{t-1}), \quad
              p(y_t \mid y_{<t}, x) = \operatorname{softmax}(W_o [s_t; c; e(y_{t-1})])

    (Cho et al., 2014, who feed :math:`c` at every step, with a bidirectional encoder for a fair
    comparison with :class:`AttentionSeq2Seq`.)

    Shapes: ``forward(src (B, S), src_mask (B, S), tgt_in (B, T))`` -> logits ``(B, T, V)``.
    """

    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__()
        self.config = config
        H, E = config.hidden_dim, config.emb_dim
        self.encoder = Encoder(config)
        self.bridge = nn.Linear(H, H)
        self.embedding = nn.Embedding(config.tgt_vocab_size, E, padding_idx=config.pad_id)
        self.rnn = nn.GRU(E + H, H, batch_first=True)
        self.out = nn.Linear(2 * H + E, config.tgt_vocab_size)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor:
        """The fixed vector ``c``: ``(B, H)``."""
        _, final = self.encoder(src, src_mask)
        return torch.tanh(self.bridge(final))

    def decode(self, c: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits ``(B, T, V)`` of every position, given ``c`` ``(B, H)``."""
        check_ids("tgt_in", tgt_in, self.embedding.num_embeddings, ndim=2, shape="(B, T)")
        emb = self.embedding(tgt_in)  # (B, T, E)
        ctx = c[:, None, :].expand(-1, tgt_in.shape[1], -1)  # (B, T, H): the same c every step
        states, _ = self.rnn(torch.cat([emb, ctx], dim=-1), c[None].contiguous())  # (B, T, H)
        logits: torch.Tensor = self.out(torch.cat([states, ctx, emb], dim=-1))  # (B, T, V)
        return logits

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor,
                return_attention: bool = False) -> torch.Tensor:
        if return_attention:
            raise ValueError("Seq2Seq has no attention weights; AttentionSeq2Seq has")
        return self.decode(self.encode(src, src_mask), tgt_in)

    def make_step(self, src: torch.Tensor, src_mask: torch.Tensor) -> StepFn:
        """Encode once; return ``step(tokens (B, t)) -> (B, V)`` next-token logits."""
        c = self.encode(src, src_mask)

        def step(tokens: torch.Tensor) -> torch.Tensor:
            return self.decode(_expand_to(c, tokens.shape[0]), tokens)[:, -1]

        return step


def attention_decoder_step(
    y_prev: torch.Tensor, state: torch.Tensor, memory: torch.Tensor, keys: torch.Tensor,
    memory_mask: torch.Tensor, embedding: nn.Embedding, gru_cell: nn.GRUCell,
    W_q: torch.Tensor, v: torch.Tensor, out: nn.Linear,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""One step of Bahdanau's decoder: attend with the previous state, update it, predict.

    .. math::
        e_{j} = v^\top \tanh(W_q s_{t-1} + W_k h_j), \quad
        \alpha = \operatorname{masked\,softmax}(e), \quad
        c_t = \sum_j \alpha_j h_j, \\
        s_t = \mathrm{GRUCell}([e(y_{t-1}); c_t],\, s_{t-1}), \quad
        z_t = \mathrm{out}([s_t; c_t; e(y_{t-1})])

    ``keys`` holds :math:`W_k h_j`, the same at every step, so it is computed once per source
    (``memory @ W_k.T``) instead of once per output token.

    Args:
        y_prev: ``(B,)`` long, the previous output token (``<bos>`` at the first step).
        state: ``(B, H)`` the decoder state :math:`s_{t-1}`.
        memory: ``(B, S, H_enc)`` the annotations :math:`h_j` (the values).
        keys: ``(B, S, d_a)`` the projected annotations :math:`W_k h_j`.
        memory_mask: ``(B, S)`` bool, ``True`` at real source tokens.
        embedding: target embedding, ``E`` features.
        gru_cell: ``GRUCell(E + H_enc, H)``.
        W_q: ``(d_a, H)``.
        v: ``(d_a,)``.
        out: ``Linear(H + H_enc + E, V)``.

    Returns:
        ``(logits (B, V), new state (B, H), attention weights (B, S))``.
    """
    check_ids("y_prev", y_prev, embedding.num_embeddings, ndim=1, shape="(B,)")
    check_float_tensor("state", state, ndim=2, shape="(B, H)")
    check_float_tensor("memory", memory, ndim=3, shape="(B, S, H_enc)")
    check_float_tensor("keys", keys, ndim=3, shape="(B, S, d_a)")
    check_bool_tensor("memory_mask", memory_mask, ndim=2, shape="(B, S)")
    check_float_tensor("W_q", W_q, ndim=2, shape="(d_a, H)")
    check_float_tensor("v", v, ndim=1, shape="(d_a,)")
    q = state @ W_q.T  # (B, d_a)
    scores = torch.tanh(q[:, None, :] + keys) @ v  # (B, S)
    weights = masked_softmax(scores, memory_mask)  # (B, S)
    context = (weights[:, None, :] @ memory)[:, 0]  # (B, 1, S) @ (B, S, H_enc) -> (B, H_enc)
    emb = embedding(y_prev)  # (B, E)
    new_state = gru_cell(torch.cat([emb, context], dim=-1), state)
    logits = out(torch.cat([new_state, context, emb], dim=-1))
    return logits, new_state, weights


class AttentionSeq2Seq(nn.Module):
    r"""GRU encoder-decoder with Bahdanau (additive) attention (Bahdanau et al., 2014).

    At each output step the decoder scores every annotation against its previous state, takes the
    softmax-weighted average as the context :math:`c_t` and reads it with the previous token
    (:func:`attention_decoder_step`). The initial state is :math:`s_0 = \tanh(W_s
    [\overrightarrow{h}_S; \overleftarrow{h}_1])`.

    Shapes: ``forward(src (B, S), src_mask (B, S), tgt_in (B, T))`` -> logits ``(B, T, V)``, and
    with ``return_attention=True`` also the weights ``(B, T, S)``.
    """

    def __init__(self, config: Seq2SeqConfig) -> None:
        super().__init__()
        self.config = config
        H, E, A = config.hidden_dim, config.emb_dim, config.attn_dim
        self.encoder = Encoder(config)
        self.bridge = nn.Linear(H, H)
        self.embedding = nn.Embedding(config.tgt_vocab_size, E, padding_idx=config.pad_id)
        self.W_q = nn.Linear(H, A, bias=False)
        self.W_k = nn.Linear(H, A, bias=False)
        self.v = nn.Parameter(torch.empty(A).uniform_(-A ** -0.5, A ** -0.5))
        self.cell = nn.GRUCell(E + H, H)
        self.out = nn.Linear(2 * H + E, config.tgt_vocab_size)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """``(memory (B, S, H), keys (B, S, d_a), mask (B, S), s_0 (B, H))``."""
        memory, final = self.encoder(src, src_mask)
        return memory, self.W_k(memory), src_mask, torch.tanh(self.bridge(final))

    def decode(self, encoded: tuple[torch.Tensor, ...], tgt_in: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced ``(logits (B, T, V), weights (B, T, S))`` from :meth:`encode`."""
        check_ids("tgt_in", tgt_in, self.embedding.num_embeddings, ndim=2, shape="(B, T)")
        memory, keys, mask, state = encoded
        logits, weights = [], []
        for t in range(tgt_in.shape[1]):
            step_logits, state, w = attention_decoder_step(
                tgt_in[:, t], state, memory, keys, mask, self.embedding, self.cell,
                self.W_q.weight, self.v, self.out)
            logits.append(step_logits)
            weights.append(w)
        return torch.stack(logits, dim=1), torch.stack(weights, dim=1)  # (B, T, V), (B, T, S)

    def forward(self, src: torch.Tensor, src_mask: torch.Tensor, tgt_in: torch.Tensor,
                return_attention: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        logits, weights = self.decode(self.encode(src, src_mask), tgt_in)
        return (logits, weights) if return_attention else logits

    def make_step(self, src: torch.Tensor, src_mask: torch.Tensor) -> StepFn:
        """Encode once; return ``step(tokens (B, t)) -> (B, V)`` next-token logits.

        The step re-reads the whole prefix (simple and correct for any decoder, beam search's
        reordered hypotheses included; outputs here are a dozen tokens long).
        """
        encoded = self.encode(src, src_mask)

        def step(tokens: torch.Tensor) -> torch.Tensor:
            batch = tokens.shape[0]
            logits, _ = self.decode(tuple(_expand_to(x, batch) for x in encoded), tokens)
            return logits[:, -1]

        return step


# --------------------------------------------------------------------------------------------
# Training and evaluation helpers, shared by the models of chapters 1 and 3
# --------------------------------------------------------------------------------------------


def teacher_forcing_loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """``loss_fn`` for :func:`course_lib.training.train`: :func:`sequence_loss` of a batch."""
    logits = model(batch.src, batch.src_mask, batch.tgt_in)
    return sequence_loss(logits, batch.tgt_out, pad_id=0)  # every course vocabulary pads with 0


@torch.no_grad()
def translate(model: Seq2SeqModel, sources: Sequence[str], src_vocab: Vocab, tgt_vocab: Vocab,
              max_len: int = 40, batch_size: int = 1000) -> list[str]:
    """Greedy outputs of ``model`` for a list of source strings.

    Example (an untrained model writes anything; the call shape is the point):
        >>> from course_lib.data import date_vocabs
        >>> sv, tv = date_vocabs()
        >>> m = Seq2Seq(Seq2SeqConfig(len(sv), len(tv)))
        >>> len(translate(m, ["3 Mar 2021"], sv, tv, max_len=3))
        1
    """
    was_training = getattr(model, "training", False)
    if hasattr(model, "eval"):
        model.eval()
    params = model.parameters() if hasattr(model, "parameters") else iter(())
    device = next(params, torch.empty(0)).device
    outputs: list[str] = []
    try:
        for start in range(0, len(sources), batch_size):
            chunk = [(s, "") for s in sources[start:start + batch_size]]
            batch = collate(chunk, src_vocab, tgt_vocab, device=device)
            step = model.make_step(batch.src, batch.src_mask)
            bos = torch.full((len(chunk), 1), tgt_vocab.bos_id, dtype=torch.long, device=device)
            tokens = greedy_decode(step, bos, max_len, eos_id=tgt_vocab.eos_id)
            outputs += [tgt_vocab.decode(row) for row in tokens[:, 1:].cpu()]
    finally:
        if was_training:
            model.train()  # type: ignore[attr-defined]
    return outputs


def exact_match(model: Seq2SeqModel, pairs: Sequence[Pair], src_vocab: Vocab, tgt_vocab: Vocab,
                max_len: int | None = None, batch_size: int = 1000) -> float:
    """Fraction of ``pairs`` whose greedy output equals the target exactly, in [0, 1]."""
    if len(pairs) == 0:
        raise ValueError("exact_match needs at least one pair")
    if max_len is None:
        max_len = max(len(tgt_vocab.tokenize(t)) for _, t in pairs) + 2
    outputs = translate(model, [s for s, _ in pairs], src_vocab, tgt_vocab, max_len, batch_size)
    return sum(o == t for o, (_, t) in zip(outputs, pairs)) / len(pairs)


def accuracy_by_length(model: Seq2SeqModel, pairs: Sequence[Pair], src_vocab: Vocab,
                       tgt_vocab: Vocab, min_count: int = 1) -> dict[int, float]:
    """Exact match of ``pairs`` grouped by source length (in source tokens): ``{length: acc}``.

    Lengths with fewer than ``min_count`` pairs are left out.
    """
    return {n: exact_match(model, group, src_vocab, tgt_vocab)
            for n, group in group_by_length(pairs, src_vocab).items() if len(group) >= min_count}
