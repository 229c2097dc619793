"""Train chapter 9's experiments and ship their results (not a test).

``--part cot`` (section 1): for each of ``--seeds``, two small GPTs from scratch on the
clipped counter (:mod:`course_lib.reasoning`), one with answer-only targets and one with every
clipped count written out, with :data:`course_lib.reasoning.REASONING_CONFIG` and ``--steps``
optimiser steps; greedy exact-match accuracy at every test k goes to
``course_lib/data/reasoning_cot.json.xz``.

``--part s5`` (section 1): for each of ``--formats`` (answer only, chain of thought, pause) and
``--seeds``, a small decoder from scratch on the point moved by k permutations of S5, with
:data:`course_lib.reasoning.S5_CONFIG`; greedy accuracy at every test k goes to
``course_lib/data/reasoning_s5.json.xz`` (``--merge`` joins the files of separate runs).

``--part rl`` (sections 2 to 5): one starting policy trained briefly with the chain-of-thought
targets (``--sft-steps``, seed 0), then for each seed GRPO (:func:`course_lib.rl.train_grpo`) with
the correctness reward; for seed 0 also GRPO with the format-only reward. Before and after,
``--samples`` answers to each of ``--problems`` held-out problems give pass@1 (with its standard
error over problems) and pass@k; the curves of training and the samples' counts go to
``course_lib/data/reasoning_rl.json.xz``, and seed 0's starting policy (half precision) to
``course_lib/data/reasoning_policy.pt.xz``, which the chapter samples from.

``--part ablations`` (section 5's ablations): from the shipped starting policy, for each seed,
``--ablation-steps`` steps of GRPO as it is and with one piece removed: the KL penalty
(``beta=0``), the clipping (``clip_eps=None``) or the division by the group's standard deviation
(``advantage="centred"``, Dr. GRPO's); pass@1 before and after on the held-out problems, and the
policy's entropy and KL over training, go to ``course_lib/data/reasoning_ablations.json.xz``.

``--part curves`` (section 5's figure over training): for each seed, a starting policy trained
with that seed (the SFT of ``--part rl``), then GRPO with the correctness reward from it, measured
every ``--eval-every`` steps on the held-out problems (pass@1, pass@k, the policy's entropy);
``course_lib/data/reasoning_curves.json.xz``.

``--part hacking`` (section 3): from the shipped starting policy, for each seed, GRPO against
the flawed verifier :func:`course_lib.rl.lenient_reward`, measured in the same way, with the
verifier's reward, the share of completions without an answer and a few of them;
``course_lib/data/reasoning_hacking.json.xz``.
Provenance, commands and cost: ``course_lib/data/REASONING.md``.

    nice -n 10 .venv/bin/python scripts/train_reasoning.py --part cot
    nice -n 10 .venv/bin/python scripts/train_reasoning.py --part s5 --seeds 0 1 2
    nice -n 10 .venv/bin/python scripts/train_reasoning.py --part rl
    nice -n 10 .venv/bin/python scripts/train_reasoning.py --part ablations
    nice -n 10 .venv/bin/python scripts/train_reasoning.py --part curves --seeds 0 1 2 3 4
    nice -n 10 .venv/bin/python scripts/train_reasoning.py --part hacking --seeds 0 1 2 3 \
        --rl-steps 300 --eval-every 25
"""

from __future__ import annotations

import argparse
import copy
import io
import lzma
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from course_lib import finetune, reasoning, rl


def part_cot(steps: int, seeds: list[int]) -> dict:
    config = replace(reasoning.REASONING_CONFIG, steps=steps)
    out: dict = {"config": asdict(config), "seeds": seeds, "accuracy": {}, "final_loss": {},
                 "seconds": {}}
    for cot in (False, True):
        name = reasoning.VARIANTS[int(cot)]
        out["accuracy"][name], out["final_loss"][name], out["seconds"][name] = {}, {}, {}
        for seed in seeds:
            model, history = reasoning.train_variant(replace(config, seed=seed), cot)
            out["accuracy"][name][str(seed)] = {
                str(k): reasoning.greedy_accuracy(
                    model, reasoning.held_out_problems(k, config.eval_problems, config.eval_seed),
                    cot)
                for k in config.test_steps}
            out["final_loss"][name][str(seed)] = sum(history.train_loss[-50:]) / 50
            out["seconds"][name][str(seed)] = history.seconds
            print(name, seed, out["accuracy"][name][str(seed)], flush=True)
    return out


def evaluate(model, problems, n: int, seed: int) -> dict:
    answers = rl.sample_answers(model, problems, n, seed=seed)
    correct = rl.correct_counts(answers, problems)
    p1, se = rl.pass_at_1_and_se(correct, n)
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64, 128, 256) if k <= n]
    votes = {}
    for m in ks:
        voted = [reasoning.majority_vote(row[:m]) for row in answers]
        votes[str(m)] = sum(v == reasoning.answer_of(s, c)
                            for v, (s, c) in zip(voted, problems)) / len(problems)
    return {"pass1": p1, "pass1_se": se, "correct": correct,
            "pass_at_k": {str(k): v for k, v in reasoning.pass_at_k_curve(correct, n, ks).items()},
            "majority": votes}


def part_rl(args: argparse.Namespace) -> dict:
    grpo = replace(rl.GRPOConfig(), steps=args.rl_steps, lr=args.lr)
    sft = replace(reasoning.REASONING_CONFIG, steps=args.sft_steps)
    problems = reasoning.held_out_problems(grpo.k, args.problems, 54321)
    out: dict = {"sft_config": asdict(sft), "grpo_config": asdict(grpo), "samples": args.samples,
                 "problems": args.problems, "eval_seed": 54321, "runs": {}}
    start = time.perf_counter()
    policy, _ = reasoning.train_variant(sft, True)  # one starting policy (seed 0), shipped
    out["sft_seconds"] = time.perf_counter() - start
    buffer = io.BytesIO()
    torch.save({"config": asdict(sft), "gpt_config": asdict(policy.config),
                "state_dict": {k: v.half() for k, v in policy.state_dict().items()}}, buffer)
    reasoning.POLICY_PATH.write_bytes(lzma.compress(buffer.getvalue()))
    policy.load_state_dict({k: v.half().float() for k, v in policy.state_dict().items()})
    for seed in args.seeds:
        before = evaluate(policy, problems, args.samples, seed=1000 + seed)
        print("seed", seed, "before", before["pass1"], flush=True)
        variants = [("correct", grpo)]
        if seed == args.seeds[0]:
            variants += [("format", replace(grpo, reward="format"))]
        for name, config in variants:
            trained = copy.deepcopy(policy)
            history = rl.train_grpo(trained, policy, replace(config, seed=seed))
            after = evaluate(trained, problems, args.samples, seed=2000 + seed)
            print("seed", seed, name, "after", after["pass1"], history["seconds"], flush=True)
            out["runs"][f"{name}/{seed}"] = {"reward": name, "seed": seed, "level": config.level,
                                             "history": history, "after": after,
                                             "before": before}
    return out


#: Section 5's ablations: each removes one piece of GRPO from rl.GRPOConfig's defaults.
ABLATIONS = {"GRPO": {}, "no KL": {"beta": 0.0}, "no clipping": {"clip_eps": None},
             "no std": {"advantage": "centred"}}


def part_ablations(args: argparse.Namespace) -> dict:
    grpo = replace(rl.GRPOConfig(), steps=args.ablation_steps, lr=args.lr)
    problems = reasoning.held_out_problems(grpo.k, args.problems, 54321)
    policy = reasoning.load_policy()
    out: dict = {"grpo_config": asdict(grpo), "samples": args.samples,
                 "problems": args.problems, "eval_seed": 54321, "ablations": ABLATIONS,
                 "before": evaluate(policy, problems, args.samples, seed=1000), "runs": {}}
    print("before", out["before"]["pass1"], flush=True)
    for seed in args.seeds:
        for name, change in ABLATIONS.items():
            trained = copy.deepcopy(policy)
            history = rl.train_grpo(trained, policy, replace(grpo, seed=seed, **change))
            after = evaluate(trained, problems, args.samples, seed=2000 + seed)
            print(name, seed, "after", after["pass1"], history["seconds"], flush=True)
            out["runs"][f"{name}/{seed}"] = {"ablation": name, "seed": seed,
                                             "history": history, "after": after}
    return out


def measure(model, problems, n: int, seed: int, proxy: str | None = None) -> dict:
    """Held-out pass@1 (standard error over problems), pass@k, and the policy's entropy per
    response token on the same ``n`` samples per problem; with ``proxy``, that reward's mean
    and the share of samples without an answer."""
    device = next(model.parameters()).device
    k = reasoning.check_problems(problems)
    prompts = rl.prompts_of(problems, device).repeat_interleave(n, 0)
    generator = torch.Generator(device=device).manual_seed(seed)
    tokens = rl.rollouts(model, prompts, 2 * k + 2, generator)
    L = prompts.shape[1]
    texts = rl.completions_of(tokens, L)
    mask = rl.response_mask(tokens, L)
    answers = [reasoning.final_answer(t) for t in texts]
    correct = rl.correct_counts([answers[p * n:(p + 1) * n] for p in range(len(problems))],
                                problems)
    p1, se = rl.pass_at_1_and_se(correct, n)
    ks = [m for m in (1, 2, 4, 8, 16, 32, 64) if m <= n]
    out = {"pass1": p1, "pass1_se": se, "correct": correct,
           "pass_at_k": {str(m): v for m, v in reasoning.pass_at_k_curve(correct, n, ks).items()},
           "entropy": rl.response_entropy(model, tokens, L, mask),
           "length": float(mask.sum(1).float().mean())}
    if proxy is not None:
        truth = [reasoning.answer_of(s, c) for s, c in problems for _ in range(n)]
        out[proxy] = sum(map(rl.REWARDS[proxy], texts, truth)) / len(texts)
        out["no_answer"] = sum(a is None for a in answers) / len(answers)
        out["examples"] = [texts[p * n:p * n + 4] for p in range(3)]
    return out


def grpo_with_checkpoints(policy, config: rl.GRPOConfig, problems, args: argparse.Namespace,
                          proxy: str | None = None) -> dict:
    """GRPO from ``policy`` (the frozen reference), measured every ``--eval-every`` steps."""
    def sample_seed(step: int) -> int:
        return 10_000 * (config.seed + 1) + step

    evals = {"0": measure(policy, problems, args.samples, sample_seed(0), proxy)}

    def on_step(step: int, model) -> None:
        if step % args.eval_every == 0 or step == config.steps:
            evals[str(step)] = measure(model, problems, args.samples, sample_seed(step), proxy)
            print(f"  step {step}: pass@1 {evals[str(step)]['pass1']:.3f}", flush=True)

    trained = copy.deepcopy(policy)
    history = rl.train_grpo(trained, policy, config, on_step=on_step)
    return {"seed": config.seed, "history": history, "evals": evals}


def part_curves(args: argparse.Namespace) -> dict:
    """Section 5's figure: for each seed, a starting policy trained with that seed (the SFT of
    ``--part rl``), then GRPO with the correctness reward from it, measured during training."""
    grpo = replace(rl.GRPOConfig(), steps=args.rl_steps, lr=args.lr)
    sft = replace(reasoning.REASONING_CONFIG, steps=args.sft_steps)
    problems = reasoning.held_out_problems(grpo.k, args.problems, 54321)
    out: dict = {"sft_config": asdict(sft), "grpo_config": asdict(grpo), "samples": args.samples,
                 "problems": args.problems, "eval_seed": 54321, "eval_every": args.eval_every,
                 "runs": {}}
    shipped = reasoning.load_policy().state_dict()
    for seed in args.seeds:
        start = time.perf_counter()
        policy, _ = reasoning.train_variant(replace(sft, seed=seed), True)
        sft_seconds = time.perf_counter() - start
        policy.load_state_dict({k: v.half().float() for k, v in policy.state_dict().items()})
        run = grpo_with_checkpoints(policy, replace(grpo, seed=seed), problems, args)
        run["sft_seconds"] = sft_seconds
        run["shipped_policy_difference"] = max(  # 0 when seed 0 rebuilds the shipped policy
            float((v - shipped[k]).abs().max()) for k, v in policy.state_dict().items())
        out["runs"][str(seed)] = run
        print("seed", seed, "SFT", round(sft_seconds), "s; GRPO",
              round(run["history"]["seconds"][0]), "s", flush=True)
    return out


def part_hacking(args: argparse.Namespace) -> dict:
    """Section 3: GRPO from the shipped starting policy with the flawed verifier
    (``rl.lenient_reward``), the true correctness measured during training."""
    grpo = replace(rl.GRPOConfig(), steps=args.rl_steps, lr=args.lr, reward="lenient")
    problems = reasoning.held_out_problems(grpo.k, args.problems, 54321)
    policy = reasoning.load_policy()
    out: dict = {"grpo_config": asdict(grpo), "samples": args.samples, "problems": args.problems,
                 "eval_seed": 54321, "eval_every": args.eval_every, "runs": {}}
    for seed in args.seeds:
        out["runs"][str(seed)] = grpo_with_checkpoints(policy, replace(grpo, seed=seed),
                                                       problems, args, proxy="lenient")
    out["example_problems"] = [reasoning.format_problem(s, c) for s, c in problems[:3]]
    return out


def part_s5(args: argparse.Namespace) -> dict:
    """Section 1: for each of ``--formats`` and ``--seeds``, a small decoder from scratch on the
    point tracked through k permutations of S5 (``reasoning.S5_CONFIG``), then greedy accuracy
    at every test k; with ``--merge``, the files of several such runs joined into one."""
    import platform
    import shlex

    if args.merge:
        parts = [finetune.load_json_xz(path, "scripts/train_reasoning.py --part s5")
                 for path in args.merge]
        out = {"config": parts[0]["config"], "runs": {}, "commands": [], "seconds": {},
               "where": {}, "torch_of": {}}
        for part in parts:
            assert part["config"] == out["config"], "runs of different configurations"
            out["runs"].update(part["runs"])
            command = "python scripts/train_reasoning.py " + shlex.join(part["argv"])
            out["commands"].append(command)
            out["seconds"][command] = part["total_seconds"]
            out["where"][command] = part["where"]
            out["torch_of"][command] = part["torch"]
        return out
    config = reasoning.S5_CONFIG
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text()
                .splitlines() if line.startswith("model name")), platform.processor())
    out = {"config": asdict(config), "runs": {}, "argv": sys.argv[1:],
           "where": f"{platform.node()}: {cpu}, one thread, CPU"}
    for fmt in args.formats:
        for seed in args.seeds:
            model, history = reasoning.train_s5(config, fmt, seed)
            start = time.perf_counter()
            accuracy = {str(k): reasoning.s5_accuracy(model, k, config.eval_problems,
                                                      config.eval_seed, fmt, config.slots)
                        for k in range(1, config.test_k + 1)}
            out["runs"][f"{fmt}/{seed}"] = {
                "format": fmt, "seed": seed, "accuracy": accuracy,
                "final_loss": sum(history.train_loss[-50:]) / 50,
                "loss": history.train_loss[::50], "train_seconds": history.seconds,
                "eval_seconds": time.perf_counter() - start}
            print(fmt, seed, round(history.seconds), "s", accuracy, flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", required=True,
                        choices=("cot", "rl", "ablations", "curves", "hacking", "s5"))
    parser.add_argument("--steps", type=int, default=3000, help="cot: optimiser steps")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--sft-steps", type=int, default=600)
    parser.add_argument("--rl-steps", type=int, default=120)
    parser.add_argument("--ablation-steps", type=int, default=60)
    parser.add_argument("--lr", type=float, default=2e-4)
    parser.add_argument("--problems", type=int, default=200)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--eval-every", type=int, default=20, help="curves, hacking")
    parser.add_argument("--formats", nargs="+", default=list(reasoning.S5_FORMATS),
                        choices=reasoning.S5_FORMATS, help="s5: the target formats")
    parser.add_argument("--merge", type=Path, nargs="+", default=None,
                        help="s5: join these files of --part s5 runs instead of training")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: course_lib/data/reasoning_<part>.json.xz")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    start = time.perf_counter()
    parts = {"cot": lambda: part_cot(args.steps, args.seeds), "rl": lambda: part_rl(args),
             "ablations": lambda: part_ablations(args), "curves": lambda: part_curves(args),
             "hacking": lambda: part_hacking(args), "s5": lambda: part_s5(args)}
    results = parts[args.part]()
    results["command"] = ("nice -n 10 .venv/bin/python scripts/train_reasoning.py "
                          + " ".join(argv if argv is not None else sys.argv[1:]))
    results["torch"] = torch.__version__
    results["total_seconds"] = time.perf_counter() - start
    path = args.out or reasoning.DATA_DIR / f"reasoning_{args.part}.json.xz"
    finetune.save_json_xz(results, path)
    print(f"wrote {path}; total {results['total_seconds']:.1f} s")


if __name__ == "__main__":
    main()
