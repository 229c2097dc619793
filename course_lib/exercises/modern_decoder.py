"""Graded exercises of chapter 7, "The modern decoder": references, hidden cases, slips.

Every exercise is solvable with torch (and plain Python) alone. The reference-call guard fails a
solution that calls course_lib's implementation of any exercise of this chapter: the rotations
and the weight permutation of :mod:`course_lib.rope` (and chapter 2's frequencies),
``repeat_kv``, the masks, the attention and the cache design of :mod:`course_lib.llama`, the
routing and balancing loss of :mod:`course_lib.moe`, and the verification step and the speed-up
of :mod:`course_lib.speculative`.

Case builders use torch, plain Python and :mod:`course_lib.exercises._common` only; their inputs
are plain tensors and numbers. Slips (:class:`~course_lib.grading.Slip`) are the common mistakes,
each with the message its author reads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

from course_lib import llama, moe, positional, rope, speculative
from course_lib.exercises._common import Inputs, f32, f64, gen, pick, randn
from course_lib.grading import Case, Exercise, Question, Slip

# 1. apply_rotary: the paper's (interleaved) rotation of q or k --------------------------------


def apply_rotary(x: torch.Tensor, positions: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
    """Reference: :func:`course_lib.rope.apply_rope` with the interleaved pairing."""
    return rope.apply_rope(x, positions, theta, pairing="interleaved")


def _rotary_cases() -> list[Case]:
    def draw(seed: int, shape: tuple[int, ...], dtype: torch.dtype, start: tuple[int, int],
             theta: float) -> Inputs:
        def inputs() -> dict[str, Any]:
            first = pick(seed + 100, *start)
            return {"x": randn(seed, *shape, dtype=dtype), "theta": theta,
                    "positions": torch.arange(first, first + shape[-2])}
        return inputs

    return [
        Case("float32, (B, h, T, d) queries from position 0", draw(1, (2, 3, 7, 8), f32, (0, 0),
                                                                   10000.0)),
        Case("float64, a cache offset: positions start later", draw(2, (2, 2, 5, 16), f64,
                                                                    (20, 90), 10000.0)),
        Case("float64, batch size 1, Llama 3's theta", draw(3, (1, 4, 6, 12), f64, (0, 40),
                                                            500000.0)),
        Case("float32, one pair of features (d = 2)", draw(4, (3, 9, 2), f32, (0, 5), 100.0)),
        Case("float64, far positions", draw(5, (1, 2, 4, 8), f64, (1000, 5000), 10000.0)),
        Case("float32, far positions: angles computed in float64", draw(6, (2, 2, 4, 8), f32,
                                                                         (20000, 60000), 10000.0)),
    ]


def _rotary_slip(kind: str) -> Callable[..., torch.Tensor]:
    def rotate(x: torch.Tensor, positions: torch.Tensor, theta: float = 10000.0) -> torch.Tensor:
        d = x.shape[-1]
        i = torch.arange(0, d, 2, dtype=torch.float64)
        w = theta ** (-(i / 2 if kind == "theta" else i) / d)
        angle = positions.double()[:, None] * w  # (T, d/2)
        if kind == "direction":
            angle = -angle
        if kind == "from_zero":
            angle = torch.arange(x.shape[-2], dtype=torch.float64)[:, None] * w
        if kind == "float32":
            angle = positions.float()[:, None] * w.float()
        cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
        if kind == "half":
            a, b = x[..., : d // 2], x[..., d // 2:]
            return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    return rotate


_ROTARY_SLIPS = (
    Slip("the statement pairs neighbouring features (2i, 2i+1), as the paper does; you paired "
         "feature i with feature i + d/2 (Hugging Face's rotate_half layout)",
         _rotary_slip("half")),
    Slip("the frequency of pair i is theta^(-2i/d): check where i and the factor 2 go in the "
         "exponent", _rotary_slip("theta")),
    Slip("the rotation turns the wrong way: (a, b) -> (a cos - b sin, a sin + b cos)",
         _rotary_slip("direction")),
    Slip("rotate row t by its position positions[t], not by t (a cache offsets the positions)",
         _rotary_slip("from_zero")),
    Slip("compute the angles in float64: at positions in the tens of thousands a float32 angle "
         "is off by about a thousandth of a radian", _rotary_slip("float32")),
)


# 2. to_half_split: an interleaved checkpoint's W_q / W_k for half-split code ------------------


def to_half_split(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    """Reference: :func:`course_lib.rope.interleaved_to_half_weight`."""
    return rope.interleaved_to_half_weight(w, n_heads)


def _half_split_cases() -> list[Case]:
    def draw(seed: int, heads: tuple[int, int], d_head: tuple[int, int], d_in: tuple[int, int],
             dtype: torch.dtype, layers: tuple[int, ...] = ()) -> Inputs:
        def inputs() -> dict[str, Any]:
            h = pick(seed + 100, *heads)
            dh = 2 * pick(seed + 101, *d_head)
            return {"w": randn(seed, *layers, h * dh, pick(seed + 102, *d_in), dtype=dtype),
                    "n_heads": h}
        return inputs

    return [
        Case("float32, 4 heads of width 8", draw(1, (4, 4), (4, 4), (12, 20), f32)),
        Case("float64, several heads, wider", draw(2, (2, 6), (3, 8), (5, 30), f64)),
        Case("float64, one head (multi-query keys)", draw(3, (1, 1), (2, 16), (4, 10), f64)),
        Case("float32, heads of width 2: one pair each", draw(4, (3, 8), (1, 1), (3, 9), f32)),
        Case("float64, many heads, a projection from a narrower input", draw(5, (8, 12), (2, 4),
                                                                             (2, 3), f64)),
        Case("float32, a stack of 3 layers' weights", draw(6, (2, 4), (2, 6), (6, 10), f32, (3,))),
        Case("float64, a stack of one layer's weights: batch size 1", draw(7, (2, 4), (2, 4),
                                                                          (5, 8), f64, (1,))),
    ]


def _half_split_slip(kind: str) -> Callable[..., torch.Tensor]:
    def permute(w: torch.Tensor, n_heads: int) -> torch.Tensor:
        rows = w.shape[-2] // n_heads if kind != "global" else w.shape[-2]
        ev_od = torch.cat((torch.arange(0, rows, 2), torch.arange(1, rows, 2)))
        perm = ev_od if kind != "inverse" else torch.argsort(ev_od)
        return w.reshape(-1, rows, w.shape[-1])[:, perm].reshape(w.shape)
    return permute


_HALF_SPLIT_SLIPS = (
    Slip("the rows of the half-split weight are those of the interleaved one reordered the other "
         "way round: check which new row each old row (2i and 2i + 1) must land on",
         _half_split_slip("inverse")),
    Slip("each head is rotated on its own features: reorder the rows within each head's block of "
         "d_head rows, not across the whole matrix", _half_split_slip("global")),
)


# 3. grouped_query_attention: GQA over a cache whose positions are given ----------------------


def grouped_query_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                            q_pos: torch.Tensor, k_pos: torch.Tensor,
                            window: int | None = None) -> torch.Tensor:
    """Reference: query head ``j`` reads key/value head ``j // (h / g)``; a query at position
    ``m`` sees the keys at positions ``n <= m`` (and ``m - n < window``)."""
    rep = q.shape[1] // k.shape[1]
    k, v = llama.repeat_kv(k, rep), llama.repeat_kv(v, rep)
    mask = llama.attention_mask(q_pos, k_pos, window)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def _gqa_cases() -> list[Case]:
    def draw(seed: int, b: int, h: int, g: int, d: int, dtype: torch.dtype, kind: str) -> Inputs:
        def inputs() -> dict[str, Any]:
            n = pick(seed + 100, 6, 12)  # positions seen so far
            window = None
            if kind == "prefill":
                q_pos = k_pos = torch.arange(n)
            elif kind == "prefill_window":
                q_pos = k_pos = torch.arange(n)
                window = pick(seed + 101, 2, 4)
            elif kind == "decode":
                q_pos, k_pos = torch.tensor([n - 1]), torch.arange(n)
            elif kind == "rolling":  # Mistral's buffer: position p sits in slot p % window
                window = pick(seed + 101, 3, 5)
                kept = torch.arange(n - window, n)
                k_pos = kept[torch.argsort(kept % window)]
                q_pos = torch.tensor([n - 1])
            else:  # a chunk of 3 new tokens written into a buffer's slots, in no order
                window = pick(seed + 101, 3, 4)
                kept = torch.arange(n - 3 - window, n)
                k_pos = kept[torch.randperm(len(kept), generator=gen(seed + 102))]
                q_pos = torch.arange(n - 3, n)
            return {"q": randn(seed, b, h, len(q_pos), d, dtype=dtype),
                    "k": randn(seed + 1, b, g, len(k_pos), d, dtype=dtype, scale=1.5),
                    "v": randn(seed + 2, b, g, len(k_pos), d, dtype=dtype),
                    "q_pos": q_pos, "k_pos": k_pos, "window": window}
        return inputs

    return [
        Case("float32, 4 query heads in 2 groups, a whole sequence", draw(10, 2, 4, 2, 8, f32,
                                                                          "prefill")),
        Case("float64, 6 query heads in 3 groups, a sliding window", draw(20, 2, 6, 3, 4, f64,
                                                                          "prefill_window")),
        Case("float64, batch size 1, multi-query, one new token", draw(30, 1, 4, 1, 8, f64,
                                                                       "decode")),
        Case("float32, a rolling buffer: keys out of order", draw(40, 2, 4, 2, 6, f32,
                                                                  "rolling")),
        Case("float64, 8 query heads in 2 groups, a chunk among cached keys in no order",
             draw(50, 1, 8, 2, 4, f64, "chunk")),
        Case("float64, as many key/value heads as query heads, a rolling buffer",
             draw(60, 2, 3, 3, 4, f64, "rolling")),
    ]


def _gqa_slip(kind: str) -> Callable[..., torch.Tensor]:
    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos: torch.Tensor,
               k_pos: torch.Tensor, window: int | None = None) -> torch.Tensor:
        h, g = q.shape[1], k.shape[1]
        if kind == "tile":
            k, v = k.repeat(1, h // g, 1, 1), v.repeat(1, h // g, 1, 1)
        else:
            k, v = k.repeat_interleave(h // g, 1), v.repeat_interleave(h // g, 1)
        s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if kind == "index":  # causal by row and column index, as if positions were 0..T-1
            allowed = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril(
                k.shape[2] - q.shape[2])
        else:
            allowed = k_pos[None, :] <= q_pos[:, None]
            if window is not None and kind != "no_window":
                shift = 1 if kind == "window_plus_one" else 0
                allowed &= k_pos[None, :] >= q_pos[:, None] - window + 1 - shift
        return s.masked_fill(~allowed, float("-inf")).softmax(-1) @ v
    return attend


_GQA_SLIPS = (
    Slip("the groups are in the wrong order: key/value head j serves the consecutive query heads "
         "j * (h/g) ... (j+1) * (h/g) - 1 (repeat each head, do not tile the whole set)",
         _gqa_slip("tile")),
    Slip("with a window, a query at position m sees the keys at m - window + 1 .. m only",
         _gqa_slip("no_window")),
    Slip("which key a query may see depends on the positions q_pos and k_pos, not on the row "
         "and column indices: a rolling cache keeps its keys out of order", _gqa_slip("index")),
    Slip("the window holds `window` positions, the query's own included: m - n < window",
         _gqa_slip("window_plus_one")),
)


# 4. kv_cache_design: key/value heads and window under a memory budget -------------------------


def kv_cache_design(budget_bytes: int, context: int, n_layers: int, n_heads: int, head_dim: int,
                    batch_size: int, bytes_per_value: int) -> tuple[int, int | None] | None:
    """Reference: :func:`course_lib.llama.kv_cache_design`."""
    return llama.kv_cache_design(budget_bytes, context, n_layers, n_heads, head_dim, batch_size,
                                 bytes_per_value)


_DESIGN_KEYS = ("None exactly when no design fits",
                "a pair (n_kv_heads, window) of ints, n_kv_heads dividing n_heads and window "
                "None or 1 <= window < context",
                "the cache after `context` tokens fits the budget",
                "with a window, every token of the context can reach the last position",
                "full attention whenever some number of key/value heads fits it",
                "the most key/value heads the rule allows",
                "the longest window at those key/value heads")


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if hasattr(value, "shape") and getattr(value, "shape", None) == () and \
            getattr(value, "dtype", None) is not None and value.dtype.kind in "iu":
        return int(value)
    return None


def design_verdicts(inputs: Mapping[str, Any], design: Any) -> dict[str, bool]:
    """``Exercise.postprocess`` of ``kv_cache_design``: the design checked against the rules.

    The reference's design meets every rule; a student's is judged by the same rules (the
    budget, the reach, then the order of preference), not compared with one memorised answer.

    Example:
        >>> case = {"budget_bytes": 2**25, "context": 8192, "n_layers": 32, "n_heads": 32,
        ...         "head_dim": 128, "batch_size": 1, "bytes_per_value": 2}
        >>> all(design_verdicts(case, [4, 512]).values())
        True
        >>> design_verdicts(case, [4, 1024])["the cache after `context` tokens fits the budget"]
        False
    """
    best = llama.kv_cache_design(**inputs)
    verdict = dict.fromkeys(_DESIGN_KEYS, True)
    if design is None:
        verdict[_DESIGN_KEYS[0]] = best is None
        return verdict
    verdict[_DESIGN_KEYS[0]] = best is not None
    n, layers = inputs["context"], inputs["n_layers"]
    ok = isinstance(design, list) and len(design) == 2
    g = _as_int(design[0]) if ok else None
    w = design[1] if ok else None
    w = None if w is None else _as_int(w)
    ok = (ok and g is not None and 1 <= g <= inputs["n_heads"] and inputs["n_heads"] % g == 0
          and (design[1] is None or (w is not None and 1 <= w < n)))
    if not ok or g is None:
        return dict.fromkeys(_DESIGN_KEYS, False) | {_DESIGN_KEYS[0]: best is not None}
    per_head = (2 * layers * inputs["head_dim"] * inputs["batch_size"]
                * inputs["bytes_per_value"])
    verdict[_DESIGN_KEYS[2]] = per_head * g * (n if w is None else w) <= inputs["budget_bytes"]
    verdict[_DESIGN_KEYS[3]] = w is None or layers * (w - 1) >= n - 1
    if best is None:  # a design where none fits: the rules it breaks, no order of preference
        return verdict
    best_g, best_w = best
    verdict[_DESIGN_KEYS[4]] = (w is None) == (best_w is None)
    verdict[_DESIGN_KEYS[5]] = g >= best_g if verdict[_DESIGN_KEYS[4]] else True
    verdict[_DESIGN_KEYS[6]] = (w is None or best_w is None or g != best_g or w >= best_w)
    return verdict


def _reach_threshold(convention: str, context: int, layers: int) -> int:
    """The least window that a reach convention accepts (``correct``: L (W - 1) >= n - 1)."""
    span, extra = {"correct": (context - 1, 1), "mistral": (context, 0),
                   "window_back": (context - 1, 0), "two_short": (context - 1, 2),
                   "past_end": (context, 1), "one_short": (context - 2, 1)}[convention]
    return extra + -(-span // layers)


def _design_cases() -> list[Case]:
    def shape(seed: int) -> tuple[int, int, int, int, int, int]:
        layers = pick(seed, 8, 40)
        heads = [8, 12, 16, 32][pick(seed + 1, 0, 3)]
        head_dim = [64, 128][pick(seed + 2, 0, 1)]
        batch, b = pick(seed + 4, 1, 4), [1, 2][pick(seed + 5, 0, 1)]
        per_head = 2 * layers * head_dim * batch * b  # bytes per position and kv head
        return layers, heads, head_dim, batch, b, per_head

    def draw(seed: int, regime: str) -> Inputs:
        def inputs() -> dict[str, Any]:
            layers, heads, head_dim, batch, b, per_head = shape(seed)
            context = 2 ** pick(seed + 3, 10, 15)
            divisors = [g for g in range(1, heads + 1) if heads % g == 0]
            shortest = _reach_threshold("correct", context, layers)
            if regime == "full_all":
                budget = per_head * heads * context + pick(seed + 6, 0, per_head * context)
            elif regime == "full_some":
                i = pick(seed + 6, 0, len(divisors) - 2)
                g, nxt = divisors[i], divisors[i + 1]
                budget = per_head * g * context + pick(seed + 7, 0, per_head * (nxt - g)
                                                       * context - 1)
            elif regime == "exact":
                budget = per_head * divisors[pick(seed + 6, 0, len(divisors) - 1)] * context
            elif regime == "window":
                g = divisors[pick(seed + 6, 0, len(divisors) - 1)]
                w = pick(seed + 7, shortest, context - 1)
                budget = min(per_head * g * w + pick(seed + 8, 0, per_head * g - 1),
                             per_head * context - 1)
            else:  # nothing fits, far from the boundary: at most half the shortest window
                budget = pick(seed + 6, 1, per_head * (shortest // 2 - 1))
            return {"budget_bytes": budget, "context": context, "n_layers": layers,
                    "n_heads": heads, "head_dim": head_dim, "batch_size": batch,
                    "bytes_per_value": b}
        return inputs

    def boundary(seed: int, rest: tuple[int, int], short: bool) -> Inputs:
        """The budget at the reach's boundary: the context is ``L m + r`` (r drawn from
        ``rest``), and at some g the budget holds exactly the shortest reaching window
        (``short``: one position less)."""
        def inputs() -> dict[str, Any]:
            layers, heads, head_dim, batch, b, per_head = shape(seed)
            r = pick(seed + 3, *(min(rest[0], layers), min(rest[1], layers)))
            context = layers * pick(seed + 6, 1024 // layers, 32768 // layers) + r
            w = _reach_threshold("correct", context, layers) - (1 if short else 0)
            fit = [g for g in range(1, heads + 1) if heads % g == 0 and g * (w + 1) < context]
            g = fit[pick(seed + 7, 0, min(2, len(fit) - 1))]
            budget = per_head * g * w + pick(seed + 8, 0, per_head * g - 1)
            return {"budget_bytes": budget, "context": context, "n_layers": layers,
                    "n_heads": heads, "head_dim": head_dim, "batch_size": batch,
                    "bytes_per_value": b}
        return inputs

    return [
        Case("full attention at every head fits", draw(1, "full_all")),
        Case("full attention fits at fewer key/value heads", draw(10, "full_some")),
        Case("full attention fits at fewer key/value heads, another configuration",
             draw(20, "full_some")),
        Case("a budget met exactly", draw(30, "exact")),
        Case("only a sliding window fits", draw(40, "window")),
        Case("only a sliding window fits, another configuration", draw(50, "window")),
        Case("only a sliding window fits, a third configuration", draw(60, "window")),
        Case("nothing fits", draw(70, "none")),
        Case("the budget holds the shortest window that reaches, and no more",
             boundary(80, (1, 1), short=False)),
        Case("the budget holds the shortest window that reaches, another context",
             boundary(90, (2, 10 ** 6), short=False)),
        Case("the budget holds one position less than the shortest window that reaches",
             boundary(100, (1, 1), short=True)),
        Case("one position less than the shortest window that reaches, another context",
             boundary(110, (2, 2), short=True)),
        Case("one position less than the shortest window that reaches, a third context",
             boundary(120, (3, 10 ** 6), short=True)),
    ]


def _design_slip(kind: str) -> Callable[..., tuple[int, int | None] | None]:
    def design(budget_bytes: int, context: int, n_layers: int, n_heads: int, head_dim: int,
               batch_size: int, bytes_per_value: int) -> tuple[int, int | None] | None:
        per = (1 if kind == "one_tensor" else 2) * n_layers * head_dim * batch_size * \
            bytes_per_value
        convention = kind if kind in ("mistral", "window_back", "two_short", "past_end",
                                      "one_short") else "correct"
        shortest = _reach_threshold(convention, context, n_layers)
        divisors = sorted((g for g in range(1, n_heads + 1) if n_heads % g == 0),
                          reverse=True)
        if kind == "window_first":
            for g in divisors:
                longest = budget_bytes // (per * g)
                if longest >= context:
                    return g, None
                if longest >= shortest:
                    return g, longest
            return None
        for g in divisors:
            if per * g * context <= budget_bytes:
                return g, None
        for g in divisors:
            longest = min(budget_bytes // (per * g), context - 1)
            if longest >= (1 if kind == "no_reach" else shortest):
                return g, shortest if kind == "shortest" else longest
        return None
    return design


_DESIGN_SLIPS = (
    Slip("the cache holds a key and a value per position, head and layer: two tensors",
         _design_slip("one_tensor")),
    Slip("at the most key/value heads, take the longest window the budget allows, not the "
         "shortest that reaches", _design_slip("shortest")),
    Slip("full attention comes first, whenever any number of key/value heads fits it; only "
         "then trade it for a window", _design_slip("window_first")),
    Slip("your reach rule asks for one position too many: rule 2 is about the tokens of the "
         "context, and the first of them is not `context` positions before the last",
         _design_slip("past_end")),
    Slip("your reach rule asks for a longer window than needed: a query sees itself and the "
         "W - 1 positions before it, so count how far back one layer reaches once more",
         _design_slip("two_short")),
    Slip("your reach rule lets the first token of the context miss the last position: count "
         "how far before the last position it lies", _design_slip("one_short")),
    Slip("that is the Mistral paper's convention (a window of positions i - W to i); here a "
         "query sees itself and only the W - 1 positions before it", _design_slip("mistral")),
    Slip("one layer's window reaches back W - 1 positions, not W: the query's own position "
         "is one of the W", _design_slip("window_back")),
    Slip("a window must still let every token of the context reach the last position through "
         "the layers", _design_slip("no_reach")),
)


# 5. moe_route: find and fix the bug of a given router ----------------------------------------


def moe_route(router_logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor,
                                                             torch.Tensor]:
    """Reference: renormalised top-k gates, their experts, and the balancing loss (:mod:`moe`)."""
    weights, experts = moe.route(router_logits, k)
    return weights, experts, moe.load_balancing_loss(router_logits, k)


def _route_cases() -> list[Case]:
    def draw(seed: int, n: int, e: int, k: int, dtype: torch.dtype, scale: float = 1.0) -> Inputs:
        def inputs() -> dict[str, Any]:
            return {"router_logits": randn(seed, n, e, dtype=dtype, scale=scale), "k": k}
        return inputs

    return [
        Case("float32, 8 experts, top-2 (Mixtral)", draw(1, 12, 8, 2, f32)),
        Case("float64, 4 experts, top-1 (Switch)", draw(2, 10, 4, 1, f64)),
        Case("float64, one token, top-3", draw(3, 1, 6, 3, f64)),
        Case("float32, confident router (large logits)", draw(4, 16, 4, 2, f32, 4.0)),
        Case("float64, many tokens, 16 experts, top-4", draw(5, 40, 16, 4, f64)),
    ]


def given_router(router_logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor,
                                                              torch.Tensor]:
    """The router the statement gives, with its bug (a slip: never a reference)."""
    top_logits, experts = router_logits.topk(k, dim=-1)
    weights = top_logits.softmax(dim=-1)
    n, e = router_logits.shape
    gates = torch.zeros_like(router_logits).scatter(1, experts, weights)
    f = F.one_hot(experts, e).sum(dim=(0, 1)).to(router_logits.dtype) / n
    return weights, experts, e * (f * gates.mean(dim=0)).sum()


def _route_slip(kind: str) -> Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    def route(router_logits: torch.Tensor,
              k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        probs = router_logits.softmax(-1)
        top, experts = probs.topk(k, -1)
        weights = top if kind == "raw" else top / top.sum(-1, keepdim=True)
        n, e = router_logits.shape
        chosen = experts if kind != "top1" else experts[:, :1]
        f = torch.zeros(e, dtype=probs.dtype).scatter_add_(
            0, chosen.flatten(), torch.ones(chosen.numel(), dtype=probs.dtype)) / n
        loss = e * (f * probs.mean(0)).sum()
        return weights, experts, loss
    return route


_ROUTE_SLIPS = (
    Slip("the loss is still the given code's: on a small case, which logits does its gradient "
         "reach? P_e must give a gradient to an expert that a token did not choose",
         given_router),
    Slip("the gates were right in the given code: a token's k gates are its router "
         "probabilities renormalised to sum to one", _route_slip("raw")),
    Slip("f_e counts every one of a token's k choices, not only its first", _route_slip("top1")),
)


# 6. speculative_accept: the accept/resample step ----------------------------------------------


def speculative_accept(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor,
                       u: torch.Tensor) -> tuple[int, torch.Tensor]:
    """Reference: :func:`course_lib.speculative.accept_step`."""
    return speculative.accept_step(p, q, drafts, u)


def _accept_cases() -> list[Case]:
    def draw(seed: int, k: int, v: int, dtype: torch.dtype, kind: str = "random") -> Inputs:
        def inputs() -> dict[str, Any]:
            p = randn(seed, k + 1, v, dtype=dtype, scale=1.5).softmax(-1)
            q = randn(seed + 1, k, v, dtype=dtype, scale=1.5).softmax(-1)
            if kind == "same":
                q = p[:k].clone()
            drafts = torch.multinomial(q, 1, generator=gen(seed + 2)).flatten() if k else \
                torch.zeros(0, dtype=torch.long)
            u = torch.rand(k, generator=gen(seed + 3), dtype=dtype)
            if kind == "reject":
                u = torch.full((k,), 0.999, dtype=dtype)
            return {"p": p, "q": q, "drafts": drafts, "u": u}
        return inputs

    return [
        Case("float32, 4 drafts over 6 tokens", draw(1, 4, 6, f32)),
        Case("float64, 3 drafts over 5 tokens", draw(10, 3, 5, f64)),
        Case("float64, 5 drafts, draws close to one: rejections", draw(20, 5, 4, f64, "reject")),
        Case("float32, the draft equals the target: all accepted", draw(30, 3, 7, f32, "same")),
        Case("float64, no draft: the bonus token only", draw(40, 0, 5, f64)),
        Case("float64, 2 drafts over 3 tokens", draw(50, 2, 3, f64)),
        Case("float64, 6 drafts over 8 tokens", draw(60, 6, 8, f64)),
    ]


def _accept_slip(kind: str) -> Callable[..., tuple[int, torch.Tensor]]:
    def accept(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor,
               u: torch.Tensor) -> tuple[int, torch.Tensor]:
        k = drafts.shape[0]
        for i in range(k):
            x = int(drafts[i])
            ratio = q[i, x] / p[i, x] if kind == "q_over_p" else p[i, x] / q[i, x]
            if u[i] >= ratio:
                if kind == "resample_p":
                    return i, p[i]
                residual = (q[i] - p[i] if kind == "q_minus_p" else p[i] - q[i]).clamp(min=0)
                if kind == "unnormalised":
                    return i, residual
                return i, residual / residual.sum()
        return k, p[k]
    return accept


_ACCEPT_SLIPS = (
    Slip("accept draft x with probability min(1, p(x) / q(x)), target over draft",
         _accept_slip("q_over_p")),
    Slip("after a rejection draw from the residual max(0, p - q), not from p itself",
         _accept_slip("resample_p")),
    Slip("the residual is max(0, p - q): the target's probability minus the draft's",
         _accept_slip("q_minus_p")),
    Slip("normalise the residual max(0, p - q) to sum to one", _accept_slip("unnormalised")),
)


# 7. speculative_speedup: tokens per round and the speed-up, derived ---------------------------


def speculative_speedup(alpha: float, k: int, cost_ratio: float) -> tuple[float, float]:
    """Reference: :func:`course_lib.speculative.expected_tokens_per_round` and
    :func:`course_lib.speculative.expected_speedup`."""
    return (speculative.expected_tokens_per_round(alpha, k),
            speculative.expected_speedup(alpha, k, cost_ratio))


def _speedup_cases() -> list[Case]:
    def draw(seed: int, alpha: str, ks: tuple[int, int], cost: str) -> Inputs:
        def inputs() -> dict[str, Any]:
            a = {"random": 0.05 + 0.9 * float(torch.rand(1, generator=gen(seed), dtype=f64)),
                 "one": 1.0, "zero": 0.0}[alpha]
            c = {"random": 0.3 * float(torch.rand(1, generator=gen(seed + 1), dtype=f64)),
                 "free": 0.0}[cost]
            return {"alpha": a, "k": pick(seed + 2, *ks), "cost_ratio": c}
        return inputs

    return [
        Case("a typical draft", draw(1, "random", (2, 8), "random")),
        Case("another draft and round length", draw(2, "random", (1, 12), "random")),
        Case("a free draft", draw(3, "random", (3, 6), "free")),
        Case("a draft the target always accepts", draw(4, "one", (1, 8), "random")),
        Case("a draft the target never accepts", draw(5, "zero", (1, 8), "random")),
        Case("one draft per round", draw(6, "random", (1, 1), "random")),
    ]


def _speedup_slip(kind: str) -> Callable[..., tuple[float, float]]:
    def speedup(alpha: float, k: int, cost_ratio: float) -> tuple[float, float]:
        if kind == "no_bonus":
            tokens = float(sum(alpha ** i for i in range(1, k + 1)))
        elif kind == "independent":
            tokens = k * alpha + 1
        else:
            tokens = float(sum(alpha ** i for i in range(k + 1)))
        cost = k * cost_ratio if kind == "no_target" else k * cost_ratio + 1
        if kind == "bonus_draft":
            cost = (k + 1) * cost_ratio + 1
        return tokens, tokens / cost if cost > 0 else math.inf
    return speedup


_SPEEDUP_SLIPS = (
    Slip("a round always emits one token of the target's besides the accepted drafts: the "
         "residual's after a rejection, the bonus token when all k were accepted",
         _speedup_slip("no_bonus")),
    Slip("the round ends at the first rejection: draft i counts only if drafts 1..i were all "
         "accepted", _speedup_slip("independent")),
    Slip("a round costs the k draft calls and one target call", _speedup_slip("no_target")),
    Slip("the draft is called k times per round, not k + 1", _speedup_slip("bonus_draft")),
)


# 8. ladder_prediction -------------------------------------------------------------------------


_LADDER_PREDICTION = Question(
    id="modern_decoder.ladder_prediction", choices="abcd",
    hint=("divide the learned-position rung's gap after the equal-time runs by the 600-step "
          "gap: the two validation curves of section 8 give both"))


EXERCISES = {ex.id: ex for ex in [
    Exercise(id="modern_decoder.apply_rotary", reference=apply_rotary, cases=_rotary_cases,
             slips=_ROTARY_SLIPS,
             forbidden=(rope.apply_rope, rope.rope_angles, rope.inv_frequencies, rope.rotate_half,
                        rope.rope_scores, positional.frequencies, positional.sinusoidal_encoding)),
    Exercise(id="modern_decoder.to_half_split", reference=to_half_split,
             cases=_half_split_cases, slips=_HALF_SPLIT_SLIPS,
             forbidden=(rope.interleaved_to_half, rope.interleaved_to_half_weight)),
    Exercise(id="modern_decoder.grouped_query_attention", reference=grouped_query_attention,
             cases=_gqa_cases, slips=_GQA_SLIPS,
             forbidden=(llama.repeat_kv, llama.attention_mask, llama.LlamaAttention)),
    Exercise(id="modern_decoder.kv_cache_design", reference=kv_cache_design,
             cases=_design_cases, slips=_DESIGN_SLIPS, postprocess=design_verdicts,
             forbidden=(llama.kv_cache_design, llama.kv_cache_bytes)),
    Exercise(id="modern_decoder.moe_route", reference=moe_route, cases=_route_cases,
             slips=_ROUTE_SLIPS,
             forbidden=(moe.route, moe.load_balancing_loss, moe.expert_counts,
                        moe.SparseMoeBlock)),
    Exercise(id="modern_decoder.speculative_accept", reference=speculative_accept,
             cases=_accept_cases, slips=_ACCEPT_SLIPS,
             forbidden=(speculative.accept_step, speculative.speculative_generate,
                        speculative.acceptance_probability)),
    Exercise(id="modern_decoder.speculative_speedup", reference=speculative_speedup,
             cases=_speedup_cases, slips=_SPEEDUP_SLIPS,
             forbidden=(speculative.expected_tokens_per_round, speculative.expected_speedup)),
    _LADDER_PREDICTION,
]}
