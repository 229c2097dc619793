"""Graded exercises of chapter 8, "From a base model to an assistant": references, cases, slips.

Every exercise is solvable with torch (and plain Python) alone. The reference-call guard fails a
solution that calls course_lib's implementation of any exercise of this chapter: LoRA's forward
pass, merge and parameter count (:mod:`course_lib.lora`), the answer-only loss
(:mod:`course_lib.finetune`), the distillation loss (:mod:`course_lib.distill`), the DPO loss,
the implicit rewards and the KL-regularised optimum (:mod:`course_lib.dpo`) and the answer
extraction (:mod:`course_lib.arithmetic`).

Four exercises ask the student to work something out or predict rather than transcribe a
printed formula: ``lora_trainable`` (the largest rank whose adapters fit a budget of trainable
numbers in a GPT whose heads share keys and values, a shape the chapter does not print, and the
count at that rank), ``predict_forgetting`` (predict, then see the measurement),
``kl_frontier`` (derive the optimum of the KL-regularised objective and trace its
reward-against-KL frontier; a hidden case of up to 20,000 completions and betas over five
decades is out of reach of a numerical maximisation of the objective) and
``implicit_rewards`` (invert that optimum into DPO's implicit reward, a short step, and derive
the log of how much DPO's gradient weighs each pair, exact when the rewards are so far apart
that the weight itself underflows: autograd on the loss gives the weight, 0 there, and no
finite log). ``lora_forward`` is graded on its algorithm too (``largest_tensor`` and the memory
probe): forming the product ``B A`` fails.

Case builders use torch, plain Python and :mod:`course_lib.exercises._common` only (the grading
sandbox strips the references' bodies). Slips (:class:`~course_lib.grading.Slip`) are the common
mistakes, each with the message its author reads.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

from course_lib import arithmetic, distill, dpo, finetune, lora
from course_lib.exercises._calls import extract_all
from course_lib.exercises._common import f32, f64, gen, pick, randn
from course_lib.grading import Case, Exercise, MemoryProbe, Question, Slip

# 2. lora_forward ---------------------------------------------------------------------------------


def _lora_inputs(seed: int, lead: tuple[int, ...], d_in: int, d_out: int, r: int, alpha: float,
                 bias: bool = True, dtype: torch.dtype = f32) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        return {"x": randn(seed, *lead, d_in, dtype=dtype),
                "weight": randn(seed + 1, d_out, d_in, dtype=dtype, scale=d_in ** -0.5),
                "bias": randn(seed + 2, d_out, dtype=dtype) if bias else None,
                "lora_a": randn(seed + 3, r, d_in, dtype=dtype, scale=d_in ** -0.5),
                "lora_b": randn(seed + 4, d_out, r, dtype=dtype),
                "alpha": alpha}
    return build


def _lora_forward_cases() -> list[Case]:
    return [
        Case("float32, a batch of vectors, rank 4", _lora_inputs(10, (6,), 8, 5, 4, 8.0)),
        Case("float32, (batch, time, features), rank 2", _lora_inputs(20, (3, 4), 6, 9, 2, 4.0)),
        Case("float64, rank 1, no bias", _lora_inputs(30, (5,), 7, 3, 1, 2.0, bias=False,
                                                      dtype=f64)),
        Case("float64, batch size 1, alpha smaller than r", _lora_inputs(40, (1, 2), 10, 4, 8,
                                                                          2.0, dtype=f64)),
        Case("float32, few rows and wide layers (B A would be the largest tensor)",
             _lora_inputs(45, (pick(46, 1, 3),), pick(47, 40, 64), pick(48, 40, 64),
                          pick(49, 1, 4), 4.0)),
        Case("float64, a batch of sequences and wide layers", _lora_inputs(
            55, (1, pick(56, 2, 4)), pick(57, 48, 80), pick(58, 32, 48), 2, 2.0, dtype=f64)),
    ]


def _lora_bound(inputs: Mapping[str, Any]) -> int:
    """Without B A the largest new tensor is the output, x's size, x A^T, or a rescaled copy of
    A or B (``B * alpha / r``): the largest of rows x max(in, out, r), out x r and r x in."""
    x: torch.Tensor = inputs["x"]
    weight: torch.Tensor = inputs["weight"]
    lora_a: torch.Tensor = inputs["lora_a"]
    rows = x.numel() // x.shape[-1]
    r = lora_a.shape[0]
    return max(rows * max(weight.shape[0], weight.shape[1], r), weight.shape[0] * r,
               r * weight.shape[1])


def _lora_probe_inputs() -> dict[str, Any]:
    n = 8192
    return {"x": randn(91, 4, n), "weight": randn(92, n, n, scale=n ** -0.5),
            "bias": randn(93, n), "lora_a": randn(94, 8, n, scale=n ** -0.5),
            "lora_b": randn(95, n, 8), "alpha": 16.0}


#: The memory rule as the hardened grader enforces it: an 8192 x 8192 layer in float32, whose
#: B A (out x in) takes 256 MiB, under a limit of 96 MiB beyond the inputs; every way of applying
#: A and then B needs well under 1 MiB here. Sums of 8,192 float32 products in another order
#: differ by a few 1e-5: the tolerance is 1e-3.
_LORA_PROBE = MemoryProbe("float32, an 8192 x 8192 layer of rank 8, under a memory limit",
                          _lora_probe_inputs, budget_bytes=96 << 20,
                          forbidden_bytes=8192 * 8192 * 4, rtol=1e-3, atol=1e-3)


def _lora_alpha_only(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                     lora_a: torch.Tensor, lora_b: torch.Tensor, alpha: float) -> torch.Tensor:
    out = x @ weight.T + alpha * (x @ lora_a.T) @ lora_b.T
    return out + bias if bias is not None else out


def _lora_r_over_alpha(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                       lora_a: torch.Tensor, lora_b: torch.Tensor, alpha: float) -> torch.Tensor:
    out = x @ weight.T + (lora_a.shape[0] / alpha) * (x @ lora_a.T) @ lora_b.T
    return out + bias if bias is not None else out


def _lora_unscaled(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                   lora_a: torch.Tensor, lora_b: torch.Tensor, alpha: float) -> torch.Tensor:
    out = x @ weight.T + (x @ lora_a.T) @ lora_b.T
    return out + bias if bias is not None else out


def _lora_no_bias(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                  lora_a: torch.Tensor, lora_b: torch.Tensor, alpha: float) -> torch.Tensor:
    return x @ weight.T + (alpha / lora_a.shape[0]) * (x @ lora_a.T) @ lora_b.T


def _lora_no_base(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                  lora_a: torch.Tensor, lora_b: torch.Tensor, alpha: float) -> torch.Tensor:
    out = (alpha / lora_a.shape[0]) * (x @ lora_a.T) @ lora_b.T
    return out + bias if bias is not None else out


_LORA_FORWARD_SLIPS = (
    Slip("the update is scaled by alpha / r (r = lora_a.shape[0]), not by alpha",
         _lora_alpha_only),
    Slip("the scale is alpha / r, not r / alpha", _lora_r_over_alpha),
    Slip("the low-rank update is multiplied by alpha / r", _lora_unscaled),
    Slip("the frozen layer's bias is part of the output (x @ weight.T + bias)", _lora_no_bias),
    Slip("LoRA adds to the frozen layer's output: keep x @ weight.T (+ bias)", _lora_no_base),
)


# 3. merge_lora -----------------------------------------------------------------------------------


def _merge_cases() -> list[Case]:
    def build(seed: int, d_out: int, d_in: int, r: int, alpha: float,
              dtype: torch.dtype = f32) -> Callable[[], dict[str, Any]]:
        def inputs() -> dict[str, Any]:
            return {"weight": randn(seed, d_out, d_in, dtype=dtype),
                    "lora_a": randn(seed + 1, r, d_in, dtype=dtype),
                    "lora_b": randn(seed + 2, d_out, r, dtype=dtype), "alpha": alpha}
        return inputs
    return [
        Case("float32, rank 4, more outputs than inputs", build(50, 12, 7, 4, 16.0)),
        Case("float32, rank 1", build(60, 5, 9, 1, 1.0)),
        Case("float64, rank 3, alpha smaller than r", build(70, 6, 4, 3, 2.0, f64)),
        Case("float64, a square weight, rank 2", build(80, 8, 8, 2, 8.0, f64)),
    ]


def _merge_alpha_only(weight: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor,
                      alpha: float) -> torch.Tensor:
    return weight + alpha * lora_b @ lora_a


def _merge_unscaled(weight: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor,
                    alpha: float) -> torch.Tensor:
    return weight + lora_b @ lora_a


def _merge_delta_only(weight: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor,
                      alpha: float) -> torch.Tensor:
    return (alpha / lora_a.shape[0]) * lora_b @ lora_a


def _merge_transposed(weight: torch.Tensor, lora_a: torch.Tensor, lora_b: torch.Tensor,
                      alpha: float) -> torch.Tensor:
    return weight + (alpha / lora_a.shape[0]) * (lora_b @ lora_a).T


_MERGE_SLIPS = (
    Slip("the update is scaled by alpha / r (r = lora_a.shape[0]), not by alpha",
         _merge_alpha_only),
    Slip("the low-rank update B A is multiplied by alpha / r", _merge_unscaled),
    Slip("the merged weight is the frozen weight plus the update, not the update alone",
         _merge_delta_only),
    Slip("the update is lora_b @ lora_a, shaped (out, in) like the weight; it was transposed",
         _merge_transposed),
)


# 4. lora_trainable (work it out) -----------------------------------------------------------------


def lora_trainable(budget: int, n_layer: int, n_embd: int, n_head: int, n_kv_head: int
                   ) -> tuple[int, int] | None:
    """Reference: the largest rank whose adapters train at most ``budget`` numbers, and how many.

    Adapters on the four maps of every block (``c_attn``, ``attn.c_proj``, ``mlp.c_fc``,
    ``mlp.c_proj``) of a GPT with ``n_kv_head`` key/value heads; ``None`` below rank 1.
    """
    per_rank = lora.gpt_lora_parameters(n_layer, n_embd, 1, n_head, n_kv_head)
    r = budget // per_rank
    return None if r == 0 else (r, r * per_rank)


def _per_rank(n_layer: int, n_embd: int, n_head: int, n_kv_head: int) -> int:
    """The numbers one rank trains (trusted side, for the case builders)."""
    return _trainable_from(n_layer, 1, _gqa_shapes(n_embd, _kv_width(n_embd, n_head, n_kv_head)))


def _trainable_cases() -> list[Case]:
    def build(seed: int, layers: tuple[int, int], head_dim: tuple[int, int],
              heads: tuple[int, int], rank: tuple[int, int], extra: str = "any"
              ) -> Callable[[], dict[str, Any]]:
        def inputs() -> dict[str, Any]:
            n_head = 2 ** pick(seed + 1, *heads)  # a power of two, as n_kv_head: it divides
            n_kv_head = 2 ** pick(seed + 3, 0, max(0, pick(seed + 1, *heads) - 1))
            n_layer, n_embd = pick(seed, *layers), n_head * pick(seed + 2, *head_dim)
            per = _per_rank(n_layer, n_embd, n_head, n_kv_head)
            r = pick(seed + 4, *rank)
            budget = {"any": r * per + pick(seed + 5, 0, per - 1), "exact": r * per,
                      "short": r * per - 1, "below": pick(seed + 5, 1, per - 1)}[extra]
            return {"budget": budget, "n_layer": n_layer, "n_embd": n_embd, "n_head": n_head,
                    "n_kv_head": n_kv_head}
        return inputs
    return [
        Case("one layer, one head, a budget of exactly rank 1",
             lambda: {"budget": _per_rank(1, 8, 1, 1), "n_layer": 1, "n_embd": 8, "n_head": 1,
                      "n_kv_head": 1}),
        Case("a small GPT, every head its own keys and values",
             lambda: {"budget": pick(205, 2_000, 200_000), "n_layer": pick(206, 1, 4),
                      "n_embd": 64, "n_head": 4, "n_kv_head": 4}),
        Case("a small GPT, fewer key/value heads", build(210, (1, 4), (4, 16), (1, 3), (1, 8))),
        Case("multi-query attention (one key/value head)",
             lambda: {"budget": pick(215, 20_000, 2_000_000), "n_layer": pick(216, 2, 6),
                      "n_embd": 96, "n_head": 8, "n_kv_head": 1}),
        Case("a deeper GPT, a budget a rank uses exactly",
             build(220, (6, 24), (16, 64), (2, 4), (8, 64), "exact")),
        Case("a GPT-2-sized model, a budget one number short of a rank",
             build(230, (12, 48), (64, 128), (3, 5), (2, 16), "short")),
        Case("a budget below rank 1", build(240, (2, 12), (8, 64), (1, 4), (1, 1), "below")),
    ]


def _kv_width(n_embd: int, n_head: int, n_kv_head: int) -> int:
    return n_kv_head * (n_embd // n_head)


def _trainable_from(n_layer: int, r: int, shapes: list[tuple[int, int]]) -> int:
    return n_layer * sum(r * (d_in + d_out) for d_out, d_in in shapes)


def _trainable_full_matrices(n_layer: int, n_embd: int, r: int, n_head: int,
                             n_kv_head: int) -> int:
    d, kv = n_embd, _kv_width(n_embd, n_head, n_kv_head)
    return n_layer * r * ((d + 2 * kv) * d + d * d + 8 * d * d)


def _trainable_attention_only(n_layer: int, n_embd: int, r: int, n_head: int,
                              n_kv_head: int) -> int:
    d, kv = n_embd, _kv_width(n_embd, n_head, n_kv_head)
    return _trainable_from(n_layer, r, [(d + 2 * kv, d), (d, d)])


def _trainable_square_mlp(n_layer: int, n_embd: int, r: int, n_head: int,
                          n_kv_head: int) -> int:
    d, kv = n_embd, _kv_width(n_embd, n_head, n_kv_head)
    return _trainable_from(n_layer, r, [(d + 2 * kv, d), (d, d), (d, d), (d, d)])


def _trainable_square_qkv(n_layer: int, n_embd: int, r: int, n_head: int,
                          n_kv_head: int) -> int:
    d = n_embd
    return _trainable_from(n_layer, r, [(d, d), (d, d), (4 * d, d), (d, 4 * d)])


def _trainable_one_layer(n_layer: int, n_embd: int, r: int, n_head: int,
                         n_kv_head: int) -> int:
    return _trainable_from(1, r, _gqa_shapes(n_embd, _kv_width(n_embd, n_head, n_kv_head)))


def _trainable_a_only(n_layer: int, n_embd: int, r: int, n_head: int, n_kv_head: int) -> int:
    return n_layer * r * (n_embd + n_embd + n_embd + 4 * n_embd)


def _gqa_shapes(d: int, kv: int) -> list[tuple[int, int]]:
    return [(d + 2 * kv, d), (d, d), (4 * d, d), (d, 4 * d)]


def _trainable_no_gqa(n_layer: int, n_embd: int, r: int, n_head: int, n_kv_head: int) -> int:
    return _trainable_from(n_layer, r, _gqa_shapes(n_embd, n_embd))


def _trainable_kv_full_heads(n_layer: int, n_embd: int, r: int, n_head: int,
                             n_kv_head: int) -> int:
    return _trainable_from(n_layer, r, _gqa_shapes(n_embd, n_kv_head * n_embd))


def _trainable_one_kv(n_layer: int, n_embd: int, r: int, n_head: int, n_kv_head: int) -> int:
    d, kv = n_embd, _kv_width(n_embd, n_head, n_kv_head)
    return _trainable_from(n_layer, r, [(d + kv, d), (d, d), (4 * d, d), (d, 4 * d)])


def _trainable_separate_qkv(n_layer: int, n_embd: int, r: int, n_head: int,
                            n_kv_head: int) -> int:
    d, kv = n_embd, _kv_width(n_embd, n_head, n_kv_head)
    return _trainable_from(n_layer, r, [(d, d), (kv, d), (kv, d), (d, d), (4 * d, d),
                                        (d, 4 * d)])


def _as_design(count: Callable[..., int], rule: str = "floor"
               ) -> Callable[..., tuple[int, int] | None]:
    """A slip of the count, or of the budget's rule, turned into the exercise's answer."""
    def design(budget: int, n_layer: int, n_embd: int, n_head: int, n_kv_head: int
               ) -> tuple[int, int] | None:
        per = count(n_layer, n_embd, 1, n_head, n_kv_head)
        r = {"floor": budget // per, "strict": (budget - 1) // per,
             "ceil": -(-budget // per)}[rule]
        return None if r <= 0 else (r, r * per)
    return design


def _trainable_right(n_layer: int, n_embd: int, r: int, n_head: int, n_kv_head: int) -> int:
    return _trainable_from(n_layer, r, _gqa_shapes(n_embd, _kv_width(n_embd, n_head, n_kv_head)))


_TRAINABLE_SLIPS = (
    Slip("an adapter on a (out, in) map trains A (r, in) and B (out, r): r (in + out) numbers, "
         "not r times the weight's in x out", _as_design(_trainable_full_matrices)),
    Slip("the adapters sit on the MLP's maps too (c_fc and mlp.c_proj), not only attention's",
         _as_design(_trainable_attention_only)),
    Slip("the MLP is 4 n_embd wide: c_fc maps n_embd to 4 n_embd and mlp.c_proj back",
         _as_design(_trainable_square_mlp)),
    Slip("c_attn computes queries, keys and values at once: its output holds all three",
         _as_design(_trainable_square_qkv)),
    Slip("every one of the n_layer blocks has its own adapters", _as_design(_trainable_one_layer)),
    Slip("both factors train: B (out, r) as well as A (r, in)", _as_design(_trainable_a_only)),
    Slip("with fewer key/value heads the keys and values are narrower than the queries, and so "
         "is c_attn's output", _as_design(_trainable_no_gqa)),
    Slip("a key/value head is as wide as a query head, n_embd / n_head, not n_embd",
         _as_design(_trainable_kv_full_heads)),
    Slip("c_attn computes the keys and the values: both are n_kv_head heads wide",
         _as_design(_trainable_one_kv)),
    Slip("c_attn is one map with one adapter: one A (r, n_embd) for the queries, keys and "
         "values together, not three", _as_design(_trainable_separate_qkv)),
    Slip("a rank whose adapters use the whole budget fits: at most budget numbers",
         _as_design(_trainable_right, "strict")),
    Slip("the rank must fit in the budget: round down, never up",
         _as_design(_trainable_right, "ceil")),
)


# 5. predict_forgetting (question) ----------------------------------------------------------------


_PREDICT_FORGETTING = Question(
    id="fine_tuning.predict_forgetting", choices="abc",
    hint=("at the same learning rate, count how many directions of each weight matrix each "
          "method can change: which update can change more of what the model does on "
          "Shakespeare?"))


# 1. answer_only_loss -----------------------------------------------------------------------------


def _loss_cases() -> list[Case]:
    def build(seed: int, B: int, T: int, V: int, spans: list[tuple[int, int]],
              dtype: torch.dtype = f32) -> Callable[[], dict[str, Any]]:
        def inputs() -> dict[str, Any]:
            mask = torch.zeros(B, T, dtype=torch.bool)
            for b, (start, stop) in enumerate(spans):
                mask[b, start:stop] = True
            return {"logits": randn(seed, B, T, V, dtype=dtype, scale=2.0),
                    "targets": torch.randint(V, (B, T), generator=gen(seed + 1)),
                    "answer_mask": mask}
        return inputs
    return [
        Case("float32, answers of different lengths", build(90, 3, 10, 7, [(6, 9), (2, 10),
                                                                           (8, 9)])),
        Case("float64, answers in the middle (padding after)", build(100, 2, 12, 5,
                                                                     [(4, 6), (3, 11)], f64)),
        Case("float32, batch size 1", build(110, 1, 8, 11, [(5, 8)])),
        Case("float64, every row a different share of answer tokens",
             build(120, 4, 6, 3, [(0, 6), (5, 6), (3, 5), (1, 2)], f64)),
    ]


def _loss_all_positions(logits: torch.Tensor, targets: torch.Tensor,
                        answer_mask: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def _loss_row_means(logits: torch.Tensor, targets: torch.Tensor,
                    answer_mask: torch.Tensor) -> torch.Tensor:
    nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T)
    m = answer_mask.to(nll.dtype)
    return ((nll * m).sum(1) / m.sum(1)).mean()


def _loss_mean_over_all(logits: torch.Tensor, targets: torch.Tensor,
                        answer_mask: torch.Tensor) -> torch.Tensor:
    nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    return (nll * answer_mask.to(nll.dtype)).mean()


def _loss_sum(logits: torch.Tensor, targets: torch.Tensor,
              answer_mask: torch.Tensor) -> torch.Tensor:
    nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    return (nll * answer_mask.to(nll.dtype)).sum()


def _loss_prompt(logits: torch.Tensor, targets: torch.Tensor,
                 answer_mask: torch.Tensor) -> torch.Tensor:
    nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    m = (~answer_mask).to(nll.dtype)
    return (nll * m).sum() / m.sum()


_LOSS_SLIPS = (
    Slip("only the answer tokens count: the prompt and the padding get no loss",
         _loss_all_positions),
    Slip("every answer token weighs the same: divide the batch's sum by the number of answer "
         "tokens, not the mean of per-row means", _loss_row_means),
    Slip("divide by the number of answer tokens (answer_mask.sum()), not by every position",
         _loss_mean_over_all),
    Slip("the loss is a mean over the answer tokens, not their sum", _loss_sum),
    Slip("the mask marks the answer: keep the positions where it is True", _loss_prompt),
)


# 6. distillation_loss ----------------------------------------------------------------------------


def _distill_cases() -> list[Case]:
    def build(seed: int, shape: tuple[int, ...], T: float,
              dtype: torch.dtype = f32) -> Callable[[], dict[str, Any]]:
        def inputs() -> dict[str, Any]:
            return {"student_logits": randn(seed, *shape, dtype=dtype, scale=2.0),
                    "teacher_logits": randn(seed + 1, *shape, dtype=dtype, scale=3.0),
                    "temperature": T}
        return inputs
    return [
        Case("float32, (batch, time, vocabulary), T = 2", build(130, (2, 5, 9), 2.0)),
        Case("float64, rows of logits, T = 4", build(140, (6, 7), 4.0, f64)),
        Case("float64, T = 1 (plain KL)", build(150, (3, 4, 5), 1.0, f64)),
        Case("float32, batch size 1, T = 0.5", build(160, (1, 3, 11), 0.5)),
    ]


def _kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor, ts: float,
        tt: float) -> torch.Tensor:
    log_s = F.log_softmax(student_logits / ts, -1)
    log_t = F.log_softmax(teacher_logits / tt, -1)
    return (log_t.exp() * (log_t - log_s)).sum(-1)


def _distill_no_t2(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                   temperature: float) -> torch.Tensor:
    return _kl(student_logits, teacher_logits, temperature, temperature).mean()


def _distill_t1(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                temperature: float) -> torch.Tensor:
    return temperature * _kl(student_logits, teacher_logits, temperature, temperature).mean()


def _distill_reversed(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                      temperature: float) -> torch.Tensor:
    return temperature ** 2 * _kl(teacher_logits, student_logits, temperature,
                                  temperature).mean()


def _distill_no_temperature(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                            temperature: float) -> torch.Tensor:
    return temperature ** 2 * _kl(student_logits, teacher_logits, 1.0, 1.0).mean()


def _distill_teacher_only(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                          temperature: float) -> torch.Tensor:
    return temperature ** 2 * _kl(student_logits, teacher_logits, 1.0, temperature).mean()


def _distill_sum(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                 temperature: float) -> torch.Tensor:
    return temperature ** 2 * _kl(student_logits, teacher_logits, temperature, temperature).sum()


_DISTILL_SLIPS = (
    Slip("multiply the KL by T ** 2, which keeps the gradients' size independent of T",
         _distill_no_t2),
    Slip("the factor is T ** 2, not T", _distill_t1),
    Slip("KL(teacher || student): the expectation is under the teacher's distribution",
         _distill_reversed),
    Slip("divide both logits by the temperature before the softmax", _distill_no_temperature),
    Slip("divide the student's logits by the temperature too", _distill_teacher_only),
    Slip("average the KL over positions (every leading index is one distribution), not sum",
         _distill_sum),
)


# 8. dpo_loss -------------------------------------------------------------------------------------


def _dpo_cases() -> list[Case]:
    def build(seed: int, B: int, beta: float,
              dtype: torch.dtype = f32) -> Callable[[], dict[str, Any]]:
        def inputs() -> dict[str, Any]:
            base = -20.0 - 10.0 * torch.rand(4, B, generator=gen(seed), dtype=dtype)
            return {"policy_chosen": base[0], "policy_rejected": base[1],
                    "reference_chosen": base[2], "reference_rejected": base[3], "beta": beta}
        return inputs
    return [
        Case("float32, beta = 0.1", build(170, 8, 0.1)),
        Case("float64, beta = 0.5", build(180, 5, 0.5, f64)),
        Case("float64, a large beta (saturated pairs)", build(190, 6, 3.0, f64)),
        Case("float32, batch size 1, beta = 1", build(200, 1, 1.0)),
    ]


def _dpo_no_reference(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
                      reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
                      beta: float) -> torch.Tensor:
    return -F.logsigmoid(beta * (policy_chosen - policy_rejected)).mean()


def _dpo_swapped(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
                 reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
                 beta: float) -> torch.Tensor:
    margin = (policy_rejected - reference_rejected) - (policy_chosen - reference_chosen)
    return -F.logsigmoid(beta * margin).mean()


def _dpo_no_beta(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
                 reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
                 beta: float) -> torch.Tensor:
    margin = (policy_chosen - reference_chosen) - (policy_rejected - reference_rejected)
    return -F.logsigmoid(margin).mean()


def _dpo_beta_outside(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
                      reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
                      beta: float) -> torch.Tensor:
    margin = (policy_chosen - reference_chosen) - (policy_rejected - reference_rejected)
    return -beta * F.logsigmoid(margin).mean()


def _dpo_sum(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
             reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
             beta: float) -> torch.Tensor:
    margin = (policy_chosen - reference_chosen) - (policy_rejected - reference_rejected)
    return -F.logsigmoid(beta * margin).sum()


def _dpo_ratio_added(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
                     reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
                     beta: float) -> torch.Tensor:
    margin = (policy_chosen + reference_chosen) - (policy_rejected + reference_rejected)
    return -F.logsigmoid(beta * margin).mean()


_DPO_SLIPS = (
    Slip("each log-probability is measured against the reference's: log pi - log pi_ref",
         _dpo_no_reference),
    Slip("the margin is chosen minus rejected: the loss should fall as the chosen completion "
         "gains", _dpo_swapped),
    Slip("multiply the margin by beta inside the sigmoid", _dpo_no_beta),
    Slip("beta multiplies the margin inside the log-sigmoid, not the loss", _dpo_beta_outside),
    Slip("the loss is the mean over pairs, not the sum", _dpo_sum),
    Slip("log-ratios subtract: log pi(y|x) - log pi_ref(y|x)", _dpo_ratio_added),
)


# 7. kl_frontier (work it out) --------------------------------------------------------------------


def _frontier_cases() -> list[Case]:
    def build(seed: int, k: tuple[int, int], n: tuple[int, int], log_beta: tuple[float, float],
              reward_scale: float, dtype: torch.dtype = f64) -> Callable[[], dict[str, Any]]:
        def inputs() -> dict[str, Any]:
            K, N = pick(seed, *k), pick(seed + 1, *n)
            lo, hi = log_beta
            u = torch.rand(N, generator=gen(seed + 2), dtype=dtype)
            return {"reference_probs": torch.softmax(randn(seed + 3, K, dtype=dtype), -1),
                    "rewards": randn(seed + 4, K, dtype=dtype, scale=reward_scale),
                    "betas": torch.sort(10 ** (lo + (hi - lo) * u)).values}
        return inputs
    return [
        Case("float64, two completions", build(240, (2, 2), (4, 6), (-1.0, 1.0), 1.0)),
        Case("float64, several completions, betas from 0.1 to 100",
             build(250, (3, 9), (3, 8), (-1.0, 2.0), 2.0)),
        Case("float32, a large beta (near the reference)", build(260, (4, 8), (2, 4), (2.0, 3.0),
                                                                 1.0, f32)),
        Case("float32, a small beta (where a naive exponential overflows float32)",
             build(270, (3, 6), (3, 5), (-2.5, -1.5), 5.0, f32)),
        Case("float64, one beta", build(280, (5, 7), (1, 1), (-0.5, 0.5), 1.0)),
        Case("float64, 16,000 to 20,000 completions, betas from 0.001 to 100",
             _many_completions),
    ]


def _many_completions() -> dict[str, Any]:
    """A reference spread over many orders of magnitude and betas over five decades: a numerical
    maximisation of J over the policy's logits stalls far from the optimum here (the optimum's
    small probabilities barely move the gradient), the closed form is exact to float64."""
    K, N = pick(290, 16_000, 20_000), pick(291, 10, 14)
    u = (torch.arange(N, dtype=f64) + torch.rand(N, generator=gen(292), dtype=f64)) / N
    return {"reference_probs": torch.softmax(randn(293, K, dtype=f64, scale=2.0), -1),
            "rewards": randn(294, K, dtype=f64, scale=2.0),
            "betas": 10 ** (-3.0 + 5.0 * u)}  # one in each band, ascending


def _optimum_logits(reference_probs: torch.Tensor, rewards: torch.Tensor, betas: torch.Tensor,
                    scale: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> torch.Tensor:
    return torch.log_softmax(reference_probs.log()[None] + scale(rewards, betas), -1)


def _frontier_from(log_opt: torch.Tensor, reference_probs: torch.Tensor, rewards: torch.Tensor,
                   reverse: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    opt = log_opt.exp()
    log_ref = reference_probs.log()[None]
    if reverse:
        return (opt * rewards).sum(-1), (log_ref.exp() * (log_ref - log_opt)).sum(-1)
    return (opt * rewards).sum(-1), (opt * (log_opt - log_ref)).sum(-1)


def _frontier_times_beta(reference_probs: torch.Tensor, rewards: torch.Tensor,
                         betas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    log_opt = _optimum_logits(reference_probs, rewards, betas, lambda r, b: r[None] * b[:, None])
    return _frontier_from(log_opt, reference_probs, rewards)


def _frontier_no_reference(reference_probs: torch.Tensor, rewards: torch.Tensor,
                           betas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    log_opt = torch.log_softmax(rewards[None] / betas[:, None], -1)
    return _frontier_from(log_opt, reference_probs, rewards)


def _frontier_reverse_kl(reference_probs: torch.Tensor, rewards: torch.Tensor,
                         betas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    log_opt = _optimum_logits(reference_probs, rewards, betas, lambda r, b: r[None] / b[:, None])
    return _frontier_from(log_opt, reference_probs, rewards, reverse=True)


def _frontier_reference_reward(reference_probs: torch.Tensor, rewards: torch.Tensor,
                               betas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    log_opt = _optimum_logits(reference_probs, rewards, betas, lambda r, b: r[None] / b[:, None])
    _, kl = _frontier_from(log_opt, reference_probs, rewards)
    return (reference_probs * rewards).sum().expand(len(betas)).clone(), kl


def _frontier_naive_exp(reference_probs: torch.Tensor, rewards: torch.Tensor,
                        betas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    weights = reference_probs[None] * torch.exp(rewards[None] / betas[:, None])
    opt = weights / weights.sum(-1, keepdim=True)
    return (opt * rewards).sum(-1), (opt * (opt / reference_probs[None]).log()).sum(-1)


_FRONTIER_SLIPS = (
    Slip("your optimum moves away from the reference as beta grows: a large beta (a strong KL "
         "penalty) must keep the policy near the reference", _frontier_times_beta),
    Slip("your optimum ignores the reference policy: the KL term ties pi* to pi_ref, so pi_ref "
         "must appear in it (redo the stationarity condition with the KL's log pi_ref term)",
         _frontier_no_reference),
    Slip("the KL is KL(pi* || pi_ref), an expectation under the optimal policy, not under the "
         "reference", _frontier_reverse_kl),
    Slip("the reward is the optimal policy's expected reward, which changes with beta",
         _frontier_reference_reward),
    Slip("an exponential overflows for a small beta (inf / inf is NaN): rearrange the "
         "computation so that no intermediate value leaves the float range", _frontier_naive_exp),
)


# 9. implicit_rewards (work it out) ---------------------------------------------------------------


def _implicit_cases() -> list[Case]:
    def build(seed: int, B: tuple[int, int], beta: float, dtype: torch.dtype = f32,
              ties: int = 0) -> Callable[[], dict[str, Any]]:
        def inputs() -> dict[str, Any]:
            n = pick(seed, *B)
            lp = -5.0 - 25.0 * torch.rand(4, n, generator=gen(seed + 1), dtype=dtype)
            lp[0, :ties], lp[1, :ties] = lp[2, :ties], lp[3, :ties]  # policy = reference there
            return {"policy_chosen": lp[0], "policy_rejected": lp[1], "reference_chosen": lp[2],
                    "reference_rejected": lp[3], "beta": beta}
        return inputs
    return [
        Case("float32, held-out pairs, beta = 0.1", build(300, (6, 20), 0.1)),
        Case("float64, beta = 0.5", build(310, (4, 12), 0.5, f64)),
        Case("float64, some pairs where the policy is the reference (ties)",
             build(320, (5, 9), 1.0, f64, ties=3)),
        Case("float32, batch size 1, beta = 2", build(330, (1, 1), 2.0)),
        Case("float64, rewards hundreds apart, both ways", _far_apart),
    ]


def _far_apart() -> dict[str, Any]:
    """Pairs whose rewards differ by 800 to 1,500, some each way (log-probabilities stay
    negative): e^m / (1 + e^m) overflows float64 for the pairs ranked wrong and gives NaN; the
    weight of the pairs ranked right underflows to 0, so its log is -inf unless computed as a
    log-sigmoid."""
    n = pick(340, 4, 8)
    gap = 800.0 + 700.0 * torch.rand(n, generator=gen(341), dtype=f64)
    sign = torch.where(torch.arange(n) % 2 == 0, 1.0, -1.0).to(f64)
    ref = -5.0 - 20.0 * torch.rand(2, n, generator=gen(342), dtype=f64)
    return {"policy_chosen": ref[0] - gap * (sign < 0),
            "policy_rejected": ref[1] - gap * (sign > 0),
            "reference_chosen": ref[0], "reference_rejected": ref[1], "beta": 1.0}


_Rewards = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _with_weights(w: torch.Tensor, lose: torch.Tensor) -> _Rewards:
    return w, lose, F.logsigmoid(lose - w)


def _implicit_policy_only(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
                          reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
                          beta: float) -> _Rewards:
    return _with_weights(beta * policy_chosen, beta * policy_rejected)


def _implicit_no_beta(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
                      reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
                      beta: float) -> _Rewards:
    return _with_weights(policy_chosen - reference_chosen, policy_rejected - reference_rejected)


def _implicit_reversed(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
                       reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
                       beta: float) -> _Rewards:
    return _with_weights(beta * (reference_chosen - policy_chosen),
                         beta * (reference_rejected - policy_rejected))


def _rewards(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
             reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
             beta: float) -> tuple[torch.Tensor, torch.Tensor]:
    return beta * (policy_chosen - reference_chosen), beta * (policy_rejected - reference_rejected)


def _weights_flipped(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
                     reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
                     beta: float) -> _Rewards:
    w, lose = _rewards(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta)
    return w, lose, F.logsigmoid(w - lose)


def _weights_times_beta(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
                        reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
                        beta: float) -> _Rewards:
    w, lose = _rewards(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta)
    return w, lose, math.log(beta) + F.logsigmoid(lose - w)


def _weights_of_the_mean(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
                         reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
                         beta: float) -> _Rewards:
    w, lose = _rewards(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta)
    return w, lose, F.logsigmoid(lose - w) - math.log(len(w))


def _weights_the_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
                      reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
                      beta: float) -> _Rewards:
    w, lose = _rewards(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta)
    return w, lose, torch.log(-F.logsigmoid(w - lose))


def _weights_unscaled_margin(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
                             reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
                             beta: float) -> _Rewards:
    w, lose = _rewards(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta)
    return w, lose, F.logsigmoid((lose - w) / beta)


def _weights_naive_exp(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
                       reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
                       beta: float) -> _Rewards:
    w, lose = _rewards(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta)
    e = torch.exp(lose - w)
    return w, lose, torch.log(e / (1 + e))


def _weights_underflow(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor,
                       reference_chosen: torch.Tensor, reference_rejected: torch.Tensor,
                       beta: float) -> _Rewards:
    w, lose = _rewards(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta)
    return w, lose, torch.log(torch.sigmoid(lose - w))


_IMPLICIT_SLIPS = (
    Slip("the reward is measured against the reference: beta (log pi - log pi_ref); a "
         "completion the reference already liked is not rewarded for it", _implicit_policy_only),
    Slip("solving your optimum of exercise 7 for r gives beta times the log-ratio",
         _implicit_no_beta),
    Slip("the reward grows as the policy raises a completion above the reference",
         _implicit_reversed),
    Slip("the weight shrinks as the pair gets ranked right: a pair whose chosen completion "
         "already has the much larger reward barely moves the policy", _weights_flipped),
    Slip("the chain rule brings a factor beta out of the sigmoid's argument: divide the "
         "derivative by beta", _weights_times_beta),
    Slip("the weight is the derivative of the pair's own term, before the mean over pairs",
         _weights_of_the_mean),
    Slip("the weight is minus the derivative of the pair's loss, not the loss itself",
         _weights_the_loss),
    Slip("the sigmoid's argument is the difference of the rewards, which already carry beta",
         _weights_unscaled_margin),
    Slip("e^m / (1 + e^m) overflows when the rewards are far apart: write the log of the "
         "weight in a form that never forms e^m (a log-sigmoid)", _weights_naive_exp),
    Slip("the weight itself underflows to 0 when the rewards are far apart, and its log "
         "becomes -inf; the log of the weight is finite: compute it directly, never through "
         "the weight", _weights_underflow),
)


# 10. extract_answer ------------------------------------------------------------------------------


def _extract_cases() -> list[Case]:
    return [
        Case("chains of thought", lambda: {"texts": ["10,08,13", "41,45,39,40", "03,00,07",
                                                     "88,91,94,97,99"]}),
        Case("answers only", lambda: {"texts": ["13", "07", "0", "99"]}),
        Case("words around the numbers", lambda: {"texts": [
            "Paul has 7, then 10, so the answer is 8", "first 12 then 5 apples", "A: 4"]}),
        Case("longer numbers", lambda: {"texts": ["120,1375,2048", "1000000", "5 and 123456"]}),
        Case("no number at all", lambda: {"texts": ["", "no idea", ",,.", "=+-"]}),
        Case("text after the last number", lambda: {"texts": ["10,08,13.", "13. The end",
                                                              "answer: 21!"]}),
        Case("chains drawn for this grading run", _drawn_chains),
    ]


def _drawn_chains() -> dict[str, Any]:
    """Chains of two-digit steps and sentences around numbers, drawn from the run's secret."""
    texts = []
    for k in range(6):
        n = pick(660 + k, 1, 7)
        values = torch.randint(0, 1000, (n,), generator=gen(670 + k)).tolist()
        chain = ",".join(f"{v % 100:02d}" if k % 2 else str(v) for v in values)
        texts.append(chain + ("." if k % 3 == 0 else "") if k < 4
                     else f"we get {values[0]} and then {values[-1]} apples")
    return {"texts": texts}


def _extract_first(text: str) -> int | None:
    found = re.findall(r"[0-9]+", text)
    return int(found[0]) if found else None


def _extract_joined(text: str) -> int | None:
    digits = "".join(ch for ch in text if ch.isdigit())
    return int(digits) if digits else None


def _extract_last_digit(text: str) -> int | None:
    digits = [ch for ch in text if ch.isdigit()]
    return int(digits[-1]) if digits else None


def _extract_zero(text: str) -> int:
    found = re.findall(r"[0-9]+", text)
    return int(found[-1]) if found else 0


def _extract_string(text: str) -> str | None:
    found = re.findall(r"[0-9]+", text)
    return found[-1] if found else None


_EXTRACT_SLIPS = (
    Slip("the final answer is the last number of the completion, not the first",
         _extract_first),
    Slip("numbers are runs of digits: joining every digit of the text merges several numbers",
         _extract_joined),
    Slip("a number may have several digits: take the whole last run of digits",
         _extract_last_digit),
    Slip("a completion without a number has no answer: return None, not 0", _extract_zero),
    Slip("return the answer as an int, not a string", _extract_string),
)


EXERCISES = {ex.id: ex for ex in [  # in the notebook's order
    Exercise(id="fine_tuning.answer_only_loss", reference=finetune.answer_only_loss,
             cases=_loss_cases, slips=_LOSS_SLIPS),
    Exercise(id="fine_tuning.lora_forward", reference=lora.lora_forward,
             cases=_lora_forward_cases, slips=_LORA_FORWARD_SLIPS,
             forbidden=(lora.LoRALinear,), largest_tensor=_lora_bound, memory_probe=_LORA_PROBE,
             too_large="the product B A (out x in): apply A, then B"),
    Exercise(id="fine_tuning.merge_lora", reference=lora.merge_lora, cases=_merge_cases,
             slips=_MERGE_SLIPS, forbidden=(lora.merge_all,)),
    Exercise(id="fine_tuning.lora_trainable", reference=lora_trainable,
             cases=_trainable_cases, slips=_TRAINABLE_SLIPS,
             forbidden=(lora.add_lora, lora.trainable_parameters, lora.gpt_lora_parameters)),
    _PREDICT_FORGETTING,
    Exercise(id="fine_tuning.distillation_loss", reference=distill.distillation_loss,
             cases=_distill_cases, slips=_DISTILL_SLIPS, forbidden=(distill.hinton_loss,)),
    Exercise(id="fine_tuning.kl_frontier", reference=dpo.kl_regularised_optimum,
             cases=_frontier_cases, slips=_FRONTIER_SLIPS),
    Exercise(id="fine_tuning.dpo_loss", reference=dpo.dpo_loss, cases=_dpo_cases,
             slips=_DPO_SLIPS),
    Exercise(id="fine_tuning.implicit_rewards", reference=dpo.dpo_pair_weights,
             cases=_implicit_cases, slips=_IMPLICIT_SLIPS, forbidden=(dpo.implicit_rewards,)),
    Exercise(id="fine_tuning.extract_answer", reference=arithmetic.extract_answer,
             cases=_extract_cases, slips=_EXTRACT_SLIPS, forbidden=(arithmetic.score_answers,),
             call=extract_all),
]}
