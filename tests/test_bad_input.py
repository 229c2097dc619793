"""Every taught public function of course_lib, fed the usual bad inputs, says what is wrong.

A *taught* function is a public function, or the ``forward`` of a public ``nn.Module``, defined in
a course_lib module that a chapter teaches (its docstring says "Taught in chapter ..."), that takes
a tensor: a parameter annotated ``torch.Tensor`` (alone, optional, in a union or in a container).
:data:`CASES` holds an entry for each: how to build valid arguments, and, for every tensor
argument, the bad inputs that apply to it (:data:`KINDS`: integers where floats are expected,
NaN, an empty or 0-d tensor, a wrong number of dimensions, ids out of range, ...). Each bad input
must raise ``ValueError`` or ``TypeError`` from a ``raise`` statement of course_lib, with a message
that names the argument: never a traceback from deep inside torch, never a silent wrong answer or
NaN.

A taught function without an entry fails :func:`test_every_taught_function_has_an_entry` with the
list of the missing ones, so that a function is covered as soon as it is added, and a tensor
argument that no bad input exercises fails :func:`test_every_tensor_argument_has_its_bad_inputs`
(an entry's ``unchecked`` says why, where none applies). Which bad inputs apply is decided per
argument: integers are fine where a function only reshapes, NaN is checked where it would not just
propagate. Entries for methods (``GPT.step``, the cached step, ``markov_step``'s step) and for
functions that take no tensor (parameter counts, scaling laws, LoRA's constructor) sit in the same
table; a few bad inputs that need files or a whole model have their own tests at the end.

The modules of chapters 7 and 9 (:data:`EVERY_ARGUMENT`: ``rope``, ``llama``, ``moe``,
``speculative``, ``reasoning``, ``rl``) are held to more: every parameter of every public
function, of every ``nn.Module.forward`` and of every other public class's constructor and
methods (configs, the KV cache), tensor or not, and functions that take no tensor included, must
be named in its entry's ``bad`` or in ``unchecked`` with a reason (a seed, a progress flag, a
device, a model object, a path tested elsewhere), or
:func:`test_every_argument_of_chapters_7_and_9_has_its_bad_inputs` fails with the list. Their
bad inputs include the other kinds of argument: strings naming options (``bad_option``), sizes
(``zero``, ``negative``, ``fraction``), probabilities (``negative``, ``above_one``, ``nan``) and
configs of the wrong type (``a_dict``). The other chapters' modules are held to their tensor
arguments only.

For every taught module, options are checked generically: a parameter of a :data:`CASES` entry
annotated ``Literal[...]`` gets an automatic ``bad_option`` bad input (an unknown option string),
and every dataclass config of a taught module with a ``Literal[...]`` field refuses an unknown
value at construction with a ``ValueError`` naming the field
(:func:`test_a_config_refuses_an_unknown_option`), so that a new option cannot escape.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import importlib
import inspect
import json
import math
import pkgutil
import random
import re
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from torch import nn

import course_lib
from course_lib import (
    alignment,
    attention,
    bpe,
    complexity,
    copying,
    corpus,
    counting,
    decoding,
    distill,
    dpo,
    efficient_models,
    entmax,
    finetune,
    flops,
    gpt,
    head_importance,
    linear_attention,
    linformer,
    llama,
    lm,
    longrange,
    lora,
    moe,
    multihead,
    plotting,
    positional,
    reasoning,
    rl,
    rope,
    sampling,
    scaling,
    seq2seq,
    sparse_attention,
    speculative,
    sweep,
    tiled_attention,
    training,
    transformer,
)

COURSE_LIB = Path(course_lib.__file__).resolve().parent
TAUGHT = re.compile(r"\b[Tt]aught in (chapter|every chapter)")

#: The modules of chapters 7 and 9, whose every argument (not only tensors) needs bad inputs.
EVERY_ARGUMENT = frozenset({"rope", "llama", "moe", "speculative", "reasoning", "rl"})

Call = tuple[Callable[..., Any], dict[str, Any]]


# --- discovery --------------------------------------------------------------------------------

def _is_tensor_annotation(annotation: Any) -> bool:
    """``torch.Tensor``, or a union or container holding one (not a callable's signature)."""
    if annotation is torch.Tensor:
        return True
    origin = typing.get_origin(annotation)
    if origin is None or origin is collections.abc.Callable:
        return False
    return any(_is_tensor_annotation(a) for a in typing.get_args(annotation))


def _tensor_parameters(fn: Callable[..., Any], module: types.ModuleType) -> list[str]:
    params = []
    for name, p in inspect.signature(fn).parameters.items():
        if name == "self" or p.annotation is inspect.Parameter.empty:
            continue
        annotation = p.annotation
        if isinstance(annotation, str):  # `from __future__ import annotations`
            try:
                annotation = eval(annotation, vars(module))  # course_lib's own hints
            except Exception:  # a name imported only for type checkers (matplotlib's Axes)
                if re.search(r"\bTensor\b", annotation) and "Callable" not in annotation:
                    params.append(name)
                continue
        if _is_tensor_annotation(annotation):
            params.append(name)
    return params


def taught_modules() -> list[types.ModuleType]:
    """The course_lib modules a chapter teaches (not the exercise registries, not the grader)."""
    modules = []
    for info in pkgutil.iter_modules(course_lib.__path__):
        if info.ispkg:
            continue
        module = importlib.import_module(f"course_lib.{info.name}")
        if TAUGHT.search(module.__doc__ or ""):
            modules.append(module)
    return modules


def taught_tensor_functions() -> dict[str, list[str]]:
    """``"module.name"`` -> its tensor parameters, for every taught function that takes a tensor."""
    found: dict[str, list[str]] = {}
    for module in taught_modules():
        short = module.__name__.rsplit(".", 1)[1]
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isclass(obj):
                if not issubclass(obj, nn.Module):
                    continue  # records, autograd Functions, protocols: not called with tensors
                fn = obj.forward
            elif inspect.isfunction(obj):
                fn = obj
            else:
                continue
            params = _tensor_parameters(fn, module)
            if params:
                found[f"{short}.{name}"] = params
    return found


def _is_literal(annotation: Any) -> bool:
    """``Literal[...]``, alone or in a union (``Literal["a", "b"] | None``)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return True
    return origin is not None and any(_is_literal(a) for a in typing.get_args(annotation))


def _hints(obj: Any) -> dict[str, Any]:
    """Evaluated annotations (``from __future__ import annotations`` leaves strings)."""
    try:
        return typing.get_type_hints(obj)
    except Exception:  # a name imported only for type checkers: no option among them
        return {}


def literal_parameters(fn: Callable[..., Any]) -> list[str]:
    """The parameters of ``fn`` annotated ``Literal[...]``: strings naming options."""
    return [name for name, a in _hints(fn).items() if name != "return" and _is_literal(a)]


def resolve(name: str) -> Callable[..., Any] | None:
    """The function a :data:`CASES` key names (a module's ``forward``; ``[...]`` a variant)."""
    module, *attributes = re.sub(r"\[.*\]$", "", name).split(".")
    obj: Any = importlib.import_module(f"course_lib.{module}")
    for attribute in attributes:
        obj = getattr(obj, attribute, None)
        if obj is None:
            return None  # a closure (``decoding.markov_step.step``)
    if inspect.isclass(obj) and issubclass(obj, nn.Module):
        return obj.forward  # type: ignore[no-any-return]
    return obj  # type: ignore[no-any-return]


def every_argument_functions() -> dict[str, Callable[..., Any]]:
    """``"module.name"`` -> function, for every public callable of :data:`EVERY_ARGUMENT`.

    Functions, ``nn.Module.forward``, and the constructor and public methods of every other
    public class (configs, the KV cache); not protocols.
    """
    found: dict[str, Callable[..., Any]] = {}
    for short in sorted(EVERY_ARGUMENT):
        module = importlib.import_module(f"course_lib.{short}")
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
                continue
            if inspect.isfunction(obj):
                found[f"{short}.{name}"] = obj
            elif inspect.isclass(obj) and issubclass(obj, nn.Module):
                found[f"{short}.{name}"] = obj.forward
            elif inspect.isclass(obj) and not getattr(obj, "_is_protocol", False):
                found[f"{short}.{name}"] = obj
                for method, fn in vars(obj).items():
                    if not method.startswith("_") and inspect.isfunction(fn):
                        found[f"{short}.{name}.{method}"] = fn
    return found


def _arguments(fn: Callable[..., Any]) -> list[str]:
    return [name for name, p in inspect.signature(fn).parameters.items()
            if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def literal_config_fields() -> list[tuple[str, str]]:
    """``("module.Config", field)`` for every dataclass field of a taught module typed
    ``Literal[...]``."""
    found = []
    for module in taught_modules():
        short = module.__name__.rsplit(".", 1)[1]
        for name, obj in vars(module).items():
            if (name.startswith("_") or getattr(obj, "__module__", None) != module.__name__
                    or not inspect.isclass(obj) or not dataclasses.is_dataclass(obj)):
                continue
            hints = _hints(obj)
            found += [(f"{short}.{name}", f.name) for f in dataclasses.fields(obj)
                      if _is_literal(hints.get(f.name))]
    return found


# --- bad inputs -------------------------------------------------------------------------------

def _set_first(t: torch.Tensor, value: float) -> torch.Tensor:
    t = t.clone()
    t.view(-1)[0] = value
    return t


def _neg_inf_row(t: torch.Tensor) -> torch.Tensor:
    t = t.clone()
    t[0] = float("-inf")
    return t


def _scalar_or_first(value: float) -> Callable[[Any, Entry], Any]:
    return lambda v, e: _set_first(v, value) if isinstance(v, torch.Tensor) else value


#: The usual bad inputs, each a function of the valid value (and the entry, for its vocabulary).
KINDS: dict[str, Callable[[Any, Entry], Any]] = {
    "int": lambda t, e: t.round().long(),       # integers where floats are expected
    "float": lambda t, e: t.float(),            # floats where integer ids are expected
    "not_bool": lambda t, e: t.long(),          # 0/1 integers where a boolean mask is expected
    "float64": lambda t, e: t.double(),         # float64 mixed with float32 arguments
    "0d": lambda t, e: t.reshape(-1)[0].clone(),  # a 0-d tensor
    "extra_dim": lambda t, e: t[None],          # one dimension too many
    "missing_dim": lambda t, e: t[0],           # one dimension too few
    "empty": lambda t, e: t[..., :0],           # nothing along the last dimension
    "empty_batch": lambda t, e: t[:0],          # nothing along the first dimension
    "list": lambda t, e: t.tolist(),            # a list where a tensor is expected
    "nan": _scalar_or_first(float("nan")),
    "inf": _scalar_or_first(float("inf")),
    "zero": _scalar_or_first(0),
    "negative": _scalar_or_first(-1),           # a negative id, size or value
    "fraction": lambda v, e: 2.5,               # a fraction where an integer is expected
    "-inf_row": lambda t, e: _neg_inf_row(t),   # a row of logits that allows no token
    "id_too_large": lambda t, e: _set_first(t, e.vocab) if isinstance(t, torch.Tensor) else e.vocab,
    "all_equal": lambda t, e: torch.full_like(t, t.reshape(-1)[0].item()),
    "bad_option": lambda v, e: "no_such_option",  # a string that names no option
    "above_one": _scalar_or_first(1.5),         # a probability above one
    "a_dict": lambda v, e: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else {},  # config
    "not_a_sequence": lambda v, e: 3,           # a number where a list is expected
    "not_callable": lambda v, e: 3,             # a number where a function is expected
}


@dataclass(frozen=True)
class Custom:
    """A bad input that is not one of :data:`KINDS`: ``label`` names it in the test id."""

    label: str
    make: Callable[[Any], Any]


Kind = str | Custom


@dataclass(frozen=True)
class Entry:
    """How to call one taught function with valid arguments, and the bad inputs that apply.

    ``bad`` maps an argument (or several joined by ``+``, changed together) to its bad inputs;
    ``vocab`` is one past the largest valid id of the id arguments; ``unchecked`` maps a tensor
    argument to no bad input, with the reason.
    """

    build: Callable[[], Call]
    bad: Mapping[str, tuple[Kind, ...]]
    vocab: int = 0
    unchecked: Mapping[str, str] = field(default_factory=dict)


def _randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _ids(*shape: int, vocab: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(vocab, shape, generator=torch.Generator().manual_seed(seed))


FLOAT = ("int", "list")                       # a float tensor, elementwise
RANKED = ("int", "0d", "list")                # a float tensor (..., n): at least one dimension
FLOAT_FIXED = ("int", "0d", "missing_dim", "extra_dim", "list")  # ... of one fixed rank
IDS = ("float", "0d", "extra_dim", "id_too_large", "negative", "list")  # (B, T) token ids
TARGETS = ("float", "0d", "id_too_large", "negative")  # ids of a loss (-100 may be ignored)
MASK = ("not_bool",)                           # a boolean mask, True = may attend


# --- the table: small models and valid arguments ----------------------------------------------

V = 11  # the vocabulary of the small language models below

# Reasons an argument of chapters 7 and 9 has no bad input of its own.
MODEL = "a model object: its forward has its own entry"
GENERATOR = "a torch.Generator: torch checks it where it draws"
SEED = "a seed: any integer seeds"
DEVICE = "a device: torch checks it"
PROGRESS = "a progress-bar flag"
FLAG = "a flag: any value is read as true or false"


def _gpt(**overrides: Any) -> gpt.GPT:
    torch.manual_seed(0)
    config = dict(vocab_size=V, block_size=8, n_layer=1, n_head=2, n_embd=8) | overrides
    return gpt.GPT(gpt.GPTConfig(**config)).eval()


def _gpt_config() -> gpt.GPTConfig:
    return _gpt().config


def _markov() -> decoding.StepFn:
    return decoding.greedy_vs_beam_example()[0]  # vocabulary of 4, <bos> = 3, <eos> = 0


def _cached_step() -> Call:
    step = _gpt().cached_step()
    return step, {"tokens": _ids(2, 3, vocab=V)}


def _lora_layer() -> lora.LoRALinear:
    torch.manual_seed(0)
    return lora.LoRALinear(nn.Linear(4, 3), r=2, alpha=4.0)


def _dpo_logprobs() -> dict[str, Any]:
    return {"policy_chosen": _randn(3, seed=1), "policy_rejected": _randn(3, seed=2),
            "reference_chosen": _randn(3, seed=3), "reference_rejected": _randn(3, seed=4),
            "beta": 0.1}


def _vocabulary() -> list[str]:
    return list("abcdefghijk")  # V = 11 letters, for dpo's preference pairs


def _transformer_config() -> transformer.TransformerConfig:
    return transformer.TransformerConfig(src_vocab_size=V, tgt_vocab_size=V, d_model=8, n_heads=2,
                                         n_encoder_layers=1, n_decoder_layers=1, d_ff=16,
                                         dropout=0.0, max_len=16)


def _seq2seq_config() -> seq2seq.Seq2SeqConfig:
    return seq2seq.Seq2SeqConfig(src_vocab_size=V, tgt_vocab_size=V, emb_dim=4, hidden_dim=6,
                                 attn_dim=5)


def _seq2seq_inputs() -> dict[str, Any]:
    return {"src": _ids(2, 4, vocab=V), "src_mask": torch.ones(2, 4, dtype=torch.bool),
            "tgt_in": _ids(2, 3, vocab=V, seed=1)}


def _recall() -> longrange.RecallConfig:
    return longrange.RecallConfig(n_keys=4, n_values=4, length=6, n_pairs=2)


def _recall_inputs() -> dict[str, Any]:
    batch = longrange.make_recall_batch(_recall(), 2, torch.Generator().manual_seed(0))
    return {"keys": batch.keys, "values": batch.values}


def _mha() -> multihead.MultiHeadAttention:
    torch.manual_seed(0)
    return multihead.MultiHeadAttention(8, 2)


def _train_config() -> training.TrainConfig:
    return training.TrainConfig(steps=1, progress=False)


def _attention_decoder_inputs() -> dict[str, Any]:
    torch.manual_seed(0)
    memory = _randn(2, 4, 6)
    return {"y_prev": _ids(2, vocab=V), "state": _randn(2, 5, seed=1), "memory": memory,
            "keys": _randn(2, 4, 3, seed=2), "memory_mask": torch.ones(2, 4, dtype=torch.bool),
            "embedding": nn.Embedding(V, 4), "gru_cell": nn.GRUCell(4 + 6, 5),
            "W_q": _randn(3, 5, seed=3), "v": _randn(3, seed=4), "out": nn.Linear(5 + 6 + 4, V)}


def _decoder_inputs() -> dict[str, Any]:
    return {"y": _randn(2, 3, 8), "memory": _randn(2, 4, 8, seed=1),
            "self_mask": attention.causal_mask(3),
            "memory_mask": torch.ones(2, 1, 1, 4, dtype=torch.bool)}


def _llama_config() -> llama.LlamaConfig:
    return llama.LlamaConfig(vocab_size=V, hidden_size=16, intermediate_size=40,
                             num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2)


def _used_cache() -> llama.KVCache:
    """A cache of 2 layers that already holds 3 positions of a batch of 2 (2 heads of width 4)."""
    cache = llama.KVCache(2)
    for layer in range(2):
        cache.update(layer, _randn(2, 2, 3, 4), _randn(2, 2, 3, 4))
    return cache


def _llama_logits(seed: int = 0) -> Callable[[torch.Tensor], torch.Tensor]:
    """A tiny Llama as speculative decoding's ``(1, T) -> (1, T, V)`` logits function."""
    torch.manual_seed(seed)
    return llama.LlamaForCausalLM(_llama_config()).eval()


def _moe_experts() -> moe.Experts:
    torch.manual_seed(0)
    return moe.Experts(n_experts=4, hidden_size=8, intermediate_size=16)


def _moe_block() -> moe.SparseMoeBlock:
    torch.manual_seed(0)
    return moe.SparseMoeBlock(hidden_size=8, intermediate_size=16, n_experts=4, k=2)


def _linformer_layer() -> linformer.LinformerSelfAttention:
    torch.manual_seed(0)
    return linformer.LinformerSelfAttention(d_model=8, n_heads=2, seq_len=6, k=3)


PROBLEMS = [(7, [3, -2, 1]), (0, [1, 2, -1])]  # chapter 9's problems: a start, its changes

#: Bad problems of chapter 9: a start outside [LOW, HIGH], changes that are no signed digits.
PROBLEM: dict[str, tuple[Kind, ...]] = {
    "start": ("fraction", "negative", Custom("above_high", lambda _: 10)),
    "changes": ("not_a_sequence", Custom("a_string", lambda _: "3-2"),
                Custom("a_fraction", lambda _: [2.5]), Custom("empty", lambda _: []),
                Custom("two_digits", lambda _: [12]))}


def _mixed_k(problems: list[tuple[int, list[int]]]) -> list[tuple[int, list[int]]]:
    return [*problems, (5, [1])]  # one problem with another number of changes


#: Bad lists of problems: not a list, none, two numbers of changes.
BAD_PROBLEMS: tuple[Kind, ...] = ("not_a_sequence", Custom("empty", lambda _: []),
                                  Custom("mixed_k", _mixed_k))


def _reasoning_config() -> reasoning.ReasoningConfig:
    return reasoning.ReasoningConfig(train_steps=(1, 2), test_steps=(1, 2), n_layer=1, n_head=2,
                                     n_embd=8, steps=1, batch_size=2, warmup_steps=0,
                                     eval_problems=1)


def _s5_config() -> reasoning.S5Config:
    return reasoning.S5Config(train_k=2, test_k=3, n_layer=1, n_head=2, n_embd=8, steps=1,
                              batch_size=2, warmup_steps=0, eval_problems=1)


def _reasoning_gpt() -> gpt.GPT:
    return _gpt(vocab_size=len(reasoning.VOCAB), block_size=16)


def _head_gates(model: nn.Module, gates: torch.Tensor | None = None) -> None:
    with head_importance.head_gates(model, gates):
        pass


def _head_mask(model: nn.Module, keep: torch.Tensor) -> None:
    with head_importance.head_mask(model, keep):
        pass


def _write_gpt2_files(folder: Path) -> tuple[Path, Path]:
    """A tiny tokenizer in GPT-2's two file formats: ``encoder.json`` and ``vocab.bpe``."""
    alphabet = bpe.bytes_to_unicode()
    table = {alphabet[b]: b for b in range(256)}
    table[alphabet[ord("a")] * 2] = 256
    table["<|endoftext|>"] = 257
    vocab_path, merges_path = folder / "encoder.json", folder / "vocab.bpe"
    vocab_path.write_text(json.dumps(table), encoding="utf-8")
    merges_path.write_text(f"#version: 0.2\n{alphabet[ord('a')]} {alphabet[ord('a')]}\n",
                           encoding="utf-8")
    return vocab_path, merges_path


CASES: dict[str, Entry] = {
    # --- sampling (chapter 4) -----------------------------------------------------------------
    "sampling.apply_temperature": Entry(
        lambda: (sampling.apply_temperature, {"logits": _randn(2, 5), "temperature": 0.5}),
        {"logits": RANKED, "temperature": ("nan", "zero")}),
    "sampling.top_k_filter": Entry(
        lambda: (sampling.top_k_filter, {"logits": _randn(2, 5), "k": 2}),
        {"logits": RANKED + ("empty",), "k": ("fraction", "zero")}),
    "sampling.top_p_filter": Entry(
        lambda: (sampling.top_p_filter, {"logits": _randn(2, 5), "p": 0.9}),
        {"logits": RANKED + ("empty",), "p": ("nan", "zero")}),
    "sampling.filter_logits": Entry(
        lambda: (sampling.filter_logits, {"logits": _randn(2, 5), "top_k": 3, "top_p": 0.9}),
        {"logits": RANKED + ("empty",)}),
    "sampling.filtered_distribution": Entry(
        lambda: (sampling.filtered_distribution, {"logits": _randn(2, 5), "top_k": 3}),
        {"logits": RANKED + ("empty", "nan", "-inf_row")}),
    "sampling.sample_next": Entry(
        lambda: (sampling.sample_next, {"logits": _randn(2, 5),
                                        "generator": torch.Generator().manual_seed(0)}),
        {"logits": FLOAT_FIXED + ("empty", "nan", "-inf_row")}),
    "sampling.sample": Entry(
        lambda: (sampling.sample, {"step": _markov(), "prompt": torch.tensor([[3]]),
                                   "max_new_tokens": 3, "eos_id": 0}),
        {"prompt": ("float", "0d", "extra_dim", "empty", "list"),
         "eos_id": ("id_too_large", "negative"),
         "max_new_tokens": ("negative", "fraction")}, vocab=4),
    "sampling.distinct_ngrams": Entry(
        lambda: (sampling.distinct_ngrams, {"sequences": torch.tensor([[1, 2, 1, 2]]), "n": 2}),
        {"sequences": ("float", "0d", "extra_dim"), "n": ("zero", "fraction")}),
    # --- gpt (chapter 4) ----------------------------------------------------------------------
    "gpt.gelu_tanh": Entry(lambda: (gpt.gelu_tanh, {"x": _randn(3)}), {"x": FLOAT}),
    "gpt.CausalSelfAttention": Entry(
        lambda: (gpt.CausalSelfAttention(_gpt_config()), {"x": _randn(2, 3, 8)}),
        {"x": FLOAT_FIXED + ("empty",)}, unchecked={"cache": "a KVCache, not a tensor"}),
    "gpt.MLP": Entry(lambda: (gpt.MLP(_gpt_config()), {"x": _randn(2, 3, 8)}),
                     {"x": RANKED + ("empty",)}),
    "gpt.Block": Entry(lambda: (gpt.Block(_gpt_config()), {"x": _randn(2, 3, 8)}),
                       {"x": FLOAT_FIXED + ("empty",)}),
    "gpt.GPT": Entry(lambda: (_gpt(), {"idx": _ids(2, 3, vocab=V)}), {"idx": IDS}, vocab=V),
    "gpt.GPT.step": Entry(lambda: (_gpt().step, {"tokens": _ids(2, 3, vocab=V)}),
                          {"tokens": IDS + ("empty",)}, vocab=V),
    "gpt.GPT.cached_step": Entry(_cached_step, {"tokens": IDS + ("empty",)}, vocab=V),
    "gpt.lm_loss": Entry(
        lambda: (gpt.lm_loss, {"logits": _randn(2, 3, V), "targets": _ids(2, 3, vocab=V)}),
        {"logits": FLOAT_FIXED, "targets": TARGETS}, vocab=V),
    "gpt.bits_per_byte_loss": Entry(
        lambda: (gpt.bits_per_byte_loss, {"logits": _randn(2, 3, V),
                                          "targets": _ids(2, 3, vocab=V),
                                          "token_bytes": torch.ones(V, dtype=torch.long)}),
        {"logits": FLOAT_FIXED, "targets": TARGETS, "token_bytes": ("float", "0d", "negative")},
        vocab=V),
    "gpt.from_gpt2_state_dict": Entry(
        lambda: (gpt.from_gpt2_state_dict, {"state_dict": gpt.to_gpt2_state_dict(_gpt()),
                                            "config": _gpt_config()}),
        {"state_dict": (Custom("empty_dict", lambda d: {}),
                        Custom("a_misshapen_weight",
                               lambda d: d | {"transformer.wpe.weight": torch.zeros(3, 8)}),
                        Custom("an_integer_weight",
                               lambda d: d | {"transformer.ln_f.bias": torch.zeros(8).long()}))}),
    # --- decoding (chapters 1, 3, 4) ----------------------------------------------------------
    "decoding.greedy_decode": Entry(
        lambda: (decoding.greedy_decode, {"step": _markov(), "prompt": torch.tensor([[3]]),
                                          "max_new_tokens": 3, "eos_id": 0}),
        {"prompt": ("float", "0d", "extra_dim", "empty", "list"),
         "eos_id": ("id_too_large", "negative")}, vocab=4),
    "decoding.beam_search": Entry(
        lambda: (decoding.beam_search, {"step": _markov(), "prompt": torch.tensor([[3]]),
                                        "beam_width": 2, "max_new_tokens": 3, "eos_id": 0}),
        {"prompt": ("float", "0d", "extra_dim", "empty", "list"),
         "eos_id": ("id_too_large", "negative"), "beam_width": ("zero", "fraction")}, vocab=4),
    "decoding.markov_step": Entry(
        lambda: (decoding.markov_step, {"logits": _randn(2, 4, 4)}), {"logits": FLOAT_FIXED}),
    "decoding.markov_step.step": Entry(
        lambda: (decoding.markov_step(_randn(2, 4, 4)), {"tokens": torch.tensor([[1, 2]])}),
        {"tokens": ("float", "0d", "empty", "id_too_large", "negative")}, vocab=4),
    "decoding.sequence_log_prob": Entry(
        lambda: (decoding.sequence_log_prob, {"step": _markov(),
                                              "tokens": torch.tensor([[3, 2, 1]]),
                                              "prompt_len": 1}),
        {"tokens": ("float", "0d", "extra_dim", "empty", "list")}),
    # --- parameter and FLOP counts (chapters 3, 5): no tensors ----------------------------------
    "counting.layer_shares": Entry(lambda: (counting.layer_shares, {"d": 8, "d_ff": 32}),
                                   {"d": ("zero", "negative", "fraction"),
                                    "d_ff": ("zero", "negative")}),
    "flops.attention_share": Entry(
        lambda: (flops.attention_share, {"n_params": 85e6, "n_layers": 12, "n_ctx": 1024,
                                         "d_model": 768}),
        {"n_params+n_layers+n_ctx+d_model": ("zero",), "n_params": ("nan", "negative"),
         "n_layers": ("negative",), "n_ctx": ("negative",), "d_model": ("negative",)}),
    # --- attention (chapters 1, 2) ------------------------------------------------------------
    "attention.additive_mask": Entry(
        lambda: (attention.additive_mask, {"mask": torch.tensor([True, False])}),
        {"mask": ("not_bool", "list")}),
    "attention.masked_softmax": Entry(
        lambda: (attention.masked_softmax, {"scores": _randn(2, 3),
                                            "mask": torch.tensor([[True, True, False]] * 2)}),
        {"scores": FLOAT, "mask": MASK}),
    "attention.scaled_dot_product_attention": Entry(
        lambda: (attention.scaled_dot_product_attention,
                 {"query": _randn(2, 3, 4), "key": _randn(2, 5, 4, seed=1),
                  "value": _randn(2, 5, 6, seed=2), "mask": torch.ones(3, 5, dtype=torch.bool)}),
        {"query+key+value": ("int", "list"), "query": ("0d", "float64"),
         "key": ("0d",), "value": ("0d",), "mask": MASK}),
    "attention.cached_attention_step": Entry(
        lambda: (attention.cached_attention_step,
                 {"x": _randn(2, 6), "w_q": _randn(4, 6, seed=1), "w_k": _randn(4, 6, seed=2),
                  "w_v": _randn(3, 6, seed=3), "cache_k": _randn(2, 1, 4, seed=4),
                  "cache_v": _randn(2, 1, 3, seed=5)}),
        {"x+w_q+w_k+w_v+cache_k+cache_v": ("int",), "x": ("0d", "extra_dim", "float64"),
         "w_q": ("0d",), "w_k": ("0d",), "w_v": ("0d",), "cache_k": ("0d", "float64"),
         "cache_v": ("0d",)}),
    "attention.padding_mask": Entry(
        lambda: (attention.padding_mask, {"lengths": torch.tensor([1, 3])}),
        {"lengths": ("float", "0d", "negative", "list")}),
    "attention.attention_mask": Entry(
        lambda: (attention.attention_mask, {"key_padding": torch.ones(2, 3, dtype=torch.bool),
                                            "attn": attention.causal_mask(3)}),
        {"key_padding": ("not_bool", "0d"), "attn": ("not_bool", "0d")}),
    # --- sparse attention (chapter 6) ---------------------------------------------------------
    "sparse_attention.mask_to_edges": Entry(
        lambda: (sparse_attention.mask_to_edges, {"mask": attention.causal_mask(3)}),
        {"mask": ("not_bool", "0d", "extra_dim")}),
    "sparse_attention.edges_to_mask": Entry(
        lambda: (sparse_attention.edges_to_mask, {"edges": torch.tensor([[0, 1], [0, 0]]),
                                                  "n_queries": 2, "n_keys": 2}),
        {"edges": ("float", "0d", "negative", "id_too_large")}, vocab=2),
    "sparse_attention.receptive_field": Entry(
        lambda: (sparse_attention.receptive_field, {"mask": attention.causal_mask(3),
                                                    "n_layers": 2}),
        {"mask": ("not_bool", "0d", "extra_dim"), "n_layers": ("zero",)}),
    "sparse_attention.block_sparse_attention": Entry(
        lambda: (sparse_attention.block_sparse_attention,
                 {"q": _randn(2, 6, 4), "k": _randn(2, 6, 4, seed=1), "v": _randn(2, 6, 3, seed=2),
                  "pattern": sparse_attention.sliding_window(1), "block_size": 2}),
        {"q+k+v": ("int", "list"), "q": ("0d", "float64"), "k": ("0d",), "v": ("0d",),
         "layout": (Custom("integers", lambda _: torch.ones(3, 3, dtype=torch.long)),)}),
    # --- linear attention (chapter 6) ---------------------------------------------------------
    "linear_attention.elu_feature_map": Entry(
        lambda: (linear_attention.elu_feature_map, {"x": _randn(3)}), {"x": FLOAT}),
    "linear_attention.relu_feature_map": Entry(
        lambda: (linear_attention.relu_feature_map, {"x": _randn(3)}), {"x": FLOAT}),
    "linear_attention.exp_feature_map": Entry(
        lambda: (linear_attention.exp_feature_map, {"x": _randn(3)}), {"x": FLOAT}),
    **{f"linear_attention.{name}": Entry(
        (lambda name=name: (getattr(linear_attention, name),
                            {"q": _randn(2, 5, 4), "k": _randn(2, 5, 4, seed=1),
                             "v": _randn(2, 5, 3, seed=2)})),
        {"q+k+v": ("int", "list"), "q": ("0d", "missing_dim", "float64"), "k": ("0d",),
         "v": ("0d",)})
       for name in ("kernel_attention", "linear_attention", "causal_linear_attention",
                    "recurrent_linear_attention")},
    "linear_attention.init_state": Entry(
        lambda: (linear_attention.init_state, {"k": _randn(2, 4), "v": _randn(2, 3, seed=1)}),
        {"k": ("int", "0d"), "v": ("int", "0d")}),
    "linear_attention.linear_attention_step": Entry(
        lambda: (linear_attention.linear_attention_step,
                 {"state": linear_attention.init_state(_randn(2, 4), _randn(2, 3)),
                  "q": _randn(2, 4, seed=1), "k": _randn(2, 4, seed=2), "v": _randn(2, 3, seed=3)}),
        {"q+k+v": ("int",), "q": ("0d",), "k": ("0d",), "v": ("0d",),
         "state": (Custom("misshapen", lambda s: (s[0][..., :1], s[1])),
                   Custom("integers", lambda s: (s[0].long(), s[1].long())),
                   Custom("not_a_pair", lambda s: s[0]))}),
    # --- LoRA, distillation, DPO (chapter 8) --------------------------------------------------
    "lora.lora_forward": Entry(
        lambda: (lora.lora_forward, {"x": _randn(5, 4), "weight": _randn(3, 4, seed=1),
                                     "bias": _randn(3, seed=2), "lora_a": _randn(2, 4, seed=3),
                                     "lora_b": _randn(3, 2, seed=4), "alpha": 4.0}),
        {"x+weight+bias+lora_a+lora_b": ("int",), "x": ("0d", "float64", "list"),
         "weight": ("0d", "float64"), "bias": ("float64", "extra_dim"),
         "lora_a": ("0d", "float64"), "lora_b": ("0d", "float64"), "alpha": ("nan",)}),
    "lora.merge_lora": Entry(
        lambda: (lora.merge_lora, {"weight": _randn(3, 4, seed=1), "lora_a": _randn(2, 4, seed=3),
                                   "lora_b": _randn(3, 2, seed=4), "alpha": 4.0}),
        {"weight+lora_a+lora_b": ("int",), "weight": ("0d", "float64"),
         "lora_a": ("0d", "float64"), "lora_b": ("0d", "float64"), "alpha": ("nan",)}),
    "lora.LoRALinear": Entry(lambda: (_lora_layer(), {"x": _randn(5, 4)}),
                             {"x": ("int", "0d", "float64", "list")}),
    "lora.LoRALinear.__init__": Entry(
        lambda: (lora.LoRALinear, {"base": nn.Linear(4, 3), "r": 2, "alpha": 4.0}),
        {"r": ("fraction", "zero"), "alpha": ("nan",),
         "base": (Custom("conv1d", lambda _: nn.Conv1d(4, 3, 1)),)}),
    "lora.add_lora": Entry(
        lambda: (lora.add_lora, {"model": _gpt(), "r": 2, "alpha": 2.0}),
        {"r": ("fraction", "zero"), "alpha": ("nan",),
         "targets": (Custom("a_name_matching_nothing", lambda _: ("attn.c_q",)),
                     Custom("not_names", lambda _: (1, 2)))}),
    "distill.distillation_loss": Entry(
        lambda: (distill.distillation_loss, {"student_logits": _randn(2, 3, V),
                                             "teacher_logits": _randn(2, 3, V, seed=1),
                                             "temperature": 2.0}),
        {"student_logits+teacher_logits": ("int", "0d"), "student_logits": ("float64",),
         "temperature": ("nan",)}),
    "distill.hinton_loss": Entry(
        lambda: (distill.hinton_loss, {"student_logits": _randn(2, 3, V),
                                       "teacher_logits": _randn(2, 3, V, seed=1),
                                       "targets": _ids(2, 3, vocab=V), "temperature": 2.0,
                                       "weight": 0.5}),
        {"student_logits+teacher_logits": ("int",), "targets": TARGETS, "weight": ("nan",)},
        vocab=V),
    "distill.train_student": Entry(
        lambda: (distill.train_student, {"student": _gpt(), "teacher": _gpt(),
                                         "ids": _ids(40, vocab=V),
                                         "block_size": 4, "batch_size": 2,
                                         "config": _train_config()}),
        {"ids": ("float", "0d", "id_too_large", "negative")}, vocab=V),
    "dpo.dpo_loss": Entry(
        lambda: (dpo.dpo_loss, _dpo_logprobs()),
        {"policy_chosen+policy_rejected+reference_chosen+reference_rejected":
            ("empty_batch", "int", "nan"),
         "policy_chosen": ("0d", "float64"), "reference_rejected": ("extra_dim",),
         "beta": ("nan", "zero")}),
    "dpo.completion_logprobs": Entry(
        lambda: (dpo.completion_logprobs, {"model": _gpt(), "tokens": _ids(2, 5, vocab=V),
                                           "prompt_length": 2}),
        {"tokens": ("float", "0d", "extra_dim", "id_too_large", "negative")}, vocab=V),
    "dpo.sample_completions": Entry(
        lambda: (dpo.sample_completions, {"model": _gpt(), "prompts": _ids(2, 2, vocab=V),
                                          "length": 2, "seed": 0}),
        {"prompts": ("float", "0d", "empty", "id_too_large")}, vocab=V),
    "dpo.preference_pairs": Entry(
        lambda: (dpo.preference_pairs, {"tokens": torch.tensor([[[0, 4, 0], [0, 1, 2]]]),
                                        "prompt_length": 1, "vocabulary": _vocabulary()}),
        {"tokens": ("float", "0d", "missing_dim", "id_too_large", "negative")}, vocab=V),
    "dpo.property_rate_and_kl": Entry(
        lambda: (dpo.property_rate_and_kl, {"policy": _gpt(), "reference": _gpt(),
                                            "prompts": _ids(2, 2, vocab=V), "length": 2,
                                            "vocabulary": _vocabulary(), "seed": 0}),
        {"prompts": ("float", "0d", "empty", "id_too_large")}, vocab=V),
    "dpo.train_dpo": Entry(
        lambda: (dpo.train_dpo, {"policy": _gpt(), "reference": _gpt(),
                                 "chosen": _ids(3, 5, vocab=V), "rejected": _ids(3, 5, vocab=V,
                                                                                 seed=1),
                                 "prompt_length": 2, "beta": 0.1, "steps": 1, "lr": 1e-3,
                                 "batch_size": 2}),
        {"chosen": ("float", "0d", "id_too_large"), "rejected": ("float", "missing_dim"),
         "chosen+rejected": ("empty_batch",), "beta": ("nan",)}, vocab=V),
    # --- BERT and GPT objectives (chapter 3) --------------------------------------------------
    "lm.bert_attention_mask": Entry(
        lambda: (lm.bert_attention_mask, {"padding": torch.tensor([[True, True, False]])}),
        {"padding": ("not_bool", "0d", "extra_dim")}),
    "lm.gpt_attention_mask": Entry(
        lambda: (lm.gpt_attention_mask, {"padding": torch.tensor([[True, True, False]])}),
        {"padding": ("not_bool", "0d", "extra_dim")}),
    "lm.mask_tokens": Entry(
        lambda: (lm.mask_tokens, {"tokens": _ids(2, 4, vocab=V), "mask_id": 1, "vocab_size": V,
                                  "special": torch.zeros(2, 4, dtype=torch.bool)}),
        {"tokens": ("float", "0d", "id_too_large", "negative"), "special": ("not_bool",),
         "mask_id": ("id_too_large", "negative")}, vocab=V),
    "lm.masked_lm_loss": Entry(
        lambda: (lm.masked_lm_loss, {"logits": _randn(2, 3, V),
                                     "targets": torch.tensor([[2, -100, 3], [-100, 1, 0]])}),
        {"logits": FLOAT_FIXED, "targets": TARGETS}, vocab=V),
    "lm.next_token_loss": Entry(
        lambda: (lm.next_token_loss, {"logits": _randn(2, 3, V), "tokens": _ids(2, 3, vocab=V),
                                      "padding": torch.ones(2, 3, dtype=torch.bool)}),
        {"logits": FLOAT_FIXED, "tokens": TARGETS, "padding": ("not_bool", "0d")}, vocab=V),
    # --- scaling laws (chapter 5) -------------------------------------------------------------
    "scaling.chinchilla_loss": Entry(
        lambda: (scaling.chinchilla_loss, {"n_params": torch.tensor([70e9]),
                                           "n_tokens": torch.tensor([1.4e12])}),
        {"n_params": ("zero", "negative", "nan", "int", "list"), "n_tokens": ("zero", "nan"),
         "alpha": ("nan",), "E": ("inf",)}),
    "scaling.compute_optimal": Entry(
        lambda: (scaling.compute_optimal, {"flops": 5.76e23}),
        {"flops": ("nan", "inf", "zero"), "E": ("nan",), "alpha": ("nan",), "B": ("inf",)}),
    "scaling.fit_power_law": Entry(
        lambda: (scaling.fit_power_law, {"x": torch.tensor([1.0, 10.0, 100.0]),
                                         "y": torch.tensor([3.0, 0.3, 0.03])}),
        {"x": ("all_equal", "nan", "zero", "0d"), "y": ("nan", "inf", "negative")}),
    "scaling.bootstrap_power_law": Entry(
        lambda: (scaling.bootstrap_power_law, {"x": torch.tensor([1.0, 10.0, 100.0]),
                                               "y": torch.tensor([3.0, 0.3, 0.03]),
                                               "n_boot": 5}),
        {"x": ("all_equal", "nan", "zero"), "y": ("nan", "negative")}),
    "scaling.fit_chinchilla": Entry(
        lambda: (scaling.fit_chinchilla,
                 {"n_params": np.array([1e3, 3e3, 1e4, 3e4, 1e5] * 3),
                  "n_tokens": np.repeat([1e5, 1e6, 1e7], 5),
                  "loss": 1.5 + 20 / np.array([1e3, 3e3, 1e4, 3e4, 1e5] * 3) ** 0.4
                  + 60 / np.repeat([1e5, 1e6, 1e7], 5) ** 0.3, "exponents": [0.3, 0.4]}),
        {"n_params": (Custom("nan", lambda a: np.where(np.arange(a.size) == 0, np.nan, a)),),
         "n_tokens": (Custom("zero", lambda a: 0 * a),),
         "loss": (Custom("negative", lambda a: -a),)}),
    "scaling.isoflop_minimum": Entry(
        lambda: (scaling.isoflop_minimum, {"flops": 6e9, "n_params": torch.tensor([1e3, 1e4, 1e5]),
                                           "loss": torch.tensor([2.5, 2.0, 2.5])}),
        {"n_params": ("nan", "zero"), "loss": ("nan", "inf"), "flops": ("nan", "zero")}),
    "scaling.bootstrap_interval": Entry(
        lambda: (scaling.bootstrap_interval, {"x": torch.tensor([1.0, 10.0, 100.0]),
                                              "y": torch.tensor([3.0, 0.3, 0.03]),
                                              "indices": torch.tensor([[0, 1, 2], [0, 0, 2]])}),
        {"x": ("nan", "zero", "0d"), "y": ("nan", "negative"),
         "indices": ("float", "0d", "id_too_large", "negative")}, vocab=3),
    # --- the chapters' other modules ----------------------------------------------------------
    # chapter 1: attention over an RNN's states, seq2seq models
    "alignment.nadaraya_watson": Entry(
        lambda: (alignment.nadaraya_watson, {"queries": _randn(4), "keys": _randn(5, seed=1),
                                             "values": _randn(5, seed=2)}),
        {"queries+keys+values": ("int",), "queries": ("0d", "extra_dim", "list"),
         "keys": ("0d", "extra_dim"), "values": ("0d",)}),
    "alignment.additive_score": Entry(
        lambda: (alignment.additive_score, {"query": _randn(2, 1, 3),
                                            "keys": _randn(2, 4, 5, seed=1),
                                            "W_q": _randn(6, 3, seed=2),
                                            "W_k": _randn(6, 5, seed=3),
                                            "v": _randn(6, seed=4)}),
        {"query+keys+W_q+W_k+v": ("int",), "query": ("0d", "missing_dim", "list"),
         "keys": ("0d", "missing_dim"), "W_q": ("0d",), "W_k": ("0d",), "v": ("0d",)}),
    "alignment.dot_score": Entry(
        lambda: (alignment.dot_score, {"query": _randn(2, 1, 3), "keys": _randn(2, 4, 3, seed=1)}),
        {"query+keys": ("int",), "query": ("0d", "missing_dim", "list"), "keys": ("0d",)}),
    "alignment.general_score": Entry(
        lambda: (alignment.general_score, {"query": _randn(2, 1, 3),
                                           "keys": _randn(2, 4, 5, seed=1),
                                           "W": _randn(3, 5, seed=2)}),
        {"query+keys+W": ("int",), "query": ("0d", "missing_dim"), "keys": ("0d",),
         "W": ("0d", "extra_dim")}),
    "alignment.context_vector": Entry(
        lambda: (alignment.context_vector, {"scores": _randn(2, 1, 4),
                                            "values": _randn(2, 4, 3, seed=1),
                                            "mask": torch.ones(2, 1, 4, dtype=torch.bool)}),
        {"scores+values": ("int",), "scores": ("0d", "missing_dim"), "values": ("0d",),
         "mask": ("not_bool",)}),
    "alignment.AdditiveAttention": Entry(
        lambda: (alignment.AdditiveAttention(3, 5, 6), {"query": _randn(2, 1, 3),
                                                         "keys": _randn(2, 4, 5, seed=1),
                  "mask": torch.ones(2, 1, 4, dtype=torch.bool)}),
        {"query": ("int", "0d", "missing_dim"), "keys": ("int", "0d"), "mask": ("not_bool",)}),
    "alignment.LuongAttention": Entry(
        lambda: (alignment.LuongAttention(3, 5), {"query": _randn(2, 1, 3),
                                                  "keys": _randn(2, 4, 5, seed=1),
                  "mask": torch.ones(2, 1, 4, dtype=torch.bool)}),
        {"query": ("int", "0d", "missing_dim"), "keys": ("int", "0d"), "mask": ("not_bool",)}),
    "seq2seq.sequence_loss": Entry(
        lambda: (seq2seq.sequence_loss, {"logits": _randn(2, 3, V),
                                         "targets": _ids(2, 3, vocab=V)}),
        {"logits": FLOAT_FIXED, "targets": ("float", "0d", "id_too_large", "negative")}, vocab=V),
    "seq2seq.Encoder": Entry(
        lambda: (seq2seq.Encoder(_seq2seq_config()), {"src": _ids(2, 4, vocab=V),
                                                      "src_mask": torch.ones(2, 4,
                                                                             dtype=torch.bool)}),
        {"src": ("float", "0d", "id_too_large", "negative"), "src_mask": ("not_bool", "0d")},
        vocab=V),
    **{f"seq2seq.{name}": Entry(
        (lambda name=name: (getattr(seq2seq, name)(_seq2seq_config()), _seq2seq_inputs())),
        {"src": ("float", "0d", "id_too_large"), "src_mask": ("not_bool",),
         "tgt_in": ("float", "0d", "id_too_large", "negative")}, vocab=V)
       for name in ("Seq2Seq", "AttentionSeq2Seq")},
    "seq2seq.attention_decoder_step": Entry(
        lambda: (seq2seq.attention_decoder_step, _attention_decoder_inputs()),
        {"y_prev": ("float", "id_too_large", "extra_dim"), "state": ("int", "0d"),
         "memory": ("int", "0d"), "keys": ("int", "0d"), "memory_mask": ("not_bool",),
         "W_q": ("int", "0d"), "v": ("int", "0d")}, vocab=V),
    # chapter 2: multi-head attention, positions, long-range models
    "multihead.split_heads": Entry(
        lambda: (multihead.split_heads, {"x": _randn(2, 3, 8), "n_heads": 2}),
        {"x": ("0d", "missing_dim", "extra_dim", "list")}),
    "multihead.merge_heads": Entry(
        lambda: (multihead.merge_heads, {"x": _randn(2, 2, 3, 4)}),
        {"x": ("0d", "missing_dim", "extra_dim", "list")}),
    "multihead.multi_head_attention": Entry(
        lambda: (multihead.multi_head_attention,
                 {"query": _randn(2, 3, 8), "key": _randn(2, 5, 8, seed=1),
                  "value": _randn(2, 5, 8, seed=2), "w_q": _randn(8, 8, seed=3),
                  "w_k": _randn(8, 8, seed=4), "w_v": _randn(8, 8, seed=5),
                  "w_o": _randn(8, 8, seed=6), "n_heads": 2}),
        {"query+key+value+w_q+w_k+w_v+w_o": ("int",), "query": ("0d", "missing_dim", "list"),
         "key": ("0d",), "value": ("0d",), "w_q": ("0d",), "w_k": ("0d",), "w_v": ("0d",),
         "w_o": ("0d",), "mask": (Custom("integers", lambda _: torch.ones(3, 5).long()),)}),
    "multihead.MultiHeadAttention": Entry(
        lambda: (_mha(), {"query": _randn(2, 3, 8), "key": _randn(2, 5, 8, seed=1),
                          "value": _randn(2, 5, 8, seed=2)}),
        {"query": FLOAT_FIXED, "key": ("int", "0d"), "value": ("int", "0d"),
         "mask": (Custom("integers", lambda _: torch.ones(3, 5).long()),)}),
    **{f"positional.{name}": Entry(
        (lambda name=name: (getattr(positional, name)(8, max_len=16), {"x": _randn(2, 3, 8)})),
        {"x": FLOAT_FIXED}) for name in ("SinusoidalPositionalEncoding",
                                        "LearnedPositionalEmbedding")},
    **{f"longrange.{name}": Entry(
        (lambda name=name: (getattr(longrange, name)(_recall(), d_model=8), _recall_inputs())),
        {"keys": ("float", "0d", "id_too_large", "negative"), "values": ("float", "0d")},
        vocab=_recall().n_keys + 1)
       for name in ("LinearMixer", "GRUModel", "DilatedCNN")},
    "longrange.AttentionModel": Entry(
        lambda: (longrange.AttentionModel(_recall(), d_model=8, n_heads=2), _recall_inputs()),
        {"keys": ("float", "0d", "id_too_large", "negative"), "values": ("float", "0d")},
        vocab=_recall().n_keys + 1),
    "longrange.CausalConvLayer": Entry(
        lambda: (longrange.CausalConvLayer(4), {"x": _randn(2, 5, 4)}), {"x": FLOAT_FIXED}),
    "longrange.accuracy_by_distance": Entry(
        lambda: (longrange.accuracy_by_distance,
                 {"model": longrange.LinearMixer(_recall(), d_model=8),
                  "batch": longrange.make_recall_batch(_recall(), 4,
                                                       torch.Generator().manual_seed(0)),
                  "bins": torch.tensor([1, 3, 6])}),
        {"bins": ("0d", "extra_dim", "list", Custom("decreasing", lambda b: b.flip(0)))}),
    # chapter 3: the Transformer
    "transformer.FeedForward": Entry(
        lambda: (transformer.FeedForward(8, 16), {"x": _randn(2, 3, 8)}), {"x": RANKED}),
    "transformer.sublayer": Entry(
        lambda: (transformer.sublayer, {"x": _randn(2, 3, 8), "f": lambda z: (2 * z, None),
                                        "norm": nn.LayerNorm(8), "dropout": nn.Identity(),
                                        "norm_first": True}),
        {"x": ("int", "0d", "list")}),
    "transformer.EncoderLayer": Entry(
        lambda: (transformer.EncoderLayer(8, 2, 16),
                 {"x": _randn(2, 3, 8), "mask": torch.ones(2, 1, 1, 3, dtype=torch.bool)}),
        {"x": FLOAT_FIXED, "mask": MASK}),
    "transformer.DecoderLayer": Entry(
        lambda: (transformer.DecoderLayer(8, 2, 16), _decoder_inputs()),
        {"y": FLOAT_FIXED, "memory": ("int", "0d", "missing_dim"), "self_mask": MASK,
         "memory_mask": MASK}),
    "transformer.Encoder": Entry(
        lambda: (transformer.Encoder(_transformer_config()),
                 {"x": _randn(2, 3, 8), "mask": torch.ones(2, 1, 1, 3, dtype=torch.bool)}),
        {"x": FLOAT_FIXED, "mask": MASK}),
    "transformer.Decoder": Entry(
        lambda: (transformer.Decoder(_transformer_config()), _decoder_inputs()),
        {"y": FLOAT_FIXED, "memory": ("int", "0d"), "self_mask": MASK, "memory_mask": MASK}),
    "transformer.key_padding_mask": Entry(
        lambda: (transformer.key_padding_mask, {"padding": torch.ones(2, 3, dtype=torch.bool)}),
        {"padding": ("not_bool", "0d", "extra_dim")}),
    "transformer.Embedding": Entry(
        lambda: (transformer.Embedding(V, 8, max_len=16), {"tokens": _ids(2, 3, vocab=V)}),
        {"tokens": IDS}, vocab=V),
    "transformer.Transformer": Entry(
        lambda: (transformer.Transformer(_transformer_config()),
                 {"src": _ids(2, 4, vocab=V), "src_padding": torch.ones(2, 4, dtype=torch.bool),
                  "tgt": _ids(2, 3, vocab=V, seed=1)}),
        {"src": IDS, "src_padding": ("not_bool", "0d"), "tgt": IDS}, vocab=V),
    # chapter 4: the corpus
    "corpus.random_windows": Entry(
        lambda: (corpus.random_windows, {"ids": _ids(40, vocab=V), "block_size": 4,
                                         "batch_size": 2}),
        {"ids": ("float", "0d", "extra_dim", "negative")}),
    # chapter 4, section "Why Transformers copy"
    "copying.WindowEmbedding": Entry(
        lambda: (copying.WindowEmbedding(7, 8, 3, pad_id=6), {"ids": _ids(2, 5, vocab=6)}),
        {"ids": IDS}, vocab=7),
    **{f"copying.{name}": Entry(
        (lambda name=name: (getattr(copying, name)(copying.CopyTask(alphabet_size=4), d_model=8),
                            {"ids": _ids(2, 5, vocab=7)})),
        {"ids": IDS}, vocab=7) for name in ("CopyTransformer", "CopyGRU")},
    "copying.greedy_copy": Entry(
        lambda: (copying.greedy_copy, {"model": copying.CopyGRU(copying.CopyTask(alphabet_size=4),
                                                                d_model=8),
                                       "task": copying.CopyTask(alphabet_size=4),
                                       "strings": _ids(2, 3, vocab=4)}),
        {"strings": IDS + ("empty",)}, vocab=4),
    "copying.attention_map": Entry(
        lambda: (copying.attention_map, {"model": copying.CopyTransformer(
            copying.CopyTask(alphabet_size=4), d_model=8), "ids": _ids(2, 5, vocab=7)}),
        {"ids": IDS}, vocab=7),
    # chapter 5: the sweep's evaluation
    "sweep.evaluate": Entry(
        lambda: (sweep.evaluate, {"model": _gpt(block_size=sweep.BLOCK_SIZE),
                                  "val": _ids(200, vocab=V), "n_windows": 2}),
        {"val": ("float", "0d", "id_too_large", "negative")}, vocab=V),
    # chapter 6: efficient attention
    "linear_attention.positive_random_features": Entry(
        lambda: (linear_attention.positive_random_features, {"x": _randn(2, 4),
                                                            "w": _randn(6, 4, seed=1)}),
        {"x": ("int", "0d", "float64"), "w": ("int", "0d", "extra_dim")}),
    "linear_attention.trigonometric_random_features": Entry(
        lambda: (linear_attention.trigonometric_random_features, {"x": _randn(2, 4),
                                                                 "w": _randn(6, 4, seed=1)}),
        {"x": ("int", "0d", "float64"), "w": ("int", "0d", "extra_dim")}),
    "sparse_attention.layers_to_connect": Entry(
        lambda: (sparse_attention.layers_to_connect, {"mask": attention.causal_mask(4) | True}),
        {"mask": ("not_bool", "0d", "extra_dim",
                  Custom("not_square", lambda m: m[:2]))}),
    "linformer.linformer_attention": Entry(
        lambda: (linformer.linformer_attention,
                 {"q": _randn(2, 6, 4), "k": _randn(2, 6, 4, seed=1), "v": _randn(2, 6, 3, seed=2),
                  "e": _randn(3, 6, seed=3), "f": _randn(3, 6, seed=4)}),
        {"q+k+v+e+f": ("int",), "q": ("0d", "float64"), "k": ("0d",), "v": ("0d",),
         "e": ("0d", "extra_dim"), "f": ("0d",)}),
    "linformer.approximation_error": Entry(
        lambda: (linformer.approximation_error, {"q": _randn(2, 6, 4), "k": _randn(2, 6, 4, seed=1),
                                                 "v": _randn(2, 6, 3, seed=2), "ks": [2, 4]}),
        {"q+k+v": ("int",), "q": ("0d",), "k": ("0d",), "v": ("0d",)}),
    **{f"linformer.{name}": Entry(
        (lambda name=name: (getattr(linformer, name), {"weights": torch.softmax(_randn(2, 4, 4),
                                                                                 -1)})),
        {"weights": ("int", "0d", "list")})
       for name in ("singular_values", "cumulative_energy", "energy_rank")},
    "linformer.low_rank_error": Entry(
        lambda: (linformer.low_rank_error, {"weights": torch.softmax(_randn(2, 4, 4), -1),
                                            "rank": 2}),
        {"weights": ("int", "0d"), "rank": ("negative", "fraction")}),
    "linformer.LinformerSelfAttention": Entry(
        lambda: (_linformer_layer(), {"x": _randn(2, 6, 8)}), {"x": FLOAT_FIXED}),
    "tiled_attention.online_softmax_update": Entry(
        lambda: (tiled_attention.online_softmax_update,
                 {"m": torch.full((2,), float("-inf")), "l": torch.zeros(2),
                  "scores": _randn(2, 3)}),
        {"m+l+scores": ("int",), "m": ("0d",), "scores": ("0d", "float64")}),
    "tiled_attention.online_softmax": Entry(
        lambda: (tiled_attention.online_softmax, {"scores": _randn(2, 5), "block_size": 2}),
        {"scores": RANKED + ("empty",), "block_size": ("zero", "fraction")}),
    **{f"tiled_attention.{name}": Entry(
        (lambda name=name, scale=scale: (getattr(tiled_attention, name),
                                         {"q": _randn(2, 5, 4), "k": _randn(2, 5, 4, seed=1),
                                          "v": _randn(2, 5, 3, seed=2)} | scale
                                         | ({} if name == "naive_attention"
                                            else {"mask": attention.causal_mask(5)}))),
        {"q+k+v": ("int", "list"), "q": ("0d", "float64"), "k": ("0d",), "v": ("0d",),
         **({"mask": MASK} if name != "naive_attention" else {})})
       for name, scale in (("tiled_attention", {}), ("naive_attention", {}),
                           ("tiled_attention_forward", {"scale": 0.5}))},
    **{f"entmax.{name}": Entry(
        (lambda name=name: (getattr(entmax, name), {"z": _randn(2, 5)})),
        {"z": RANKED + ("empty", "nan"),
         **({"alpha": ("nan",)} if name in ("entmax_bisect", "entmax") else {})})
       for name in ("sparsemax", "entmax15", "entmax_bisect", "entmax")},
    "entmax.entmax_attention": Entry(
        lambda: (entmax.entmax_attention, {"q": _randn(2, 5, 4), "k": _randn(2, 5, 4, seed=1),
                                           "v": _randn(2, 5, 3, seed=2),
                                           "mask": attention.causal_mask(5)}),
        {"q+k+v": ("int", "list"), "q": ("0d", "float64"), "k": ("0d",), "v": ("0d",),
         "mask": MASK, "alpha": ("nan",)}),
    **{f"efficient_models.{name}": Entry(
        (lambda name=name: (getattr(efficient_models, name)(_recall(), d_model=8, n_heads=2),
                            _recall_inputs())),
        {"keys": ("float", "0d", "id_too_large"), "values": ("float", "0d")},
        vocab=_recall().n_keys + 1)
       for name in ("LinearAttentionModel", "EntmaxAttentionModel")},
    "head_importance.head_gates": Entry(
        lambda: (_head_gates, {"model": _mha(), "gates": torch.ones(1, 2)}),
        {"gates": ("0d", "extra_dim", "list")}),
    "head_importance.head_mask": Entry(
        lambda: (_head_mask, {"model": _mha(), "keep": torch.ones(1, 2, dtype=torch.bool)}),
        {"keep": ("not_bool", "0d", "extra_dim")}),
    "head_importance.head_importance": Entry(
        lambda: (head_importance.head_importance,
                 {"model": _mha(), "batches": [_randn(1, 3, 8)],
                  "loss_fn": lambda m, x: m(x, x, x)[0].pow(2).mean()}),
        {}, unchecked={"batches": "anything loss_fn accepts: head_importance never reads it"}),
    "head_importance.prune_order": Entry(
        lambda: (head_importance.prune_order,
                 {"importance": torch.tensor([[0.5, 0.1], [0.9, 0.3]])}),
        {"importance": ("0d", "missing_dim", "extra_dim", "nan", "list")}),
    "head_importance.keep_mask": Entry(
        lambda: (head_importance.keep_mask, {"importance": torch.tensor([[0.5, 0.1], [0.9, 0.3]]),
                                             "n_keep": 2}),
        {"importance": ("0d", "missing_dim", "nan"), "n_keep": ("negative", "fraction")}),
    "head_importance.pruning_curve": Entry(
        lambda: (head_importance.pruning_curve,
                 {"model": _mha(), "importance": torch.tensor([[1.0, 2.0]]),
                  "evaluate": lambda m: float(m(*(3 * [_randn(1, 3, 8)]))[0].detach().norm())}),
        {"importance": ("0d", "extra_dim", "nan",
                        Custom("another_model's", lambda _: torch.ones(2, 2)))}),
    "complexity.SelfAttentionLayer": Entry(
        lambda: (complexity.SelfAttentionLayer(8, n_heads=2), {"x": _randn(2, 3, 8)}),
        {"x": FLOAT_FIXED}),
    # chapter 8: fine-tuning
    "finetune.answer_only_loss": Entry(
        lambda: (finetune.answer_only_loss,
                 {"logits": _randn(2, 3, V), "targets": _ids(2, 3, vocab=V),
                  "answer_mask": torch.tensor([[False, True, True]] * 2)}),
        {"logits": FLOAT_FIXED, "targets": TARGETS,
         "answer_mask": ("not_bool", "0d", Custom("no_answer", torch.zeros_like))},
        vocab=V),
    "finetune.base_loss": Entry(
        lambda: (finetune.base_loss, {"model": _gpt(), "windows": (_ids(3, 5, vocab=V),
                                                                   _ids(3, 5, vocab=V, seed=1))}),
        {"windows": (Custom("float_inputs", lambda w: (w[0].float(), w[1])),
                     Custom("targets_past_the_vocabulary", lambda w: (w[0], w[1] + V)),
                     Custom("misshapen", lambda w: (w[0], w[1][:, :2])))}),
    # the plots
    "plotting.plot_attention": Entry(
        lambda: (plotting.plot_attention, {"weights": torch.softmax(_randn(2, 3), -1),
                                           "query_labels": ["a", "b"],
                                           "key_labels": ["x", "y", "z"]}),
        {"weights": ("0d", "extra_dim", Custom("labels_do_not_fit", lambda w: w[:, :2]))}),
    "plotting.plot_kernel_regression": Entry(
        lambda: (plotting.plot_kernel_regression, {"x_train": _randn(5),
                                                   "y_train": _randn(5, seed=1),
                                                   "x_query": torch.linspace(-1, 1, 4),
                                                   "predictions": {"h=1": _randn(4, seed=2)}}),
        {"x_train": ("0d", Custom("longer_than_y", lambda x: torch.cat([x, x]))),
         "x_query": ("0d", "extra_dim"),
         "predictions": (Custom("misshapen", lambda p: {"h=1": torch.zeros(3)}),),
         "y_train": ("0d",), "truth": (Custom("misshapen", lambda _: torch.zeros(3)),)}),
    **{f"dpo.{fn.__name__}": Entry(
        (lambda fn=fn: (fn, _dpo_logprobs())),
        {"policy_chosen+policy_rejected+reference_chosen+reference_rejected":
            ("empty_batch", "int"),
         "policy_chosen": ("0d", "float64", "list"), "reference_rejected": ("extra_dim",),
         "beta": ("nan", "zero")}) for fn in (dpo.implicit_rewards, dpo.dpo_pair_weights)},
    "dpo.kl_regularised_optimum": Entry(
        lambda: (dpo.kl_regularised_optimum, {"reference_probs": torch.tensor([0.2, 0.3, 0.5]),
                                              "rewards": torch.tensor([1.0, 0.0, -1.0]),
                                              "betas": torch.tensor([0.1, 1.0])}),
        {"reference_probs": ("int", "0d", "negative", "nan", "list"),
         "rewards": ("int", "0d", "nan", "float64", "empty"),
         "betas": ("int", "0d", "zero", "nan")}),
    # chapter 7: the modern decoder
    "rope.rope_angles": Entry(
        lambda: (rope.rope_angles, {"positions": torch.arange(4), "head_dim": 8}),
        {"positions": ("0d", "extra_dim", "list"),
         "head_dim": ("zero", "negative", "fraction", Custom("odd", lambda _: 3)),
         "theta": ("nan", "zero", "negative"), "scale": ("nan", "zero", "negative")}),
    "rope.rotate_half": Entry(
        lambda: (rope.rotate_half, {"x": _randn(2, 4)}),
        {"x": ("0d", "list", Custom("odd_width", lambda x: x[..., :3]))}),
    "rope.apply_rope": Entry(
        lambda: (rope.apply_rope, {"x": _randn(2, 3, 4), "positions": torch.arange(3)}),
        {"x": ("int", "0d", "list", Custom("odd_width", lambda x: x[..., :3])),
         "positions": ("0d", "extra_dim", Custom("too_few", lambda t: t[:2])),
         "pairing": (Custom("neox", lambda _: "neox"),), "theta": ("nan", "negative"),
         "scale": ("nan", "zero", "negative")}),
    "rope.interleaved_to_half_weight": Entry(
        lambda: (rope.interleaved_to_half_weight, {"w": _randn(8, 5), "n_heads": 2}),
        {"w": ("int", "0d", "list"),
         "n_heads": ("zero", "fraction", Custom("not_a_divisor", lambda _: 3))}),
    "rope.rope_scores": Entry(
        lambda: (rope.rope_scores, {"q": _randn(4), "k": _randn(4, seed=1), "q_pos": 3,
                                    "k_pos": 1}),
        {"q": ("int", "0d", "extra_dim"),
         "k": ("int", "0d", "float64", Custom("another_width", lambda t: t[:2])),
         "q_pos": ("fraction", "nan"), "k_pos": ("fraction",), "theta": ("nan", "zero")}),
    "llama.RMSNorm": Entry(lambda: (llama.RMSNorm(4), {"x": _randn(2, 4)}),
                           {"x": ("int", "0d", "list", Custom("wrong_width", lambda x: x[:, :3]))}),
    "llama.repeat_kv": Entry(
        lambda: (llama.repeat_kv, {"x": _randn(1, 2, 3, 4), "n_rep": 2}),
        {"x": ("0d", "missing_dim", "extra_dim", "list"), "n_rep": ("zero", "fraction")}),
    "llama.attention_mask": Entry(
        lambda: (llama.attention_mask, {"q_pos": torch.arange(4), "k_pos": torch.arange(4)}),
        {"q_pos": ("float", "0d", "extra_dim"), "k_pos": ("float", "0d"),
         "window": ("zero", "negative", "fraction")}),
    "llama.LlamaConfig": Entry(
        lambda: (llama.LlamaConfig, {}),
        {"sliding_window": ("zero", "negative", "fraction"),
         "position": (Custom("alibi", lambda _: "alibi"),),
         "norm": (Custom("batch", lambda _: "batch"),), "mlp": (Custom("relu", lambda _: "relu"),),
         "rope_pairing": (Custom("neox", lambda _: "neox"),),
         "num_key_value_heads": ("zero", Custom("not_a_divisor", lambda _: 3)),
         "num_attention_heads": ("zero", "fraction"), "hidden_size": ("zero", "negative"),
         "num_hidden_layers": ("zero",), "vocab_size": ("zero",),
         "max_position_embeddings": ("zero",), "num_experts_per_tok": ("zero",),
         "num_local_experts": ("negative",), "rope_theta": ("nan", "negative"),
         "rms_norm_eps": ("nan", "negative"), "init_std": ("zero",),
         "intermediate_size": ("zero", "fraction"), "head_dim": ("zero", "fraction"),
         "rope_scale": ("nan", "zero"), "tie_word_embeddings": (Custom("an_int", lambda _: 1),)}),
    "llama.kv_cache_bytes": Entry(
        lambda: (llama.kv_cache_bytes, {"config": _llama_config(), "seq_len": 8}),
        {"config": (Custom("a_dict", lambda _: {"num_hidden_layers": 1}),),
         "seq_len": ("negative", "fraction"), "batch_size": ("zero",),
         "bytes_per_value": ("zero", "fraction")}),
    "llama.kv_cache_design": Entry(
        lambda: (llama.kv_cache_design, {"budget_bytes": 2 ** 20, "context": 64, "n_layers": 2,
                                         "n_heads": 4, "head_dim": 8}),
        {"budget_bytes": ("zero", "fraction"), "context": ("zero", "negative"),
         "n_layers": ("zero",), "n_heads": ("zero", "fraction"), "head_dim": ("negative",),
         "batch_size": ("zero",), "bytes_per_value": ("zero",)}),
    "llama.KVCache": Entry(lambda: (llama.KVCache, {"n_layers": 2}),
                           {"n_layers": ("zero", "fraction"), "window": ("zero", "negative")}),
    "llama.KVCache.update": Entry(
        lambda: (_used_cache().update, {"layer": 1, "k": _randn(2, 2, 1, 4),
                                        "v": _randn(2, 2, 1, 4)}),
        {"layer": ("negative", "id_too_large", "fraction"),
         "k+v": (Custom("another_batch_size", lambda t: t[:1]), "0d", "int"),
         "v": (Custom("another_length", lambda t: t.expand(2, 2, 3, 4)),)}, vocab=2),
    "llama.LlamaModel[learned]": Entry(
        lambda: (llama.LlamaModel(replace(_llama_config(), position="learned",
                                          max_position_embeddings=4)),
                 {"ids": _ids(2, 3, vocab=V)}),
        {"ids": (Custom("past_the_table", lambda t: torch.cat([t, t], dim=1)),)}, vocab=V),
    "llama.LlamaMLP": Entry(lambda: (llama.LlamaMLP(_llama_config()), {"x": _randn(2, 3, 16)}),
                            {"x": ("int", "0d", "list",
                                   Custom("wrong_width", lambda x: x[..., :3]))}),
    **{f"llama.{name}": Entry(
        (lambda name=name: (getattr(llama, name)(_llama_config()),
                            {"x": _randn(2, 3, 16), "cache": None, "layer": 0, "start": 0})),
        {"x": FLOAT_FIXED + (Custom("wrong_width", lambda x: x[..., :3]),),
         "layer": ("negative", "fraction"), "start": ("negative", "fraction")},
        unchecked={"cache": "a KVCache: its update is llama.KVCache.update's entry"})
       for name in ("LlamaAttention", "LlamaDecoderLayer")},
    **{f"llama.{name}": Entry(
        (lambda name=name: (getattr(llama, name)(_llama_config()), {"ids": _ids(2, 5, vocab=V)})),
        {"ids": IDS, "cache": (Custom("a_list", lambda _: []),
                               Custom("another_number_of_layers", lambda _: llama.KVCache(2)),
                               Custom("a_shorter_window", lambda _: llama.KVCache(1, 2)))},
        vocab=V)
       for name in ("LlamaModel", "LlamaForCausalLM")},
    "llama.generate": Entry(
        lambda: (llama.generate, {"model": llama.LlamaForCausalLM(_llama_config()),
                                  "prompt": _ids(2, 3, vocab=V), "max_new_tokens": 2}),
        {"prompt": IDS + ("empty",), "max_new_tokens": ("negative", "fraction")}, vocab=V,
        unchecked={"model": "the model object; its forward has its own entries",
                   "use_cache": "a flag: any value is read as true or false"}),
    "moe.route": Entry(lambda: (moe.route, {"router_logits": _randn(5, 4), "k": 2}),
                       {"router_logits": FLOAT_FIXED, "k": ("zero", "id_too_large", "fraction")},
                       vocab=5),
    "moe.load_balancing_loss": Entry(
        lambda: (moe.load_balancing_loss, {"router_logits": _randn(5, 4), "k": 2}),
        {"router_logits": FLOAT_FIXED + ("empty_batch",), "k": ("zero", "id_too_large")}, vocab=5),
    "moe.expert_counts": Entry(
        lambda: (moe.expert_counts, {"experts": torch.tensor([[0, 1], [0, 2]]), "n_experts": 4}),
        {"experts": ("float", "0d", "id_too_large", "negative", "list"),
         "n_experts": ("zero", "fraction")}, vocab=4),
    "moe.capacity": Entry(
        lambda: (moe.capacity, {"n_tokens": 100, "n_experts": 8, "k": 2,
                                "capacity_factor": 1.25}),
        {"n_tokens": ("negative", "fraction"), "n_experts": ("zero", "fraction"),
         "k": ("zero", "id_too_large"), "capacity_factor": ("nan", "zero")}, vocab=9),
    "moe.dropped_fraction": Entry(
        lambda: (moe.dropped_fraction, {"experts": torch.tensor([[0], [0], [0], [1]]),
                                        "n_experts": 2, "capacity_factor": 1.0}),
        {"experts": ("float", "0d", "id_too_large", "negative", "empty_batch"),
         "capacity_factor": ("nan", "zero"), "n_experts": ("zero", "fraction")}, vocab=2),
    "moe.Experts": Entry(
        lambda: (_moe_experts(), {"x": _randn(5, 8), "weights": torch.full((5, 2), 0.5),
                                  "experts": torch.tensor([[0, 1], [1, 2], [2, 3], [3, 0],
                                                           [0, 2]])}),
        {"x": ("int", "0d", "extra_dim", "list"), "weights": ("int", "0d", "float64"),
         "experts": ("float", "id_too_large", "negative", "extra_dim")}, vocab=4),
    "moe.SparseMoeBlock": Entry(
        lambda: (_moe_block(), {"x": _randn(2, 3, 8)}),
        {"x": ("int", "0d", "list", Custom("wrong_width", lambda x: x[..., :3]))}),
    "speculative.acceptance_probability": Entry(
        lambda: (speculative.acceptance_probability, {"p": torch.tensor([0.5, 0.5]),
                                                      "q": torch.tensor([0.9, 0.1])}),
        {"p": ("int", "0d", "negative", "nan", "list", "above_one"),
         "q": ("0d", "float64", "empty", "above_one")}),
    "speculative.accept_step": Entry(
        lambda: (speculative.accept_step, {"p": torch.tensor([[0.5, 0.5], [0.9, 0.1]]),
                                           "q": torch.tensor([[0.0, 1.0]]),
                                           "drafts": torch.tensor([1]), "u": torch.tensor([0.3])}),
        {"p": ("int", "0d", "nan"),
         "q": ("int", "0d", "negative",
               Custom("zero_for_the_draft", lambda q: torch.tensor([[1.0, 0.0]]))),
         "drafts": ("float", "0d", "id_too_large", "negative"),
         "u": ("int", "0d", "nan", "negative", "above_one")},
        vocab=2),
    "speculative.autoregressive_generate": Entry(
        lambda: (speculative.autoregressive_generate,
                 {"model": _llama_logits(), "prompt": _ids(1, 3, vocab=V), "max_new_tokens": 2,
                  "generator": torch.Generator().manual_seed(0)}),
        {"prompt": ("float", "0d", "extra_dim", "empty", "list"),
         "max_new_tokens": ("negative", "fraction"), "temperature": ("nan", "negative"),
         "model": ("not_callable",)},
        unchecked={"greedy": "a flag: any value is read as true or false",
                   "generator": "a torch.Generator; torch.multinomial checks it"}),
    "speculative.speculative_generate": Entry(
        lambda: (speculative.speculative_generate,
                 {"target": _llama_logits(), "draft": _llama_logits(seed=1),
                  "prompt": _ids(1, 3, vocab=V), "max_new_tokens": 3, "k": 2,
                  "generator": torch.Generator().manual_seed(0)}),
        {"prompt": ("float", "0d", "extra_dim", "empty", "list"),
         "max_new_tokens": ("negative", "fraction"), "k": ("zero", "fraction"),
         "temperature": ("nan", "negative"),
         "draft": (Custom("another_vocabulary", lambda f: lambda t: f(t)[..., :-1]),
                   "not_callable"),
         "target": (Custom("another_vocabulary", lambda f: lambda t: f(t)[..., :-1]),
                    "not_callable")},
        unchecked={"greedy": "a flag: any value is read as true or false",
                   "generator": "a torch.Generator; torch.multinomial checks it"}),
    "speculative.expected_tokens_per_round": Entry(
        lambda: (speculative.expected_tokens_per_round, {"alpha": 0.5, "k": 4}),
        {"alpha": ("nan", "negative", "above_one"),
         "k": ("negative", "fraction")}),
    "speculative.expected_speedup": Entry(
        lambda: (speculative.expected_speedup, {"alpha": 0.5, "k": 4, "cost_ratio": 0.1}),
        {"alpha": ("above_one", "nan"), "k": ("fraction",),
         "cost_ratio": ("nan", "negative")}),
    # chapter 9: reasoning and reinforcement learning
    "reasoning.pass_at_k": Entry(
        lambda: (reasoning.pass_at_k, {"n": 10, "c": torch.tensor([0, 3, 9]), "k": 2}),
        {"c": ("float", "negative", "id_too_large"), "k": ("zero", "fraction"),
         "n": ("fraction",)}, vocab=11),
    **{f"rl.{name}": Entry(
        (lambda name=name: (getattr(rl, name), {"rewards": torch.tensor([[1.0, 0.0, 1.0]] * 2)})),
        {"rewards": ("int", "0d", "missing_dim", "list", "nan", "inf",
                     Custom("a_group_of_one", lambda r: r[:, :1]))})
       for name in ("group_advantages", "rloo_advantages", "centred_advantages")},
    "rl.k3_kl": Entry(
        lambda: (rl.k3_kl, {"logp": torch.tensor([-1.0, -2.0]),
                            "logp_ref": torch.tensor([-1.0, -1.0])}),
        {"logp": ("int", "list", "float64"),
         "logp_ref": ("int", Custom("another_shape", lambda t: t[:1]))}),
    "rl.kl_gradients": Entry(
        lambda: (rl.kl_gradients, {"logits": _randn(2, 5), "ref_logits": _randn(2, 5, seed=1)}),
        {"logits": ("int", "0d", "list", "float64", "nan"),
         "ref_logits": ("int", "inf", Custom("another_shape", lambda t: t[..., :3]))}),
    "reasoning.plug_in_bias": Entry(
        lambda: (reasoning.plug_in_bias, {"p": torch.tensor([0.0, 0.3, 1.0]), "n": 8, "k": 3}),
        {"p": ("int", "list", "nan", "negative", Custom("above_one", lambda t: t + 1)),
         "n": ("zero", "fraction"), "k": ("zero", "fraction", Custom("k_above_n", lambda v: 9))}),
    "rl.grpo_loss": Entry(
        lambda: (rl.grpo_loss, {"logp": _randn(2, 3), "logp_old": _randn(2, 3, seed=1),
                                "logp_ref": _randn(2, 3, seed=2),
                                "advantages": _randn(2, seed=3),
                                "mask": torch.tensor([[True, True, False], [True, False, False]])}),
        {"logp+logp_old+logp_ref": ("int",), "logp": ("0d", "float64", "list"),
         "advantages": ("int", "0d"),
         "mask": ("not_bool", Custom("no_response_token", torch.zeros_like)),
         "clip_eps": ("nan", "negative", Custom("one", lambda _: 1.0)),
         "beta": ("nan", "negative"), "level": ("bad_option",)}),
    "rl.response_mask": Entry(
        lambda: (rl.response_mask, {"tokens": torch.tensor([reasoning.encode("7+1=8...")]),
                                    "prompt_length": 4}),
        {"tokens": ("float", "0d", "extra_dim", "id_too_large", "negative", "list"),
         "prompt_length": ("zero", "fraction")}, vocab=len(reasoning.VOCAB)),
    "rl.token_logprobs": Entry(
        lambda: (rl.token_logprobs, {"model": _gpt(), "tokens": _ids(2, 5, vocab=V),
                                     "prompt_length": 2}),
        {"tokens": ("float", "0d", "extra_dim", "id_too_large", "negative"),
         "prompt_length": ("zero", "negative")}, vocab=V, unchecked={"model": MODEL}),
    "rl.response_entropy": Entry(
        lambda: (rl.response_entropy, {"model": _gpt(vocab_size=len(reasoning.VOCAB)),
                                       "tokens": _ids(2, 5, vocab=len(reasoning.VOCAB)),
                                       "prompt_length": 2,
                                       "mask": torch.tensor([[True, True, False]] * 2)}),
        {"tokens": ("float", "0d", "extra_dim", "id_too_large", "negative"),
         "prompt_length": ("zero", "negative"),
         "mask": ("not_bool", "missing_dim", "empty")}, vocab=len(reasoning.VOCAB),
        unchecked={"model": MODEL}),
    "rl.rollouts": Entry(
        lambda: (rl.rollouts, {"model": _gpt(vocab_size=len(reasoning.VOCAB)),
                               "prompts": _ids(2, 3, vocab=len(reasoning.VOCAB)),
                               "max_new_tokens": 2,
                               "generator": torch.Generator().manual_seed(0)}),
        {"prompts": ("float", "0d", "empty", "id_too_large"),
         "max_new_tokens": ("negative", "fraction"), "temperature": ("nan", "negative")},
        vocab=len(reasoning.VOCAB), unchecked={"model": MODEL, "generator": GENERATOR}),
    "rl.completions_of": Entry(
        lambda: (rl.completions_of, {"tokens": torch.tensor([reasoning.encode("7+1=8.")]),
                                     "prompt_length": 4}),
        {"tokens": ("float", "0d", "id_too_large", "negative"),
         "prompt_length": ("zero", "fraction", Custom("past_the_end", lambda _: 20))},
        vocab=len(reasoning.VOCAB)),
    # chapters 7 and 9: the arguments that are not tensors
    "rope.inv_frequencies": Entry(
        lambda: (rope.inv_frequencies, {"head_dim": 8}),
        {"head_dim": ("zero", "negative", "fraction", Custom("odd", lambda _: 3)),
         "theta": ("nan", "zero", "negative")}, unchecked={"device": DEVICE}),
    "rope.interleaved_to_half": Entry(
        lambda: (rope.interleaved_to_half, {"head_dim": 6}),
        {"head_dim": ("zero", "negative", "fraction", Custom("odd", lambda _: 3))}),
    "llama.num_params": Entry(lambda: (llama.num_params, {"model": _llama_logits()}),
                              {"model": (Custom("a_config", lambda _: _llama_config()),)}),
    "llama.step_fn": Entry(lambda: (llama.step_fn, {"model": _llama_logits()}),
                           {"model": (Custom("a_config", lambda _: _llama_config()),)}),
    "llama.swiglu_width": Entry(
        lambda: (llama.swiglu_width, {"hidden_size": 64, "multiple_of": 8}),
        {"hidden_size": ("zero", "negative", "fraction"), "multiple_of": ("zero", "fraction")}),
    "llama.load_runs": Entry(lambda: (llama.load_runs, {}), {},
                             unchecked={"path": "a path: the shipped file, or FileNotFoundError"}),
    "moe.active_params": Entry(lambda: (moe.active_params, {"moe": _moe_block()}),
                               {"moe": (Custom("experts_only", lambda _: _moe_experts()),)}),
    "reasoning.clipped_chain": Entry(
        lambda: (reasoning.clipped_chain, {"start": 9, "changes": [3, -3]}), {**PROBLEM}),
    "reasoning.format_problem": Entry(
        lambda: (reasoning.format_problem, {"start": 7, "changes": [3, -2, 1]}), {**PROBLEM}),
    "reasoning.format_target": Entry(
        lambda: (reasoning.format_target, {"start": 7, "changes": [3, -2, 1],
                                           "chain_of_thought": True}),
        {**PROBLEM}, unchecked={"chain_of_thought": FLAG}),
    "reasoning.answer_of": Entry(
        lambda: (reasoning.answer_of, {"start": 7, "changes": [3, -2, 1]}), {**PROBLEM}),
    "reasoning.make_problem": Entry(
        lambda: (reasoning.make_problem, {"rng": random.Random(0), "k": 3}),
        {"rng": (Custom("a_seed", lambda _: 0),), "k": ("zero", "fraction")}),
    "reasoning.final_answer": Entry(
        lambda: (reasoning.final_answer, {"completion": "9,7,8."}),
        {"completion": (Custom("ids", lambda _: [9, 13, 7]),)}),
    "reasoning.correctness_reward": Entry(
        lambda: (reasoning.correctness_reward, {"completion": "9,7,8.", "answer": 8}),
        {"completion": (Custom("ids", lambda _: [9, 13, 7]),),
         "answer": (Custom("a_string", lambda _: "8"), "fraction")}),
    "reasoning.format_reward": Entry(
        lambda: (reasoning.format_reward, {"completion": "9,7,8."}),
        {"completion": (Custom("ids", lambda _: [9, 13, 7]),)},
        unchecked={"answer": "ignored: a format reward does not look at the answer"}),
    "reasoning.majority_vote": Entry(
        lambda: (reasoning.majority_vote, {"answers": [3, 5, 5, None]}),
        {"answers": ("not_a_sequence", Custom("a_string", lambda _: "355"),
                     Custom("a_fraction", lambda a: [*a, 2.5]))}),
    "reasoning.pass_at_k_curve": Entry(
        lambda: (reasoning.pass_at_k_curve, {"correct": [0, 2, 4], "n": 4, "ks": [1, 4]}),
        {"correct": (Custom("above_n", lambda _: [5]), Custom("a_fraction", lambda _: [2.5]),
                     Custom("empty", lambda _: []), "not_a_sequence"),
         "n": ("zero", "fraction"),
         "ks": ("not_a_sequence", Custom("zero", lambda _: [0]), Custom("above_n", lambda _: [5]),
                Custom("a_fraction", lambda _: [1.5]))}),
    **{name: Entry(
        (lambda fn=fn: (fn, {"values": [1.0, 0.0, 1.0]})),
        {"values": ("not_a_sequence", Custom("empty", lambda _: []),
                    Custom("a_nan", lambda v: [*v, math.nan]),
                    Custom("a_string", lambda _: ["1"]))})
       for name, fn in (("reasoning.mean_and_se", reasoning.mean_and_se),
                        ("rl.summary", rl.summary))},
    "reasoning.ReasoningConfig": Entry(
        lambda: (reasoning.ReasoningConfig, {}),
        {"train_steps": (Custom("empty", lambda _: ()), Custom("a_zero", lambda _: (1, 0))),
         "test_steps": (Custom("empty", lambda _: ()), Custom("a_fraction", lambda _: (1.5,))),
         "n_layer": ("zero", "fraction"), "n_head": ("zero",), "n_embd": ("zero", "fraction"),
         "steps": ("zero", "fraction"), "batch_size": ("zero",), "lr": ("nan", "zero"),
         "warmup_steps": ("negative", "fraction"), "eval_problems": ("zero",)},
        unchecked={"seed": SEED, "eval_seed": SEED}),
    "reasoning.encode": Entry(lambda: (reasoning.encode, {"text": "7+1="}),
                              {"text": (Custom("outside_the_vocabulary", lambda _: "7*1="),
                                        Custom("ids", lambda _: [7, 10]))}),
    "reasoning.decode": Entry(lambda: (reasoning.decode, {"ids": [7, 10, 1, 12]}),
                              {"ids": ("id_too_large", Custom("negative", lambda _: [-1]),
                                       Custom("a_string", lambda _: "7+1="))},
                              vocab=len(reasoning.VOCAB)),
    "reasoning.make_batch": Entry(
        lambda: (reasoning.make_batch, {"rng": random.Random(0), "ks": [1, 2], "batch_size": 2,
                                        "chain_of_thought": True}),
        {"rng": (Custom("a_seed", lambda _: 0),),
         "ks": ("not_a_sequence", Custom("empty", lambda _: []), Custom("a_zero", lambda _: [0])),
         "batch_size": ("zero", "fraction")}, unchecked={"chain_of_thought": FLAG}),
    "reasoning.build_model": Entry(
        lambda: (reasoning.build_model, {"config": _reasoning_config()}), {"config": ("a_dict",)}),
    "reasoning.train_variant": Entry(
        lambda: (reasoning.train_variant, {"config": _reasoning_config(),
                                           "chain_of_thought": True}),
        {"config": ("a_dict",)},
        unchecked={"chain_of_thought": FLAG, "device": DEVICE, "progress": PROGRESS}),
    "reasoning.held_out_problems": Entry(
        lambda: (reasoning.held_out_problems, {"k": 3, "n": 2, "seed": 0}),
        {"k": ("zero", "fraction"), "n": ("negative", "fraction")}, unchecked={"seed": SEED}),
    "reasoning.greedy_accuracy": Entry(
        lambda: (reasoning.greedy_accuracy, {"model": _reasoning_gpt(), "problems": PROBLEMS,
                                             "chain_of_thought": True}),
        {"problems": BAD_PROBLEMS},
        unchecked={"model": MODEL, "chain_of_thought": FLAG}),
    "reasoning.load_policy": Entry(lambda: (reasoning.load_policy, {}), {},
                                   unchecked={"device": DEVICE}),
    "reasoning.load_results": Entry(lambda: (reasoning.load_results, {"part": "cot"}),
                                    {"part": ("bad_option",)}),
    "reasoning.check_problems": Entry(
        lambda: (reasoning.check_problems, {"problems": PROBLEMS}),
        {"problems": BAD_PROBLEMS + (Custom("a_start_only", lambda p: [7, *p]),)}),
    "reasoning.compose": Entry(
        lambda: (reasoning.compose, {"p": (1, 2, 0, 3, 4), "q": (0, 1, 2, 4, 3)}),
        {"p": (Custom("a_repeat", lambda _: (0, 0, 1, 2, 3)), Custom("a_string", lambda _: "12034"),
               Custom("a_fraction", lambda _: (0.5, 1, 2, 3, 4))),
         "q": (Custom("too_short", lambda _: (0, 1, 2)), "not_a_sequence")}),
    **{f"reasoning.{fn.__name__}": Entry(
        (lambda fn=fn: (fn, {"perms": [(1, 0, 2, 3, 4), (0, 2, 1, 3, 4)]})),
        {"perms": ("not_a_sequence", Custom("empty", lambda _: []),
                   Custom("a_repeat", lambda _: [(0, 1, 2, 3, 3)]))})
       for fn in (reasoning.s5_chain, reasoning.s5_track)},
    "reasoning.make_s5_problem": Entry(
        lambda: (reasoning.make_s5_problem, {"rng": random.Random(0), "k": 3}),
        {"rng": (Custom("a_seed", lambda _: 0),), "k": ("zero", "fraction")}),
    "reasoning.s5_example": Entry(
        lambda: (reasoning.s5_example, {"perms": [(1, 0, 2, 3, 4)] * 3,
                                        "target_format": "pause", "slots": 4}),
        {"perms": (Custom("empty", lambda _: []), Custom("a_repeat", lambda _: [(1, 1, 2, 3, 4)])),
         "slots": (Custom("too_few", lambda _: 2), "fraction")}),
    "reasoning.S5Config": Entry(
        lambda: (reasoning.S5Config, {}),
        {"train_k": ("zero", "fraction"), "test_k": ("zero",), "n_layer": ("zero",),
         "n_head": ("zero", Custom("not_dividing", lambda _: 3)), "n_embd": ("fraction",),
         "steps": ("zero",), "batch_size": ("zero",), "lr": ("nan", "zero"),
         "warmup_steps": ("negative",), "eval_problems": ("zero",),
         "seeds": (Custom("empty", lambda _: ()), Custom("a_fraction", lambda _: (0.5,)))},
        unchecked={"eval_seed": SEED}),
    "reasoning.build_s5_model": Entry(
        lambda: (reasoning.build_s5_model, {"config": _s5_config(), "seed": 0}),
        {"config": ("a_dict",), "seed": ("fraction",)}),
    "reasoning.s5_batch": Entry(
        lambda: (reasoning.s5_batch, {"rng": random.Random(0), "train_k": 3, "batch_size": 2,
                                      "target_format": "chain of thought", "slots": 4}),
        {"rng": (Custom("a_seed", lambda _: 0),), "train_k": ("zero", "fraction"),
         "batch_size": ("zero",), "slots": (Custom("too_few", lambda _: 2), "fraction")}),
    "reasoning.train_s5": Entry(
        lambda: (reasoning.train_s5, {"config": _s5_config(), "target_format": "pause",
                                      "seed": 0}),
        {"config": ("a_dict",), "seed": ("fraction",)},
        unchecked={"device": DEVICE, "progress": PROGRESS}),
    "reasoning.s5_accuracy": Entry(
        lambda: (reasoning.s5_accuracy, {"model": reasoning.build_s5_model(_s5_config(), 0),
                                         "k": 2, "n": 2, "seed": 0, "target_format": "pause",
                                         "slots": 3}),
        {"model": (Custom("a_config", lambda _: _s5_config()),), "k": ("zero", "fraction"),
         "n": ("zero",), "seed": ("fraction",), "slots": (Custom("too_few", lambda _: 1),)}),
    "rl.prompts_of": Entry(
        lambda: (rl.prompts_of, {"problems": PROBLEMS}),
        {"problems": BAD_PROBLEMS},
        unchecked={"device": DEVICE}),
    "rl.sample_completions": Entry(
        lambda: (rl.sample_completions, {"model": _reasoning_gpt(), "problems": PROBLEMS,
                                         "n": 2, "max_rows": 3}),
        {"problems": BAD_PROBLEMS,
         "n": ("zero", "fraction"), "temperature": ("nan", "negative"),
         "max_rows": ("zero", "fraction")}, unchecked={"model": MODEL, "seed": SEED}),
    "rl.sample_answers": Entry(
        lambda: (rl.sample_answers, {"model": _reasoning_gpt(), "problems": PROBLEMS, "n": 2}),
        {"problems": BAD_PROBLEMS,
         "n": ("zero", "fraction"), "temperature": ("nan", "negative")},
        unchecked={"model": MODEL, "seed": SEED}),
    "rl.correct_counts": Entry(
        lambda: (rl.correct_counts, {"answers": [[8, 8, None], [1, 2, 3]],
                                     "problems": PROBLEMS}),
        {"answers": ("not_a_sequence", Custom("one_row_short", lambda a: a[:1]),
                     Custom("a_string_row", lambda a: ["88", a[1]])),
         "problems": ("not_a_sequence", Custom("one_more", lambda p: [*p, (0, [1])]))}),
    "rl.GRPOConfig": Entry(
        lambda: (rl.GRPOConfig, {}),
        {"k": ("zero", "fraction"), "steps": ("zero",), "prompts_per_step": ("zero", "fraction"),
         "group_size": (Custom("one", lambda _: 1), "fraction"), "inner_steps": ("zero",),
         "lr": ("nan", "zero"), "clip_eps": ("nan", "negative", Custom("one", lambda _: 1.0)),
         "beta": ("nan", "negative"), "temperature": ("nan", "zero"),
         "reward": ("bad_option",), "advantage": ("bad_option",), "level": ("bad_option",)},
        unchecked={"seed": SEED}),
    "rl.train_grpo": Entry(
        lambda: (rl.train_grpo, {"policy": _reasoning_gpt(), "reference": _reasoning_gpt(),
                                 "config": rl.GRPOConfig(k=1, steps=1, prompts_per_step=1,
                                                         group_size=2, inner_steps=1)}),
        {"config": ("a_dict",),
         "reference": (Custom("another_vocabulary", lambda _: _gpt(block_size=16)),),
         "on_step": (Custom("not_a_function", lambda _: 3),)},
        unchecked={"policy": MODEL, "progress": PROGRESS}),
    "rl.lenient_reward": Entry(
        lambda: (rl.lenient_reward, {"completion": "9,7,8.", "answer": 8}),
        {"completion": (Custom("ids", lambda _: [9, 13, 7]),),
         "answer": (Custom("a_string", lambda _: "8"), "fraction")}),
    "rl.load_runs": Entry(lambda: (rl.load_runs, {"part": "hacking"}), {"part": ("bad_option",)}),
    "rl.pass_at_1_and_se": Entry(
        lambda: (rl.pass_at_1_and_se, {"correct": [4, 0, 2], "n": 4}),
        {"correct": ("not_a_sequence", Custom("above_n", lambda _: [5]),
                     Custom("negative", lambda _: [-1]),
                     Custom("a_fraction", lambda _: [2.5]), Custom("empty", lambda _: [])),
         "n": ("zero", "fraction")}),
}


#: Valid values of the fields without a default, for the configs that have some.
CONFIG_ARGUMENTS: dict[str, Callable[[], dict[str, Any]]] = {
    "transformer.TransformerConfig": lambda: {"src_vocab_size": V, "tgt_vocab_size": V},
}


def _parameters(fn: Callable[..., Any]) -> Mapping[str, inspect.Parameter]:
    return inspect.signature(fn.forward if isinstance(fn, nn.Module) else fn).parameters


def _bad_cases() -> list[tuple[str, str, Kind]]:
    """The table's bad inputs, and ``bad_option`` for every ``Literal[...]`` parameter."""
    cases = []
    for name, entry in CASES.items():
        listed = [(args, kind) for args, kinds in entry.bad.items() for kind in kinds]
        fn = resolve(name)
        for param in literal_parameters(fn) if fn is not None else []:
            if (param, "bad_option") not in listed:
                listed.append((param, "bad_option"))
        cases += [(name, args, kind) for args, kind in listed]
    return cases


def _case_id(case: tuple[str, str, Kind]) -> str:
    name, args, kind = case
    return f"{name}-{args}-{kind.label if isinstance(kind, Custom) else kind}"


# --- the tests --------------------------------------------------------------------------------

def test_every_taught_function_has_an_entry() -> None:
    missing = sorted(set(taught_tensor_functions()) - set(CASES))
    assert not missing, (
        f"{len(missing)} taught function(s) take tensors but have no entry in "
        f"tests/test_bad_input.py's CASES (add one: valid arguments and the bad inputs that "
        f"apply to each tensor argument): {', '.join(missing)}")


def test_every_tensor_argument_has_its_bad_inputs() -> None:
    uncovered = []
    for name, params in taught_tensor_functions().items():
        entry = CASES.get(name)
        if entry is None:
            continue  # reported by test_every_taught_function_has_an_entry
        named = {a for args in entry.bad for a in args.split("+")} | set(entry.unchecked)
        uncovered += [f"{name}({p})" for p in params if p not in named]
    assert not uncovered, ("tensor arguments with no bad input in CASES (nor a reason in "
                           f"`unchecked`): {', '.join(uncovered)}")


def _covered(entries: list[Entry]) -> set[str]:
    return {a for e in entries for args in e.bad for a in args.split("+")} | {
        a for e in entries for a in e.unchecked}


def test_every_argument_of_chapters_7_and_9_has_its_bad_inputs() -> None:
    """Chapters 7 and 9: every argument of every public callable, whatever its type."""
    no_entry, uncovered = [], []
    for key, fn in every_argument_functions().items():
        if not _arguments(fn):
            continue  # nothing to get wrong (``KVCache.nbytes``)
        entries = [e for name, e in CASES.items() if re.sub(r"\[.*\]$", "", name) == key]
        if not entries:
            no_entry.append(key)
            continue
        named = _covered(entries) | set(literal_parameters(fn))
        uncovered += [f"{key}({p})" for p in _arguments(fn) if p not in named]
    assert not no_entry, (
        f"{len(no_entry)} public callable(s) of {', '.join(sorted(EVERY_ARGUMENT))} have no "
        f"entry in CASES (add one: valid arguments and bad inputs for every argument): "
        f"{', '.join(no_entry)}")
    assert not uncovered, (
        f"{len(uncovered)} argument(s) of chapters 7 and 9 with no bad input in CASES (nor a "
        f"reason in `unchecked`): {', '.join(uncovered)}")


@pytest.mark.parametrize("config, name", literal_config_fields(),
                         ids=[f"{c}.{f}" for c, f in literal_config_fields()])
def test_a_config_refuses_an_unknown_option(config: str, name: str) -> None:
    """A dataclass config of a taught module refuses a string that names none of its options."""
    cls = resolve(config)
    assert cls is not None
    required = CONFIG_ARGUMENTS.get(config, dict)()  # the fields without a default
    with pytest.raises(ValueError, match=rf"(?<![\w.]){name}\b"):
        cls(**required, **{name: "no_such_option"})


def test_the_table_names_real_functions_and_kinds() -> None:
    for name, args, kind in _bad_cases():
        assert isinstance(kind, Custom) or kind in KINDS, f"{name}: unknown kind {kind!r}"
        fn, kwargs = CASES[name].build()
        for arg in args.split("+"):
            assert arg in _parameters(fn), f"{name} has no argument {arg!r}"


@pytest.fixture(autouse=True)
def _close_figures() -> Any:
    """The plotting entries draw figures: close them, so that they do not pile up."""
    yield
    plt.close("all")


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_valid_call_runs(name: str) -> None:
    """The baseline: each bad input below differs from a call that works in one argument only."""
    fn, kwargs = CASES[name].build()
    fn(**kwargs)


def _mutate(name: str, args: str, kind: Kind) -> tuple[Callable[..., Any], dict[str, Any]]:
    entry = CASES[name]
    fn, kwargs = entry.build()
    for arg in args.split("+"):
        valid = kwargs[arg] if arg in kwargs else _parameters(fn)[arg].default
        kwargs[arg] = kind.make(valid) if isinstance(kind, Custom) else KINDS[kind](valid, entry)
    return fn, kwargs


@pytest.mark.parametrize("name, args, kind", _bad_cases(), ids=[_case_id(c) for c in _bad_cases()])
def test_a_bad_input_raises_a_clear_error(name: str, args: str, kind: Kind) -> None:
    fn, kwargs = _mutate(name, args, kind)
    with pytest.raises((ValueError, TypeError)) as info:
        fn(**kwargs)
    message = str(info.value)
    named = [a for a in args.split("+") if re.search(rf"(?<![\w.]){re.escape(a)}\b", message)]
    assert named, f"the message does not name {args!r}: {message}"
    where = info.traceback[-1]
    assert COURSE_LIB in Path(where.path).resolve().parents, (
        f"raised from inside {where.path}, not by course_lib: {info.value!r}")
    assert "raise " in str(where.statement), (
        f"not a deliberate raise: {str(where.statement).strip()!r} ({info.value!r})")


# --- bad inputs that need files or a whole model ------------------------------------------------

def test_from_gpt2_files_with_its_paths_swapped_says_so(tmp_path: Path) -> None:
    vocab_path, merges_path = _write_gpt2_files(tmp_path)
    tokenizer = bpe.Tokenizer.from_gpt2_files(vocab_path, merges_path)
    assert tokenizer.encode("aa") == [256]
    with pytest.raises(ValueError, match="vocab_path .* swapped"):
        bpe.Tokenizer.from_gpt2_files(merges_path, vocab_path)
    (tmp_path / "broken.bpe").write_text("#version: 0.2\nab\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"merges_path .*line 2"):
        bpe.Tokenizer.from_gpt2_files(vocab_path, tmp_path / "broken.bpe")
    (tmp_path / "list.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ValueError, match="vocab_path .* JSON object"):
        bpe.Tokenizer.from_gpt2_files(tmp_path / "list.json", merges_path)


def test_add_lora_reads_one_name_as_one_target() -> None:
    """A string is one target, not its letters (``"c_proj"`` used to wrap ``mlp.c_fc`` too)."""
    model = lora.add_lora(_gpt(n_layer=2), r=2, alpha=2.0, targets="c_proj")
    wrapped = sorted(name for name, m in model.named_modules() if isinstance(m, lora.LoRALinear))
    assert wrapped == ["transformer.h.0.attn.c_proj", "transformer.h.0.mlp.c_proj",
                       "transformer.h.1.attn.c_proj", "transformer.h.1.mlp.c_proj"]


def test_add_lora_with_a_bad_rank_leaves_the_model_as_it_was() -> None:
    model = _gpt()
    with pytest.raises(TypeError, match="r must be an int"):
        lora.add_lora(model, r=2.5, alpha=2.0)  # type: ignore[arg-type]
    assert all(p.requires_grad for p in model.parameters())
    assert not any(isinstance(m, lora.LoRALinear) for m in model.modules())


def test_sample_next_names_the_row_that_allows_no_token() -> None:
    logits = torch.zeros(3, 4)
    logits[2] = float("-inf")
    with pytest.raises(ValueError, match=r"logits row 2 is -inf everywhere"):
        sampling.sample_next(logits, torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"logits row 2 is -inf everywhere"):
        sampling.sample_next(logits, temperature=0)  # greedy would return token 0 silently


def test_gpt_names_the_ids_outside_its_vocabulary() -> None:
    model = _gpt()
    with pytest.raises(ValueError, match=r"idx holds ids outside \[0, 11\): .*11"):
        model(torch.tensor([[1, 11]]))
    with pytest.raises(ValueError, match=r"tokens must hold at least one token per row"):
        model.step(torch.zeros(2, 0, dtype=torch.long))


def test_beam_search_names_an_eos_outside_the_vocabulary() -> None:
    step, bos, _ = decoding.greedy_vs_beam_example()
    with pytest.raises(ValueError, match=r"eos_id=4 is not a token id of the step's vocabulary "
                                         r"of 4 tokens"):
        decoding.beam_search(step, torch.tensor([bos]), 2, 3, eos_id=4)


def test_counts_of_nothing_are_errors_not_zero_divisions() -> None:
    with pytest.raises(ValueError, match="d must be a positive integer, got 0"):
        counting.layer_shares(0)
    with pytest.raises(ValueError, match="zero FLOPs per token"):
        flops.attention_share(0, 0, 0, 0)


def test_scaling_laws_refuse_what_has_no_value() -> None:
    with pytest.raises(ValueError, match="flops must be finite and positive, got nan"):
        scaling.compute_optimal(math.nan)
    with pytest.raises(ValueError, match="n_params must be positive"):
        scaling.chinchilla_loss(torch.tensor([0.0, 1e9]), torch.tensor([1e9, 1e9]))
    with pytest.raises(ValueError, match="x must hold at least two different values"):
        scaling.fit_power_law(torch.tensor([2.0, 2.0, 2.0]), torch.tensor([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="empty batch"):
        dpo.dpo_loss(*(torch.zeros(0) for _ in range(4)), beta=0.1)
