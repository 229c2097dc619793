"""Device placement checked without a GPU: nothing in course_lib lands on the default device.

"GPU-ready" means that a model and its inputs moved to one device compute there: every tensor
course_lib creates takes its device (and dtype) from its inputs, and constant tables are buffers
that ``.to(device)`` moves. No GPU is needed to check that. Each call of :data:`TABLE` is built
on the CPU and then run inside ``with torch.device("meta"):`` (the scoped form of
``torch.set_default_device("meta")``), so a tensor created without ``device=`` lands on ``meta``.

What torch does when such a ``meta`` tensor meets the CPU inputs (pinned by
:func:`test_torch_mixes_meta_and_cpu_as_this_file_assumes`):

* elementwise ops, ``cat``, ``torch.where``, ``masked_fill``, ``.item()`` raise (a 0-d ``meta``
  tensor too: only 0-d *CPU* tensors mix with other devices);
* but a ``meta`` index into a CPU tensor (``x[idx]``, ``gather``, ``index_select``) and a CPU
  tensor times a ``meta`` matrix run silently and return a CPU tensor of garbage;
* ``einsum`` with one ``meta`` operand returns ``meta``; ``*_like`` and ``new_*`` follow their
  input.

So three checks, each of which fails a misplaced tensor: under ``meta``, every torch op that is
handed a ``meta`` tensor is refused (:class:`_NoMetaArguments`: the silent cases fail
deterministically, not through the garbage they read); every tensor returned, or left in an
argument (a model's parameters after a training step, a cache), must be on the CPU; and its values
must equal those of the same call run plainly from the same seeds (wall-clock times excepted).

A call that takes no tensor and no ``device=`` (a builder, or data made from Python lists) must
follow the default device instead: its entry says ``creates=True``, and what it returns must be on
``meta``. Builders of seeded or loaded models that take ``device=`` build on the CPU and move.

:data:`TABLE` holds every entry of ``tests/test_bad_input.py``'s ``CASES`` (every taught function
and ``nn.Module`` that takes a tensor, with valid arguments) and :data:`MORE`: training loops run
for one step, data makers, builders, loaders, the methods of models and tensor records, autograd
Functions (with a backward pass). :func:`test_every_public_callable_is_placed` fails when a public
callable of course_lib has neither an entry nor a reason in :data:`EXCLUDED`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import math
import pkgutil
import random
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

import course_lib
from course_lib import (
    arithmetic,
    attention,
    checks,
    complexity,
    copying,
    corpus,
    counting,
    data,
    decoding,
    efficient_models,
    entmax,
    finetune,
    flops,
    gpt,
    head_importance,
    linformer,
    llama,
    longrange,
    lora,
    moe,
    peers,
    positional,
    reasoning,
    rl,
    rope,
    seq2seq,
    sparse_attention,
    sweep,
    tiled_attention,
    training,
    transformer,
)
from tests import test_bad_input as bad_input

Call = tuple[Callable[..., Any], dict[str, Any]]
META = torch.device("meta")


# --- running a call twice and comparing -------------------------------------------------------

@dataclass(frozen=True)
class Placed:
    """How to call one course_lib callable with valid arguments built on the CPU.

    ``creates`` marks a call that takes no tensor and no ``device=``: what it creates must follow
    the default device (``meta`` here), so its tensors are checked to be on ``meta`` and not
    compared with a plain run.
    """

    build: Callable[[], Call]
    creates: bool = False
    timings: tuple[str, ...] = ()  # where a wall-clock time is returned: not compared


class MetaArgument(RuntimeError):
    """An op was handed a tensor on the default device (``meta``) while the inputs are on the
    CPU."""


class _NoMetaArguments(TorchFunctionMode):
    """Refuse every op that is handed a ``meta`` tensor: the inputs are on the CPU, so one means a
    tensor was created on the default device. This catches the mixes torch lets through silently
    (a ``meta`` index into a CPU tensor, a CPU tensor times a ``meta`` matrix) deterministically,
    rather than through the garbage values they return."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if any(isinstance(t, torch.Tensor) and t.is_meta for t in tree_leaves((args, kwargs))):
            raise MetaArgument(f"{getattr(func, '__qualname__', func)} was handed a tensor "
                               f"created on the default device, not on the inputs' device")
        return func(*args, **kwargs)


def _leaves(value: Any, path: str, seen: dict[int, Any]) -> Iterator[tuple[str, Any]]:
    """The tensors and plain values inside ``value``, each with where it was found.

    ``seen`` keeps every visited container alive: an id is unique only while its object lives,
    and a temporary (a module's state dict) freed early would let a later one share its id and
    be skipped.
    """
    if id(value) in seen:
        return
    if isinstance(value, torch.Tensor) or value is None or isinstance(value, (bool, int, float,
                                                                              str, bytes)):
        yield path, value
        return
    seen[id(value)] = value
    if isinstance(value, nn.Module):  # its parameters and every buffer (persistent or not)
        state = {**dict(value.named_parameters()), **dict(value.named_buffers())}
        yield from _leaves(state, path, seen)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{path}[{key!r}]", seen)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{path}[{i}]", seen)
    elif isinstance(value, types.MethodType):
        yield from _leaves(value.__self__, f"{path}.__self__", seen)
    elif dataclasses.is_dataclass(value) or type(value).__module__.startswith("course_lib"):
        for key, item in vars(value).items():
            yield from _leaves(item, f"{path}.{key}", seen)
    # anything else (a Generator, a figure, a closure) holds nothing to compare


def _flatten(value: Any, path: str) -> list[tuple[str, Any]]:
    return list(_leaves(value, path, {}))


def _seed(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def _run(placed: Placed, on_meta: bool) -> list[tuple[str, Any]]:
    """Build the call on the CPU, run it (under ``meta`` if asked): its output and arguments."""
    _seed(0)
    fn, kwargs = placed.build()
    _seed(1)
    if on_meta:
        with torch.device(META), (contextlib.nullcontext() if placed.creates
                                  else _NoMetaArguments()):
            out = fn(**kwargs)
    else:
        out = fn(**kwargs)
    leaves = _flatten(out, "output") + _flatten((fn, kwargs), "arguments")
    return [(path, value) for path, value in leaves
            if not any(path == t or path.startswith(t + "[") for t in placed.timings)]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and bool(torch.equal(a.detach().nan_to_num(), b.detach().nan_to_num()))
                and bool(torch.equal(a.detach().isnan(), b.detach().isnan())))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def check_placement(placed: Placed) -> None:
    """Run ``placed`` plainly and under ``meta``; fail on any tensor that left the inputs'
    device."""
    plain = _run(placed, on_meta=False)  # the table's call works: what fails below is placement
    try:
        on_meta = _run(placed, on_meta=True)
    except Exception as error:  # any error: the call cannot run with another default device
        raise AssertionError(
            f"fails with torch.device('meta') as the default device, so a tensor was created "
            f"without device= (or from a Python list) and met the inputs: {error!r}") from error
    tensors = [(path, v) for path, v in on_meta if isinstance(v, torch.Tensor)]
    if placed.creates:
        wrong = [f"{path} on {v.device}" for path, v in tensors if v.device != META]
        assert not wrong, f"created off the default device: {', '.join(wrong)}"
        return
    wrong = [f"{path} on {v.device}" for path, v in tensors if v.device.type != "cpu"]
    assert not wrong, f"inputs on the CPU, results elsewhere: {', '.join(wrong)}"
    assert [p for p, _ in on_meta] == [p for p, _ in plain], "the two runs return different things"
    differ = [path for (path, a), (_, b) in zip(plain, on_meta) if not _same(a, b)]
    assert not differ, ("a value differs under torch.device('meta') (a meta index, matrix or "
                        f"value met a CPU tensor silently): {', '.join(differ)}")


# --- the table --------------------------------------------------------------------------------

#: Every taught function and model that takes a tensor, with the valid arguments of test_bad_input.
FROM_BAD_INPUT: dict[str, Placed] = {name: Placed(entry.build)
                                     for name, entry in bad_input.CASES.items()}
FROM_BAD_INPUT["distill.train_student"] = Placed(bad_input.CASES["distill.train_student"].build,
                                                 timings=("output.seconds",))

b = bad_input  # its small models and valid arguments, reused below
V = b.V


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _call(fn: Callable[..., Any], **kwargs: Any) -> Callable[[], Call]:
    return lambda: (fn, kwargs)


def _calls(*thunks: Callable[[], Any]) -> Callable[[], Call]:
    """Several calls made inside the run (the object they act on is built there too)."""
    return lambda: ((lambda: [thunk() for thunk in thunks]), {})


def _backward(fn: Callable[[torch.Tensor], Any], x: torch.Tensor) -> Call:
    """A forward and a backward pass through ``fn``: the gradient must stay on ``x``'s device."""
    x = x.requires_grad_()

    def run() -> torch.Tensor:
        out = fn(x)
        (out[0] if isinstance(out, tuple) else out).square().sum().backward()
        return x.grad
    return run, {}


def _copy_batch() -> copying.CopyBatch:
    return copying.make_copy_batch(copying.CopyTask(4), 3, 2, _gen())


def _copy_gru() -> copying.CopyGRU:
    torch.manual_seed(0)
    return copying.CopyGRU(copying.CopyTask(4), hidden_size=6)


def _date_data() -> tuple[data.Vocab, data.Vocab, list[data.Pair]]:
    src_vocab, tgt_vocab = data.reorder_vocabs()
    rng = random.Random(0)
    return src_vocab, tgt_vocab, [data.reorder_sentence(rng, 4) for _ in range(3)]


def _seq2seq(attention: bool) -> seq2seq.Seq2SeqModel:
    src_vocab, tgt_vocab, _ = _date_data()
    config = seq2seq.Seq2SeqConfig(src_vocab_size=len(src_vocab), tgt_vocab_size=len(tgt_vocab),
                                   emb_dim=4, hidden_dim=6, attn_dim=5)
    torch.manual_seed(0)
    return (seq2seq.AttentionSeq2Seq if attention else seq2seq.Seq2Seq)(config).eval()


def _seq2seq_call(attention: bool, fn: Callable[..., Any], **kwargs: Any) -> Callable[[], Call]:
    def build() -> Call:
        src_vocab, tgt_vocab, _ = _date_data()
        return fn, {"model": _seq2seq(attention), "src_vocab": src_vocab, "tgt_vocab": tgt_vocab,
                    **kwargs}
    return build


def _seq2seq_method(attention: bool, method: str) -> Callable[[], Call]:
    """``encode``, ``decode`` or ``make_step`` of a seq2seq model, on a batch of the task."""
    def build() -> Call:
        batch, model = _batch(), _seq2seq(attention)
        if method == "decode":
            encoded = model.encode(batch.src, batch.src_mask)
            return model.decode, {"encoded" if attention else "c": encoded, "tgt_in": batch.tgt_in}
        return getattr(model, method), {"src": batch.src, "src_mask": batch.src_mask}
    return build


def _dataset_collate() -> Call:
    src_vocab, tgt_vocab, pairs = _date_data()
    return data.Seq2SeqDataset(pairs, src_vocab, tgt_vocab).collate, {"pairs": pairs}


def _batch() -> data.Batch:
    src_vocab, tgt_vocab, pairs = _date_data()
    return data.collate(pairs, src_vocab, tgt_vocab)


def _transformer() -> transformer.Transformer:
    torch.manual_seed(0)
    return transformer.Transformer(b._transformer_config()).eval()


def _llama() -> llama.LlamaForCausalLM:
    return b._llama_logits()


def _reasoning_gpt() -> gpt.GPT:
    return b._gpt(vocab_size=len(reasoning.VOCAB), block_size=64)


def _arithmetic_gpt() -> gpt.GPT:
    return b._gpt(vocab_size=len(arithmetic.VOCAB), block_size=64)


def _tiny(config: Any) -> Any:
    """A chapter's training configuration at its smallest: one layer, one step, two problems."""
    return dataclasses.replace(config, n_layer=1, n_head=2, n_embd=8, steps=1, batch_size=2,
                               warmup_steps=1, eval_problems=2)


def _problems() -> list[tuple[int, list[int]]]:
    return reasoning.held_out_problems(1, 2, seed=0)


def _pruning_curve() -> Call:
    """test_bad_input's entry draws its input inside ``evaluate``: drawn here, on the CPU."""
    x = b._randn(1, 3, 8)
    return head_importance.pruning_curve, {
        "model": b._mha(), "importance": torch.tensor([[1.0, 2.0]]),
        "evaluate": lambda m: float(m(x, x, x)[0].detach().norm())}


def _masks_of(pattern: Callable[[], sparse_attention.MaskFn]) -> Callable[[], Call]:
    """A pattern made inside the run (its constants too) and drawn as a dense and a block mask."""
    def build() -> Call:
        return (lambda: (sparse_attention.dense_mask(pattern(), 8, device="cpu"),
                         sparse_attention.block_layout(pattern(), 8, 2, device="cpu"))), {}
    return build


def _copy_batches() -> Call:
    generator = _gen()
    return (lambda: next(copying.copy_batches(copying.CopyTask(4), 3, 2, generator))), {}


def _transformer_decode() -> Call:
    model = _transformer()
    memory, _ = model.encode(b._ids(2, 4, vocab=V))
    return model.decode, {"tgt": b._ids(2, 3, vocab=V, seed=1), "memory": memory}


def _llama_with_a_new_cache() -> Call:
    model, ids = _llama(), b._ids(1, 3, vocab=V)
    return (lambda: model(ids, cache=model.new_cache())), {}


def _a_matmul() -> Callable[[], torch.Tensor]:
    x = b._randn(4, 4)
    return lambda: x @ x


def _optimizer_state_bytes() -> Call:
    """One AdamW step on the CPU model (so that the optimizer holds state), then its size."""
    model, ids = b._gpt(), torch.tensor([[1, 2]])
    optimizer = torch.optim.AdamW(model.parameters())

    def step_and_count() -> int:
        model(ids).sum().backward()
        optimizer.step()
        return lora.optimizer_state_bytes(optimizer)
    return step_and_count, {}


def _char_data_uncached() -> Call:
    # Cached: the run must make its tensors, not reuse the plain run's.
    sweep.char_data.cache_clear()
    return sweep.char_data, {}


#: Callables without a tensor argument that create tensors, train or evaluate a model, and the
#: methods of models and tensor records; and the entries of test_bad_input whose valid call
#: creates its inputs inside the call (built on the CPU here instead).
MORE: dict[str, Placed] = {
    "head_importance.pruning_curve": Placed(_pruning_curve),
    # masks and tables built for a device
    "attention.causal_mask": Placed(_call(attention.causal_mask, length=3, device="cpu")),
    "positional.frequencies": Placed(_call(positional.frequencies, d_model=6, device="cpu")),
    "positional.sinusoidal_encoding": Placed(
        _call(positional.sinusoidal_encoding, n_positions=3, d_model=6, device="cpu")),
    "positional.relative_position_map": Placed(
        _call(positional.relative_position_map, shift=2, d_model=6, device="cpu")),
    "rope.inv_frequencies": Placed(_call(rope.inv_frequencies, head_dim=4, device="cpu")),
    "rope.interleaved_to_half": Placed(_call(rope.interleaved_to_half, head_dim=4),
                                       creates=True),
    "linformer.random_projection": Placed(lambda: (linformer.random_projection, {
        "k": 2, "n": 5, "generator": _gen(), "device": "cpu"})),
    **{f"sparse_attention.{name}": Placed(_masks_of(pattern)) for name, pattern in {
           "sliding_window": lambda: sparse_attention.sliding_window(2),
           "dilated_window": lambda: sparse_attention.dilated_window(2, 2),
           "global_tokens": lambda: sparse_attention.global_tokens([0, 3]),
           "random_blocks": lambda: sparse_attention.random_blocks(8, 2, 1),
           "union": lambda: sparse_attention.union(sparse_attention.sliding_window(1),
                                                   sparse_attention.global_tokens([0])),
           "dense_mask": lambda: sparse_attention.sliding_window(1, causal=True),
           "block_layout": lambda: sparse_attention.sliding_window(3)}.items()},
    # data: made on the generator's device, or on the default device from Python lists
    "copying.make_copy_batch": Placed(lambda: (copying.make_copy_batch, {
        "task": copying.CopyTask(4), "length": 3, "batch_size": 2, "generator": _gen(),
        "min_length": 1})),
    "copying.copy_batches": Placed(_copy_batches),
    "copying.CopyBatch.to": Placed(lambda: (_copy_batch().to, {"device": "cpu"})),
    "longrange.make_recall_batch": Placed(lambda: (longrange.make_recall_batch, {
        "config": b._recall(), "batch_size": 2, "generator": _gen()})),
    "longrange.RecallBatch.to": Placed(lambda: (
        longrange.make_recall_batch(b._recall(), 2, _gen()).to, {"device": "cpu"})),
    "data.pad_sequences": Placed(_call(data.pad_sequences, seqs=[[1, 2], [3]]), creates=True),
    "seq2seq.offset_attention": Placed(_call(seq2seq.offset_attention, offset=2, n=10),
                                       creates=True),
    "data.collate": Placed(lambda: (data.collate, dict(zip(
        ("src_vocab", "tgt_vocab", "pairs"), _date_data()))), creates=True),
    "data.Seq2SeqDataset.collate": Placed(_dataset_collate, creates=True),
    "data.batch_iterator": Placed(lambda: (lambda: next(data.batch_iterator(
        _date_data()[2], *_date_data()[:2], batch_size=2)), {}), creates=True),
    "data.Batch.to": Placed(lambda: (_batch().to, {"device": "cpu"})),
    "corpus.encode_chars": Placed(_call(corpus.encode_chars, text="abba", vocabulary=["a", "b"]),
                                  creates=True),
    "finetune.encode_pairs": Placed(
        _call(finetune.encode_pairs, pairs=[("1+1=", "2")], vocabulary=list("\n12+="))),
    **{f"{module.__name__.rsplit('.', 1)[1]}.make_batch": Placed(lambda module=module: (
        module.make_batch, {"rng": random.Random(0), "ks": (1,), "batch_size": 2,
                            "chain_of_thought": True})) for module in (arithmetic, reasoning)},
    "rl.prompts_of": Placed(lambda: (rl.prompts_of, {"problems": _problems(), "device": "cpu"})),
    "decoding.greedy_vs_beam_example": Placed(_call(decoding.greedy_vs_beam_example),
                                              creates=True),
    "decoding.beam_loses_to_greedy_example": Placed(
        _call(decoding.beam_loses_to_greedy_example), creates=True),
    "decoding.MarkovStep": Placed(lambda: (decoding.MarkovStep(b._randn(4, 4)),
                                           {"tokens": torch.tensor([[1, 2]])})),
    # a model and a batch on the CPU: losses, evaluations, one training step
    "copying.copy_loss": Placed(lambda: (copying.copy_loss, {"model": _copy_gru(),
                                                             "batch": _copy_batch()})),
    "copying.train_copy": Placed(lambda: (copying.train_copy, {
        "model": _copy_gru(), "task": copying.CopyTask(4), "max_length": 3, "steps": 1,
        "batch_size": 2})),
    "copying.copy_accuracy": Placed(lambda: (copying.copy_accuracy, {
        "model": _copy_gru(), "task": copying.CopyTask(4), "length": 3, "n_strings": 2})),
    "longrange.train_recall": Placed(lambda: (longrange.train_recall, {
        "model": longrange.LinearMixer(b._recall(), d_model=8),
        "train": longrange.TrainConfig(steps=1, batch_size=2)})),
    **{f"longrange.{name}.mix": Placed(lambda name=name: (
        getattr(longrange, name)(b._recall(), d_model=8).mix, {"x": b._randn(2, 6, 8)}))
       for name in ("LinearMixer", "GRUModel", "DilatedCNN")},
    "longrange.AttentionModel.mix": Placed(lambda: (
        longrange.AttentionModel(b._recall(), d_model=8, n_heads=2).mix,
        {"x": b._randn(2, 6, 8)})),
    "longrange.AttentionModel.attend": Placed(lambda: (
        longrange.AttentionModel(b._recall(), d_model=8, n_heads=2).attend,
        {"x": b._randn(2, 6, 8), "need_weights": True})),
    "longrange.AttentionModel.attention_weights": Placed(lambda: (
        longrange.AttentionModel(b._recall(), d_model=8, n_heads=2).attention_weights,
        b._recall_inputs())),
    "training.train": Placed(lambda: (training.train, {
        "model": nn.Linear(3, 2), "batches": [(b._randn(4, 3), torch.tensor([0, 1, 1, 0]))],
        "loss_fn": lambda m, batch: F.cross_entropy(m(batch[0]), batch[1]),
        "config": b._train_config()}), timings=("output.seconds",)),
    "seq2seq.teacher_forcing_loss": Placed(lambda: (seq2seq.teacher_forcing_loss, {
        "model": _seq2seq(True), "batch": _batch()})),
    **{f"seq2seq.{name}": Placed(_seq2seq_call(True, fn, **kwargs)) for name, fn, kwargs in (
        ("translate", seq2seq.translate, {"sources": ["a b c"], "max_len": 5}),
        ("exact_match", seq2seq.exact_match, {"pairs": _date_data()[2], "max_len": 5}),
        ("accuracy_by_length", seq2seq.accuracy_by_length, {"pairs": _date_data()[2]}))},
    **{f"seq2seq.{cls}.{method}": Placed(_seq2seq_method(attention, method))
       for cls, attention in (("Seq2Seq", False), ("AttentionSeq2Seq", True))
       for method in ("encode", "decode", "make_step")},
    "transformer.Transformer.encode": Placed(lambda: (_transformer().encode, {
        "src": b._ids(2, 4, vocab=V)})),
    "transformer.Transformer.decode": Placed(_transformer_decode),
    "transformer.Transformer.attention_maps": Placed(lambda: (_transformer().attention_maps, {
        "src": b._ids(2, 4, vocab=V), "tgt": b._ids(2, 3, vocab=V, seed=1)})),
    "transformer.Transformer.make_step": Placed(lambda: (
        _transformer().make_step(b._ids(2, 4, vocab=V)), {"tokens": b._ids(2, 2, vocab=V)})),
    "transformer.FeedForward.memory_coefficients": Placed(lambda: (
        transformer.FeedForward(8, 16).memory_coefficients, {"x": b._randn(2, 8)})),
    "gpt.to_gpt2_state_dict": Placed(lambda: (gpt.to_gpt2_state_dict, {"model": b._gpt()})),
    "gpt.KVCache.update": Placed(lambda: (gpt.KVCache(1).update, {
        "layer": 0, "k": b._randn(1, 2, 3, 4), "v": b._randn(1, 2, 3, 4, seed=1)})),
    "gpt.KVCache.select": Placed(lambda: (_filled_gpt_cache().select,
                                          {"rows": torch.tensor([0, 0])})),
    "llama.KVCache.update": Placed(lambda: (llama.KVCache(1, window=2).update, {
        "layer": 0, "k": b._randn(1, 2, 3, 4), "v": b._randn(1, 2, 3, 4, seed=1)})),
    "llama.KVCache.nbytes": Placed(lambda: (_filled_llama_cache().nbytes, {})),
    "llama.LlamaForCausalLM.new_cache": Placed(_llama_with_a_new_cache),
    "llama.LlamaForCausalLM.router_logits": Placed(lambda: (_moe_llama().router_logits, {})),
    "llama.step_fn": Placed(lambda: (llama.step_fn(_llama()), {"tokens": b._ids(1, 3, vocab=V)})),
    "lora.LoRALinear.merged": Placed(lambda: (b._lora_layer().merged, {})),
    "lora.merge_all": Placed(lambda: (lora.merge_all, {
        "model": lora.add_lora(b._gpt(), r=2, alpha=2.0)})),
    **{f"efficient_models.{name}.weigh": Placed(lambda name=name: (
        getattr(efficient_models, name)(b._recall(), d_model=8, n_heads=2).weigh,
        dict(zip("qkv", b._randn(3, 1, 2, 3, 4).unbind(0)))))
       for name in ("LinearAttentionModel", "EntmaxAttentionModel")},
    "arithmetic.accuracy": Placed(lambda: (arithmetic.accuracy, {
        "model": _arithmetic_gpt(), "config": arithmetic.ArithmeticConfig(), "k": 1,
        "chain_of_thought": False, "n": 2})),
    "reasoning.greedy_accuracy": Placed(lambda: (reasoning.greedy_accuracy, {
        "model": _reasoning_gpt(), "problems": _problems(), "chain_of_thought": False})),
    "rl.sample_completions": Placed(lambda: (rl.sample_completions, {
        "model": _reasoning_gpt(), "problems": _problems(), "n": 2})),
    "rl.sample_answers": Placed(lambda: (rl.sample_answers, {
        "model": _reasoning_gpt(), "problems": _problems(), "n": 2})),
    "finetune.answer_accuracy": Placed(lambda: (finetune.answer_accuracy, {
        "model": b._gpt(vocab_size=len(finetune.char_vocabulary()), block_size=64),
        "pairs": finetune.word_problems(2, seed=0), "vocabulary": finetune.char_vocabulary()})),
    "peers.randomize_": Placed(lambda: (peers.randomize_, {"module": nn.Linear(3, 2), "seed": 0})),
    **{f"peers.copy_from_torch_{kind}": Placed(lambda kind=kind: _peer_copy(kind))
       for kind in ("encoder_layer", "decoder_layer", "transformer")},
    **{f"peers.{kind}_weights": Placed(lambda kind=kind: (getattr(peers, f"{kind}_weights"), {
        "layer": _torch_layer(kind)})) for kind in ("encoder_layer", "decoder_layer")},
    # whole training runs, tiny, on device="cpu"
    "arithmetic.train_variant": Placed(lambda: (arithmetic.train_variant, {
        "config": _tiny(arithmetic.ArithmeticConfig(train_steps=(1,))), "chain_of_thought": True,
        "device": "cpu"}), timings=("output[1].seconds",)),
    "reasoning.train_variant": Placed(lambda: (reasoning.train_variant, {
        "config": _tiny(reasoning.ReasoningConfig(train_steps=(1,))), "chain_of_thought": False,
        "device": "cpu"}), timings=("output[1].seconds",)),
    "reasoning.train_s5": Placed(lambda: (reasoning.train_s5, {
        "config": reasoning.S5Config(train_k=2, test_k=3, n_layer=1, n_head=2, n_embd=8, steps=1,
                                     batch_size=2, warmup_steps=0, eval_problems=1),
        "target_format": "pause", "seed": 0, "device": "cpu"}), timings=("output[1].seconds",)),
    "rl.train_grpo": Placed(lambda: (rl.train_grpo, {
        "policy": _reasoning_gpt(), "reference": _reasoning_gpt(),
        "config": rl.GRPOConfig(k=1, steps=1, prompts_per_step=1, group_size=2,
                                inner_steps=1)}), timings=("output['seconds']",)),
    "sweep.train_run": Placed(lambda: (sweep.train_run, {
        "run": sweep.make_run(8, 1, 2, budget=1e9), "device": "cpu", "steps": 1,
        "eval_windows": 2}), timings=("output['seconds']",)),
    "finetune.finetune_method": Placed(lambda: (finetune.finetune_method, {
        "base": b._gpt(vocab_size=len(finetune.char_vocabulary()), block_size=128),
        "vocabulary": finetune.char_vocabulary(),
        "config": dataclasses.replace(finetune.FinetuneConfig(), batch_size=2, n_train=4,
                                      n_test=2, warmup_steps=1),
        "rank": 2, "steps": 1}), timings=("output[1]['seconds']", "output[1]['ms_per_step']")),
    "complexity.measure": Placed(lambda: (complexity.measure, {
        "kind": "attention", "ns": [4], "d": 8, "repeats": 1, "device": "cpu"}),
        timings=("output.seconds", "output.peak_bytes")),
    "complexity.time_call": Placed(lambda: (complexity.time_call, {
        "fn": _a_matmul(), "repeats": 1}), timings=("output",)),
    "complexity.peak_memory": Placed(lambda: (complexity.peak_memory, {
        "fn": _a_matmul(), "device": "cpu"}), timings=("output",)),
    "flops.measure_training_throughput": Placed(lambda: (flops.measure_training_throughput, {
        "config": b._gpt_config(), "batch": 1, "steps": 1, "device": "cpu"}),
        timings=("output.tokens_per_second", "output.seconds_per_step")),
    "flops.measure_matmul_peak": Placed(_call(flops.measure_matmul_peak, n=8, seconds=0.01,
                                              device="cpu"), timings=("output",)),
    # models built from a configuration, and shipped models loaded for a device
    "arithmetic.build_model": Placed(_call(arithmetic.build_model,
                                           config=_tiny(arithmetic.ArithmeticConfig())),
                                     creates=True),
    "reasoning.build_model": Placed(_call(reasoning.build_model,
                                          config=_tiny(reasoning.ReasoningConfig())),
                                    creates=True),
    "reasoning.build_s5_model": Placed(_call(reasoning.build_s5_model, config=reasoning.S5Config(
        train_k=2, test_k=3, n_layer=1, n_head=2, n_embd=8, steps=1, batch_size=2,
        warmup_steps=0, eval_problems=1), seed=0), creates=True),
    "sweep.model_for": Placed(_call(sweep.model_for, run=sweep.make_run(8, 1, 2, budget=1e9),
                                    vocab_size=V), creates=True),
    "complexity.make_layer": Placed(_call(complexity.make_layer, kind="attention", d=8),
                                    creates=True),
    "finetune.load_base_model": Placed(_call(finetune.load_base_model, device="cpu")),
    "reasoning.load_policy": Placed(_call(reasoning.load_policy, device="cpu")),
    "finetune.validation_windows": Placed(_call(finetune.validation_windows)),
    "finetune.read_base_file": Placed(_call(finetune.read_base_file)),
    "reasoning.pass_at_k_curve": Placed(_call(reasoning.pass_at_k_curve, correct=[0, 2, 4], n=4,
                                              ks=[1, 4])),
    "sweep.char_data": Placed(_char_data_uncached),
    "data.Vocab.decode": Placed(lambda: (_date_data()[1].decode, {"ids": torch.tensor([4, 5])})),
    # counts read off a model's parameters
    **{name: Placed(lambda fn=fn: (fn, {"model" if "module" not in inspect.signature(fn).parameters
                                        else "module": b._gpt()}))
       for name, fn in {"copying.count_params": copying.count_params,
                        "counting.count_parameters": counting.count_parameters,
                        "llama.num_params": llama.num_params,
                        "lora.trainable_parameters": lora.trainable_parameters,
                        "lora.adam_state_bytes": lora.adam_state_bytes}.items()},
    "lora.optimizer_state_bytes": Placed(_optimizer_state_bytes),
    "moe.active_params": Placed(lambda: (moe.active_params, {"moe": b._moe_block()})),
    "head_importance.attention_layers": Placed(lambda: (head_importance.attention_layers, {
        "model": b._gpt()})),
    # autograd Functions: a backward pass too
    "entmax.SparsemaxFunction": Placed(lambda: _backward(entmax.sparsemax, b._randn(2, 5))),
    "entmax.Entmax15Function": Placed(lambda: _backward(entmax.entmax15, b._randn(2, 5))),
    "entmax.EntmaxBisectFunction": Placed(lambda: _backward(
        lambda x: entmax.entmax_bisect(x, alpha=1.7), b._randn(2, 5))),
    "tiled_attention.TiledAttentionFunction": Placed(lambda: _backward(
        lambda q: tiled_attention.tiled_attention(q, q, q, block_q=2, block_k=2),
        b._randn(1, 5, 4))),
    # checks: they look at a tensor, never create one
    **{f"checks.{name}": Placed(_call(getattr(checks, name), name="x", x=x)) for name, x in (
        ("check_tensor", torch.ones(2)), ("check_float_tensor", torch.ones(2)),
        ("check_bool_tensor", torch.ones(2, dtype=torch.bool)),
        ("check_int_tensor", torch.ones(2, dtype=torch.long)),
        ("check_finite_tensor", torch.ones(2)), ("check_positive_tensor", torch.ones(2)))},
    "checks.check_ids": Placed(_call(checks.check_ids, name="ids", ids=torch.tensor([0, 3]),
                                     vocab_size=4)),
    "checks.check_same_dtype": Placed(_call(checks.check_same_dtype, a=torch.ones(2),
                                            b=torch.zeros(3))),
}


def _filled_gpt_cache() -> gpt.KVCache:
    cache = gpt.KVCache(1)
    cache.update(0, b._randn(1, 2, 3, 4), b._randn(1, 2, 3, 4, seed=1))
    return cache


def _filled_llama_cache() -> llama.KVCache:
    cache = llama.KVCache(1)
    cache.update(0, b._randn(1, 2, 3, 4), b._randn(1, 2, 3, 4, seed=1))
    return cache


def _moe_llama() -> llama.LlamaForCausalLM:
    torch.manual_seed(0)
    config = dataclasses.replace(b._llama_config(), num_local_experts=2, num_experts_per_tok=1)
    model = llama.LlamaForCausalLM(config).eval()
    model(b._ids(1, 3, vocab=V))
    return model


def _torch_layer(kind: str) -> nn.Module:
    torch.manual_seed(0)
    cls = nn.TransformerEncoderLayer if kind == "encoder_layer" else nn.TransformerDecoderLayer
    return cls(8, 2, 16, dropout=0.0, batch_first=True)


def _peer_copy(kind: str) -> Call:
    torch.manual_seed(0)
    if kind == "transformer":
        theirs: nn.Module = nn.Transformer(8, 2, 1, 1, 16, dropout=0.0, batch_first=True)
        theirs.encoder.norm = theirs.decoder.norm = None  # post-norm, as course_lib's
        ours: nn.Module = transformer.Transformer(dataclasses.replace(
            b._transformer_config(), n_encoder_layers=1, n_decoder_layers=1))
    else:
        theirs = _torch_layer(kind)
        ours = (transformer.EncoderLayer if kind == "encoder_layer"
                else transformer.DecoderLayer)(8, 2, 16, dropout=0.0)
    return getattr(peers, f"copy_from_torch_{kind}"), {"ours": ours, "theirs": theirs}


TABLE: dict[str, Placed] = {**FROM_BAD_INPUT, **MORE}


# --- the tests --------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    """The plotting entries draw figures: close them, so that they do not pile up."""
    yield
    plt.close("all")


@pytest.mark.parametrize("name", sorted(TABLE))
def test_runs_on_its_inputs_device(name: str) -> None:
    check_placement(TABLE[name])


# --- completeness -----------------------------------------------------------------------------

#: course_lib modules outside this test (and ``<name>_*`` modules beside them), and why.
SKIPPED_MODULES: dict[str, str] = {
    "grading": "the grader's comparisons of a student's answer with the reference: grading tests",
    "exercises": "the exercise registries: they call the functions of the table",
}


def _methods(cls: type) -> list[str]:
    """The public methods a class defines itself (``forward`` is the class's own entry)."""
    if issubclass(cls, torch.autograd.Function):
        return []  # forward and backward: the Function's entry runs both
    return [name for name, value in vars(cls).items()
            if not name.startswith("_") and name != "forward"
            and (inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod)))]


def public_callables() -> list[str]:
    """``"module.name"`` and ``"module.Class.method"`` for every public callable of course_lib."""
    names = []
    for info in pkgutil.iter_modules(course_lib.__path__):
        if info.name.partition("_")[0] in SKIPPED_MODULES:
            continue
        module = importlib.import_module(f"course_lib.{info.name}")
        for name, obj in vars(module).items():
            if (name.startswith("_") or getattr(obj, "__module__", None) != module.__name__
                    or not callable(obj)):
                continue
            names.append(f"{info.name}.{name}")
            if inspect.isclass(obj):
                names += [f"{info.name}.{name}.{method}" for method in _methods(obj)]
    return names


def _names(text: str) -> list[str]:
    return text.split()


_RECORD = "a configuration or record: it holds what it is given and computes nothing"
_PYTHON = "Python numbers, strings and lists in and out: no tensor"
_FILE = "a path, or a results file of Python values read or written"
_EXPERIMENT = "a chapter's whole experiment (minutes of training): each of its steps has an entry"

#: Public callables without an entry, each with the reason it needs none (reviewed by hand).
EXCLUDED: dict[str, str] = {
    **dict.fromkeys(_names("""
        arithmetic.ArithmeticConfig complexity.Measurement copying.CopyTask copying.CopyBatch
        copying.CopyingSetup corpus.SplitRecord counting.GPT3Row data.Splits data.DateTaskConfig
        data.ReorderTaskConfig data.Batch data.Vocab data.Seq2SeqDataset finetune.BaseRecipe
        finetune.FinetuneConfig finetune.ForgettingConfig flops.Throughput flops.RunCost
        gpt.GPTConfig longrange.RecallConfig longrange.RecallBatch
        longrange.TrainConfig scaling.ChinchillaFit
        scaling.PowerLawFit scaling.IsoFlopMinimum seq2seq.Seq2SeqConfig sweep.RunConfig
        training.TrainConfig training.History transformer.TransformerConfig bpe.Tokenizer
        """), _RECORD),
    "gpt.KVCache": "an empty cache (no tensor until update, which has an entry)",
    "seq2seq.Seq2SeqModel": "a typing Protocol: the two models' make_step have entries",
    "seq2seq.Seq2SeqModel.make_step": "a Protocol's signature: the models' own have entries",
    "arithmetic.TrainingFields": "a typing Protocol: the fields train_variant reads (records)",
    **dict.fromkeys(_names("""
        arithmetic.make_problem arithmetic.format_problem arithmetic.format_target
        arithmetic.extract_answer arithmetic.score_answers arithmetic.encode arithmetic.decode
        bpe.pair_counts bpe.merge bpe.split_on_special bpe.pretokenize bpe.train_bpe
        bpe.bytes_to_unicode bpe.Tokenizer.train bpe.Tokenizer.encode bpe.Tokenizer.decode
        bpe.Tokenizer.from_gpt2_files bpe.bytes_per_token bpe.token_lengths bpe.truncated
        checks.check_finite checks.check_positive checks.check_int checks.check_token_id
        complexity.flops complexity.loglog_slope complexity.crossover copying.max_copy_length
        corpus.char_vocabulary counting.attention_params counting.feed_forward_params
        counting.encoder_layer_params counting.decoder_layer_params counting.gpt_params_approx
        counting.transformer_params counting.gpt_param_parts counting.gpt_param_count
        counting.gpt3_inconsistencies counting.training_state_bytes data.Vocab.tokenize
        data.Vocab.encode data.Vocab.tokens data.ordinal data.format_date data.random_date_pair
        data.date_vocabs data.date_task data.reorder_sentence data.reorder_vocabs
        data.reorder_task data.group_by_length dpo.has_property finetune.char_vocabulary
        finetune.base_config finetune.word_problem finetune.word_problems finetune.method_names
        flops.forward_flops_per_token flops.training_flops flops.gpt_matmul_flops flops.mfu
        flops.run_cost gpt.generation_cost gpt.gpt_params gpt.bits_per_byte
        lora.gpt_lora_parameters scaling.kaplan_loss_n
        scaling.kaplan_loss_d scaling.kaplan_loss_nd scaling.kaplan_loss_c
        scaling.kaplan_optimal_n scaling.ChinchillaFit.compute_optimal sweep.non_embedding_params
        sweep.learning_rate sweep.make_run sweep.sweep_configs sweep.lr_at training.History.last
        training.lr_at utils.quick_mode utils.pick decoding.beam_search_cost
        seq2seq.collision_loss_bound bpe.run_tokens checks.check_sequence
        """), _PYTHON),
    "scaling.chinchilla_objective": "numpy arrays in and out: the fit runs in numpy on the CPU",
    "scaling.ChinchillaFit.loss": "numpy arrays in and out: the fitted law evaluated in numpy",
    **dict.fromkeys(_names("""
        arithmetic.results_path arithmetic.load_results corpus.shakespeare_path
        corpus.load_shakespeare
        finetune.load_forgetting finetune.save_json_xz finetune.load_json_xz finetune.load_runs
        reasoning.load_s5_results
        sweep.write_csv sweep.read_csv
        """), _FILE),
    **dict.fromkeys(_names("""
        arithmetic.run copying.compare_copying finetune.compare_methods finetune.forgetting_runs
        finetune.forgetting_run finetune.measure_costs
        """), _EXPERIMENT),
    **dict.fromkeys(_names("book.label book.glue"), "the book's glue of values into pages"),
    **dict.fromkeys(_names("""
        plotting.series_style plotting.course_rc plotting.course_text_rc plotting.smallest_text_pt
        plotting.use_course_style plotting.plot_loss_curves plotting.plot_accuracy_vs_length
        """), "matplotlib styles, and plots of Python lists: no tensor"),
    "finetune.save_base_model": "writes a model's weights to a file, each where it is",
    "utils.get_device": "picks a device; creates no tensor",
    "utils.seed_everything": "seeds the RNGs and returns a CPU torch.Generator",
    "sweep.init_distributed": "starts torch.distributed (torchrun only): tests/test_sweep.py",
    "longrange.layers_to_connect": ("builds its probe layers and input itself (nothing to take a "
                                    "device from) and reads their gradients back as numbers"),
}


def test_every_public_callable_is_placed() -> None:
    """A new function of course_lib fails here until it has an entry or a reason."""
    missing = [name for name in public_callables() if name not in TABLE and name not in EXCLUDED]
    assert not missing, (
        f"{len(missing)} public callable(s) of course_lib have no entry in "
        f"tests/test_device_placement.py (add one to MORE, with CPU inputs; or, if it never "
        f"touches a tensor, a reason to EXCLUDED): {', '.join(missing)}")


def test_the_exclusions_are_current() -> None:
    public = set(public_callables())
    stale = sorted(set(EXCLUDED) - public)
    assert not stale, f"EXCLUDED names what course_lib no longer has: {', '.join(stale)}"
    both = sorted(set(EXCLUDED) & set(TABLE))
    assert not both, f"both placed and excluded: {', '.join(both)}"


# --- the check itself -------------------------------------------------------------------------

def _under_meta(fn: Callable[[], Any]) -> Any:
    with torch.device(META):
        return fn()


def test_torch_mixes_meta_and_cpu_as_this_file_assumes() -> None:
    """What the module docstring says torch does, so a torch upgrade that changes it shows here."""
    x, mask = torch.arange(9.0).view(3, 3), torch.eye(3, dtype=torch.bool)
    for loud in (lambda: x + torch.ones(3, 3), lambda: x * torch.tensor(2.0),
                 lambda: torch.cat([x, torch.zeros(1, 3)]), lambda: torch.where(mask, x, x.T)
                 .masked_fill(torch.ones(3, 3, dtype=torch.bool), 0.0),
                 lambda: torch.where(torch.ones(3, 3, dtype=torch.bool), x, x),
                 lambda: torch.zeros(()).item()):
        with pytest.raises((RuntimeError, NotImplementedError)):
            _under_meta(loud)
    for silent in (lambda: x[torch.tensor([2, 0])], lambda: x @ torch.eye(3),
                   lambda: x.gather(1, torch.zeros(3, 1, dtype=torch.long)),
                   lambda: x.index_select(0, torch.tensor([1]))):
        assert _under_meta(silent).device.type == "cpu"  # garbage values, no error
    assert _under_meta(lambda: torch.einsum("ij,jk->ik", x, torch.eye(3))).is_meta
    assert _under_meta(lambda: torch.zeros_like(x)).device.type == "cpu"  # *_like follow x


def _add_ones(x: torch.Tensor) -> torch.Tensor:
    return x + torch.ones(x.shape)  # wrong: ones on the default device


def _take_first_two(x: torch.Tensor) -> torch.Tensor:
    return x[torch.arange(2)]  # wrong, and silent: a meta index reads garbage from x


def _mix_with_eye(x: torch.Tensor) -> torch.Tensor:
    return torch.einsum("ij,jk->ik", x, torch.eye(x.shape[-1]))  # wrong: a meta result


def _scale_by_table(x: torch.Tensor) -> torch.Tensor:
    return x * torch.tensor([1.0, 2.0, 3.0])  # wrong: a constant table on the default device


class _MaskInForward(nn.Module):
    """A constant mask made in ``forward`` without ``device=``: wrong."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.masked_fill(torch.tril(torch.ones(3, 3, dtype=torch.bool)), 0.0)


class _MaskAsBuffer(nn.Module):
    """The same mask registered as a buffer: right, it moves with ``.to(device)``."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mask", torch.tril(torch.ones(3, 3, dtype=torch.bool)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.masked_fill(self.mask, 0.0)


@pytest.mark.parametrize("wrong", [_add_ones, _take_first_two, _mix_with_eye, _scale_by_table,
                                   _MaskInForward()], ids=lambda f: type(f).__name__
                         if isinstance(f, nn.Module) else f.__name__)
def test_a_tensor_made_on_the_default_device_fails_the_check(wrong: Callable[..., Any]) -> None:
    with pytest.raises(AssertionError, match="default device|elsewhere|differs"):
        check_placement(Placed(lambda: (wrong, {"x": b._randn(3, 3)})))


@pytest.mark.parametrize("right", [lambda x: x + torch.ones_like(x),
                                   lambda x: x[torch.arange(2, device=x.device)],
                                   _MaskAsBuffer()], ids=["ones_like", "arange_on_x", "buffer"])
def test_the_same_made_on_the_inputs_device_passes(right: Callable[..., Any]) -> None:
    check_placement(Placed(lambda: (right, {"x": b._randn(3, 3)})))


def test_a_silent_meta_index_is_caught_without_comparing_values() -> None:
    """The garbage a meta index reads may happen to equal the plain values: the mode refuses it."""
    with torch.device(META), _NoMetaArguments(), pytest.raises(MetaArgument):
        torch.arange(9.0, device="cpu")[torch.tensor([0])]


def test_a_creator_must_follow_the_default_device() -> None:
    check_placement(Placed(_call(torch.ones, size=(2,)), creates=True))
    with pytest.raises(AssertionError, match="off the default device"):
        check_placement(Placed(_call(torch.ones, size=(2,), device="cpu"), creates=True))
