"""What the generic registry and notebook tests cannot know about chapter 3's exercises.

Solutions come from the source notebook (``tests.conftest.solution``). Here: the visible tests of
the two layer exercises catch the usual mistakes (transposed weights, wrong head split, sqrt(d),
inverted masks, swapped norms, keys and values from the wrong place); ``mask_tokens`` is graded by
its properties, so a correct solution that draws in another order passes; calling chapter 2's or
chapter 3's layers is flagged. The questions are checked with every chapter's in
tests/test_questions.py.
"""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch

from course_lib import grading, lm, multihead
from course_lib import transformer as tf
from course_lib.exercises import transformer as ex3
from tests.conftest import cell_by_grade_id, setup_namespace, solution

pytestmark = pytest.mark.ch03
SLUG = "03-transformer"


def _visible_part(name: str) -> str:
    source = "".join(cell_by_grade_id(SLUG, f"{name}_test")["source"])
    return source.split("### BEGIN HIDDEN TESTS")[0]


def _run_visible(name: str, fn: Callable[..., Any]) -> None:
    namespace = setup_namespace(SLUG)
    namespace[name] = fn
    exec(compile(_visible_part(name), f"<{name} visible tests>", "exec"), namespace)


# --------------------------------------------------------------------------------------------
# The layer exercises: visible tests against torch peers on random weights
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["encoder_layer", "decoder_layer"])
def test_the_notebook_solution_passes_the_visible_and_hidden_tests(name: str, capsys) -> None:
    fn = solution(SLUG, name)
    _run_visible(name, fn)
    assert "visible tests passed" in capsys.readouterr().out
    assert grading.format_failures(f"transformer.{name}",
                                   grading.evaluate(f"transformer.{name}", fn)) is None


@pytest.mark.parametrize("slip", ex3._ENCODER_LAYER_SLIPS, ids=lambda s: s.message[:40])
def test_the_encoder_visible_test_catches_each_slip(slip: grading.Slip) -> None:
    with pytest.raises(AssertionError, match="differs from nn.TransformerEncoderLayer"):
        _run_visible("encoder_layer", slip.fn)


@pytest.mark.parametrize("slip", ex3._DECODER_LAYER_SLIPS, ids=lambda s: s.message[:40])
def test_the_decoder_visible_test_catches_each_slip(slip: grading.Slip) -> None:
    """Its second source is padded, so even ignoring cross_mask changes the output; keys and
    values taken from y (length 4) cannot take the (B, 4, 6) cross_mask: that attempt raises."""
    with pytest.raises((AssertionError, RuntimeError),
                       match="differs from nn.TransformerDecoderLayer|size of tensor"):
        _run_visible("decoder_layer", slip.fn)


def _with_chapter2_mha(x, params, n_heads, mask, norm_first):
    mha = multihead.MultiHeadAttention(x.shape[-1], n_heads).to(x.dtype)
    return mha(x, x, x, None if mask is None else mask[:, None])[0]


def _with_course_lib_decoder_layer(y, memory, params, n_heads, self_mask, cross_mask, norm_first):
    layer = tf.DecoderLayer(y.shape[-1], n_heads, params["w_1"].shape[0]).to(y.dtype)
    return layer(y, memory)[0]


@pytest.mark.parametrize("name, fn", [("encoder_layer", _with_chapter2_mha),
                                      ("decoder_layer", _with_course_lib_decoder_layer)])
def test_using_course_lib_layers_is_flagged(name: str, fn: Callable[..., Any]) -> None:
    results = grading.evaluate(f"transformer.{name}", fn)
    assert all(r.reference_called for r in results)
    with pytest.raises(grading.ReferenceCallError, match="calls course_lib's implementation"):
        grading.check(f"transformer.{name}", fn)


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


def test_the_notebook_solution_of_mask_tokens_passes() -> None:
    fn = solution(SLUG, "mask_tokens")
    assert grading.format_failures("transformer.mask_tokens",
                                   grading.evaluate("transformer.mask_tokens", fn)) is None


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
