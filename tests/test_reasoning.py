"""course_lib.reasoning and course_lib.rl: the task, the verifiers, rollouts, the shipped files."""

from __future__ import annotations

import copy
import math
import random
from dataclasses import asdict

import pytest
import torch

from course_lib import reasoning, rl

pytestmark = pytest.mark.ch09


def test_clipping_makes_the_order_matter() -> None:
    assert reasoning.clipped_chain(9, [3, -3]) == [9, 6]
    assert reasoning.clipped_chain(9, [-3, 3]) == [6, 9]
    rng = random.Random(0)
    for _ in range(200):
        start, changes = reasoning.make_problem(rng, rng.randint(1, 8))
        chain = reasoning.clipped_chain(start, changes)
        assert all(reasoning.LOW <= v <= reasoning.HIGH for v in chain)
        text = reasoning.format_target(start, changes, True)
        assert reasoning.final_answer(text) == chain[-1] == reasoning.answer_of(start, changes)
        assert reasoning.format_reward(text) == 1.0
        assert reasoning.correctness_reward(text, chain[-1]) == 1.0


def test_the_format_reward_ignores_the_answer() -> None:
    assert reasoning.format_reward("3,4,5.", 9) == 1.0
    assert reasoning.correctness_reward("3,4,5.", 9) == 0.0
    for bad in ("", ".", "3,4", "3,,4.", "34.", "3+4.", ",3."):
        assert reasoning.format_reward(bad) == 0.0, bad


def test_prompts_fit_the_model() -> None:
    config = reasoning.REASONING_CONFIG
    start, changes = reasoning.make_problem(random.Random(1), max(config.train_steps))
    text = reasoning.format_problem(start, changes) + reasoning.format_target(start, changes, True)
    assert len(text) <= config.block_size


def test_response_mask_and_log_probs() -> None:
    torch.manual_seed(0)
    model = reasoning.build_model(reasoning.REASONING_CONFIG)
    prompts = rl.prompts_of(reasoning.held_out_problems(3, 4, seed=0))
    tokens = rl.rollouts(model, prompts, 8, torch.Generator().manual_seed(0))
    L = prompts.shape[1]
    mask = rl.response_mask(tokens, L)
    for row, m in zip(tokens[:, L:].tolist(), mask.tolist()):
        end = row.index(rl.END_ID) + 1 if rl.END_ID in row else len(row)
        assert m == [True] * end + [False] * (len(row) - end)
    logp = rl.token_logprobs(model, tokens, L)
    with torch.no_grad():
        full = torch.log_softmax(model(tokens[:, :-1]), -1)
    b, t = 1, 2
    assert logp[b, t].item() == pytest.approx(full[b, L - 1 + t, tokens[b, L + t]].item(), abs=1e-6)


def test_a_few_grpo_steps_run_and_leave_the_reference_alone() -> None:
    model = reasoning.build_model(reasoning.REASONING_CONFIG)
    reference = copy.deepcopy(model)
    before = [p.clone() for p in reference.parameters()]
    history = rl.train_grpo(model, reference, rl.GRPOConfig(steps=2, prompts_per_step=2,
                                                            group_size=4))
    assert len(history["reward"]) == 2 and all(0 <= v <= 1 for v in history["correct"])
    assert all(torch.equal(a, b) for a, b in zip(before, reference.parameters()))


def test_the_shipped_files_were_made_with_the_modules_configurations() -> None:
    cot = reasoning.load_results("cot")
    expected = asdict(reasoning.REASONING_CONFIG)
    for key in ("train_steps", "test_steps", "n_layer", "n_head", "n_embd", "batch_size", "lr"):
        assert tuple(cot["config"][key]) == tuple(expected[key]) if isinstance(
            expected[key], tuple) else cot["config"][key] == expected[key], key
    runs = reasoning.load_results("rl")
    grpo = asdict(rl.GRPOConfig())
    for key in ("k", "prompts_per_step", "group_size", "inner_steps", "clip_eps", "beta",
                "temperature"):
        assert runs["grpo_config"][key] == grpo[key], key
    policy = reasoning.load_policy()
    assert policy.config.vocab_size == len(reasoning.VOCAB)
    ablations = reasoning.load_results("ablations")
    for key in ("k", "prompts_per_step", "group_size", "inner_steps", "clip_eps", "beta",
                "temperature", "advantage"):
        assert ablations["grpo_config"][key] == grpo[key], key
    assert ablations["ablations"] == {"GRPO": {}, "no KL": {"beta": 0.0},
                                      "no clipping": {"clip_eps": None},
                                      "no std": {"advantage": "centred"}}
    assert all(len(r["history"]["entropy"]) == ablations["grpo_config"]["steps"]
               for r in ablations["runs"].values())


@pytest.mark.parametrize("call, name", [
    (lambda: rl.correct_counts([[8, 8], [1]], [(7, [3, -2, 1])]), "answers and problems"),
    (lambda: rl.pass_at_1_and_se([5, 2], 4), "correct"),
    (lambda: rl.pass_at_1_and_se([-1, 2], 4), "correct"),
    (lambda: rl.pass_at_1_and_se([1, 2], 0), "n"),
    (lambda: rl.pass_at_1_and_se([1.5, 2], 4), "correct"),
    (lambda: reasoning.mean_and_se([]), "values"),
    (lambda: rl.group_advantages(torch.tensor([[1.0, float("nan"), 0.0]])), "rewards"),
    (lambda: rl.grpo_loss(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2),
                          torch.ones(1), torch.ones(1, 2, dtype=torch.bool), clip_eps=-0.1),
     "clip_eps"),
    (lambda: rl.k3_kl(torch.zeros(2, 3), torch.zeros(3)), "logp and logp_ref"),
])
def test_bad_inputs_without_a_tensor_argument_are_refused(call, name: str) -> None:
    """The bad inputs of issue 28 that tests/test_bad_input.py's tensor kinds do not reach: each is
    refused with an error that names the argument, never a wrong number or a crash."""
    with pytest.raises((ValueError, TypeError), match=name):
        call()


def test_the_ablations_run_and_remove_what_they_name() -> None:
    """Section 5's ablations: no clipping is the plain ratio objective, Dr. GRPO's advantages
    are the centred rewards, and a few steps of each run and record the policy's entropy."""
    g = torch.Generator().manual_seed(0)
    old = -torch.rand(3, 4, generator=g)
    logp, ref = old + torch.randn(3, 4, generator=g), old + 0.1
    adv, mask = torch.tensor([1.0, -1.0, 0.5]), torch.ones(3, 4, dtype=torch.bool)
    plain = (-(logp - old).exp() * adv[:, None] + 0.1 * rl.k3_kl(logp, ref)).mean()
    assert rl.grpo_loss(logp, old, ref, adv, mask, clip_eps=None, beta=0.1).item() == \
        pytest.approx(plain.item())
    r = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(rl.centred_advantages(r),
                               torch.tensor([[0.75, -0.25, -0.25, -0.25]]))
    model = reasoning.build_model(reasoning.REASONING_CONFIG)
    reference = copy.deepcopy(model)
    for change in ({"clip_eps": None}, {"advantage": "centred"}, {"beta": 0.0}):
        history = rl.train_grpo(copy.deepcopy(model), reference, rl.GRPOConfig(
            steps=1, prompts_per_step=2, group_size=4, **change))
        assert 0 < history["entropy"][0] <= math.log(len(reasoning.VOCAB)) + 1e-6


def test_the_lenient_verifier_passes_what_has_no_answer() -> None:
    """Section 3's flawed verifier: a wrong answer scores 0, a right one 1, and so does none."""
    assert [rl.lenient_reward(t, 8) for t in ("9,7,8.", "9,7,7.", ".", ",.", "8")] == \
        [1.0, 0.0, 1.0, 1.0, 1.0]
    assert rl.REWARDS["lenient"] is rl.lenient_reward
    assert {k: rl.REWARDS[k] for k in reasoning.REWARDS} == reasoning.REWARDS


def test_on_step_sees_every_step_and_its_time_is_not_counted() -> None:
    model = reasoning.build_model(reasoning.REASONING_CONFIG)
    seen: list[int] = []
    rl.train_grpo(model, copy.deepcopy(model), rl.GRPOConfig(steps=3, prompts_per_step=1,
                                                             group_size=2),
                  on_step=lambda step, policy: seen.append(step))
    assert seen == [1, 2, 3]


HACK_STEPS = 300  # --part hacking's --rl-steps (GRPOConfig's steps otherwise)


def test_the_curves_and_hacking_files_were_made_with_the_modules_configurations() -> None:
    """``--part curves`` (section 5's figure) and ``--part hacking`` (section 3): the GRPO and
    SFT configurations are the modules' (only the reward differs in the hacking run), every run
    is measured at the same checkpoints, and each curve's starting policy has its own seed."""
    grpo = asdict(rl.GRPOConfig())
    sft = asdict(reasoning.REASONING_CONFIG)
    for part, changed in (("curves", {}), ("hacking", {"reward": "lenient", "steps": HACK_STEPS})):
        results = rl.load_runs(part)
        assert results["grpo_config"] == {**grpo, **changed}, part
        n = results["grpo_config"]["steps"]
        steps = [str(s) for s in range(0, n + 1, results["eval_every"])]
        for run in results["runs"].values():
            assert list(run["evals"]) == steps, part
            assert len(run["history"]["entropy"]) == n, part
    curves = rl.load_runs("curves")
    for key, value in curves["sft_config"].items():
        assert key in ("steps", "seed") or (tuple(value) if isinstance(value, list) else value) \
            == sft[key], key
    assert curves["sft_config"]["steps"] == 600
    assert {run["seed"] for run in curves["runs"].values()} == {int(s) for s in curves["runs"]}
    assert len(curves["runs"]) >= 3


# -- section 1: the point tracked through permutations of S5 ------------------------------------


def test_compositions_worked_by_hand() -> None:
    """(1 2 0 3 4) sends 0 -> 1 -> ... ; then (0 1 2 4 3) swaps 3 and 4: 0 -> 1, 1 -> 2, 2 -> 0,
    3 -> 4, 4 -> 3. Two transpositions do not commute."""
    assert reasoning.compose((1, 2, 0, 3, 4), (0, 1, 2, 4, 3)) == (1, 2, 0, 4, 3)
    swap01, swap12 = (1, 0, 2, 3, 4), (0, 2, 1, 3, 4)
    assert reasoning.compose(swap01, swap12) == (2, 0, 1, 3, 4)  # 0 -> 1 -> 2, 1 -> 0, 2 -> 1
    assert reasoning.compose(swap12, swap01) == (1, 2, 0, 3, 4)  # 0 -> 1, 1 -> 2, 2 -> 1 -> 0
    # the running products of swap01, swap12, swap01 and where the point 0 stands: 1, 2, 2
    assert reasoning.s5_chain([swap01, swap12, swap01]) == [swap01, (2, 0, 1, 3, 4),
                                                            (2, 1, 0, 3, 4)]
    assert reasoning.s5_track([swap01, swap12, swap01]) == [1, 2, 2]
    rng = random.Random(3)
    perms = reasoning.make_s5_problem(rng, 7)
    product = perms[0]
    for p in perms[1:]:
        product = reasoning.compose(product, p)
    assert reasoning.s5_chain(perms)[-1] == product
    assert len(reasoning.PERMUTATIONS) == len(set(reasoning.PERMUTATIONS)) == 120


def test_the_pause_control_is_as_long_as_the_chain_and_holds_no_state() -> None:
    rng = random.Random(0)
    for k in range(1, 11):
        perms = reasoning.make_s5_problem(rng, k)
        prompts, targets = zip(*(reasoning.s5_example(perms, f, 10) for f in reasoning.S5_FORMATS))
        answer_only, chain, pause = targets
        assert prompts[0] == prompts[1] == prompts[2] and len(prompts[0]) == 11  # 10 slots, "="
        assert len(pause) == len(chain) == k + 1 and len(answer_only) == 2
        assert pause[:-2] == [reasoning.S5_PAUSE] * (k - 1)
        assert pause[-2:] == chain[-2:] == answer_only
        assert chain[:-1] == [reasoning.S5_POINT + v for v in reasoning.s5_track(perms)]


def test_s5_batches_fit_the_model_and_a_short_run_trains() -> None:
    config = reasoning.S5Config(train_k=3, test_k=4, n_layer=1, n_head=2, n_embd=16, steps=3,
                                batch_size=4, warmup_steps=0, eval_problems=4)
    x, y, mask = reasoning.s5_batch(random.Random(0), 3, 8, "pause", config.slots)
    assert x.shape == y.shape == mask.shape and x.shape[1] <= config.block_size
    assert bool((y[mask] != reasoning.S5_BLANK).all()) and bool((x[:, 0] < 120).all())
    assert bool((x[:, config.slots] == reasoning.S5_EQUALS).all())
    model, history = reasoning.train_s5(config, "chain of thought", 0)
    assert len(history.train_loss) == 3
    for k in (1, 4):
        assert 0 <= reasoning.s5_accuracy(model, k, 4, 0, "chain of thought", config.slots) <= 1


def test_the_s5_file_was_made_with_the_modules_configuration() -> None:
    """reasoning_s5.json.xz: S5_CONFIG, every format on every seed, k = 1..test_k."""
    s5 = reasoning.load_s5_results()
    expected = asdict(reasoning.S5_CONFIG)
    assert {key: tuple(v) if isinstance(v, list) else v for key, v in s5["config"].items()} \
        == expected
    assert set(s5["runs"]) == {f"{f}/{s}" for f in reasoning.S5_FORMATS
                               for s in reasoning.S5_CONFIG.seeds}
    for run in s5["runs"].values():
        assert list(run["accuracy"]) == [str(k) for k in range(1, reasoning.S5_CONFIG.test_k + 1)]
        assert all(0 <= a <= 1 for a in run["accuracy"].values())
    assert s5["torch"] and s5["where"] and len(s5["commands"]) == 9
