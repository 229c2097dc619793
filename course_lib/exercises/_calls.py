"""Call adapters: how the grader calls a student's function when ``fn(**inputs)`` is not enough.

This module and :mod:`course_lib.exercises._common` are the only exercise code inside the grading
sandbox (``autograder/strip.py`` leaves every chapter's exercise module out). An adapter here
only calls the student's function and turns what it returns into plain data; it never computes a
verdict or an answer, since student code in the same kernel could replace it. Verdicts on the
outputs are computed on the trusted side (``Exercise.postprocess``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from course_lib.exercises._common import gen


def pairs_as_rows(fn: Callable[..., Any], inputs: dict[str, Any]) -> list[list[int]]:
    """A dict ``{(a, b): count}`` returned by ``fn`` as sorted ``[a, b, count]`` rows.

    Example:
        >>> pairs_as_rows(lambda ids: {(ids[1], ids[0]): 2}, {"ids": [4, 3]})
        [[3, 4, 2]]
    """
    counts = fn(**inputs)
    if not isinstance(counts, dict):
        raise AssertionError(f"return a dict {{(a, b): count}}, got {type(counts).__name__}")
    rows = []
    for key, value in counts.items():
        if not (isinstance(key, tuple) and len(key) == 2):
            raise AssertionError(f"keys must be pairs (a, b) of ids, got the key {key!r}")
        rows.append([int(key[0]), int(key[1]), int(value)])
    return sorted(rows)


def extract_all(fn: Callable[[str], Any], inputs: dict[str, Any]) -> list[Any]:
    """``fn`` applied to each text of ``inputs["texts"]``, in order.

    Example:
        >>> extract_all(len, {"texts": ["ab", ""]})
        [2, 0]
    """
    return [fn(text) for text in inputs["texts"]]


def mask_tokens_draws(fn: Callable[..., Any], inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """``fn`` (BERT's corruption) run over ``inputs["draws"]`` seeded generators, stacked.

    Returns ``{"inputs": (draws, B, T), "targets": (draws, B, T), "again_inputs": (B, T),
    "again_targets": (B, T)}``, the last two from the first seed once more. The statistics of
    the draws are judged on the trusted side.

    Example:
        >>> out = mask_tokens_draws(lambda tokens, mask_id, vocab_size, p, special, generator:
        ...     (tokens.clone(), tokens.clone()), {"tokens": torch.zeros(1, 3, dtype=torch.long),
        ...     "special": torch.zeros(1, 3, dtype=torch.bool), "mask_id": 3, "vocab_size": 9,
        ...     "p": 0.15, "draws": 2, "seed": 0})
        >>> tuple(out["inputs"].shape)
        (2, 1, 3)
    """
    tokens = inputs["tokens"]
    args = {k: inputs[k] for k in ("tokens", "mask_id", "vocab_size", "p", "special")}

    def one(k: int) -> tuple[torch.Tensor, torch.Tensor]:
        out = fn(**args, generator=gen(inputs["seed"] + k))
        if not (isinstance(out, tuple) and len(out) == 2
                and all(type(t) is torch.Tensor and t.shape == tokens.shape
                        and t.dtype == tokens.dtype for t in out)):
            raise AssertionError(f"return a pair (inputs, targets) of {tokens.dtype} tensors of "
                                 f"shape {tuple(tokens.shape)}")
        return out

    draws = [one(k) for k in range(inputs["draws"])]
    again = one(0)
    return {"inputs": torch.stack([x for x, _ in draws]),
            "targets": torch.stack([y for _, y in draws]),
            "again_inputs": again[0], "again_targets": again[1]}


def each_call(fn: Callable[..., Any], inputs: dict[str, Any]) -> list[Any]:
    """``fn`` called once with each keyword dict of ``inputs["calls"]``, in order.

    Example:
        >>> each_call(lambda a, b: a + b, {"calls": [{"a": 1, "b": 2}, {"a": 5, "b": 0}]})
        [3, 5]
    """
    return [fn(**call) for call in inputs["calls"]]



def loss_and_grad(fn: Callable[..., Any], inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """``fn(**inputs)`` (a 0-d loss) and its gradient with respect to ``inputs["logp"]``.

    Used by chapter 9's ``grpo_loss``: the loss's value and the gradient that training uses are
    both graded.

    Example:
        >>> out = loss_and_grad(lambda logp: (3 * logp).sum(), {"logp": torch.zeros(2)})
        >>> out["loss"].item(), out["grad"].tolist()
        (0.0, [3.0, 3.0])
    """
    logp = inputs["logp"].detach().clone().requires_grad_(True)
    loss = fn(**{**inputs, "logp": logp})
    if not (isinstance(loss, torch.Tensor) and loss.dim() == 0):
        raise AssertionError(f"return a 0-d tensor, got {type(loss).__name__}"
                             + (f" of shape {tuple(loss.shape)}"
                                if isinstance(loss, torch.Tensor) else ""))
    if not loss.requires_grad:
        raise AssertionError("the loss does not depend on logp through autograd: compute it "
                             "from logp with torch operations, without detaching it")
    (grad,) = torch.autograd.grad(loss, logp, allow_unused=True)
    if grad is None:
        grad = torch.zeros_like(logp)
    return {"loss": loss.detach(), "grad": grad}


def token_loss_grad(fn: Callable[..., Any], inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """``fn(logp, logp_ref)`` (one loss per token, ``logp``'s shape) and the gradient of their
    sum with respect to ``logp``.

    Used by chapter 9's ``kl_loss``: what the expected gradient over sampled tokens is, is
    computed from this gradient on the trusted side.

    Example:
        >>> out = token_loss_grad(lambda logp, logp_ref: (logp - logp_ref) ** 2,
        ...                       {"logp": torch.tensor([-1.0, -2.0]), "logp_ref": torch.zeros(2)})
        >>> out["grad"].tolist()
        [-2.0, -4.0]
    """
    logp = inputs["logp"].detach().clone().requires_grad_(True)
    out = fn(logp=logp, logp_ref=inputs["logp_ref"].detach().clone())
    if not (type(out) is torch.Tensor and out.shape == logp.shape and out.dtype == logp.dtype):
        raise AssertionError(f"return one loss per token, a {logp.dtype} tensor of shape "
                             f"{tuple(logp.shape)}, got {type(out).__name__}"
                             + (f" {out.dtype} of shape {tuple(out.shape)}"
                                if isinstance(out, torch.Tensor) else ""))
    if not out.requires_grad:
        raise AssertionError("the loss does not depend on logp through autograd: compute it "
                             "from logp with torch operations, without detaching it")
    (grad,) = torch.autograd.grad(out.sum(), logp, allow_unused=True)
    if grad is None:
        grad = torch.zeros_like(logp)
    return {"grad": grad}


def key_value_stream(fn: Callable[..., Any], inputs: dict[str, Any]) -> Any:
    """``fn(q, kv_blocks)`` with the keys and values as a one-shot stream of blocks.

    Used by chapter 6's ``query_tile_attention``: ``inputs`` holds the queries ``q`` and the
    stream's recipe (``seed``, ``n_keys``, ``d_v``, ``block_size``, ``scale``); block ``i`` is
    drawn from ``torch.Generator().manual_seed(seed + i)`` when it is read (keys, then values, in
    ``q``'s dtype and batch shape), so the keys never exist all at once and the stream, a
    generator, cannot be read twice. The output is returned as the function gives it.

    Example:
        >>> q = torch.zeros(1, 2, 4)
        >>> inputs = {"q": q, "seed": 0, "n_keys": 5, "d_v": 3, "block_size": 2, "scale": 1.0}
        >>> key_value_stream(lambda q, kv_blocks: [tuple(k.shape) for k, _ in kv_blocks], inputs)
        [(1, 2, 4), (1, 2, 4), (1, 1, 4)]
    """
    q: torch.Tensor = inputs["q"]
    batch, d, n = tuple(q.shape[:-2]), q.shape[-1], int(inputs["n_keys"])
    b, d_v = int(inputs["block_size"]), int(inputs["d_v"])
    scale, seed = float(inputs["scale"]), int(inputs["seed"])

    def blocks() -> Any:
        for i, start in enumerate(range(0, n, b)):
            g = torch.Generator().manual_seed(seed + i)
            size = min(b, n - start)
            k = torch.randn(*batch, size, d, generator=g, dtype=q.dtype) * scale
            v = torch.randn(*batch, size, d_v, generator=g, dtype=q.dtype)
            yield k, v

    return fn(q=q, kv_blocks=blocks())
