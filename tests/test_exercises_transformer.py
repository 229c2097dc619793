"""Chapter 3's exercises: what the tests of every chapter's exercises cannot know.

tests/test_exercises.py checks, for chapter 3 as for every chapter, that the notebook's solutions
pass their visible and hidden tests, that the visible tests of the two layer exercises catch the
usual mistakes as a difference from torch's layers (transposed weights, wrong head split,
sqrt(d), inverted masks, swapped norms, keys and values from the wrong place) and that calling
chapter 2's or chapter 3's layers is flagged. The questions are checked with every chapter's in
tests/test_questions.py. Here: the layer cases never mask a whole query row, and ``mask_tokens``
is graded by its properties, so a correct solution that draws in another order passes;
``given_reads`` is what the notebook's ``given_self_attention`` (heads cut across positions)
reads, measured by its Jacobian; ``design_layer``'s counts agree with a layer of the variant
built from torch modules and with torch's FLOP counter.
"""

from __future__ import annotations

import pytest
import torch

from course_lib import grading, lm
from course_lib.exercises import transformer as ex3

pytestmark = pytest.mark.ch03


# --------------------------------------------------------------------------------------------
# The layer exercises' hidden cases
# --------------------------------------------------------------------------------------------


def test_layer_cases_never_mask_a_whole_query_row() -> None:
    for case in ex3.EXERCISES["transformer.encoder_layer"].cases():
        mask = case.inputs()["mask"]
        assert mask is None or bool(mask.any(-1).all()), case.name
    for case in ex3.EXERCISES["transformer.decoder_layer"].cases():
        inputs = case.inputs()
        for key in ("self_mask", "cross_mask"):
            mask = inputs[key]
            assert mask is None or bool(mask.any(-1).all()), (case.name, key)


# --------------------------------------------------------------------------------------------
# mask_tokens: graded by its properties, not by the order of its random draws
# --------------------------------------------------------------------------------------------


def _draws_in_another_order(tokens, mask_id, vocab_size, generator, p=0.15, special=None):
    """A correct solution that draws the random ids first and decides per position differently."""
    rand_ids = torch.randint(vocab_size, tokens.shape, generator=generator)
    kind = torch.multinomial(torch.tensor([1 - p, 0.8 * p, 0.1 * p, 0.1 * p]), tokens.numel(),
                             replacement=True, generator=generator).view(tokens.shape)
    if special is not None:
        kind = kind.masked_fill(special, 0)
    inputs = torch.where(kind == 1, torch.full_like(tokens, mask_id), tokens)
    inputs = torch.where(kind == 2, rand_ids, inputs)
    return inputs, torch.where(kind > 0, tokens, torch.full_like(tokens, -100))


def test_a_solution_with_other_draws_passes() -> None:
    fn = _draws_in_another_order
    assert grading.format_failures("transformer.mask_tokens",
                                   grading.evaluate("transformer.mask_tokens", fn)) is None
    # ... although its corruption differs from the reference's for the same seed.
    tokens = torch.randint(4, 30, (4, 32), generator=torch.Generator().manual_seed(0))
    ours = fn(tokens, 3, 30, torch.Generator().manual_seed(1))
    theirs = lm.mask_tokens(tokens, 3, 30, torch.Generator().manual_seed(1))
    assert not torch.equal(ours[1], theirs[1])


def test_the_reference_meets_every_property_in_every_case() -> None:
    ex = ex3.EXERCISES["transformer.mask_tokens"]
    for case in ex.cases():
        verdicts = grading.reference_output(ex, case)
        assert verdicts and all(verdicts.values()), (case.name, verdicts)


def test_a_wrong_return_type_is_explained() -> None:
    results = grading.evaluate("transformer.mask_tokens",
                               lambda tokens, mask_id, vocab_size, generator, p=0.15,
                               special=None: [tokens, tokens])
    assert all("return a pair (inputs, targets)" in r.message for r in results)


def test_a_solution_that_ignores_p_fails_on_the_case_with_another_p() -> None:
    def fixed_p(tokens, mask_id, vocab_size, generator, p=0.15, special=None):
        return _draws_in_another_order(tokens, mask_id, vocab_size, generator, 0.15, special)

    failed = [r for r in grading.evaluate("transformer.mask_tokens", fixed_p) if r.message]
    assert failed and all("share of ordinary positions is p" in r.message for r in failed)


# --------------------------------------------------------------------------------------------
# given_reads: the reference is what the given function does, measured by perturbation
# --------------------------------------------------------------------------------------------


def _given_self_attention():
    """``given_self_attention`` as the notebook defines it (its cell, on top of the setup cell)."""
    from tests.conftest import load, setup_namespace, source_notebook

    (cell,) = [c for c in load(source_notebook("03-transformer")).cells
               if c.cell_type == "code" and c.source.startswith("def given_self_attention(")]
    namespace = setup_namespace("03-transformer")
    exec(compile(cell.source, "<given_self_attention>", "exec"), namespace)
    return namespace["given_self_attention"]


def _measured_reads(given, T: int, n_heads: int, head_dim: int = 2) -> torch.Tensor:
    """[t, j]: the output at t moves when the input at j moves (the Jacobian's blocks)."""
    d = n_heads * head_dim
    g = torch.Generator().manual_seed(T * 100 + n_heads)
    y = torch.randn(1, T, d, dtype=torch.float64, generator=g)
    w_qkv = torch.randn(3 * d, d, dtype=torch.float64, generator=g)
    w_o = torch.randn(d, d, dtype=torch.float64, generator=g)
    padding = torch.ones(1, T, dtype=torch.bool)
    jac = torch.autograd.functional.jacobian(lambda x: given(x, w_qkv, w_o, n_heads, padding), y)
    return jac[0, :, :, 0].abs().amax(dim=(1, 3)) > 1e-12  # (T out, T in)


@pytest.mark.parametrize("T, n_heads", [(1, 1), (6, 1), (4, 2), (5, 3), (7, 4), (9, 2), (3, 5),
                                        (8, 8), (10, 6), (12, 5)])
def test_given_reads_is_what_the_given_function_reads(T, n_heads) -> None:
    given = _given_self_attention()
    assert torch.equal(ex3.given_reads(T, n_heads), _measured_reads(given, T, n_heads))


def test_the_given_function_passes_the_one_head_property_and_breaks_the_causal_one() -> None:
    given = _given_self_attention()
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    assert torch.equal(_measured_reads(given, 6, 1), causal)
    assert (_measured_reads(given, 6, 2) & ~causal).any()


def test_the_hidden_cases_reach_long_sequences() -> None:
    sizes = [case.inputs()["T"] for case in ex3.EXERCISES["transformer.given_reads"].cases()]
    assert max(sizes) >= 1500


# --------------------------------------------------------------------------------------------
# design_layer: the counts agree with a built layer of the variant and with torch's FLOP counter
# --------------------------------------------------------------------------------------------


class _GroupedGatedLayer(torch.nn.Module):
    """Exercise 8's variant built from torch modules, to count (grouped keys, gated FFN)."""

    def __init__(self, d: int, n_heads: int, n_kv: int, d_ff: int) -> None:
        super().__init__()
        self.h, self.kv, self.dh = n_heads, n_kv, d // n_heads
        self.q, self.o = torch.nn.Linear(d, d), torch.nn.Linear(d, d)
        self.k, self.v = torch.nn.Linear(d, n_kv * self.dh), torch.nn.Linear(d, n_kv * self.dh)
        self.gate, self.up = torch.nn.Linear(d, d_ff), torch.nn.Linear(d, d_ff)
        self.down = torch.nn.Linear(d_ff, d)
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (1, T, d), the whole score matrix
        B, T, d = x.shape
        z = self.norm1(x)
        q = self.q(z).view(B, T, self.h, self.dh).transpose(1, 2)
        k = self.k(z).view(B, T, self.kv, self.dh).transpose(1, 2)
        v = self.v(z).view(B, T, self.kv, self.dh).transpose(1, 2)
        k = k.repeat_interleave(self.h // self.kv, dim=1)
        v = v.repeat_interleave(self.h // self.kv, dim=1)
        scores = (q @ k.transpose(-2, -1)).masked_fill(
            ~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
        x = x + self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(B, T, d))
        z = self.norm2(x)
        return x + self.down(torch.relu(self.gate(z)) * self.up(z))


@pytest.mark.parametrize("budget, head_dim, group, ff_mult, seq_len",
                         [(700, 2, 2, 2, 3), (7_100_000, 64, 4, 4, 1024), (60_000, 8, 1, 1, 7),
                          (90_000, 4, 3, 3, 11)])
def test_design_layer_counts_match_a_built_layer(budget, head_dim, group, ff_mult,
                                                 seq_len) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    from course_lib import counting

    got = ex3.design_layer(budget, head_dim, group, ff_mult, seq_len)
    assert got is not None
    h, m, d, d_ff = got["n_heads"], got["n_kv_heads"], got["d_model"], got["d_ff"]
    assert (h, d, d_ff) == (m * group, h * head_dim, ff_mult * h * head_dim)
    with torch.device("meta"):
        assert counting.count_parameters(_GroupedGatedLayer(d, h, m, d_ff)) == got["params"]
        wider = _GroupedGatedLayer(d + group * head_dim, h + group, m + 1,
                                   ff_mult * (d + group * head_dim))
        assert got["params"] <= budget < counting.count_parameters(wider)
    if d <= 64:  # a layer small enough to run: torch counts the whole T x T score matrix
        layer = _GroupedGatedLayer(d, h, m, d_ff)
        with FlopCounterMode(display=False) as counter:
            layer(torch.randn(1, seq_len, d))
        skipped = 2 * 2 * d * (seq_len * seq_len - seq_len * (seq_len + 1) // 2)
        assert counter.get_total_flops() == got["flops"] + skipped


def test_design_layer_returns_none_below_one_group() -> None:
    assert ex3.design_layer(191, 2, 2, 2, 3) is None
    assert ex3.design_layer(192, 2, 2, 2, 3)["n_heads"] == 2


def test_design_layer_takes_any_whole_numbers() -> None:
    """The statement asks for whole numbers, not Python ints (a rule the grader did not check):
    numpy integers pass, a wrong count does not."""
    import numpy as np

    from tests.conftest import solution

    design = solution("03-transformer", "design_layer")

    def as_numpy(budget, head_dim, group, ff_mult, seq_len):
        got = design(budget, head_dim, group, ff_mult, seq_len)
        return None if got is None else {k: np.int64(v) for k, v in got.items()}

    assert not [r.message for r in grading.evaluate("transformer.design_layer", as_numpy)
                if r.message]

    def off_by_one(budget, head_dim, group, ff_mult, seq_len):
        got = design(budget, head_dim, group, ff_mult, seq_len)
        return None if got is None else {**got, "params": got["params"] + 1}

    assert [r.message for r in grading.evaluate("transformer.design_layer", off_by_one)
            if r.message]


# --------------------------------------------------------------------------------------------
# The statements allow torch's layers (the layer exercises are warm-ups): the grader agrees
# --------------------------------------------------------------------------------------------


def _load_into_torch(peer, params, cross):
    with torch.no_grad():
        attentions = [("w", "b", peer.self_attn)]
        if cross:
            attentions.append(("wc", "bc", peer.multihead_attn))
        for w, b, attn in attentions:
            attn.in_proj_weight.copy_(torch.cat([params[f"{w}_{n}"] for n in "qkv"]))
            attn.in_proj_bias.copy_(torch.cat([params[f"{b}_{n}"] for n in "qkv"]))
            attn.out_proj.weight.copy_(params[f"{w}_o"])
            attn.out_proj.bias.copy_(params[f"{b}_o"])
        for k in (1, 2):
            getattr(peer, f"linear{k}").weight.copy_(params[f"w_{k}"])
            getattr(peer, f"linear{k}").bias.copy_(params[f"b_{k}"])
        for k in (1, 2, 3) if cross else (1, 2):
            getattr(peer, f"norm{k}").weight.copy_(params[f"gamma_{k}"])
            getattr(peer, f"norm{k}").bias.copy_(params[f"beta_{k}"])


def _torch_mask(mask, n_heads):
    """course_lib's (B, T, S) "may attend" -> torch's (B * h, T, S) "may not attend"."""
    return None if mask is None else (~mask).repeat_interleave(n_heads, 0)


def _encoder_by_torch(x, params, n_heads, mask, norm_first):
    peer = torch.nn.TransformerEncoderLayer(x.shape[-1], n_heads, params["w_1"].shape[0],
                                            dropout=0.0, batch_first=True,
                                            norm_first=norm_first).to(x.dtype).eval()
    _load_into_torch(peer, params, cross=False)
    with torch.no_grad():
        return peer(x, src_mask=_torch_mask(mask, n_heads))


def _decoder_by_torch(y, memory, params, n_heads, self_mask, cross_mask, norm_first):
    peer = torch.nn.TransformerDecoderLayer(y.shape[-1], n_heads, params["w_1"].shape[0],
                                            dropout=0.0, batch_first=True,
                                            norm_first=norm_first).to(y.dtype).eval()
    _load_into_torch(peer, params, cross=True)
    with torch.no_grad():
        return peer(y, memory, tgt_mask=_torch_mask(self_mask, n_heads),
                    memory_mask=_torch_mask(cross_mask, n_heads))


@pytest.mark.parametrize("exercise_id, fn", [
    ("transformer.layer_norm", lambda x, gamma, beta, eps=1e-5: torch.nn.functional.layer_norm(
        x, (x.shape[-1],), gamma, beta, eps)),
    ("transformer.encoder_layer", _encoder_by_torch),
    ("transformer.decoder_layer", _decoder_by_torch)])
def test_a_solution_with_the_torch_layer_the_statement_allows_passes(exercise_id, fn) -> None:
    results = grading.evaluate(exercise_id, fn)
    assert [r.message for r in results if r.message] == []
