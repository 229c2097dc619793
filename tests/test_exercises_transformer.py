"""Chapter 3's exercises: what the tests of every chapter's exercises cannot know.

tests/test_exercises.py checks, for chapter 3 as for every chapter, that the notebook's solutions
pass their visible and hidden tests, that the visible tests of the two layer exercises catch the
usual mistakes as a difference from torch's layers (transposed weights, wrong head split,
sqrt(d), inverted masks, swapped norms, keys and values from the wrong place) and that calling
chapter 2's or chapter 3's layers is flagged. The questions are checked with every chapter's in
tests/test_questions.py. Here: the layer cases never mask a whole query row, and ``mask_tokens``
is graded by its properties, so a correct solution that draws in another order passes; the
notebook's ``given_self_attention`` (heads cut across positions) has exactly the bug of
``masked_self_attention``'s first slip and passes its visible test (the student's own test must
catch it); ``design_layer``'s counts agree with a built layer's parameters and with torch's FLOP
counter.
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
# masked_self_attention: the given function has exactly the bug the first slip names
# --------------------------------------------------------------------------------------------


def _given_self_attention():
    """``given_self_attention`` as the notebook defines it (its cell, on top of the setup cell)."""
    from tests.conftest import load, setup_namespace, source_notebook

    (cell,) = [c for c in load(source_notebook("03-transformer")).cells
               if c.cell_type == "code" and c.source.startswith("def given_self_attention(")]
    namespace = setup_namespace("03-transformer")
    exec(compile(cell.source, "<given_self_attention>", "exec"), namespace)
    return namespace["given_self_attention"]


def test_the_given_attention_is_the_first_slip_and_passes_the_visible_tests(capsys) -> None:
    from tests.conftest import run_visible_tests

    given = _given_self_attention()
    ex = ex3.EXERCISES["transformer.masked_self_attention"]
    results = grading.evaluate(ex.id, given)
    failed = [r.message for r in results if r.message]
    assert failed and all(ex.slips[0].message in m for m in failed)
    # The statement says so: the visible test does not catch it, the student's own test must.
    run_visible_tests("03-transformer", "masked_self_attention",
                      lambda y, w_qkv, w_o, n_heads, padding: given(y, w_qkv, w_o, n_heads,
                                                                    padding))
    assert "visible tests passed" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------
# design_layer: the counts agree with built layers and with torch's FLOP counter
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("budget, head_dim, ff_mult, seq_len",
                         [(200, 2, 2, 3), (7_100_000, 64, 4, 1024), (60_000, 8, 1, 7)])
def test_design_layer_counts_match_a_built_layer(budget, head_dim, ff_mult, seq_len) -> None:
    from torch.utils.flop_counter import FlopCounterMode

    from course_lib import counting
    from course_lib import transformer as tf
    from course_lib.attention import causal_mask

    got = ex3.design_layer(budget, head_dim, ff_mult, seq_len)
    assert got is not None
    h, d, d_ff = got["n_heads"], got["d_model"], got["d_ff"]
    assert (d, d_ff) == (h * head_dim, ff_mult * h * head_dim)
    assert got["params"] == counting.encoder_layer_params(d, d_ff) <= budget
    assert counting.encoder_layer_params(d + head_dim, ff_mult * (d + head_dim)) > budget
    with torch.device("meta"):
        assert counting.count_parameters(tf.EncoderLayer(d, h, d_ff)) == got["params"]
    if d <= 64:  # a layer small enough to run: torch counts the whole T x T score matrix
        layer = tf.EncoderLayer(d, h, d_ff, attn_impl="reference").eval()
        with FlopCounterMode(display=False) as counter:
            layer(torch.randn(1, seq_len, d), causal_mask(seq_len))
        skipped = 2 * 2 * d * (seq_len * seq_len - seq_len * (seq_len + 1) // 2)
        assert counter.get_total_flops() == got["flops"] + skipped


def test_design_layer_returns_none_below_one_head() -> None:
    assert ex3.design_layer(53, 2, 2, 3) is None
    assert ex3.design_layer(54, 2, 2, 3)["n_heads"] == 1


def test_design_layer_takes_any_whole_numbers() -> None:
    """The statement asks for whole numbers, not Python ints (a rule the grader did not check):
    numpy integers pass, a wrong count does not."""
    import numpy as np

    def solution(budget, head_dim, ff_mult, seq_len):  # the notebook's, not the reference
        def params(d):
            return 4 * d * d + 4 * d + 2 * d * ff_mult * d + ff_mult * d + d + 4 * d

        h = 0
        while params((h + 1) * head_dim) <= budget:
            h += 1
        if h == 0:
            return None
        d, T = h * head_dim, seq_len
        flops = 2 * T * 4 * d * d + 2 * 2 * (T * (T + 1) // 2) * d + 2 * T * 2 * d * ff_mult * d
        return {"n_heads": h, "d_model": d, "d_ff": ff_mult * d, "params": params(d),
                "flops": flops}

    def as_numpy(budget, head_dim, ff_mult, seq_len):
        got = solution(budget, head_dim, ff_mult, seq_len)
        return None if got is None else {k: np.int64(v) for k, v in got.items()}

    assert not [r.message for r in grading.evaluate("transformer.design_layer", as_numpy)
                if r.message]

    def off_by_one(budget, head_dim, ff_mult, seq_len):
        got = solution(budget, head_dim, ff_mult, seq_len)
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
