r"""Reasoning tasks and verifiers: a point moved by permutations of S5, a counter that clips at
its bounds, chains of thought, many samples.

Taught in chapter 9 (reasoning), sections 1 to 3. Section 1's task is **state tracking without a
shortcut**: where the point 0 ends after :math:`k` permutations of five places
(:func:`s5_track`; composing permutations of :math:`S_5` is :math:`\mathsf{NC}^1`-complete),
answered directly, through every intermediate place (a chain of thought) or after as many pause
tokens (:func:`s5_example`, :func:`train_s5`, :func:`s5_accuracy`,
``scripts/train_reasoning.py --part s5``). Sections 2 to 5 use an easier task: a count starts
at a digit and takes :math:`k` signed changes, and after each one it is clipped to
``[LOW, HIGH] = [0, 9]``:

.. math:: s_0 = \text{start}, \qquad s_i = \min(\mathrm{HIGH}, \max(\mathrm{LOW}, s_{i-1} + d_i)).

Clipping makes the order matter (``9+3-3`` ends at 6, ``9-3+3`` at 9), so the answer is no
plain sum; but clipped additions compose into one clipped addition, and the counter's automaton
has a constant-depth shortcut (Liu et al., 2023). A problem is a string of
:data:`course_lib.arithmetic.VOCAB` read one character at a time:

* answer only: ``7+3-2+1=`` :math:`\to` ``8.``
* chain of thought: ``7+3-2+1=`` :math:`\to` ``9,7,8.`` (every clipped count; the last is the
  answer).

:func:`train_variant` trains either from scratch (``scripts/train_reasoning.py --part cot``);
section 2 samples many answers (:func:`majority_vote`, :func:`pass_at_k`); section 3 rewards
them (:func:`correctness_reward`, :func:`format_reward`).
"""

from __future__ import annotations

import itertools
import math
import numbers
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from course_lib import arithmetic, finetune, gpt, llama, training
from course_lib.checks import (
    check_finite_tensor,
    check_float_tensor,
    check_int,
    check_int_tensor,
    check_positive,
    check_sequence,
)

DATA_DIR = Path(__file__).resolve().parent / "data"
POLICY_PATH = DATA_DIR / "reasoning_policy.pt.xz"  # scripts/train_reasoning.py --part rl

LOW, HIGH = 0, 9  # the count is clipped to [LOW, HIGH] after every change
MAX_CHANGE = 3  # changes are -3..-1 and 1..3
VOCAB = arithmetic.VOCAB  # "0123456789+-=,."
END = arithmetic.END
VARIANTS = arithmetic.VARIANTS  # ("answer only", "chain of thought")
_FORMAT = re.compile(r"[0-9](,[0-9])*\.")


def _check_problem(start: int, changes: Sequence[int]) -> list[int]:
    """A start in ``[LOW, HIGH]`` and at least one change of one signed digit (``+3``, ``-2``)."""
    if not LOW <= check_int("start", start) <= HIGH:
        raise ValueError(f"start must be a count in [{LOW}, {HIGH}], got {start}")
    if isinstance(changes, str) or not isinstance(changes, Sequence):
        raise TypeError(f"changes must be a sequence of ints, got {type(changes).__name__} "
                        f"{changes!r}")
    if not changes:
        raise ValueError("changes must hold at least one change, got none")
    for d in changes:
        if not -9 <= check_int("changes", d) <= 9:
            raise ValueError(f"changes must be signed digits in [-9, 9], got {d}")
    return list(changes)


def _check_text(name: str, text: object) -> str:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__} {text!r}")
    return text


def clipped_chain(start: int, changes: Sequence[int]) -> list[int]:
    """The counts after each change, clipped to ``[LOW, HIGH]``: :math:`s_1, \\dots, s_k`.

    Example:
        >>> clipped_chain(9, [3, -3]), clipped_chain(9, [-3, 3])
        ([9, 6], [6, 9])
    """
    _check_problem(start, changes)
    values, value = [], start
    for d in changes:
        value = min(HIGH, max(LOW, value + d))
        values.append(value)
    return values


def make_problem(rng: random.Random, k: int) -> tuple[int, list[int]]:
    """A start in ``LOW..HIGH`` and ``k`` changes in ``-MAX_CHANGE..MAX_CHANGE`` without 0.

    Example:
        >>> start, changes = make_problem(random.Random(0), 4)
        >>> len(changes), LOW <= start <= HIGH, 0 not in changes
        (4, True, True)
    """
    if not isinstance(rng, random.Random):
        raise TypeError(f"rng must be a random.Random, got {type(rng).__name__}")
    if check_int("k", k) < 1:
        raise ValueError(f"a problem has at least one change, got k={k}")
    options = [d for d in range(-MAX_CHANGE, MAX_CHANGE + 1) if d != 0]
    return rng.randint(LOW, HIGH), [rng.choice(options) for _ in range(k)]


def format_problem(start: int, changes: Sequence[int]) -> str:
    """``"7+3-2+1="``: the start, each change with its sign, then ``=``.

    Example:
        >>> format_problem(7, [3, -2, 1])
        '7+3-2+1='
    """
    _check_problem(start, changes)
    return str(start) + "".join(f"{'+' if d > 0 else '-'}{abs(d)}" for d in changes) + "="


def format_target(start: int, changes: Sequence[int], chain_of_thought: bool) -> str:
    """``"8."`` (answer only) or ``"9,7,8."`` (every clipped count, the last one the answer).

    Example:
        >>> format_target(7, [3, -2, 1], False), format_target(7, [3, -2, 1], True)
        ('8.', '9,7,8.')
    """
    values = clipped_chain(start, changes)
    shown = values if chain_of_thought else values[-1:]
    return ",".join(str(v) for v in shown) + END


def answer_of(start: int, changes: Sequence[int]) -> int:
    """The final count.

    Example:
        >>> answer_of(7, [3, -2, 1])
        8
    """
    return clipped_chain(start, changes)[-1]


# -- verifiers (section 3) ----------------------------------------------------------------------


def final_answer(completion: str) -> int | None:
    """The answer of a completion: the last number before its first ``.`` (None without one).

    Example:
        >>> final_answer("9,7,8."), final_answer("8.5"), final_answer(",.")
        (8, 8, None)
    """
    return arithmetic.extract_answer(_check_text("completion", completion).split(END)[0])


def correctness_reward(completion: str, answer: int) -> float:
    """The verifiable reward: 1.0 when the completion's :func:`final_answer` is ``answer``.

    Example:
        >>> correctness_reward("9,7,8.", 8), correctness_reward("9,7,7.", 8)
        (1.0, 0.0)
    """
    check_int("answer", answer)
    return float(final_answer(completion) == answer)


def format_reward(completion: str, answer: int | None = None) -> float:
    """A format-only reward: 1.0 for digits separated by commas and ended by ``.``, right or not.

    ``answer`` is ignored: this reward checks how an answer looks, not whether it is right
    (section 3 trains a policy on it).

    Example:
        >>> (format_reward("9,7,8."), format_reward("1."), format_reward("9,,7"),
        ...  format_reward("97."))
        (1.0, 1.0, 0.0, 0.0)
    """
    _check_text("completion", completion)
    return float(_FORMAT.fullmatch(completion.split(END)[0] + END) is not None
                 and END in completion)


REWARDS = {"correct": correctness_reward, "format": format_reward}


# -- many samples (section 2) -------------------------------------------------------------------


def majority_vote(answers: Sequence[int | None]) -> int | None:
    """Self-consistency (Wang et al., 2023): the most frequent answer; ties go to the one seen
    first.

    ``None`` (a completion without an answer) never votes; with no answer at all, None.

    Example:
        >>> majority_vote([3, 5, 5, None, 3]), majority_vote([None, None]), majority_vote([2, 7])
        (3, None, 2)
    """
    if isinstance(answers, str) or not isinstance(answers, Sequence):
        raise TypeError(f"answers must be a sequence of ints or None, got "
                        f"{type(answers).__name__} {answers!r}")
    for a in answers:
        if a is not None:
            check_int("answers", a)
    counts = Counter(a for a in answers if a is not None)
    if not counts:
        return None
    best = max(counts.values())
    return next(a for a in answers if a is not None and counts[a] == best)


def pass_at_k(n: int, c: torch.Tensor | int, k: int) -> torch.Tensor:
    r"""The unbiased estimator of pass@k (Chen et al., 2021), from ``c`` correct of ``n`` samples.

    .. math:: \widehat{\text{pass@}k} = 1 - \binom{n-c}{k} \Big/ \binom{n}{k}
              = 1 - \prod_{i=n-c+1}^{n} \left(1 - \frac{k}{i}\right)

    The product never forms a binomial coefficient, so it neither overflows nor loses precision
    at large ``n``; when ``n - c < k`` it holds the factor :math:`i = k`, which is 0: every
    choice of ``k`` samples holds a right one, and the estimate is 1.

    Args:
        n: samples per problem; k: ``1 <= k <= n``.
        c: ``(P,)`` (or a number): right samples of each problem, ``0 <= c <= n``.

    Returns:
        ``(P,)`` float64 (0-d for a number).

    Example:
        >>> pass_at_k(10, torch.tensor([0, 3, 9]), 2)
        tensor([0.0000, 0.5333, 1.0000], dtype=torch.float64)
    """
    check_int("n", n)
    check_int("k", k)
    c = (check_int_tensor("c", c) if isinstance(c, torch.Tensor)
         else torch.as_tensor(check_int("c", c)))
    if not 1 <= k <= n or bool((c < 0).any()) or bool((c > n).any()):
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, k={k}, c in "
                         f"[{int(c.min())}, {int(c.max())}]")
    i = torch.arange(1, n + 1, dtype=torch.float64, device=c.device)  # (n,)
    factors = torch.where(i > (n - c.to(torch.float64))[..., None], 1.0 - k / i, 1.0)
    return 1.0 - factors.prod(-1)


def plug_in_bias(p: torch.Tensor, n: int, k: int) -> torch.Tensor:
    r"""The bias of the plug-in estimate :math:`1 - (1 - c/n)^k` of pass@k, exactly.

    A problem that a sample solves with probability :math:`p` has pass@k
    :math:`1 - (1 - p)^k`. Estimating it by putting the share :math:`c/n` of right samples in
    place of :math:`p`, with :math:`c \sim \mathrm{Binomial}(n, p)`, is biased: the bias is
    :math:`\mathbb E[1 - (1 - c/n)^k] - (1 - (1 - p)^k)`, which is :math:`\le 0` (Jensen:
    :math:`x \mapsto 1 - (1-x)^k` is concave) and 0 for :math:`k = 1`. The expectation is
    computed in exact rational arithmetic with a number of terms that depends on ``k`` only, so
    ``n`` may be as large as ``10**9`` and the result is the float64 nearest the exact bias.
    :func:`pass_at_k`'s expectation is exactly :math:`1 - (1-p)^k`.

    Args:
        p: float, each problem's probability of a right sample, in ``[0, 1]``.
        n: samples per problem; k: ``1 <= k <= n``.

    Returns:
        float64, the shape of ``p``.

    Example:
        >>> plug_in_bias(torch.tensor([0.5], dtype=torch.float64), 2, 2)
        tensor([-0.1250], dtype=torch.float64)
    """
    check_float_tensor("p", p)
    check_finite_tensor("p", p)
    if bool(((p < 0) | (p > 1)).any()):
        raise ValueError(f"p must lie in [0, 1], got values in [{float(p.min())}, "
                         f"{float(p.max())}]")
    check_int("n", n, minimum=1)
    check_int("k", k, minimum=1)
    if k > n:
        raise ValueError(f"k must lie in [1, n] = [1, {n}], got k={k}")
    from fractions import Fraction
    stirling = [1]  # the row S(i, 0..i) of Stirling numbers of the second kind, i = 0
    for i in range(1, k + 1):
        stirling = [0] + [j * (stirling[j] if j < i else 0) + stirling[j - 1]
                          for j in range(1, i + 1)]
    falling = [1]  # n (n - 1) ... (n - j + 1), j = 0..k
    for j in range(k):
        falling.append(falling[-1] * (n - j))
    out = []
    for value in p.detach().cpu().to(torch.float64).flatten().tolist():
        q = 1 - Fraction(value)  # n - c ~ Binomial(n, q); q = a / b exactly, in integers
        a, b = q.numerator, q.denominator
        # b^k n^k E[(n - c)^k] = sum_j S(k, j) n (n - 1) ... (n - j + 1) a^j b^(k - j)
        moment = sum(stirling[j] * falling[j] * a ** j * b ** (k - j) for j in range(k + 1))
        out.append(float(Fraction(a ** k * n ** k - moment, b ** k * n ** k)))
    return torch.tensor(out, dtype=torch.float64, device=p.device).reshape(p.shape)


def pass_at_k_curve(correct: Sequence[int], n: int, ks: Sequence[int]) -> dict[int, float]:
    """Mean :func:`pass_at_k` over problems (``correct[p]`` of ``n`` right) for each ``k``.

    Example:
        >>> pass_at_k_curve([0, 2, 4], 4, [1, 4])
        {1: 0.5, 4: 0.6666666666666666}
    """
    check_int("n", n, minimum=1)
    check_sequence("ks", ks)
    if not check_sequence("correct", correct):
        raise ValueError("correct must hold one count per problem, got none")
    for c_p in correct:
        if not 0 <= check_int("correct", c_p) <= n:
            raise ValueError(f"correct must hold counts in [0, n] = [0, {n}], got {c_p}")
    for k in ks:
        if not 1 <= check_int("ks", k) <= n:
            raise ValueError(f"ks must hold sample counts in [1, n] = [1, {n}], got {k}")
    c = torch.tensor(list(correct), device="cpu")  # Python counts in, Python means out
    return {k: float(pass_at_k(n, c, k).mean()) for k in ks}


def mean_and_se(values: Sequence[float]) -> tuple[float, float]:
    """The mean and its standard error (sample standard deviation over the square root of n).

    Example:
        >>> mean_and_se([1.0, 0.0, 1.0, 0.0])
        (0.5, 0.28867513459481287)
    """
    n = len(check_sequence("values", values))
    if n == 0:
        raise ValueError("values must hold at least one value: the mean of none is 0/0")
    for v in values:
        if not isinstance(v, numbers.Real):
            raise TypeError(f"values must hold real numbers, got {type(v).__name__} {v!r}")
        if not math.isfinite(v):
            raise ValueError(f"values must be finite, got {v}")
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var / n)


# -- training from scratch (section 1) ----------------------------------------------------------


@dataclass(frozen=True)
class ReasoningConfig:
    """Section 1's experiment: the task, the model, the training."""

    train_steps: tuple[int, ...] = tuple(range(1, 9))  # numbers of changes k in training
    test_steps: tuple[int, ...] = tuple(range(1, 9))  # k at test time
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    steps: int = 3000  # optimiser steps
    batch_size: int = 64
    lr: float = 3e-3
    warmup_steps: int = 100
    seed: int = 0  # initialisation and training problems
    eval_problems: int = 500  # test problems per k
    eval_seed: int = 12345  # test problems are drawn with this seed plus k

    def __post_init__(self) -> None:
        for name in ("train_steps", "test_steps"):
            ks = getattr(self, name)
            if isinstance(ks, str) or not isinstance(ks, Sequence) or not ks:
                raise ValueError(f"{name} must be a non-empty tuple of numbers of changes, got "
                                 f"{ks!r}")
            for k in ks:
                check_int(name, k, minimum=1)
        for name in ("n_layer", "n_head", "n_embd", "steps", "batch_size", "eval_problems"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("warmup_steps", self.warmup_steps, minimum=0)
        check_positive("lr", self.lr)

    @property
    def block_size(self) -> int:
        """A chain of thought of the largest k: 2 + 2k prompt and 2k target positions."""
        return 2 + 4 * max(*self.train_steps, *self.test_steps)


REASONING_CONFIG = ReasoningConfig()


def _check_config(config: ReasoningConfig) -> None:
    if not isinstance(config, ReasoningConfig):
        raise TypeError(f"config must be a ReasoningConfig, got {type(config).__name__}")


def check_problems(problems: Sequence[tuple[int, list[int]]]) -> int:
    """``problems`` is a non-empty list of ``(start, changes)`` with one number of changes ``k``;
    returns ``k``."""
    if not check_sequence("problems", problems):
        raise ValueError("problems must hold at least one (start, changes) problem, got none")
    for problem in problems:
        if not isinstance(problem, (tuple, list)) or len(problem) != 2:
            raise TypeError(f"problems must hold (start, changes) pairs, got {problem!r}")
    ks = {len(_check_problem(*problem)) for problem in problems}
    if len(ks) > 1:
        raise ValueError(f"problems must all have the same number of changes, got {sorted(ks)}")
    return ks.pop()


def encode(text: str) -> list[int]:
    """Token ids of ``text`` in :data:`VOCAB`.

    Example:
        >>> encode("7+1=")
        [7, 10, 1, 12]
    """
    bad = [ch for ch in _check_text("text", text) if ch not in VOCAB]
    if bad:
        raise ValueError(f"text must be written in {VOCAB!r}, got {bad[0]!r} in {text!r}")
    return arithmetic.encode(text)


def decode(ids: Sequence[int]) -> str:
    """The text of token ids (the inverse of :func:`encode`)."""
    if isinstance(ids, str) or not isinstance(ids, Sequence):
        raise TypeError(f"ids must be a sequence of ints, got {type(ids).__name__} {ids!r}")
    for i in ids:
        if not 0 <= check_int("ids", i) < len(VOCAB):
            raise ValueError(f"ids must be token ids in [0, {len(VOCAB)}), got {i}")
    return arithmetic.decode(list(ids))


def make_batch(rng: random.Random, ks: Sequence[int], batch_size: int, chain_of_thought: bool,
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch ``x, y, mask`` (each ``(B, T)``; mask: the target's tokens), k drawn from ``ks``."""
    if not isinstance(rng, random.Random):
        raise TypeError(f"rng must be a random.Random, got {type(rng).__name__}")
    if not check_sequence("ks", ks):
        raise ValueError("ks must hold at least one number of changes, got none")
    for k in ks:
        check_int("ks", k, minimum=1)
    check_int("batch_size", batch_size, minimum=1)
    pairs = []
    for _ in range(batch_size):
        start, changes = make_problem(rng, rng.choice(list(ks)))
        pairs.append((format_problem(start, changes),
                      format_target(start, changes, chain_of_thought)))
    return finetune.encode_pairs(pairs, list(VOCAB), pad=END)


def build_model(config: ReasoningConfig) -> gpt.GPT:
    """A small GPT over :data:`VOCAB`, seeded with ``config.seed``."""
    _check_config(config)
    torch.manual_seed(config.seed)
    return gpt.GPT(gpt.GPTConfig(vocab_size=len(VOCAB), block_size=config.block_size,
                                 n_layer=config.n_layer, n_head=config.n_head,
                                 n_embd=config.n_embd))


def train_variant(config: ReasoningConfig, chain_of_thought: bool,
                  device: torch.device | str = "cpu", progress: bool = False,
                  ) -> tuple[gpt.GPT, training.History]:
    """Train one variant from scratch with the answer-only loss on its targets (chapter 8's
    loop, :func:`course_lib.arithmetic.train_variant`, on this task's batches and vocabulary)."""
    _check_config(config)
    return arithmetic.train_variant(config, chain_of_thought, device, progress,
                                    model_fn=build_model, batch_fn=make_batch)


def held_out_problems(k: int, n: int, seed: int) -> list[tuple[int, list[int]]]:
    """``n`` problems with ``k`` changes drawn with ``seed + k`` (held out: training uses others).

    Example:
        >>> held_out_problems(3, 2, 0) == held_out_problems(3, 2, 0)
        True
    """
    check_int("k", k, minimum=1)
    check_int("n", n, minimum=0)
    rng = random.Random(seed + k)
    return [make_problem(rng, k) for _ in range(n)]


@torch.no_grad()
def greedy_accuracy(model: gpt.GPT, problems: Sequence[tuple[int, list[int]]],
                    chain_of_thought: bool) -> float:
    """Exact-match accuracy of greedy completions (all problems with the same k)."""
    check_problems(problems)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    prompts = torch.tensor([encode(format_problem(s, c)) for s, c in problems], device=device)
    k = len(problems[0][1])
    tokens, step = prompts, model.cached_step()
    for _ in range(2 * k if chain_of_thought else 2):
        tokens = torch.cat([tokens, step(tokens).argmax(-1, keepdim=True)], dim=1)
    model.train(was_training)
    completions = [decode(row) for row in tokens[:, prompts.shape[1]:].tolist()]
    return sum(final_answer(t) == answer_of(s, c)
               for t, (s, c) in zip(completions, problems)) / len(problems)


def load_policy(device: torch.device | str = "cpu") -> gpt.GPT:
    """Section 2's starting policy: the shipped chain-of-thought GPT of
    ``scripts/train_reasoning.py``.

    A GPT trained for only a few hundred steps on chains of thought (seed 0 of ``--part rl``),
    so that it is right often, but far from always; shipped in half precision, loaded in float32.
    """
    import io
    import lzma

    if not POLICY_PATH.is_file():
        raise FileNotFoundError(f"{POLICY_PATH} not found; run scripts/train_reasoning.py "
                                "--part rl")
    saved = torch.load(io.BytesIO(lzma.decompress(POLICY_PATH.read_bytes())), weights_only=True)
    with torch.device("cpu"):  # where torch.load put the checkpoint; moved below
        model = gpt.GPT(gpt.GPTConfig(**saved["gpt_config"]))
    model.load_state_dict({k: v.float() for k, v in saved["state_dict"].items()})
    return model.to(device).eval()


def load_results(part: Literal["cot", "rl", "ablations"]) -> dict[str, Any]:
    """The shipped results of ``scripts/train_reasoning.py --part cot|rl|ablations``."""
    if part not in ("cot", "rl", "ablations"):
        raise ValueError(f"part must be 'cot', 'rl' or 'ablations', got {part!r}")
    results: dict[str, Any] = finetune.load_json_xz(DATA_DIR / f"reasoning_{part}.json.xz",
                                                    f"scripts/train_reasoning.py --part {part}")
    return results


# -- the word problem of S5: state tracking without a shortcut (section 1) ----------------------

#: The 120 permutations of ``0..4`` in one-line notation (``p[x]`` is where ``x`` goes), in
#: lexicographic order: token ``i`` of the S5 task is ``PERMUTATIONS[i]``.
PERMUTATIONS: tuple[tuple[int, ...], ...] = tuple(itertools.permutations(range(5)))
_PERM_INDEX = {p: i for i, p in enumerate(PERMUTATIONS)}
S5_POINT = 120  # token S5_POINT + v: "the point is at v" (v = 0..4)
S5_EQUALS, S5_END, S5_PAUSE = 125, 126, 127  # "=", the end of a completion, a pause token
S5_BLANK = 128  # an empty slot of the prompt
S5_VOCAB_SIZE = 129
S5_FORMATS = ("answer only", "chain of thought", "pause")
S5Format = Literal["answer only", "chain of thought", "pause"]
S5_PATH = DATA_DIR / "reasoning_s5.json.xz"  # scripts/train_reasoning.py --part s5


def _check_permutation(name: str, p: object) -> tuple[int, ...]:
    if isinstance(p, str) or not isinstance(p, Sequence):
        raise TypeError(f"{name} must be a permutation of 0..4 (a tuple of 5 ints), got "
                        f"{type(p).__name__} {p!r}")
    for x in p:
        check_int(name, x)
    if sorted(p) != [0, 1, 2, 3, 4]:
        raise ValueError(f"{name} must be a permutation of 0..4 (each of 0..4 once), got {p!r}")
    return tuple(p)


def _check_permutations(perms: object) -> list[tuple[int, ...]]:
    if isinstance(perms, str) or not isinstance(perms, Sequence):
        raise TypeError(f"perms must be a sequence of permutations of 0..4, got "
                        f"{type(perms).__name__} {perms!r}")
    if not perms:
        raise ValueError("perms must hold at least one permutation, got none")
    return [_check_permutation("perms", p) for p in perms]


def compose(p: Sequence[int], q: Sequence[int]) -> tuple[int, ...]:
    """``p`` then ``q``: the permutation that sends ``x`` to ``q[p[x]]`` (one-line notation).

    Example:
        >>> compose((1, 2, 0, 3, 4), (0, 1, 2, 4, 3)), compose((1, 0, 2, 3, 4), (0, 2, 1, 3, 4))
        ((1, 2, 0, 4, 3), (2, 0, 1, 3, 4))
    """
    p, q = _check_permutation("p", p), _check_permutation("q", q)
    return tuple(q[p[x]] for x in range(5))


def s5_chain(perms: Sequence[Sequence[int]]) -> list[tuple[int, ...]]:
    r"""The running products :math:`r_i = \pi_1 \text{ then } \pi_2 \dots \text{ then } \pi_i`:
    :math:`r_1 = \pi_1`, :math:`r_i(x) = \pi_i(r_{i-1}(x))`; the last is the answer.

    Example:
        >>> s5_chain([(1, 0, 2, 3, 4), (0, 2, 1, 3, 4), (1, 0, 2, 3, 4)])
        [(1, 0, 2, 3, 4), (2, 0, 1, 3, 4), (2, 1, 0, 3, 4)]
    """
    perms = _check_permutations(perms)
    out = [perms[0]]
    for p in perms[1:]:
        out.append(tuple(p[x] for x in out[-1]))
    return out


def make_s5_problem(rng: random.Random, k: int) -> list[tuple[int, ...]]:
    """``k`` permutations of ``0..4`` drawn uniformly and independently.

    Example:
        >>> perms = make_s5_problem(random.Random(0), 3)
        >>> len(perms), all(sorted(p) == [0, 1, 2, 3, 4] for p in perms)
        (3, True)
    """
    if not isinstance(rng, random.Random):
        raise TypeError(f"rng must be a random.Random, got {type(rng).__name__}")
    if check_int("k", k) < 1:
        raise ValueError(f"a problem has at least one permutation, got k={k}")
    return [PERMUTATIONS[rng.randrange(120)] for _ in range(k)]


def s5_track(perms: Sequence[Sequence[int]]) -> list[int]:
    r"""Where the point 0 stands after each permutation: :math:`s_i = r_i(0)`, that is
    :math:`s_0 = 0`, :math:`s_i = \pi_i(s_{i-1})` (:func:`s5_chain`'s products at 0).

    Example:
        >>> s5_track([(1, 0, 2, 3, 4), (0, 2, 1, 3, 4), (1, 0, 2, 3, 4)])
        [1, 2, 2]
    """
    return [r[0] for r in s5_chain(perms)]


def s5_example(perms: Sequence[Sequence[int]], target_format: S5Format, slots: int,
               ) -> tuple[list[int], list[int]]:
    """Token ids of a problem and its target: one token per permutation, one per place.

    The prompt is ``slots`` slots holding the ``k`` permutations (token ``i`` is
    ``PERMUTATIONS[i]``) and then ``S5_BLANK`` in the ``slots - k`` empty ones, then
    ``S5_EQUALS``: with the prompt's length fixed, the ``i``-th token of a chain stands at the
    same distance from the ``i``-th permutation for every ``k``. The question is where the
    point 0 ends (:func:`s5_track`); the place ``v`` is the token ``S5_POINT + v``. The targets
    end with ``S5_END``:

    * ``"answer only"``: the last place, then the end (2 tokens);
    * ``"chain of thought"``: every place :math:`s_1, \\dots, s_k`, then the end
      (``k + 1`` tokens);
    * ``"pause"``: ``k - 1`` pause tokens, the last place, then the end: as many tokens as the
      chain, with no intermediate state in them.

    Example:
        >>> perms = [(1, 0, 2, 3, 4), (0, 2, 1, 3, 4), (1, 0, 2, 3, 4)]
        >>> [PERMUTATIONS.index(p) for p in perms]
        [24, 6, 24]
        >>> s5_example(perms, "chain of thought", 4)
        ([24, 6, 24, 128, 125], [121, 122, 122, 126])
        >>> s5_example(perms, "pause", 3)[1], s5_example(perms, "answer only", 3)[1]
        ([127, 127, 122, 126], [122, 126])
    """
    _check_format(target_format)
    track = [S5_POINT + v for v in s5_track(perms)]
    if check_int("slots", slots) < len(track):
        raise ValueError(f"slots must hold the {len(track)} permutations, got slots={slots}")
    prompt = ([_PERM_INDEX[tuple(p)] for p in perms] + [S5_BLANK] * (slots - len(track))
              + [S5_EQUALS])
    if target_format == "chain of thought":
        return prompt, track + [S5_END]
    if target_format == "pause":
        return prompt, [S5_PAUSE] * (len(track) - 1) + track[-1:] + [S5_END]
    return prompt, track[-1:] + [S5_END]


@dataclass(frozen=True)
class S5Config:
    """Section 1's experiment on S5: the task, the model (a small Llama-style decoder of
    :mod:`course_lib.llama`), the training and the test."""

    train_k: int = 5  # training problems have k = 1..train_k permutations
    test_k: int = 10  # tested at k = 1..test_k (past train_k: longer than any trained problem)
    position: Literal["rope", "learned"] = "learned"  # a learned table (GPT-2's) or RoPE
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 128
    steps: int = 3000  # optimiser steps
    batch_size: int = 64
    lr: float = 3e-3
    warmup_steps: int = 100
    seeds: tuple[int, ...] = (0, 1, 2)  # initialisation and training problems
    eval_problems: int = 300  # test problems per k
    eval_seed: int = 777  # test problems are drawn with this seed plus k

    def __post_init__(self) -> None:
        for name in ("train_k", "test_k", "n_layer", "n_head", "n_embd", "steps", "batch_size",
                     "eval_problems"):
            check_int(name, getattr(self, name), minimum=1)
        check_int("warmup_steps", self.warmup_steps, minimum=0)
        check_positive("lr", self.lr)
        if self.position not in ("rope", "learned"):
            raise ValueError(f"position must be 'rope' or 'learned', got {self.position!r}")
        if self.n_embd % (2 * self.n_head):
            raise ValueError(f"n_embd must be a multiple of 2 * n_head (RoPE rotates pairs), got "
                             f"n_embd={self.n_embd}, n_head={self.n_head}")
        if isinstance(self.seeds, str) or not isinstance(self.seeds, Sequence) or not self.seeds:
            raise ValueError(f"seeds must be a non-empty tuple of ints, got {self.seeds!r}")
        for s in self.seeds:
            check_int("seeds", s)

    @property
    def block_size(self) -> int:
        """The prompt's ``slots + 1`` tokens and a chain of thought of ``slots + 1``."""
        return 2 * self.slots + 2

    @property
    def slots(self) -> int:
        """The prompt's slots for permutations: room for the largest k, trained or tested."""
        return max(self.train_k, self.test_k)


S5_CONFIG = S5Config()


def _check_s5_config(config: S5Config) -> None:
    if not isinstance(config, S5Config):
        raise TypeError(f"config must be an S5Config, got {type(config).__name__}")


def _check_format(target_format: object) -> None:
    if target_format not in S5_FORMATS:
        raise ValueError(f"target_format must be one of {', '.join(map(repr, S5_FORMATS))}, got "
                         f"{target_format!r}")


def build_s5_model(config: S5Config, seed: int) -> llama.LlamaForCausalLM:
    """A small decoder (RMSNorm, SwiGLU, RoPE or a learned position table) over the S5 tokens."""
    _check_s5_config(config)
    torch.manual_seed(check_int("seed", seed))
    return llama.LlamaForCausalLM(llama.LlamaConfig(
        vocab_size=S5_VOCAB_SIZE, hidden_size=config.n_embd,
        intermediate_size=llama.swiglu_width(config.n_embd), num_hidden_layers=config.n_layer,
        num_attention_heads=config.n_head, num_key_value_heads=config.n_head,
        position=config.position, max_position_embeddings=config.block_size))


def s5_batch(rng: random.Random, train_k: int, batch_size: int, target_format: S5Format,
             slots: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch ``x, y, mask`` (each ``(B, T)``; mask: the target's tokens), k uniform in
    ``1..train_k``, right-padded with ``S5_END``."""
    if not isinstance(rng, random.Random):
        raise TypeError(f"rng must be a random.Random, got {type(rng).__name__}")
    check_int("train_k", train_k, minimum=1)
    check_int("batch_size", batch_size, minimum=1)
    if check_int("slots", slots) < train_k:
        raise ValueError(f"slots must hold train_k={train_k} permutations, got slots={slots}")
    _check_format(target_format)
    rows = [s5_example(make_s5_problem(rng, rng.randint(1, train_k)), target_format, slots)
            for _ in range(batch_size)]
    width = max(len(p) + len(t) for p, t in rows)
    # built on the CPU (the training loop moves each batch to the model's device)
    ids = torch.full((batch_size, width), S5_END, dtype=torch.long, device="cpu")
    mask = torch.zeros(batch_size, width, dtype=torch.bool, device="cpu")
    for b, (p, t) in enumerate(rows):
        ids[b, :len(p) + len(t)] = torch.tensor(p + t, device="cpu")
        mask[b, len(p):len(p) + len(t)] = True
    return ids[:, :-1], ids[:, 1:], mask[:, 1:]


def train_s5(config: S5Config, target_format: S5Format, seed: int,
             device: torch.device | str = "cpu", progress: bool = False,
             ) -> tuple[llama.LlamaForCausalLM, training.History]:
    """Train one format from scratch on ``k = 1..train_k`` with the loss on the target's tokens
    (chapter 8's answer-only loss); ``seed`` draws the weights and the training problems."""
    _check_s5_config(config)
    _check_format(target_format)
    return arithmetic._train_answer_only(
        lambda: build_s5_model(config, seed),
        lambda rng: s5_batch(rng, config.train_k, config.batch_size, target_format, config.slots),
        (config.steps, config.lr, config.warmup_steps), seed, device, progress, target_format)


@torch.no_grad()
def s5_accuracy(model: torch.nn.Module, k: int, n: int, seed: int,
                target_format: S5Format, slots: int) -> float:
    """Exact-match accuracy of greedy completions of ``n`` fresh problems with ``k`` permutations
    (drawn with ``seed + k``): each completion runs as many tokens as its format's target, and
    is right when the token in the answer's place (the one before the target's end: the first
    of answer only, the ``k``-th of the chain or of the pause target) is the place
    :math:`s_k`."""
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    check_int("k", k, minimum=1)
    check_int("n", n, minimum=1)
    if check_int("slots", slots) < k:
        raise ValueError(f"slots must hold k={k} permutations, got slots={slots}")
    _check_format(target_format)
    rng = random.Random(check_int("seed", seed) + k)
    examples = [s5_example(make_s5_problem(rng, k), target_format, slots) for _ in range(n)]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    tokens = torch.tensor([p for p, _ in examples], device=device)
    for _ in range(len(examples[0][1])):
        tokens = torch.cat([tokens, model(tokens)[:, -1].argmax(-1, keepdim=True)], dim=1)
    model.train(was_training)
    answers = torch.tensor([t[-2] for _, t in examples], device=device)
    return float((tokens[:, -2] == answers).double().mean())


def load_s5_results() -> dict[str, Any]:
    """The shipped results of ``scripts/train_reasoning.py --part s5``."""
    results: dict[str, Any] = finetune.load_json_xz(S5_PATH,
                                                    "scripts/train_reasoning.py --part s5")
    return results
