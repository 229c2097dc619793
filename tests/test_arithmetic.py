"""The chain-of-thought task (course_lib.arithmetic) and the shipped results of its script."""

from __future__ import annotations

import json
import random
from dataclasses import asdict, replace

import pytest

from course_lib import arithmetic

pytestmark = pytest.mark.ch08


def test_problems_stay_in_range_and_targets_follow_the_counts() -> None:
    rng = random.Random(0)
    for k in range(1, 9):
        for _ in range(50):
            start, changes = arithmetic.make_problem(rng, k)
            values = [start + sum(changes[:i]) for i in range(k + 1)]
            assert all(0 <= v <= 99 for v in values) and all(1 <= abs(d) <= 9 for d in changes)
            cot = arithmetic.format_target(start, changes, True)
            assert [int(v) for v in cot[:-1].split(",")] == values[1:]
            assert arithmetic.extract_answer(cot) == values[-1]
            assert arithmetic.format_target(start, changes, False) == f"{values[-1]:02d}."
            text = arithmetic.format_problem(start, changes)
            assert eval(text[:-1].lstrip("0") or "0") == values[-1]  # Python's arithmetic agrees
            assert len(text) == 3 + 2 * k and len(text) + len(cot) - 1 <= 3 + 5 * k
    with pytest.raises(ValueError, match="at least one change"):
        arithmetic.make_problem(rng, 0)


def test_extract_and_score_answers() -> None:
    assert arithmetic.extract_answer("Paul has 7 apples, then 10, so 8.") == 8
    assert arithmetic.extract_answer("") is None
    assert arithmetic.score_answers(["10,08,13.", "13", "x"], [13, 12, 0]) == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="as many"):
        arithmetic.score_answers(["1"], [1, 2])
    with pytest.raises(ValueError, match="vocabulary"):
        arithmetic.encode("7 apples")


def test_a_short_training_learns_the_format_and_accuracy_is_measured() -> None:
    config = replace(arithmetic.COT_CONFIG, train_steps=(1,), test_steps=(1, 2), steps=60,
                     eval_problems=20, n_embd=32, warmup_steps=5, lr=1e-2)
    model, history = arithmetic.train_variant(config, chain_of_thought=True)
    assert history.train_loss[-1] < 0.6 * history.train_loss[0]
    acc = arithmetic.accuracy(model, config, 1, True)
    assert 0.0 <= acc <= 1.0


@pytest.mark.parametrize("name", sorted(arithmetic.COT_CONFIGS))
def test_the_shipped_results_are_the_scripts_configuration(name: str) -> None:
    data = arithmetic.load_results(name)
    config = asdict(arithmetic.COT_CONFIGS[name])
    assert data["config"] == json.loads(json.dumps(config))  # tuples become lists in JSON
    assert data["command"].endswith(f"--config {name}")
    for variant in arithmetic.VARIANTS:
        assert list(data["accuracy"][variant]) == [str(k) for k in config["test_steps"]]
        assert all(0.0 <= a <= 1.0 for a in data["accuracy"][variant].values())
    with pytest.raises(ValueError, match="unknown configuration"):
        arithmetic.results_path("medium")


def test_the_script_runs_and_writes_a_file_the_loader_reads(tmp_path, monkeypatch) -> None:
    """A smoke run of scripts/train_chain_of_thought.py (two steps, few test problems)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts" / "train_chain_of_thought.py"
    spec = importlib.util.spec_from_file_location("train_chain_of_thought", path)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    small = replace(arithmetic.COT_CONFIGS["short"], eval_problems=5, test_steps=(1, 2))
    monkeypatch.setitem(arithmetic.COT_CONFIGS, "short", small)
    out = tmp_path / "cot.json.xz"
    results = script.main(["--config", "short", "--steps", "2", "--out", str(out)])
    monkeypatch.setattr(arithmetic, "results_path", lambda name: out)
    assert arithmetic.load_results("short")["accuracy"] == results["accuracy"]
    assert results["config"]["steps"] == 2 and results["command"].endswith("--config short")
