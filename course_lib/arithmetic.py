r"""Chain of thought as extra computation: multi-step arithmetic with and without written-out steps.

Taught in chapter 8 (from a base model to an assistant), section 5. The seed's apples ("Paul
has 7 apples, gets 3, gives away 2, gets 5: how many does he have?") as a string a small
Transformer reads one character at a time: the start (two digits), then :math:`k` signed
single-digit changes, then ``=``:

* answer only: ``07+3-2+5=`` :math:`\to` ``13.``
* chain of thought: ``07+3-2+5=`` :math:`\to` ``10,08,13.`` (every intermediate count, then the
  last one is the answer).

Counts stay between 0 and 99. The answer-only model must do all :math:`k` additions within one
forward pass of fixed depth; the chain-of-thought model writes each intermediate result, so each
new token depends on one previous result and one digit: a short dependency, repeated :math:`k`
times, with one more pass of the network per written token. The final answer of a completion is
its last number (:func:`extract_answer`).

``scripts/train_chain_of_thought.py --config short|long`` trains both variants with
:data:`COT_CONFIGS` (up to 4 or up to 8 steps in training) and writes
``course_lib/data/chain_of_thought_<name>.json.xz``, which the chapter plots.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

import torch

from course_lib import finetune, gpt, training

VOCAB: tuple[str, ...] = tuple("0123456789+-=,.")
END = "."  # ends every target; also the padding
VARIANTS: tuple[str, ...] = ("answer only", "chain of thought")
DATA_DIR = Path(__file__).resolve().parent / "data"


def results_path(name: str) -> Path:
    """Where ``scripts/train_chain_of_thought.py --config name`` writes its results."""
    if name not in COT_CONFIGS:
        raise ValueError(f"unknown configuration {name!r}; choose from {sorted(COT_CONFIGS)}")
    return DATA_DIR / f"chain_of_thought_{name}.json.xz"


@dataclass(frozen=True)
class ArithmeticConfig:
    """A chain-of-thought experiment: the task, the model, the training."""

    train_steps: tuple[int, ...] = (1, 2, 3, 4)  # numbers of changes k seen in training
    test_steps: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 8)  # k at test time (more than in training)
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    steps: int = 3000  # optimiser steps
    batch_size: int = 64
    lr: float = 3e-3
    warmup_steps: int = 100
    seed: int = 0  # initialisation and training problems
    eval_problems: int = 500  # test problems per k
    eval_seed: int = 12345  # test problems are drawn with this seed

    @property
    def block_size(self) -> int:
        """Long enough for a chain of thought of the largest k: 3 + 2k + 3k - 1 positions."""
        return 3 + 5 * max(*self.train_steps, *self.test_steps)


#: The two experiments of section 5: up to 4 steps in training, and up to 8 (longer chains).
COT_CONFIGS: dict[str, ArithmeticConfig] = {
    "short": ArithmeticConfig(),
    "long": ArithmeticConfig(train_steps=(1, 2, 3, 4, 5, 6, 7, 8),
                             test_steps=(1, 2, 3, 4, 5, 6, 7, 8, 10, 12)),
}
COT_CONFIG = COT_CONFIGS["short"]


def make_problem(rng: random.Random, k: int) -> tuple[int, list[int]]:
    """A start in 0..99 and ``k`` changes in -9..-1, 1..9 that keep the count in 0..99.

    Example:
        >>> start, changes = make_problem(random.Random(0), 3)
        >>> len(changes), all(0 <= start + sum(changes[:i]) <= 99 for i in range(4))
        (3, True)
    """
    if k < 1:
        raise ValueError(f"a problem has at least one change, got k={k}")
    start = rng.randint(0, 99)
    value, changes = start, []
    for _ in range(k):
        options = [d for d in range(-9, 10) if d != 0 and 0 <= value + d <= 99]
        d = rng.choice(options)
        changes.append(d)
        value += d
    return start, changes


def format_problem(start: int, changes: list[int]) -> str:
    """``"07+3-2+5="``: the start on two digits, each change with its sign, then ``=``.

    Example:
        >>> format_problem(7, [3, -2, 5])
        '07+3-2+5='
    """
    return f"{start:02d}" + "".join(f"{'+' if d > 0 else '-'}{abs(d)}" for d in changes) + "="


def format_target(start: int, changes: list[int], chain_of_thought: bool) -> str:
    """The target: ``"13."`` (answer only) or ``"10,08,13."`` (every intermediate count).

    Example:
        >>> format_target(7, [3, -2, 5], False), format_target(7, [3, -2, 5], True)
        ('13.', '10,08,13.')
    """
    values, value = [], start
    for d in changes:
        value += d
        values.append(value)
    shown = values if chain_of_thought else values[-1:]
    return ",".join(f"{v:02d}" for v in shown) + END


def extract_answer(text: str) -> int | None:
    """The final answer of a completion: its last number (a run of digits), or None if it has none.

    Example:
        >>> extract_answer("10,08,13."), extract_answer("13."), extract_answer("no idea")
        (13, 13, None)
    """
    numbers = re.findall(r"[0-9]+", text)
    return int(numbers[-1]) if numbers else None


def score_answers(completions: list[str], answers: list[int]) -> float:
    """Exact-match accuracy: the fraction of completions whose :func:`extract_answer` is the answer.

    Example:
        >>> score_answers(["10,08,13.", "5.", ""], [13, 6, 0])
        0.3333333333333333
    """
    if len(completions) != len(answers) or not answers:
        raise ValueError(f"need as many completions as answers (and at least one), got "
                         f"{len(completions)} and {len(answers)}")
    return sum(extract_answer(c) == a for c, a in zip(completions, answers)) / len(answers)


def encode(text: str) -> list[int]:
    """Token ids of ``text`` in :data:`VOCAB`."""
    try:
        return [VOCAB.index(ch) for ch in text]
    except ValueError:
        bad = next(ch for ch in text if ch not in VOCAB)
        raise ValueError(f"character {bad!r} is not in the arithmetic vocabulary {VOCAB}") from None


def decode(ids: list[int]) -> str:
    """The text of token ids."""
    return "".join(VOCAB[i] for i in ids)


def make_batch(rng: random.Random, ks: tuple[int, ...], batch_size: int, chain_of_thought: bool,
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch ``x, y, mask`` (each ``(B, T)``; mask: the target's tokens), k drawn from ``ks``."""
    pairs = []
    for _ in range(batch_size):
        start, changes = make_problem(rng, rng.choice(ks))
        pairs.append((format_problem(start, changes),
                      format_target(start, changes, chain_of_thought)))
    return finetune.encode_pairs(pairs, list(VOCAB), pad=END)


def build_model(config: ArithmeticConfig) -> gpt.GPT:
    """A small GPT over :data:`VOCAB`, seeded with ``config.seed``."""
    torch.manual_seed(config.seed)
    return gpt.GPT(gpt.GPTConfig(vocab_size=len(VOCAB), block_size=config.block_size,
                                 n_layer=config.n_layer, n_head=config.n_head,
                                 n_embd=config.n_embd))


class TrainingFields(Protocol):
    """The fields :func:`train_variant` reads (:class:`ArithmeticConfig` and chapter 9's config)."""

    @property
    def train_steps(self) -> tuple[int, ...]: ...
    @property
    def steps(self) -> int: ...
    @property
    def batch_size(self) -> int: ...
    @property
    def lr(self) -> float: ...
    @property
    def warmup_steps(self) -> int: ...
    @property
    def seed(self) -> int: ...


def train_variant(config: TrainingFields, chain_of_thought: bool,
                  device: torch.device | str = "cpu", progress: bool = False, *,
                  model_fn: Callable[[Any], gpt.GPT] = build_model,
                  batch_fn: Callable[..., tuple[torch.Tensor, ...]] = make_batch,
                  ) -> tuple[gpt.GPT, training.History]:
    """Train one variant from scratch with the answer-only loss on its targets.

    ``model_fn`` and ``batch_fn`` build the model and the batches (chapter 9's task passes its
    own; ``config`` then needs the same training fields).
    """
    return _train_answer_only(
        lambda: model_fn(config),
        lambda rng: batch_fn(rng, config.train_steps, config.batch_size, chain_of_thought),
        (config.steps, config.lr, config.warmup_steps), config.seed, device, progress,
        "chain of thought" if chain_of_thought else "answer only")


M = TypeVar("M", bound=torch.nn.Module)


def _train_answer_only(build: Callable[[], M],
                       next_batch: Callable[[random.Random], tuple[torch.Tensor, ...]],
                       schedule: tuple[int, float, int], seed: int, device: torch.device | str,
                       progress: bool, desc: str) -> tuple[M, training.History]:
    """The loop of :func:`train_variant` (and of chapter 9's S5 runs): ``build()`` seeded on the
    CPU, then moved; batches ``next_batch(rng)`` from ``random.Random(seed)``, each moved to
    ``device``; the answer-only loss; a cosine schedule of ``schedule = (steps, lr,
    warmup_steps)``."""
    with torch.device("cpu"):  # seeded initialisation on the CPU: the same weights on every device
        model = build()
    model = model.to(device)
    rng = random.Random(seed)

    def batches() -> Iterator[tuple[torch.Tensor, ...]]:
        while True:
            yield tuple(t.to(device) for t in next_batch(rng))

    def objective(model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        x, y, mask = batch
        return finetune.answer_only_loss(model(x), y, mask)

    steps, lr, warmup_steps = schedule
    train_config = training.TrainConfig(steps=steps, lr=lr, warmup_steps=warmup_steps,
                                        schedule="cosine", seed=seed, progress=progress, desc=desc)
    return model, training.train(model, batches(), objective, train_config)


@torch.no_grad()
def accuracy(model: gpt.GPT, config: ArithmeticConfig, k: int, chain_of_thought: bool,
             n: int | None = None) -> float:
    """Exact-match accuracy of greedy completions on ``n`` fresh problems with ``k`` changes."""
    n = config.eval_problems if n is None else n
    rng = random.Random(config.eval_seed + k)
    problems = [make_problem(rng, k) for _ in range(n)]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    prompts = torch.tensor([encode(format_problem(s, c)) for s, c in problems], device=device)
    new = 3 * k if chain_of_thought else 3
    tokens, step = prompts, model.cached_step()
    for _ in range(new):
        tokens = torch.cat([tokens, step(tokens).argmax(-1, keepdim=True)], dim=1)
    completions = [decode(row).split(END)[0] for row in tokens[:, prompts.shape[1]:].tolist()]
    model.train(was_training)
    return score_answers(completions, [s + sum(c) for s, c in problems])


def run(config: ArithmeticConfig, device: torch.device | str = "cpu",
        progress: bool = False) -> dict[str, Any]:
    """Train both variants and measure accuracy at every test k: what the script ships."""
    results: dict[str, Any] = {"config": asdict(config), "accuracy": {}, "final_loss": {},
                               "seconds": {}}
    for cot in (False, True):
        name = VARIANTS[int(cot)]
        model, history = train_variant(config, cot, device, progress)
        results["accuracy"][name] = {str(k): accuracy(model, config, k, cot)
                                     for k in config.test_steps}
        tail = history.train_loss[-50:]
        results["final_loss"][name] = sum(tail) / len(tail)
        results["seconds"][name] = history.seconds
    return results


def load_results(name: str = "short") -> dict[str, Any]:
    """The shipped results of ``scripts/train_chain_of_thought.py --config name``."""
    results: dict[str, Any] = finetune.load_json_xz(
        results_path(name), f"scripts/train_chain_of_thought.py --config {name}")
    return results
