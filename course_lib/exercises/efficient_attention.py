"""Graded exercises of chapter 6, "Efficient attention": references, hidden cases, slips.

Every exercise is solvable with torch (and plain Python) alone. The reference-call guard fails a
solution that calls course_lib's implementation of any exercise of this chapter: the patterns and
the receptive field of :mod:`course_lib.sparse_attention`, the linear attention forms and random
features of :mod:`course_lib.linear_attention`, the online softmax and tiled attention of
:mod:`course_lib.tiled_attention` (and chapter 2's attention), and sparsemax and entmax of
:mod:`course_lib.entmax`, private helpers included.

Two exercises grade their algorithm, not only their output (``Exercise.largest_tensor``):
``causal_linear_attention`` and ``query_tile_attention`` fail a case in which they allocate a
tensor far larger than their statement's memory bound, as building the ``T x T`` scores does.

Case builders use torch, plain Python and :mod:`course_lib.exercises._common` only (the grading
sandbox strips the references' bodies). Slips (:class:`~course_lib.grading.Slip`) are the common
mistakes, each with the message its author reads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F

from course_lib import attention, entmax, linear_attention, sparse_attention, tiled_attention
from course_lib.exercises._calls import key_value_stream
from course_lib.exercises._common import Inputs, f32, f64, gen, pick, randn
from course_lib.grading import Case, Exercise, MemoryProbe, Slip

# 1. sliding_window_mask ------------------------------------------------------------------------


def sliding_window_mask(n: int, window: int, causal: bool = False) -> torch.Tensor:
    """Reference: the ``(n, n)`` mask of :func:`course_lib.sparse_attention.sliding_window`."""
    return sparse_attention.dense_mask(sparse_attention.sliding_window(window, causal), n)


def _window_cases() -> list[Case]:
    def draw(seed: int, n: tuple[int, int], window: tuple[int, int], causal: bool) -> Inputs:
        def inputs() -> dict[str, Any]:
            g = gen(seed)
            size, w = (int(torch.randint(low, high + 1, (1,), generator=g))
                       for low, high in (n, window))
            return {"n": size, "window": w, "causal": causal}
        return inputs

    return [
        Case("a window of a few keys on each side", draw(1, (8, 16), (1, 3), False)),
        Case("causal, a window of a few keys", draw(2, (8, 16), (1, 4), True)),
        Case("window 0: each token sees itself", draw(3, (3, 8), (0, 0), False)),
        Case("a window wider than the sequence", draw(4, (2, 5), (6, 9), False)),
        Case("causal, a long sequence", draw(5, (40, 64), (3, 8), True)),
        Case("one token", draw(6, (1, 1), (0, 3), True)),
    ]


def _window_slip(kind: str) -> Callable[..., torch.Tensor]:
    def mask(n: int, window: int, causal: bool = False) -> torch.Tensor:
        i = torch.arange(n)[:, None]
        j = torch.arange(n)[None, :]
        gap = i - j
        near = gap.abs() < window if kind == "strict" else gap.abs() <= window
        if causal:
            near = near & (gap <= 0 if kind == "future" else gap >= 0)
        return near
    return mask


_WINDOW_SLIPS = (
    Slip("a window of w keeps the keys at distance up to and including w (|i - j| <= w)",
         _window_slip("strict")),
    Slip("causal: query i sees the keys j <= i (rows are queries, columns keys)",
         _window_slip("future")),
)


# 2. layers_to_connect --------------------------------------------------------------------------


def layers_to_connect(n: int, window: int, dilation: int = 1,
                      global_tokens: list[int] | tuple[int, ...] = ()) -> int | None:
    """Reference: the layers a window (and global tokens) need to connect the ends.

    Up to :data:`_MEASURED_UP_TO` positions it builds the ``(n, n)`` mask and counts layers with
    :func:`course_lib.sparse_attention.layers_to_connect` (receptive fields, residuals included):
    the measurement the student's derivation must agree with. Beyond, where no mask fits in
    memory and no loop over layers ends in time, it is the closed form (:func:`_layers`), which
    the chapter's tests check against the measurement on every small case.
    """
    if n > _MEASURED_UP_TO:
        return _layers(n, window, dilation, global_tokens)
    pattern = sparse_attention.union(sparse_attention.dilated_window(window, dilation),
                                     sparse_attention.global_tokens(list(global_tokens)))
    return sparse_attention.layers_to_connect(sparse_attention.dense_mask(pattern, n))


_MEASURED_UP_TO = 256


def _layers_cases() -> list[Case]:
    def draw(seed: int, kind: str) -> Inputs:
        def inputs() -> dict[str, Any]:
            g = gen(seed)

            def pick(low: int, high: int) -> int:  # an int in [low, high]
                return int(torch.randint(low, high + 1, (1,), generator=g))

            window, dilation, globals_ = pick(1, 5), 1, []
            n = pick(window + 3, 60)
            if kind == "one layer":
                n = pick(2, window + 1)
            if kind == "whole windows":
                n = window * pick(2, 12) + 1
            if kind.startswith("global"):  # far ends: the window alone needs 4 layers or more
                n = pick(3 * window + 2, 60)
            if kind == "dilated, reachable":
                dilation = pick(2, 3)
                n = dilation * pick(window + 1, 15) + 1
            if kind == "dilated, unreachable":
                dilation = pick(2, 3)
                n = dilation * pick(2, 15) + pick(1, dilation - 1) + 1
            if kind == "global inside":
                globals_ = sorted(set(torch.randint(1, n - 1, (pick(1, 2),), generator=g).tolist()))
            if kind == "global at an end":
                globals_ = [0] if pick(0, 1) else [n - 1]
            if kind == "window 0":
                window = 0
            if kind.startswith("long"):  # no mask fits, no loop over ~10^10 layers ends in time
                window = pick(1, 5)
                n = window * int(torch.randint(10 ** 10, 10 ** 11, (1,), generator=g)) \
                    + pick(1, window)
            if kind == "long, dilated, reachable":
                dilation = pick(2, 3)
                n = dilation * (n - 1) + 1
            if kind == "long, dilated, unreachable":
                dilation = pick(2, 3)
                n = dilation * (n - 1) + pick(1, dilation - 1) + 1
            return {"n": n, "window": window, "dilation": dilation, "global_tokens": globals_}
        return inputs

    return [
        Case("a plain window", draw(11, "plain")),
        Case("the ends a whole number of windows apart", draw(12, "whole windows")),
        Case("the ends within one window", draw(13, "one layer")),
        Case("global tokens inside the sequence", draw(14, "global inside")),
        Case("a global token at one end", draw(15, "global at an end")),
        Case("dilation, the ends a multiple of r apart", draw(16, "dilated, reachable")),
        Case("dilation, the ends not a multiple of r apart", draw(17, "dilated, unreachable")),
        Case("window 0, no global token", draw(18, "window 0")),
        Case("about 10^11 positions, a plain window", draw(19, "long")),
        Case("about 10^11 positions, dilation, the ends a multiple of r apart",
             draw(20, "long, dilated, reachable")),
        Case("about 10^11 positions, dilation, the ends not a multiple of r apart",
             draw(21, "long, dilated, unreachable")),
    ]


def _layers(n: int, window: int, dilation: int = 1,
            global_tokens: list[int] | tuple[int, ...] = (), slip: str = "") -> int | None:
    hops = window * dilation
    if (n - 1) % dilation == 0 and (n - 1) <= hops:
        return 1
    if global_tokens and slip != "no global":
        if slip != "end" and (0 in global_tokens or n - 1 in global_tokens):
            return 1
        return 2
    if hops == 0 or ((n - 1) % dilation and slip != "gaps"):
        return None
    if slip == "half":
        return -(-n // (2 * hops))
    if slip == "n over w":
        return -(-n // hops)
    return -(-(n - 1) // hops)  # ceil((n - 1) / hops) in Python ints, exact at any n


_LAYERS_SLIPS = (  # the more specific slips first: a student reads the first that matches
    Slip("information moves w positions per layer in one direction: the window's 2w + 1 keys are "
         "not a reach of 2w from one end to the other", partial(_layers, slip="half")),
    Slip("with dilation r every hop is a multiple of r: positions whose distance is not a "
         "multiple of r are never connected (return None)", partial(_layers, slip="gaps")),
    Slip("the ends are n - 1 positions apart, not n: count the distance, not the tokens",
         partial(_layers, slip="n over w")),
    Slip("a global token at an end: that end attends to every position and every position to it, "
         "in one layer", partial(_layers, slip="end")),
    Slip("a global token connects any two positions in two layers (up to it, then down from it)",
         partial(_layers, slip="no global")),
)


# 3. bigbird_mask -------------------------------------------------------------------------------


def bigbird_mask(n: int, window: int, global_tokens: list[int], block_size: int,
                 random_blocks: list[list[int]]) -> torch.Tensor:
    """Reference: sliding window, global tokens and random key blocks, as one ``(n, n)`` mask."""
    pattern = sparse_attention.union(sparse_attention.sliding_window(window),
                                     sparse_attention.global_tokens(global_tokens))
    mask = sparse_attention.dense_mask(pattern, n)
    for row, blocks in enumerate(random_blocks):
        for col in blocks:
            mask[row * block_size:(row + 1) * block_size,
                 col * block_size:(col + 1) * block_size] = True
    return mask


def _bigbird_cases() -> list[Case]:
    def build(seed: int, n: int, window: int, n_global: int, block_size: int,
              n_random: int) -> Inputs:
        def inputs() -> dict[str, Any]:
            g = gen(seed)
            n_blocks = math.ceil(n / block_size)
            chosen = torch.randperm(n, generator=g)[:n_global].tolist()
            blocks = [sorted(torch.randperm(n_blocks, generator=g)[:n_random].tolist())
                      for _ in range(n_blocks)]
            if n % block_size and 0 not in blocks[-1]:  # the short last block sees a far block
                blocks[-1] = sorted(blocks[-1][1:] + [0])
            return {"n": n, "window": window, "global_tokens": chosen, "block_size": block_size,
                    "random_blocks": blocks}
        return inputs

    return [
        Case("16 tokens, blocks of 4, one global token", build(21, 16, 1, 1, 4, 1)),
        Case("30 tokens, blocks of 5, two global tokens, two random blocks",
             build(22, 30, 2, 2, 5, 2)),
        Case("a last block shorter than the others", build(23, 14, 1, 1, 4, 1)),
        Case("no global token", build(24, 12, 1, 0, 3, 1)),
        Case("no random block", build(25, 12, 2, 1, 3, 0)),
        Case("global token 0 (a [CLS] token)",
             lambda: {"n": 8, "window": 1, "global_tokens": [0], "block_size": 2,
                      "random_blocks": [[3], [0], [2], [1]]}),
    ]


def _bigbird(n: int, window: int, global_tokens: list[int] | tuple[int, ...], block_size: int,
             random_blocks: list[list[int]], slip: str) -> torch.Tensor:
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    mask = (i - j).abs() <= window
    g = torch.zeros(n, dtype=torch.bool)
    g[list(global_tokens)] = True
    mask = mask | g[None, :] if slip == "one way" else mask | g[None, :] | g[:, None]
    rows = random_blocks[:n // block_size] if slip == "short block" else random_blocks
    for row, blocks in enumerate(rows):
        for col in blocks:
            if slip == "tokens":
                mask[row, col] = True
            else:
                mask[row * block_size:(row + 1) * block_size,
                     col * block_size:(col + 1) * block_size] = True
    return mask


_BIGBIRD_SLIPS = (
    Slip("a global token attends to every position too, not only the other way round",
         partial(_bigbird, slip="one way")),
    Slip("random_blocks[r] lists key blocks for query block r: set whole block_size x block_size "
         "squares, not single entries", partial(_bigbird, slip="tokens")),
    Slip("the last query block may be shorter than block_size: its random key blocks count too",
         partial(_bigbird, slip="short block")),
)


# 4. causal_linear_attention --------------------------------------------------------------------


def _linear_cases() -> list[Case]:
    def build(seed: int, shape: tuple[int, ...], d_v: int, dtype: torch.dtype,
              scale: float = 1.0) -> Inputs:
        def inputs() -> dict[str, Any]:
            q = randn(seed, *shape, dtype=dtype, scale=scale)
            k = randn(seed + 1, *shape, dtype=dtype, scale=scale)
            v = randn(seed + 2, *shape[:-1], d_v, dtype=dtype)
            return {"q": q, "k": k, "v": v}
        return inputs

    return [
        Case("float32, batch 2, 4 heads", build(31, (2, 4, 12, 8), 6, f32)),
        Case("float64, batch size 1", build(34, (1, 20, 5), 3, f64)),
        Case("float32, one position", build(37, (3, 1, 4), 4, f32)),
        Case("float64, large negative and positive scores", build(40, (2, 9, 6), 5, f64, 6.0)),
        Case("float32, a longer sequence", build(43, (1, 2, 64, 16), 16, f32)),
        Case("float64, 2048 positions and 4 features (memory bound)",
             build(46, (1, 2048, 4), 4, f64)),
    ]


def _linear_probe_inputs() -> dict[str, Any]:
    return {"q": randn(48, 1, 8192, 8, dtype=f64), "k": randn(49, 1, 8192, 8, dtype=f64),
            "v": randn(50, 1, 8192, 8, dtype=f64)}


#: The memory rule as the hardened grader enforces it: 8192 positions in float64, where the
#: T x T scores take 512 MiB and the prefix-sum states (T x d x d_v) take 4 MiB.
_LINEAR_PROBE = MemoryProbe("float64, 8192 positions, under a memory limit",
                            _linear_probe_inputs, budget_bytes=192 << 20,
                            forbidden_bytes=8192 * 8192 * 8)


def _linear_bound(inputs: Mapping[str, Any]) -> int:
    """The statement's bound: a few tensors of ``(..., T, d, d_v)``, far below ``T x T``."""
    q: torch.Tensor = inputs["q"]
    v: torch.Tensor = inputs["v"]
    batch = q[..., 0, 0].numel()
    return 4 * batch * q.shape[-2] * (q.shape[-1] + 1) * (v.shape[-1] + 1)


def _phi(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x > 0, x + 1.0, torch.exp(x.clamp(max=0.0)))


def _linear(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slip: str) -> torch.Tensor:
    fq, fk = (F.relu(q), F.relu(k)) if slip == "relu" else (_phi(q), _phi(k))
    s = torch.cumsum(fk[..., :, None] * v[..., None, :], dim=-3)    # (..., T, d, d_v)
    z = torch.cumsum(fk, dim=-2)                                     # (..., T, d)
    if slip == "exclusive":
        s, z = s - fk[..., :, None] * v[..., None, :], z - fk
    if slip == "all":
        s = s[..., -1:, :, :].expand_as(s)
        z = z[..., -1:, :].expand_as(z)
    num = (fq[..., None, :] @ s).squeeze(-2)                         # (..., T, d_v)
    if slip == "unnormalised":
        return num
    den = (fq * z).sum(-1, keepdim=True)
    return num / torch.where(den > 0, den, torch.ones_like(den))


_LINEAR_SLIPS = (
    Slip("divide by the normaliser phi(q_i)^T z_i, where z_i is the prefix sum of phi(k_j)",
         partial(_linear, slip="unnormalised")),
    Slip("causal: position i sums over the keys j <= i only, a prefix sum (cumsum), not over all "
         "positions", partial(_linear, slip="all")),
    Slip("the prefix sum includes position i itself (j <= i, not j < i)",
         partial(_linear, slip="exclusive")),
    Slip("the feature map is elu(x) + 1 (positive everywhere), not relu",
         partial(_linear, slip="relu")),
)


# 5. positive_random_features -------------------------------------------------------------------


def _prf_cases() -> list[Case]:
    def build(seed: int, shape: tuple[int, ...], m: int, dtype: torch.dtype,
              scale: float = 0.5) -> Inputs:
        def inputs() -> dict[str, Any]:
            return {"x": randn(seed, *shape, dtype=dtype, scale=scale),
                    "w": randn(seed + 1, m, shape[-1], dtype=dtype)}
        return inputs

    return [
        Case("float32, batch 2, 3 positions, 16 features", build(91, (2, 3, 4), 16, f32)),
        Case("float64, batch size 1, more features than dimensions", build(92, (1, 6), 32, f64)),
        Case("float64, as many features as dimensions (a square w)", build(93, (5, 8), 8, f64)),
        Case("float32, fewer features than dimensions", build(94, (4, 2, 12), 5, f32)),
        Case("float64, larger inputs (the norm term matters)", build(95, (3, 4), 7, f64, 1.5)),
    ]


def _prf(x: torch.Tensor, w: torch.Tensor, slip: str) -> torch.Tensor:
    proj = x @ w.T if slip != "transposed" else x @ w
    sq = (x * x).sum(dim=-1, keepdim=True)
    m = w.shape[0]
    if slip == "trig":
        return torch.exp(0.5 * sq) / math.sqrt(m) * torch.cat([proj.sin(), proj.cos()], dim=-1)
    shifts: dict[str, float | torch.Tensor] = {"no norm": 0.0, "full norm": sq}
    shift = shifts.get(slip, 0.5 * sq)
    norm = {"no sqrt m": 1.0, "over m": m}.get(slip, math.sqrt(m))
    return torch.exp(proj - shift) / norm


_PRF_SLIPS = (
    Slip("phi(x) . phi(y) averages m products: divide each feature by sqrt(m) (the dot product "
         "then divides by m)", partial(_prf, slip="no sqrt m")),
    Slip("divide each feature by sqrt(m), not m: the dot product of two features multiplies the "
         "two factors", partial(_prf, slip="over m")),
    Slip("E[exp(w . u)] = exp(|u|^2 / 2) with u = x + y: without a correction the estimate is "
         "exp(x . y) times exp(|x|^2 / 2 + |y|^2 / 2)", partial(_prf, slip="no norm")),
    Slip("|x + y|^2 / 2 = |x|^2 / 2 + x . y + |y|^2 / 2: each feature divides by exp(|x|^2 / 2), "
         "not exp(|x|^2)", partial(_prf, slip="full norm")),
    Slip("w holds the random directions as rows, shape (m, d): project with x @ w.T",
         partial(_prf, slip="transposed")),
    Slip("the features must be positive (exp of a projection); sin and cos give an unbiased "
         "estimate too, but of either sign", partial(_prf, slip="trig")),
)


# 6. online_softmax_update ----------------------------------------------------------------------


def _online_cases() -> list[Case]:
    def build(seed: int, shape: tuple[int, ...], b: int, dtype: torch.dtype,
              masked: float = 0.0, fresh: float = 0.0, dead: bool = False) -> Inputs:
        def inputs() -> dict[str, Any]:
            g = gen(seed)
            m = (3 * torch.randn(*shape, generator=g, dtype=f64)).to(dtype)
            l = (1 + 4 * torch.rand(*shape, generator=g, dtype=f64)).to(dtype)
            scores = (3 * torch.randn(*shape, b, generator=g, dtype=f64)).to(dtype)
            if masked:
                scores = scores.masked_fill(torch.rand(*shape, b, generator=g) < masked,
                                            float("-inf"))
            if fresh:  # rows that have seen nothing yet: m = -inf, l = 0
                start = torch.rand(*shape, generator=g) < fresh
                m = m.masked_fill(start, float("-inf"))
                l = l.masked_fill(start, 0.0)
            if dead:  # a fully masked block: row 0 fresh (the -inf guard), row 1 with history
                flat_m, flat_l, flat_s = m.view(-1), l.view(-1), scores.view(-1, b)
                flat_m[0], flat_l[0] = float("-inf"), 0.0
                flat_s[:2] = float("-inf")
            return {"m": m, "l": l, "scores": scores}
        return inputs

    return [
        Case("float32, batch 2, 3 rows, blocks of 4", build(51, (2, 3), 4, f32)),
        Case("float64, batch size 1", build(52, (1, 5), 6, f64)),
        Case("float64, the first block (m = -inf, l = 0)", build(53, (4,), 3, f64, fresh=1.0)),
        Case("float32, some masked scores (-inf)", build(54, (3, 4), 8, f32, masked=0.4)),
        Case("float64, masked scores and fresh rows", build(55, (2, 6), 5, f64, 0.5, 0.5)),
        Case("float32, fully masked blocks, on a fresh row and on a row with history",
             build(56, (2, 3), 4, f32, 0.3, 0.3, dead=True)),
    ]


def _online(m: torch.Tensor, l: torch.Tensor, scores: torch.Tensor,
            slip: str) -> tuple[torch.Tensor, torch.Tensor]:
    m_new = torch.maximum(m, scores.amax(dim=-1))
    safe = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
    if slip == "no guard":
        safe = m_new
    old = torch.exp(m - safe)
    if slip == "no rescale":
        old = torch.ones_like(old)
    if slip == "inverted":
        old = torch.exp(safe - m.clamp(min=-1e30))
    block = torch.exp(scores - safe[..., None]).sum(dim=-1)
    if slip == "block max":
        m_blk = scores.amax(dim=-1)
        block = torch.exp(scores - m_blk[..., None]).sum(dim=-1)
    return m_new, l * old + block


_ONLINE_SLIPS = (
    Slip("rescale the old sum when the maximum grows: l * exp(m - m_new)",
         partial(_online, slip="no rescale")),
    Slip("the old sum is relative to exp(m): multiply it by exp(m - m_new), which is at most 1",
         partial(_online, slip="inverted")),
    Slip("the new block's terms must be relative to the new running maximum m_new, not to the "
         "block's own maximum", partial(_online, slip="block max")),
    Slip("a row whose maximum is still -inf after the block gives exp(-inf - (-inf)) = NaN: "
         "subtract 0 instead of m_new there, so that it keeps m = -inf, l = 0",
         partial(_online, slip="no guard")),
)


# 7. query_tile_attention: keys and values stream past once ------------------------------------


def query_tile_attention(q: torch.Tensor, kv_blocks: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference: one query tile against a one-shot stream of key/value blocks.

    ``kv_blocks`` yields ``(k_block (..., b, d), v_block (..., b, d_v))`` in key order and can be
    read once (:func:`course_lib.exercises._calls.key_value_stream` builds it). Returns the output
    ``softmax(q k^T / sqrt(d)) v`` and each query row's log-sum-exp, in one pass (trusted side).
    """
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = q.new_full(q.shape[:-1], -math.inf)  # (..., T_q)
    l = q.new_zeros(q.shape[:-1])
    acc: torch.Tensor | None = None  # (..., T_q, d_v)
    for kb, vb in kv_blocks:
        s = (q @ kb.transpose(-2, -1)) * scale  # (..., T_q, b)
        m_new = torch.maximum(m, s.amax(dim=-1))
        p = torch.exp(s - m_new[..., None])
        correction = torch.exp(m - m_new)
        l = l * correction + p.sum(dim=-1)
        pv = p @ vb
        acc = pv if acc is None else acc * correction[..., None] + pv
        m = m_new
    assert acc is not None, "the stream held no block"
    return acc / l[..., None], m + torch.log(l)


def _stream(seed: int, batch: tuple[int, ...], n_q: int, n_k: int, d: int, d_v: int, b: int,
            dtype: torch.dtype, scale: float = 1.0) -> Inputs:
    """Queries, and the recipe of the key/value stream the call adapter draws block by block."""
    def inputs() -> dict[str, Any]:
        return {"q": randn(seed, *batch, n_q, d, dtype=dtype, scale=scale),
                "seed": pick(seed + 1, 0, 2 ** 40), "n_keys": n_k, "d_v": d_v,
                "block_size": b, "scale": scale}
    return inputs


def _tile_cases() -> list[Case]:
    return [
        Case("float32, batch 2, 2 heads, blocks of 4", _stream(61, (2, 2), 8, 16, 8, 5, 4, f32)),
        Case("float64, batch size 1, a short last block",
             _stream(64, (1,), 5, 11, 4, 3, 4, f64)),
        Case("float32, one block holds every key", _stream(67, (3,), 6, 7, 4, 4, 16, f32)),
        Case("float64, large scores (the running maximum matters)",
             _stream(70, (2,), 4, 12, 6, 2, 3, f64, 5.0)),
        Case("float32, blocks of one key", _stream(73, (1, 3), 3, 9, 8, 8, 1, f32)),
        Case("float64, large scores rising along the stream",
             _stream(74, (1,), 4, 40, 4, 3, 5, f64, 8.0)),
        Case("float64, 128 queries against 2048 keys in blocks of 32 (memory bound)",
             _stream(76, (1,), 128, 2048, 8, 8, 32, f64)),
    ]


#: The memory rule as the hardened grader enforces it: 32 queries against a stream of 2^20 keys
#: and values of width 16 in float64, in blocks of 4096. The stream holds 256 MiB in all, the
#: full score matrix 256 MiB, one block of scores 1 MiB; the budget, 64 MiB, holds neither all
#: the keys (128 MiB) nor all the scores, so only a single pass that keeps (m, l, acc) fits.
_TILE_PROBE = MemoryProbe("float64, 32 queries against a stream of 2^20 keys, under a memory "
                          "limit", _stream(77, (1,), 32, 1 << 20, 16, 16, 4096, f64),
                          budget_bytes=64 << 20, forbidden_bytes=32 * (1 << 20) * 8)


def _tile_bound(inputs: Mapping[str, Any]) -> int:
    """The statement's bound: twice the largest of one tile of scores and of one block."""
    q: torch.Tensor = inputs["q"]
    b, d_v = min(int(inputs["block_size"]), int(inputs["n_keys"])), int(inputs["d_v"])
    batch = q[..., 0, 0].numel()
    d = q.shape[-1]
    return 2 * batch * max(q.shape[-2] * max(b, d, d_v), b * max(d, d_v))


def _gathered(kv_blocks: Any) -> tuple[torch.Tensor, torch.Tensor]:
    ks, vs = zip(*kv_blocks)
    return torch.cat(ks, dim=-2), torch.cat(vs, dim=-2)


def _tile(q: torch.Tensor, kv_blocks: Any, slip: str) -> tuple[torch.Tensor, torch.Tensor]:
    k, v = _gathered(kv_blocks)
    scale = 1.0 / math.sqrt(q.shape[-1]) if slip != "no scale" else 1.0
    s = (q @ k.transpose(-2, -1)) * scale
    lse = torch.logsumexp(s, dim=-1)
    out = torch.softmax(s, dim=-1) @ v
    if slip == "max only":
        lse = s.amax(dim=-1)
    if slip == "log l":
        lse = lse - s.amax(dim=-1)
    if slip == "unnormalised":
        out = torch.exp(s - s.amax(-1, keepdim=True)) @ v
    return out, lse


def _tile_loop(q: torch.Tensor, kv_blocks: Any, slip: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Block by block, with one mistake in the accumulator."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    m = q.new_full(q.shape[:-1], -math.inf)
    l = q.new_zeros(q.shape[:-1])
    acc: Any = 0.0
    for kb, vb in kv_blocks:
        s = (q @ kb.transpose(-2, -1)) * scale
        m_new = torch.maximum(m, s.amax(dim=-1))
        p = torch.exp(s - m_new[..., None])
        correction = torch.exp(m - m_new)
        l = l * correction + p.sum(dim=-1)
        pv = p @ vb
        if slip == "acc not rescaled":
            acc = acc + pv
        elif slip == "last block only":
            acc = pv
        else:
            acc = acc * correction[..., None] + pv
        m = m_new
    return acc / l[..., None], m + torch.log(l)


_TILE_SLIPS = (
    Slip("scale the scores by 1 / sqrt(d) before the softmax", partial(_tile, slip="no scale")),
    Slip("the log-sum-exp is m + log(l): the running maximum plus the log of the running sum",
         partial(_tile, slip="max only")),
    Slip("the log-sum-exp is m + log(l), not log(l) alone: l is relative to exp(m)",
         partial(_tile, slip="log l")),
    Slip("divide the accumulated output by the running sum l at the end",
         partial(_tile, slip="unnormalised")),
    Slip("when the running maximum grows, the accumulator must be rescaled too, as the "
         "running sum is", partial(_tile_loop, slip="acc not rescaled")),
    Slip("the accumulator must keep what the earlier blocks contributed, not only the last "
         "block's", partial(_tile_loop, slip="last block only")),
)


# 8. sparsemax ----------------------------------------------------------------------------------


def _sparsemax_cases() -> list[Case]:
    def build(seed: int, shape: tuple[int, ...], dtype: torch.dtype, scale: float) -> Inputs:
        def inputs() -> dict[str, Any]:
            return {"z": randn(seed, *shape, dtype=dtype, scale=scale)}
        return inputs

    def ties() -> dict[str, Any]:
        z = torch.tensor([[1.0, 1.0, 0.2, -3.0], [0.5, 0.5, 0.5, 0.5], [2.0, 0.0, 2.0, 0.0]],
                         dtype=f64)
        return {"z": z}

    return [
        Case("float32, batch 2, 3 rows of 7", build(81, (2, 3, 7), f32, 1.0)),
        Case("float64, batch size 1", build(82, (1, 10), f64, 0.3)),
        Case("float64, spread scores (few nonzero)", build(83, (4, 12), f64, 4.0)),
        Case("float32, close scores (many nonzero)", build(84, (5, 6), f32, 0.05)),
        Case("float64, ties", ties),
        Case("float32, one score per row", build(85, (3, 1), f32, 1.0)),
    ]


def _sparsemax(z: torch.Tensor, slip: str) -> torch.Tensor:
    zs = torch.sort(z, dim=-1, descending=True).values
    cs = torch.cumsum(zs, dim=-1) - (0.0 if slip == "no minus one" else 1.0)
    r = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype)
    support = (r * zs > cs).sum(dim=-1, keepdim=True).clamp(min=1)
    if slip == "full support":
        support = torch.full_like(support, z.shape[-1])
    tau = cs.gather(-1, support - 1) / support.to(z.dtype)
    return torch.clamp(z - tau, min=0.0)


_SPARSEMAX_SLIPS = (
    Slip("sparsemax is not softmax: it gives exact zeros to scores below the threshold tau",
         lambda z: torch.softmax(z, dim=-1)),
    Slip("tau = (sum of the k largest scores - 1) / k: the weights must sum to one",
         partial(_sparsemax, slip="no minus one")),
    Slip("the support is the k largest scores with 1 + k z_(k) > sum of the k largest, not every "
         "score", partial(_sparsemax, slip="full support")),
)


# Registry --------------------------------------------------------------------------------------

EXERCISES = {ex.id: ex for ex in [
    Exercise(id="efficient_attention.sliding_window_mask", reference=sliding_window_mask,
             cases=_window_cases, slips=_WINDOW_SLIPS,
             forbidden=(sparse_attention.sliding_window, sparse_attention.dilated_window,
                        sparse_attention.dense_mask)),
    Exercise(id="efficient_attention.layers_to_connect", reference=layers_to_connect,
             cases=_layers_cases, slips=_LAYERS_SLIPS,
             forbidden=(sparse_attention.layers_to_connect, sparse_attention.receptive_field)),
    Exercise(id="efficient_attention.bigbird_mask", reference=bigbird_mask,
             cases=_bigbird_cases, slips=_BIGBIRD_SLIPS,
             forbidden=(sparse_attention.global_tokens, sparse_attention.random_blocks,
                        sparse_attention.union, sparse_attention.block_layout)),
    Exercise(id="efficient_attention.causal_linear_attention",
             reference=linear_attention.causal_linear_attention, cases=_linear_cases,
             slips=_LINEAR_SLIPS, largest_tensor=_linear_bound, memory_probe=_LINEAR_PROBE,
             forbidden=(linear_attention.kernel_attention, linear_attention.linear_attention,
                        linear_attention.linear_attention_step,
                        linear_attention.recurrent_linear_attention,
                        linear_attention.elu_feature_map, linear_attention._divide)),
    Exercise(id="efficient_attention.positive_random_features",
             reference=linear_attention.positive_random_features, cases=_prf_cases,
             slips=_PRF_SLIPS, forbidden=(linear_attention.trigonometric_random_features,)),
    Exercise(id="efficient_attention.online_softmax_update",
             reference=tiled_attention.online_softmax_update, cases=_online_cases,
             slips=_ONLINE_SLIPS, forbidden=(tiled_attention.online_softmax,)),
    Exercise(id="efficient_attention.query_tile_attention", reference=query_tile_attention,
             cases=_tile_cases, slips=_TILE_SLIPS, largest_tensor=_tile_bound,
             memory_probe=_TILE_PROBE, call=key_value_stream,
             forbidden=(tiled_attention.tiled_attention_forward, tiled_attention.tiled_attention,
                        tiled_attention.TiledAttentionFunction, tiled_attention.naive_attention,
                        attention.scaled_dot_product_attention, attention.masked_softmax,
                        sparse_attention.block_sparse_attention, entmax.entmax_attention)),
    Exercise(id="efficient_attention.sparsemax", reference=entmax.sparsemax,
             cases=_sparsemax_cases, slips=_SPARSEMAX_SLIPS,
             forbidden=(entmax.SparsemaxFunction, entmax._sparsemax_forward, entmax.entmax,
                        entmax.entmax_bisect, entmax.EntmaxBisectFunction, entmax._bisect_forward,
                        entmax.entmax15, entmax.entmax_attention)),
]}
