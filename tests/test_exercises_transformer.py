"""Chapter 3's exercises: what the tests of every chapter's exercises cannot know.

tests/test_exercises.py checks, for chapter 3 as for every chapter, that the notebook's solutions
pass their visible and hidden tests, that the visible tests of the two layer exercises catch the
usual mistakes as a difference from torch's layers (transposed weights, wrong head split,
sqrt(d), inverted masks, swapped norms, keys and values from the wrong place) and that calling
chapter 2's or chapter 3's layers is flagged. The questions are checked with every chapter's in
tests/test_questions.py. Here: the layer cases never mask a whole query row, and ``mask_tokens``
is graded by its properties, so a correct solution that draws in another order passes.
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
