r"""Supervised fine-tuning: the shipped base GPT, an instruction task, the answer-only loss.

Taught in chapter 8 (from a base model to an assistant), section 1. A *base model* has learnt
to continue text; supervised fine-tuning (SFT) trains it further on prompt/answer pairs with a
loss only on the answer's tokens (:func:`answer_only_loss`): the prompt is given, never predicted.

The base model is chapter 4's character-level GPT (:class:`course_lib.gpt.GPT`, 2 layers, 4
heads, width 64, the 83 characters of the Shakespeare corpus), with a context of 128 characters
instead of 64 so that a question and its answer fit. It is trained by
``scripts/train_base_model.py`` with :data:`BASE_RECIPE` and shipped in half precision in
``course_lib/data/base_gpt.pt.xz`` (provenance in ``course_lib/data/BASE_GPT.md``);
:func:`load_base_model` loads it.

The instruction task (:func:`word_problem`) is a word problem, in a format the base model never
saw: ``"Q: Paul has 7 apples and Anna has 3 pears. How many pears does Anna have?\nA: 3\n"``.
"""

from __future__ import annotations

import io
import lzma
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from course_lib import corpus, gpt
from course_lib.checks import check_float_tensor, check_ids

DATA_DIR = Path(__file__).resolve().parent / "data"
BASE_MODEL_PATH = DATA_DIR / "base_gpt.pt.xz"
RUNS_PATH = DATA_DIR / "fine_tuning_runs.json.xz"  # scripts/finetune_runs.py's results


@dataclass(frozen=True)
class BaseRecipe:
    """How ``scripts/train_base_model.py`` trains the shipped base model (chapter 4's GPT)."""

    n_layer: int = 2  # chapter 4's model
    n_head: int = 4
    n_embd: int = 64
    block_size: int = 128  # chapter 4 used 64; 128 holds a question and its answer
    batch_size: int = 32  # windows per step (chapter 4: 16)
    steps: int = 2500  # optimiser steps (chapter 4: 250, inside its run budget)
    lr: float = 3e-3  # peak AdamW learning rate (chapter 4's)
    warmup_steps: int = 100
    train_chars: int | None = None  # None: the whole training split (4.3 million characters)
    seed: int = 0  # initialisation and batches
    eval_windows: int = 64  # validation windows of block_size characters ...
    eval_seed: int = 1  # ... drawn with this seed from the validation plays


BASE_RECIPE = BaseRecipe()


def char_vocabulary() -> list[str]:
    """The 83 characters of the Shakespeare corpus (both splits): the base model's vocabulary.

    Example:
        >>> vocab = char_vocabulary()
        >>> len(vocab), vocab[:3]
        (83, ['\\n', ' ', '!'])
    """
    return list(_char_vocabulary())


@lru_cache(maxsize=1)
def _char_vocabulary() -> tuple[str, ...]:
    return tuple(corpus.char_vocabulary(corpus.load_shakespeare("train")
                                        + corpus.load_shakespeare("val")))


def base_config(recipe: BaseRecipe = BASE_RECIPE, vocab_size: int = 83) -> gpt.GPTConfig:
    """The :class:`~course_lib.gpt.GPTConfig` of the base model trained with ``recipe``."""
    return gpt.GPTConfig(vocab_size=vocab_size, block_size=recipe.block_size,
                         n_layer=recipe.n_layer, n_head=recipe.n_head, n_embd=recipe.n_embd)


def validation_windows(recipe: BaseRecipe = BASE_RECIPE) -> tuple[torch.Tensor, torch.Tensor]:
    """The base task's fixed validation windows ``(x, y)``, each ``(eval_windows, block_size)``.

    On the CPU, as the corpus: :func:`base_loss` moves each batch to the model's device.
    """
    ids = corpus.encode_chars(corpus.load_shakespeare("val"), char_vocabulary(), device="cpu")
    g = torch.Generator().manual_seed(recipe.eval_seed)  # on the CPU, as the windows
    return corpus.random_windows(ids, recipe.block_size, recipe.eval_windows, g)


@torch.no_grad()
def base_loss(model: gpt.GPT, windows: tuple[torch.Tensor, torch.Tensor] | None = None,
              batch_size: int = 32) -> float:
    """Mean next-character loss (nats) of ``model`` on the base task's validation windows.

    The *forgetting* of section 2 is this loss after fine-tuning minus the same before.
    """
    if windows is not None:
        if not isinstance(windows, tuple) or len(windows) != 2:
            raise TypeError(f"windows must be a pair (inputs, targets), got "
                            f"{type(windows).__name__}")
        for name, t in (("windows[0] (the inputs)", windows[0]),
                        ("windows[1] (the targets)", windows[1])):
            check_ids(name, t, model.config.vocab_size, ndim=2, shape="(N, T)")
        if windows[0].shape != windows[1].shape:
            raise ValueError(f"windows must be inputs and targets of one shape, got "
                             f"{tuple(windows[0].shape)} and {tuple(windows[1].shape)}")
    x_all, y_all = validation_windows() if windows is None else windows
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    total = 0.0
    for start in range(0, len(x_all), batch_size):
        x = x_all[start:start + batch_size].to(device)
        y = y_all[start:start + batch_size].to(device)
        total += float(gpt.lm_loss(model(x), y)) * len(x)
    model.train(was_training)
    return total / len(x_all)


def save_base_model(model: gpt.GPT, path: Path, recipe: BaseRecipe, vocabulary: list[str],
                    extra: dict[str, Any]) -> None:
    """Write ``model``'s float16 weights, recipe, vocabulary and ``extra``, xz-compressed."""
    state = {k: v.detach().to("cpu", torch.float16) for k, v in model.state_dict().items()
             if k != "lm_head.weight"}  # tied to transformer.wte.weight: stored once
    buffer = io.BytesIO()
    torch.save({"recipe": asdict(recipe), "vocabulary": vocabulary, "state_dict": state, **extra},
               buffer)
    path.write_bytes(lzma.compress(buffer.getvalue(), preset=9 | lzma.PRESET_EXTREME))


def read_base_file(path: Path = BASE_MODEL_PATH) -> dict[str, Any]:
    """The shipped file: ``recipe`` (a dict), ``vocabulary``, ``state_dict``, ``val_loss``."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found; train it with scripts/train_base_model.py")
    saved: dict[str, Any] = torch.load(io.BytesIO(lzma.decompress(path.read_bytes())),
                                       weights_only=True)
    return saved


def load_base_model(device: torch.device | str = "cpu", path: Path = BASE_MODEL_PATH,
                    ) -> tuple[gpt.GPT, list[str]]:
    """The shipped base model (in float32, ``eval`` mode, on ``device``) and its vocabulary.

    Example:
        >>> model, vocab = load_base_model()
        >>> model.config.block_size, len(vocab)
        (128, 83)
    """
    saved = read_base_file(path)
    recipe = BaseRecipe(**saved["recipe"])
    with torch.device("cpu"):  # where torch.load put the checkpoint; moved below
        model = gpt.GPT(base_config(recipe, len(saved["vocabulary"])))
    state = {k: v.float() for k, v in saved["state_dict"].items()}
    state["lm_head.weight"] = state["transformer.wte.weight"]
    model.load_state_dict(state)
    return model.to(device).eval(), list(saved["vocabulary"])


# The instruction task ---------------------------------------------------------------------------

NAMES = (("Paul", "He"), ("Anna", "She"), ("Tom", "He"), ("Mary", "She"), ("John", "He"),
         ("Kate", "She"))
FRUITS = ("apples", "pears", "plums")


def word_problem(rng: random.Random) -> tuple[str, str]:
    """One question and its answer: two people, two counts, one of them asked for.

    Answering needs the right number out of the question (the one that goes with the person and
    the fruit asked about), a retrieval that attention does in one step.

    Example:
        >>> q, a = word_problem(random.Random(0))
        >>> q.startswith("Q: ") and q.endswith("\\nA: ") and a.endswith("\\n")
        True
    """
    (first, _), (second, _) = rng.sample(NAMES, 2)
    fruit_1, fruit_2 = rng.sample(FRUITS, 2)
    count_1, count_2 = rng.sample(range(1, 20), 2)
    name, fruit, answer = rng.choice([(first, fruit_1, count_1), (second, fruit_2, count_2)])
    question = (f"Q: {first} has {count_1} {fruit_1} and {second} has {count_2} {fruit_2}. "
                f"How many {fruit} does {name} have?\nA: ")
    return question, f"{answer}\n"


def word_problems(n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` questions and answers from ``seed``."""
    rng = random.Random(seed)
    return [word_problem(rng) for _ in range(n)]


def encode_pairs(pairs: list[tuple[str, str]], vocabulary: list[str], pad: str = "\n",
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Prompt/answer pairs as next-token training tensors with the answer's positions marked.

    Each pair becomes ``prompt + answer``, right-padded with ``pad`` to the longest pair. As in
    :func:`course_lib.corpus.random_windows`, ``x`` is the sequence without its last token and
    ``y`` the same shifted by one; ``mask[b, t]`` is True where ``y[b, t]`` is an answer token.

    Returns:
        ``x, y`` ``(B, T)`` long and ``mask`` ``(B, T)`` bool, on the CPU (text is host data:
        the training loops move each batch to the model's device).

    Example:
        >>> x, y, mask = encode_pairs([("ab", "c"), ("a", "bc")], ["a", "b", "c", "\\n"])
        >>> y.tolist(), mask.int().tolist()
        ([[1, 2], [1, 2]], [[0, 1], [1, 1]])
    """
    width = max(len(p) + len(a) for p, a in pairs)
    rows, masks = [], []
    for prompt, answer in pairs:
        text = (prompt + answer).ljust(width, pad)
        rows.append(corpus.encode_chars(text, vocabulary, device="cpu"))
        m = torch.zeros(width, dtype=torch.bool, device="cpu")
        m[len(prompt):len(prompt) + len(answer)] = True
        masks.append(m)
    ids, mask = torch.stack(rows), torch.stack(masks)
    return ids[:, :-1], ids[:, 1:], mask[:, 1:]


def answer_only_loss(logits: torch.Tensor, targets: torch.Tensor,
                     answer_mask: torch.Tensor) -> torch.Tensor:
    r"""Mean cross-entropy over the answer tokens only (the SFT loss).

    .. math:: \mathcal L = -\frac{1}{\sum_{b,t} m_{b,t}} \sum_{b,t} m_{b,t}\,
              \log p_\theta(y_{b,t} \mid y_{b,<t})

    Every answer token of the batch weighs the same (a sum over the batch divided by the number
    of answer tokens, not a mean of per-row means); prompt and padding positions count for nothing.

    Args:
        logits: ``(B, T, V)``, position ``t`` predicting ``targets[:, t]``.
        targets: ``(B, T)`` ids.
        answer_mask: ``(B, T)`` bool, True where ``targets`` is an answer token.

    Returns:
        A 0-d tensor in the logits' dtype.

    Example:
        >>> logits = torch.zeros(1, 3, 4)  # uniform: log 4 per token
        >>> mask = torch.tensor([[False, True, True]])
        >>> round(answer_only_loss(logits, torch.tensor([[0, 1, 2]]), mask).item(), 4)
        1.3863
    """
    check_float_tensor("logits", logits, ndim=3, shape="(B, T, V)")
    check_ids("targets", targets, logits.shape[-1], ignore_index=-100,
              dtypes=(torch.long, torch.uint8))
    if logits.shape[:-1] != targets.shape or answer_mask.shape != targets.shape:
        raise ValueError(f"logits (B, T, V) = {tuple(logits.shape)}, targets (B, T) = "
                         f"{tuple(targets.shape)} and answer_mask (B, T) = "
                         f"{tuple(answer_mask.shape)} do not fit together")
    if answer_mask.dtype != torch.bool:
        raise ValueError(f"answer_mask must be bool, got {answer_mask.dtype}")
    n = answer_mask.sum()
    if int(n) == 0:
        raise ValueError("answer_mask marks no token: the loss would be 0/0")
    nll = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")  # (B T,)
    return (nll * answer_mask.flatten().to(nll.dtype)).sum() / n.to(nll.dtype)


@torch.no_grad()
def answer_accuracy(model: gpt.GPT, pairs: list[tuple[str, str]], vocabulary: list[str],
                    batch_size: int = 128) -> float:
    """The fraction of questions whose greedy answer (up to the newline) is exactly right.

    Questions of the same length are decoded together; the answer is the greedy continuation
    cut at its first newline.
    """
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    vocabulary.index("\n")  # answers end at a newline: a vocabulary without one is refused
    by_length: dict[int, list[tuple[str, str]]] = {}
    for prompt, answer in pairs:
        by_length.setdefault(len(prompt), []).append((prompt, answer))
    correct = 0
    for group in by_length.values():
        for start in range(0, len(group), batch_size):
            chunk = group[start:start + batch_size]
            prompts = torch.stack([corpus.encode_chars(p, vocabulary, device=device)
                                   for p, _ in chunk])  # (B, T)
            tokens = prompts
            step = model.cached_step()
            for _ in range(3):  # answers are at most 2 digits and a newline
                tokens = torch.cat([tokens, step(tokens).argmax(-1, keepdim=True)], dim=1)
            for row, (_, answer) in zip(tokens[:, prompts.shape[1]:].tolist(), chunk):
                text = "".join(vocabulary[i] for i in row)
                correct += text[:text.index("\n") + 1] == answer if "\n" in text else False
    model.train(was_training)
    return correct / len(pairs)


# Full fine-tuning against LoRA ------------------------------------------------------------------


@dataclass(frozen=True)
class FinetuneConfig:
    """Section 2's comparison: one task, steps and batches; full against LoRA at several ranks."""

    ranks: tuple[int, ...] = (1, 4, 16)  # LoRA ranks compared with full fine-tuning
    alpha_over_r: float = 1.0  # alpha = r: the update's scale alpha / r is 1 at every rank
    steps: int = 1500
    batch_size: int = 16
    # AdamW's peak learning rates, each the best of a grid of 500-step runs scored on 300
    # held-out questions (seed 2, neither training nor test; FINE_TUNING_RUNS.md has the grid),
    # the lower rate where two are within one standard error: full fine-tuning ...
    lr_full: float = 3e-4
    lr_lora: float = 3e-3  # ... and LoRA, one rate for every rank (adapters start at B = 0)
    warmup_steps: int = 20
    n_train: int = 4000  # training questions
    n_test: int = 300  # test questions (another seed)
    seed: int = 0
    test_seed: int = 1


FINETUNE_CONFIG = FinetuneConfig()


def method_names(config: FinetuneConfig = FINETUNE_CONFIG) -> list[str]:
    """``["full", "LoRA r=1", ...]``: the methods of the comparison, in order."""
    return ["full"] + [f"LoRA r={r}" for r in config.ranks]


def finetune_method(base: gpt.GPT, vocabulary: list[str], config: FinetuneConfig,
                    rank: int | None, steps: int | None = None, lr: float | None = None,
                    mix_windows: int = 0) -> tuple[gpt.GPT, dict[str, Any]]:
    """Fine-tune a copy of ``base`` (full when ``rank`` is None, else LoRA) and measure it.

    ``lr`` overrides the configuration's rate for the method. ``mix_windows > 0`` mixes the
    pretraining text into every step (the usual remedy for forgetting): that many windows of
    ``block_size`` characters of the training plays, drawn by a generator of their own, whose
    next-character loss is added to the answer-only loss (the questions and their batches stay
    those of the unmixed run).

    Returns the tuned model (LoRA merged into the weights) and ``trainable`` parameters,
    ``adam_bytes`` (the optimiser's moments, counted from its state after training),
    ``ms_per_step``, task ``accuracy`` on the test questions, ``base_loss`` (the base task's
    validation loss after tuning) and ``train_loss`` (every step, the answer-only loss).
    """
    import copy

    from course_lib import lora, training

    steps = config.steps if steps is None else steps
    model = copy.deepcopy(base)
    torch.manual_seed(config.seed)  # the adapters' initialisation, whatever ran before
    if rank is not None:
        lora.add_lora(model, rank, config.alpha_over_r * rank)
    params = [p for p in model.parameters() if p.requires_grad]
    if lr is None:
        lr = config.lr_full if rank is None else config.lr_lora
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    pairs = word_problems(config.n_train, config.seed)
    rng = random.Random(config.seed)
    device = next(model.parameters()).device

    def batches() -> Iterator[tuple[torch.Tensor, ...]]:
        while True:
            yield tuple(t.to(device) for t in encode_pairs(rng.sample(pairs, config.batch_size),
                                                          vocabulary))

    text_ids = (corpus.encode_chars(corpus.load_shakespeare("train"), vocabulary)
                if mix_windows > 0 else None)
    text_gen = torch.Generator().manual_seed(config.seed + 1)
    answer_losses: list[float] = []

    def objective(m: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        x, y, mask = batch
        loss = answer_only_loss(m(x), y, mask)
        if text_ids is None:
            return loss
        answer_losses.append(float(loss.detach()))
        tx, ty = corpus.random_windows(text_ids, model.config.block_size, mix_windows, text_gen)
        return loss + gpt.lm_loss(m(tx.to(device)), ty.to(device))

    train_config = training.TrainConfig(steps=steps, lr=lr, warmup_steps=config.warmup_steps,
                                        schedule="cosine", seed=config.seed, progress=False)
    history = training.train(model, batches(), objective, train_config, optimizer=optimizer)
    if text_ids is not None:  # report the answer-only part, comparable with unmixed runs
        history.train_loss = answer_losses
    trainable = lora.trainable_parameters(model)
    adam_bytes = lora.optimizer_state_bytes(optimizer)
    if rank is not None:
        lora.merge_all(model)
    model.eval()
    test = word_problems(config.n_test, config.test_seed)
    return model, {"trainable": trainable, "adam_bytes": adam_bytes,
                   "ms_per_step": 1000 * history.seconds / max(steps, 1),
                   "accuracy": answer_accuracy(model, test, vocabulary),
                   "base_loss": base_loss(model), "train_loss": history.train_loss}


def compare_methods(config: FinetuneConfig = FINETUNE_CONFIG,
                    device: torch.device | str = "cpu") -> dict[str, Any]:
    """Run :func:`finetune_method` for full fine-tuning and every rank: what the script ships."""
    base, vocabulary = load_base_model(device)
    test = word_problems(config.n_test, config.test_seed)
    results: dict[str, Any] = {"config": asdict(config), "base_loss_before": base_loss(base),
                               "accuracy_before": answer_accuracy(base, test, vocabulary),
                               "methods": {}}
    for name, rank in zip(method_names(config), (None, *config.ranks)):
        _, measured = finetune_method(base, vocabulary, config, rank)
        curve = measured.pop("train_loss")
        every = max(1, len(curve) // 60)  # about 60 points of the loss curve, each a mean
        measured["train_loss"] = [sum(curve[i:i + every]) / len(curve[i:i + every])
                                  for i in range(0, len(curve), every)]
        measured["train_loss_every"] = every
        results["methods"][name] = measured
    return results


FORGETTING_PATH = DATA_DIR / "fine_tuning_forgetting.json.xz"  # finetune_runs.py --forgetting


@dataclass(frozen=True)
class ForgettingConfig:
    """Section 2's forgetting sweep: more runs of :data:`FINETUNE_CONFIG`, at other rates or mixed.

    Each run is ``(method, rank, lr, mix_windows)``: ``rank`` None is full fine-tuning,
    ``mix_windows`` the windows of pretraining text added to each step (0: none). With the four
    runs of :func:`compare_methods` (full at 3e-4, LoRA at 3e-3), full fine-tuning and LoRA at
    ranks 4 and 16 are measured at 3e-4 and at 1e-3, the same rates, so the methods compare at
    matched learning rates as well as along their learned-against-forgotten lines; the mixed
    runs measure the remedy. (LoRA at rank 1 has only its tuned rate: the sweep ran on a busy
    shared machine and was cut to what the chapter's text needs.)
    """

    runs: tuple[tuple[str, int | None, float, int], ...] = (
        ("full", None, 1e-3, 0), ("LoRA r=16", 16, 1e-3, 0),  # matched rates first
        ("full", None, 1e-4, 0), ("LoRA r=16", 16, 3e-4, 0),
        ("full", None, 3e-4, 8), ("LoRA r=4", 4, 1e-3, 0),  # the remedy: text mixed in
        ("LoRA r=4", 4, 3e-4, 0), ("LoRA r=16", 16, 3e-3, 8),
    )


FORGETTING_CONFIG = ForgettingConfig()


def forgetting_runs(config: ForgettingConfig = FORGETTING_CONFIG,
                    base_config: FinetuneConfig = FINETUNE_CONFIG, part: int = 0, parts: int = 1,
                    device: torch.device | str = "cpu") -> list[dict[str, Any]]:
    """Run every ``parts``-th run of ``config`` from ``part`` on (see :func:`forgetting_run`)."""
    base, vocabulary = load_base_model(device)
    return [forgetting_run(base, vocabulary, config, base_config, index)
            for index in range(part, len(config.runs), parts)]


def forgetting_run(base: gpt.GPT, vocabulary: list[str], config: ForgettingConfig,
                   base_config: FinetuneConfig, index: int) -> dict[str, Any]:
    """Run ``config.runs[index]``: method, rank, lr, mix and :func:`finetune_method`'s results."""
    method, rank, lr, mix = config.runs[index]
    _, measured = finetune_method(base, vocabulary, base_config, rank, lr=lr, mix_windows=mix)
    curve = measured.pop("train_loss")
    return {"index": index, "method": method, "rank": rank, "lr": lr, "mix_windows": mix,
            **measured, "final_train_loss": sum(curve[-100:]) / len(curve[-100:])}


def load_forgetting(path: Path = FORGETTING_PATH) -> dict[str, Any]:
    """The shipped forgetting sweep of ``scripts/finetune_runs.py --forgetting``."""
    sweep: dict[str, Any] = load_json_xz(path, "scripts/finetune_runs.py --forgetting")
    return sweep


def save_json_xz(data: Any, path: Path) -> None:
    """Write ``data`` as xz-compressed JSON (``course_lib``'s package data ships ``*.xz`` files)."""
    import json

    path.write_bytes(lzma.compress((json.dumps(data, indent=1) + "\n").encode("utf-8")))


def load_json_xz(path: Path, made_by: str) -> Any:
    """Read what :func:`save_json_xz` wrote; a missing file names the command ``made_by``."""
    import json

    if not path.is_file():
        raise FileNotFoundError(f"{path} not found; run {made_by}")
    return json.loads(lzma.decompress(path.read_bytes()).decode("utf-8"))


def load_runs(path: Path = RUNS_PATH) -> dict[str, Any]:
    """The shipped results of ``scripts/finetune_runs.py`` (one entry per method)."""
    runs: dict[str, Any] = load_json_xz(path, "scripts/finetune_runs.py")
    return runs


def measure_costs(base: gpt.GPT, vocabulary: list[str], config: FinetuneConfig = FINETUNE_CONFIG,
                  steps: int = 10) -> dict[str, dict[str, float]]:
    """Trainable parameters, Adam's state in bytes and CPU milliseconds per step, per method.

    Every method takes ``steps`` optimiser steps on the same batch after one untimed warm-up
    step (which also creates Adam's state, then read from the optimiser). Time is the process's
    CPU time (``time.process_time``), which a busy machine inflates less than wall time; on a
    GPU it would measure only the host's work, so there the wall time of a synchronised loop is
    the one to use.
    """
    import copy
    import time

    from course_lib import lora

    device = next(base.parameters()).device
    rng = random.Random(config.seed)
    x, y, mask = (t.to(device) for t in encode_pairs(
        rng.sample(word_problems(config.n_train, config.seed), config.batch_size), vocabulary))
    costs: dict[str, dict[str, float]] = {}

    def step(model: gpt.GPT, optimizer: torch.optim.Optimizer) -> None:
        loss = answer_only_loss(model(x), y, mask)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    for name, rank in zip(method_names(config), (None, *config.ranks)):
        model = copy.deepcopy(base).train()
        if rank is not None:
            lora.add_lora(model, rank, config.alpha_over_r * rank)
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.0)
        step(model, optimizer)  # warm-up; creates the optimiser's state
        start = time.process_time()
        for _ in range(steps):
            step(model, optimizer)
        seconds = (time.process_time() - start) / steps
        costs[name] = {"trainable": lora.trainable_parameters(model),
                       "adam_bytes": lora.optimizer_state_bytes(optimizer),
                       "ms_per_step": 1000 * seconds}
    return costs
