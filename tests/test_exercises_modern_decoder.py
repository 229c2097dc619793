"""Chapter 7's exercises: the references agree with independent peers (the rotation matrix,
torch's grouped-query attention, a brute-force search of cache designs, a round of speculative
decoding enumerated, the measured ladder).

That the instructor's solutions pass, the slips fail with their own messages and calling
course_lib fails is checked for every chapter in tests/test_exercises.py and
tests/test_exercise_registries.py."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import pytest
import torch

from course_lib import grading, llama
from course_lib.exercises import modern_decoder as ex7
from course_lib.exercises._common import using_secret
from tests.questions import answer

pytestmark = pytest.mark.ch07


def test_rotary_reference_equals_the_rotation_matrix() -> None:
    x = torch.randn(3, 6, dtype=torch.float64)
    pos = torch.tensor([0, 5, 9])
    out = ex7.apply_rotary(x, pos, theta=50.0)
    for t in range(3):
        for i in range(3):
            a = float(pos[t]) * 50.0 ** (-2 * i / 6)
            r = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]],
                             dtype=torch.float64)
            assert torch.allclose(out[t, 2 * i:2 * i + 2], r @ x[t, 2 * i:2 * i + 2])


def test_half_split_reference_turns_an_interleaved_model_into_the_same_half_split_model() -> None:
    torch.manual_seed(0)
    cfg = llama.LlamaConfig(vocab_size=30, hidden_size=48, intermediate_size=64,
                            num_attention_heads=6, num_key_value_heads=2,
                            rope_pairing="interleaved", init_std=0.2)
    inter = llama.LlamaForCausalLM(cfg).double().eval()
    half = llama.LlamaForCausalLM(replace(cfg, rope_pairing="half")).double().eval()
    state = dict(inter.state_dict())
    for name, w in state.items():
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = cfg.num_attention_heads if "q_proj" in name else cfg.num_key_value_heads
            state[name] = ex7.to_half_split(w, heads)
    half.load_state_dict(state)
    ids = torch.randint(30, (2, 17))
    with torch.no_grad():
        assert torch.allclose(half(ids), inter(ids), atol=1e-12)
        half.load_state_dict(inter.state_dict())
        assert not torch.allclose(half(ids), inter(ids), atol=1e-3)


def test_half_split_reference_is_hugging_faces_permute() -> None:
    # convert_llama_weights_to_hf.py: w.view(n_heads, d // n_heads // 2, 2, d_in).transpose(1, 2)
    w = torch.randn(24, 5)
    hf = w.view(3, 4, 2, 5).transpose(1, 2).reshape(24, 5)
    assert torch.equal(ex7.to_half_split(w, 3), hf)


def test_gqa_reference_equals_torch_with_enable_gqa() -> None:
    q, k, v = torch.randn(2, 6, 5, 4), torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4)
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                enable_gqa=True)
    pos = torch.arange(5)
    assert torch.allclose(ex7.grouped_query_attention(q, k, v, pos, pos), expected, atol=1e-6)


def test_gqa_reference_on_a_shuffled_rolling_cache_equals_the_sorted_one() -> None:
    q, k, v = torch.randn(1, 4, 1, 8), torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    sorted_pos, order = torch.tensor([6, 7, 8, 9]), torch.tensor([2, 3, 0, 1])
    a = ex7.grouped_query_attention(q, k, v, torch.tensor([9]), sorted_pos, window=3)
    b = ex7.grouped_query_attention(q, k[:, :, order], v[:, :, order], torch.tensor([9]),
                                    sorted_pos[order], window=3)
    assert torch.allclose(a, b, atol=1e-6)


def _brute_force_design(budget: int, n: int, layers: int, heads: int, dh: int, batch: int,
                        b: int) -> tuple[int, int | None] | None:
    """Every design enumerated and filtered by the statement's rules, one by one."""
    per = 2 * layers * dh * batch * b
    divisors = [g for g in range(1, heads + 1) if heads % g == 0]
    full = [g for g in divisors if per * g * n <= budget]
    if full:
        return max(full), None
    windowed = [(g, w) for g in divisors for w in range(1, n)
                if per * g * w <= budget and layers * (w - 1) >= n - 1]
    if not windowed:
        return None
    g = max(gw[0] for gw in windowed)
    return g, max(w for gg, w in windowed if gg == g)


@pytest.mark.parametrize("n, layers, heads", [(40, 4, 6), (33, 2, 8), (17, 8, 4), (64, 1, 2)])
def test_design_reference_equals_a_brute_force_search(n: int, layers: int, heads: int) -> None:
    per = 2 * layers * 8 * 1 * 2
    for budget in range(1, per * heads * n + 2, max(1, per // 3)):
        assert ex7.kv_cache_design(budget, n, layers, heads, 8, 1, 2) == \
            _brute_force_design(budget, n, layers, heads, 8, 1, 2), budget


def test_design_verdicts_accept_the_reference_and_name_what_a_design_breaks() -> None:
    with using_secret("design"):
        for case in ex7._design_cases():
            inputs = case.inputs()
            best = ex7.kv_cache_design(**inputs)
            plain = None if best is None else list(best)
            assert all(ex7.design_verdicts(inputs, plain).values()), case.name
    llama3 = {"budget_bytes": 2 ** 30, "context": 8192, "n_layers": 32, "n_heads": 32,
              "head_dim": 128, "batch_size": 1, "bytes_per_value": 2}
    assert ex7.kv_cache_design(**llama3) == (8, None)
    v = ex7.design_verdicts(llama3, [16, None])
    assert not v["the cache after `context` tokens fits the budget"]
    v = ex7.design_verdicts(llama3, [32, 2048])
    assert v["the cache after `context` tokens fits the budget"]
    assert not v["full attention whenever some number of key/value heads fits it"]
    v = ex7.design_verdicts(llama3, [3, None])
    assert not v[ex7._DESIGN_KEYS[1]]
    assert not ex7.design_verdicts(llama3, None)["None exactly when no design fits"]


def _design_with_reach(reaches):  # the reference's search with another reach rule
    def design(budget_bytes, context, n_layers, n_heads, head_dim, batch_size, bytes_per_value):
        per = 2 * n_layers * head_dim * batch_size * bytes_per_value
        heads = [g for g in range(n_heads, 0, -1) if n_heads % g == 0]
        for g in heads:
            if per * g * context <= budget_bytes:
                return g, None
        for g in heads:
            w = min(budget_bytes // (per * g), context - 1)
            if w >= 1 and reaches(n_layers, w, context):
                return g, w
        return None
    return design


@pytest.mark.parametrize("secret", ["a", "b", "c"])
@pytest.mark.parametrize("name, reaches", [
    ("L W >= n (Mistral's convention)", lambda L, w, n: L * w >= n),
    ("L W >= n - 1", lambda L, w, n: L * w >= n - 1),
    ("L W > n", lambda L, w, n: L * w > n),
    ("L (W - 1) >= n", lambda L, w, n: L * (w - 1) >= n),
    ("L (W - 1) >= n - 2", lambda L, w, n: L * (w - 1) >= n - 2),
    ("L (W - 2) >= n - 1", lambda L, w, n: L * (w - 2) >= n - 1),
    ("L (W - 2) >= n", lambda L, w, n: L * (w - 2) >= n),
    ("L (W + 1) >= n", lambda L, w, n: L * (w + 1) >= n),
])
def test_every_off_by_one_reach_rule_fails_a_hidden_design_case(secret, name, reaches) -> None:
    """The boundary cases put the answer at the shortest reaching window, or one below it."""
    with using_secret(secret):
        assert all(r.message is None for r in
                   grading.evaluate("modern_decoder.kv_cache_design",
                                    _design_with_reach(lambda L, w, n: L * (w - 1) >= n - 1)))
        results = grading.evaluate("modern_decoder.kv_cache_design", _design_with_reach(reaches))
    assert any(r.message for r in results), name


def test_the_given_router_has_the_gates_right_and_the_loss_wrong() -> None:
    logits = torch.randn(20, 6, dtype=torch.float64)
    w, e, loss = ex7.given_router(logits, 2)
    rw, re, rloss = ex7.moe_route(logits, 2)
    assert torch.allclose(w, rw) and torch.equal(e, re)
    assert not torch.isclose(loss, rloss)
    # Its loss has no gradient on the logits of experts outside each token's top k.
    logits.requires_grad_(True)
    ex7.given_router(logits, 2)[2].backward()
    assert logits.grad is not None
    off = torch.ones_like(logits, dtype=torch.bool).scatter(1, e, False)
    assert torch.all(logits.grad[off] == 0)


@pytest.mark.parametrize("alpha, k", [(0.0, 3), (0.3, 1), (0.7, 4), (0.95, 6), (1.0, 5)])
def test_speedup_reference_equals_the_enumerated_round(alpha: float, k: int) -> None:
    expected = 0.0
    for outcome in itertools.product([True, False], repeat=k):  # acceptance of each draft
        prob, emitted = 1.0, 1
        for accepted in outcome:
            prob *= alpha if accepted else 1 - alpha
        for accepted in outcome:  # the round stops at the first rejection
            if not accepted:
                break
            emitted += 1
        expected += prob * emitted
    tokens, speedup = ex7.speculative_speedup(alpha, k, 0.1)
    assert tokens == pytest.approx(expected, abs=1e-12)
    assert speedup == pytest.approx(expected / (0.1 * k + 1), abs=1e-12)


def test_ladder_answer_is_the_measured_share_of_the_600_step_lead() -> None:
    """Exercise 8: the RoPE rung's lead over the learned-position rung after the equal-time runs
    (every run the same CPU time of training steps), as a share of its lead after 600 steps
    (means over seeds), put in the statement's bins."""
    runs = llama.load_runs()

    def gap(rows: list[dict]) -> float:
        mean = {}
        for r in rows:
            mean.setdefault(r["name"], []).append(r["val_loss"]["128"])
        return sum(mean["gpt"]) / len(mean["gpt"]) - sum(mean["+rope"]) / len(mean["+rope"])

    share = gap(runs["equal_time"]["runs"]) / gap(runs["runs"])  # 0.114 / 0.400 = 0.29
    letter = "a" if share > 1 else "b" if share >= 0.5 else "c" if share >= 0.1 else "d"
    assert letter == answer("modern_decoder.ladder_prediction")
    assert 0.15 < share < 0.45  # away from the bins' edges
