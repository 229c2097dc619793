"""Graded exercises of chapter 8, "From a base model to an assistant": references, cases, slips.

Every exercise is solvable with torch (and plain Python) alone. The reference-call guard fails a
solution that calls course_lib's implementation of any exercise of this chapter: LoRA's forward
pass and merge (:mod:`course_lib.lora`), the answer-only loss (:mod:`course_lib.finetune`), the
distillation loss (:mod:`course_lib.distill`), the DPO loss (:mod:`course_lib.dpo`) and the
answer extraction (:mod:`course_lib.arithmetic`).

Case builders use torch, plain Python and :mod:`course_lib.exercises._common` only (the grading
sandbox strips the references' bodies). Slips (:class:`~course_lib.grading.Slip`) are the common
mistakes, each with the message its author reads.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import torch
import torch.nn.functional as F

from course_lib import arithmetic, distill, dpo, finetune, lora
from course_lib.exercises._calls import extract_all
from course_lib.exercises._common import f32, f64, gen, lengths_mask, pick, randn
from course_lib.grading import Case, Exercise, Slip


# 1. lora_forward --------------------------------------------------------------------------------


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
    ]


def _lora_alpha_only(x, weight, bias, lora_a, lora_b, alpha):
    out = x @ weight.T + alpha * (x @ lora_a.T) @ lora_b.T
    return out + bias if bias is not None else out


def _lora_r_over_alpha(x, weight, bias, lora_a, lora_b, alpha):
    out = x @ weight.T + (lora_a.shape[0] / alpha) * (x @ lora_a.T) @ lora_b.T
    return out + bias if bias is not None else out


def _lora_unscaled(x, weight, bias, lora_a, lora_b, alpha):
    out = x @ weight.T + (x @ lora_a.T) @ lora_b.T
    return out + bias if bias is not None else out


def _lora_no_bias(x, weight, bias, lora_a, lora_b, alpha):
    return x @ weight.T + (alpha / lora_a.shape[0]) * (x @ lora_a.T) @ lora_b.T


def _lora_no_base(x, weight, bias, lora_a, lora_b, alpha):
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


# 2. merge_lora ----------------------------------------------------------------------------------


def _merge_cases() -> list[Case]:
    def build(seed: int, d_out: int, d_in: int, r: int, alpha: float, dtype=f32):
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


def _merge_alpha_only(weight, lora_a, lora_b, alpha):
    return weight + alpha * lora_b @ lora_a


def _merge_unscaled(weight, lora_a, lora_b, alpha):
    return weight + lora_b @ lora_a


def _merge_delta_only(weight, lora_a, lora_b, alpha):
    return (alpha / lora_a.shape[0]) * lora_b @ lora_a


def _merge_transposed(weight, lora_a, lora_b, alpha):
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


# 3. answer_only_loss ----------------------------------------------------------------------------


def _loss_cases() -> list[Case]:
    def build(seed: int, B: int, T: int, V: int, spans: list[tuple[int, int]], dtype=f32):
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


def _loss_all_positions(logits, targets, answer_mask):
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def _loss_row_means(logits, targets, answer_mask):
    nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T)
    m = answer_mask.to(nll.dtype)
    return ((nll * m).sum(1) / m.sum(1)).mean()


def _loss_mean_over_all(logits, targets, answer_mask):
    nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    return (nll * answer_mask.to(nll.dtype)).mean()


def _loss_sum(logits, targets, answer_mask):
    nll = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
    return (nll * answer_mask.to(nll.dtype)).sum()


def _loss_prompt(logits, targets, answer_mask):
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


# 4. distillation_loss ---------------------------------------------------------------------------


def _distill_cases() -> list[Case]:
    def build(seed: int, shape: tuple[int, ...], T: float, dtype=f32):
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


def _kl(student_logits, teacher_logits, ts, tt):
    log_s = F.log_softmax(student_logits / ts, -1)
    log_t = F.log_softmax(teacher_logits / tt, -1)
    return (log_t.exp() * (log_t - log_s)).sum(-1)


def _distill_no_t2(student_logits, teacher_logits, temperature):
    return _kl(student_logits, teacher_logits, temperature, temperature).mean()


def _distill_t1(student_logits, teacher_logits, temperature):
    return temperature * _kl(student_logits, teacher_logits, temperature, temperature).mean()


def _distill_reversed(student_logits, teacher_logits, temperature):
    return temperature ** 2 * _kl(teacher_logits, student_logits, temperature,
                                  temperature).mean()


def _distill_no_temperature(student_logits, teacher_logits, temperature):
    return temperature ** 2 * _kl(student_logits, teacher_logits, 1.0, 1.0).mean()


def _distill_teacher_only(student_logits, teacher_logits, temperature):
    return temperature ** 2 * _kl(student_logits, teacher_logits, 1.0, temperature).mean()


def _distill_sum(student_logits, teacher_logits, temperature):
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


# 5. dpo_loss ------------------------------------------------------------------------------------


def _dpo_cases() -> list[Case]:
    def build(seed: int, B: int, beta: float, dtype=f32):
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


def _dpo_no_reference(policy_chosen, policy_rejected, reference_chosen, reference_rejected,
                      beta):
    return -F.logsigmoid(beta * (policy_chosen - policy_rejected)).mean()


def _dpo_swapped(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta):
    margin = (policy_rejected - reference_rejected) - (policy_chosen - reference_chosen)
    return -F.logsigmoid(beta * margin).mean()


def _dpo_no_beta(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta):
    margin = (policy_chosen - reference_chosen) - (policy_rejected - reference_rejected)
    return -F.logsigmoid(margin).mean()


def _dpo_beta_outside(policy_chosen, policy_rejected, reference_chosen, reference_rejected,
                      beta):
    margin = (policy_chosen - reference_chosen) - (policy_rejected - reference_rejected)
    return -beta * F.logsigmoid(margin).mean()


def _dpo_sum(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta):
    margin = (policy_chosen - reference_chosen) - (policy_rejected - reference_rejected)
    return -F.logsigmoid(beta * margin).sum()


def _dpo_ratio_added(policy_chosen, policy_rejected, reference_chosen, reference_rejected,
                     beta):
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


# 6. extract_answer ------------------------------------------------------------------------------


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


def _extract_first(text):
    found = re.findall(r"[0-9]+", text)
    return int(found[0]) if found else None


def _extract_joined(text):
    digits = "".join(ch for ch in text if ch.isdigit())
    return int(digits) if digits else None


def _extract_last_digit(text):
    digits = [ch for ch in text if ch.isdigit()]
    return int(digits[-1]) if digits else None


def _extract_zero(text):
    found = re.findall(r"[0-9]+", text)
    return int(found[-1]) if found else 0


def _extract_string(text):
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


EXERCISES = {ex.id: ex for ex in [
    Exercise(id="fine_tuning.lora_forward", reference=lora.lora_forward,
             cases=_lora_forward_cases, slips=_LORA_FORWARD_SLIPS,
             forbidden=(lora.LoRALinear,)),
    Exercise(id="fine_tuning.merge_lora", reference=lora.merge_lora, cases=_merge_cases,
             slips=_MERGE_SLIPS, forbidden=(lora.merge_all,)),
    Exercise(id="fine_tuning.answer_only_loss", reference=finetune.answer_only_loss,
             cases=_loss_cases, slips=_LOSS_SLIPS),
    Exercise(id="fine_tuning.distillation_loss", reference=distill.distillation_loss,
             cases=_distill_cases, slips=_DISTILL_SLIPS, forbidden=(distill.hinton_loss,)),
    Exercise(id="fine_tuning.dpo_loss", reference=dpo.dpo_loss, cases=_dpo_cases,
             slips=_DPO_SLIPS),
    Exercise(id="fine_tuning.extract_answer", reference=arithmetic.extract_answer,
             cases=_extract_cases, slips=_EXTRACT_SLIPS, forbidden=(arithmetic.score_answers,),
             call=extract_all),
]}
