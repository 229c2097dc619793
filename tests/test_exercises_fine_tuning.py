"""Chapter 8's graded exercises: the instructor's solutions pass, the references agree with
independent peers, the slips fail with their own messages, and calling course_lib fails."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_lib import arithmetic, distill, dpo, finetune, grading, lora
from course_lib.exercises import fine_tuning as ex7
from tests.conftest import solution
from tests.questions import answer

pytestmark = pytest.mark.ch08

SLUG = "08-fine-tuning"
NAMES = ["answer_only_loss", "lora_forward", "merge_lora", "lora_trainable", "predict_forgetting",
         "distillation_loss", "kl_frontier", "dpo_loss", "implicit_rewards", "extract_answer"]


@pytest.mark.parametrize("name", NAMES)
def test_the_instructor_solution_passes_every_hidden_case(name: str) -> None:
    results = grading.evaluate(f"fine_tuning.{name}", solution(SLUG, name),
                               answer(f"fine_tuning.{name}"))
    assert [r.message for r in results if r.message] == []


def test_the_registry_holds_exactly_the_notebook_exercises() -> None:
    assert sorted(ex7.EXERCISES) == sorted(f"fine_tuning.{n}" for n in NAMES)


@pytest.mark.parametrize("exercise_id", sorted(ex7.EXERCISES))
def test_every_slip_fails_with_its_own_message(exercise_id: str) -> None:
    exercise = ex7.EXERCISES[exercise_id]
    for slip in exercise.slips:
        messages = [r.message for r in grading.evaluate(exercise_id, slip.fn) if r.message]
        assert messages, f"{exercise_id}: the slip {slip.message!r} passes every case"
        assert any(slip.message in m for m in messages), (exercise_id, slip.message, messages)


def test_the_hidden_cases_cover_float64_and_batch_size_one() -> None:
    for exercise_id in ["fine_tuning.lora_forward", "fine_tuning.answer_only_loss",
                        "fine_tuning.distillation_loss", "fine_tuning.dpo_loss",
                        "fine_tuning.implicit_rewards"]:
        names = [case.name for case in ex7.EXERCISES[exercise_id].cases()]
        assert any("float64" in n for n in names) and any("batch size 1" in n for n in names)


def test_references_agree_with_torch_peers() -> None:
    g = torch.Generator().manual_seed(0)
    # lora_forward: an nn.Linear holding the merged weight
    x = torch.randn(4, 6, generator=g, dtype=torch.float64)
    f64 = torch.float64
    w, b = torch.randn(3, 6, generator=g, dtype=f64), torch.randn(3, generator=g, dtype=f64)
    a, bb = torch.randn(2, 6, generator=g, dtype=f64), torch.randn(3, 2, generator=g, dtype=f64)
    linear = torch.nn.Linear(6, 3).double()
    with torch.no_grad():
        linear.weight.copy_(lora.merge_lora(w, a, bb, 5.0))
        linear.bias.copy_(b)
        torch.testing.assert_close(lora.lora_forward(x, w, b, a, bb, 5.0), linear(x),
                                   rtol=1e-12, atol=1e-12)
    # answer_only_loss: cross_entropy with ignore_index on the other positions
    logits = torch.randn(2, 5, 7, generator=g, dtype=torch.float64)
    targets = torch.randint(7, (2, 5), generator=g)
    mask = torch.tensor([[0, 0, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    ignored = targets.masked_fill(~mask, -100)
    torch.testing.assert_close(finetune.answer_only_loss(logits, targets, mask),
                               F.cross_entropy(logits.transpose(1, 2), ignored), rtol=1e-12,
                               atol=1e-12)
    # distillation_loss: kl_div, batchmean over positions, times T^2
    s, t = logits, torch.randn(2, 5, 7, generator=g, dtype=torch.float64)
    peer = 9 * F.kl_div(F.log_softmax(s.reshape(-1, 7) / 3, -1),
                        F.softmax(t.reshape(-1, 7) / 3, -1), reduction="batchmean")
    torch.testing.assert_close(distill.distillation_loss(s, t, 3.0), peer, rtol=1e-12, atol=1e-12)
    # dpo_loss: binary cross-entropy with the chosen label on the logit beta * margin
    pw, pl, rw, rl = (torch.randn(5, generator=g, dtype=torch.float64) * 10 for _ in range(4))
    logit = 0.2 * ((pw - rw) - (pl - rl))
    torch.testing.assert_close(dpo.dpo_loss(pw, pl, rw, rl, 0.2),
                               F.binary_cross_entropy_with_logits(logit, torch.ones_like(logit)),
                               rtol=1e-12, atol=1e-12)
    assert dpo.dpo_loss(pw, pw, rw, rw, 0.2).item() == pytest.approx(math.log(2))


def test_extract_answer_reference_reads_the_last_run_of_digits() -> None:
    cases = {"10,08,13.": 13, "": None, "7 then 10 so 8": 8, "x1y22z": 22, "007": 7}
    assert {text: arithmetic.extract_answer(text) for text in cases} == cases


@pytest.mark.parametrize("name,cheat", [
    ("answer_only_loss", lambda logits, targets, answer_mask:
        finetune.answer_only_loss(logits, targets, answer_mask)),
    ("lora_forward", lambda x, weight, bias, lora_a, lora_b, alpha:
        lora.lora_forward(x, weight, bias, lora_a, lora_b, alpha)),
    ("merge_lora", lambda weight, lora_a, lora_b, alpha:
        lora.merge_lora(weight, lora_a, lora_b, alpha)),
    ("distillation_loss", lambda student_logits, teacher_logits, temperature:
        distill.distillation_loss(student_logits, teacher_logits, temperature)),
    ("dpo_loss", lambda policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta:
        dpo.dpo_loss(policy_chosen, policy_rejected, reference_chosen, reference_rejected, beta)),
    ("extract_answer", lambda text: arithmetic.extract_answer(text)),
    ("lora_trainable", lambda n_layer, n_embd, r: lora.gpt_lora_parameters(n_layer, n_embd, r)),
    ("kl_frontier", lambda reference_probs, rewards, betas:
        dpo.kl_regularised_optimum(reference_probs, rewards, betas)),
    ("implicit_rewards", lambda policy_chosen, policy_rejected, reference_chosen,
        reference_rejected, beta: dpo.implicit_rewards(policy_chosen, policy_rejected,
                                                       reference_chosen, reference_rejected, beta)),
])
def test_calling_course_lib_fails_with_the_reference_message(name: str, cheat) -> None:
    results = grading.evaluate(f"fine_tuning.{name}", cheat)
    assert results and all(r.reference_called for r in results), name
    assert grading.is_reference_call(results[0].message)


def _lora_forward_forming_ba(x, weight, bias, lora_a, lora_b, alpha):
    merged = weight + (alpha / lora_a.shape[0]) * lora_b @ lora_a  # (out, in): what is forbidden
    out = x @ merged.T
    return out + bias if bias is not None else out


def test_lora_forward_that_forms_ba_fails_on_memory_with_a_right_output() -> None:
    """The statement's "without forming BA" is graded: a right output built through B A fails."""
    messages = [r.message for r in grading.evaluate("fine_tuning.lora_forward",
                                                    _lora_forward_forming_ba) if r.message]
    assert messages and all("the output is right" in m and "B A" in m for m in messages)
    wide = [c for c in ex7.EXERCISES["fine_tuning.lora_forward"].cases() if "wide" in c.name]
    assert len(wide) >= 2  # cases where B A is larger than anything the algorithm needs


def test_lora_trainable_reference_counts_what_add_lora_leaves_trainable() -> None:
    from course_lib import gpt
    for n_layer, n_embd, r in [(1, 8, 1), (3, 12, 5), (2, 64, 4)]:
        model = gpt.GPT(gpt.GPTConfig(vocab_size=11, block_size=8, n_layer=n_layer, n_head=2,
                                      n_embd=n_embd))
        lora.add_lora(model, r, float(r))
        assert lora.trainable_parameters(model) == lora.gpt_lora_parameters(n_layer, n_embd, r)


def test_kl_frontier_reference_is_the_best_policy_against_random_policies() -> None:
    """No policy beats pi* on J = E[r] - beta KL; and the reward and KL are consistent with it."""
    g = torch.Generator().manual_seed(0)
    ref = torch.softmax(torch.randn(6, generator=g, dtype=torch.float64), -1)
    r = torch.randn(6, generator=g, dtype=torch.float64)
    betas = torch.tensor([0.1, 1.0, 10.0], dtype=torch.float64)
    reward, kl = dpo.kl_regularised_optimum(ref, r, betas)
    best = reward - betas * kl
    for _ in range(200):
        pi = torch.softmax(3 * torch.randn(6, generator=g, dtype=torch.float64), -1)
        j = (pi * r).sum() - betas * (pi * (pi / ref).log()).sum()
        assert (j <= best + 1e-12).all()
    # J at the optimum is beta log Z (the partition function)
    log_z = torch.logsumexp(ref.log() + r / betas[:, None], -1)
    torch.testing.assert_close(best, betas * log_z, rtol=1e-12, atol=1e-12)


def test_implicit_rewards_reference_ranks_pairs_by_the_dpo_margin() -> None:
    g = torch.Generator().manual_seed(1)
    pw, pl, rw, rl = (-30 * torch.rand(50, generator=g, dtype=torch.float64) for _ in range(4))
    w, lose, acc = dpo.implicit_rewards(pw, pl, rw, rl, 0.3)
    margin = (pw - rw) - (pl - rl)
    torch.testing.assert_close(w - lose, 0.3 * margin)
    assert acc == pytest.approx(float((margin > 0).double().mean()))
    assert type(acc) is float
