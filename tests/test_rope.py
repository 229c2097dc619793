"""Rotary position embeddings (course_lib.rope): known answers, the relative-position property, the
two pairings, and Hugging Face's ``apply_rotary_pos_emb`` as the peer of the half-split one."""

from __future__ import annotations

import pytest
import torch

from course_lib import rope

pytestmark = pytest.mark.ch07

f64 = torch.float64


def test_position_zero_is_the_identity():
    x = torch.randn(3, 1, 8, dtype=f64)
    for pairing in ("interleaved", "half"):
        assert torch.equal(rope.apply_rope(x, torch.tensor([0]), pairing=pairing), x)


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_norms_are_kept(pairing):
    x = torch.randn(2, 4, 7, 16, dtype=f64)
    y = rope.apply_rope(x, torch.arange(7), pairing=pairing)
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1))


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
def test_scores_depend_on_the_offset_only(pairing):
    q, k = torch.randn(16, dtype=f64), torch.randn(16, dtype=f64)
    for shift in (1, 17, 1000):
        assert torch.isclose(rope.rope_scores(q, k, 5, 2, pairing=pairing),
                             rope.rope_scores(q, k, 5 + shift, 2 + shift, pairing=pairing))


def test_pairings_are_one_permutation_apart():
    q, k = torch.randn(6, 12, dtype=f64), torch.randn(6, 12, dtype=f64)
    p, pos = rope.interleaved_to_half(12), torch.arange(6)
    inter = rope.apply_rope(q, pos, pairing="interleaved") @ rope.apply_rope(
        k, pos, pairing="interleaved").T
    half = rope.apply_rope(q[:, p], pos, pairing="half") @ rope.apply_rope(
        k[:, p], pos, pairing="half").T
    assert torch.allclose(inter, half)
    assert not torch.allclose(rope.apply_rope(q, pos, pairing="half"),
                              rope.apply_rope(q, pos, pairing="interleaved"))


def test_interleaved_known_answer():
    x = torch.tensor([[0.0, 1.0, 2.0, 0.0]], dtype=f64)  # pair 0 = (0, 1), pair 1 = (2, 0)
    y = rope.apply_rope(x, torch.tensor([2]), theta=100.0, pairing="interleaved")
    a0, a1 = torch.tensor(2.0, dtype=f64), torch.tensor(0.2, dtype=f64)
    c0, s0, c1, s1 = torch.cos(a0), torch.sin(a0), torch.cos(a1), torch.sin(a1)
    assert torch.allclose(y, torch.stack([-s0, c0, 2 * c1, 2 * s1])[None])


def test_half_split_equals_hugging_face():
    hf = pytest.importorskip("transformers.models.llama.modeling_llama")
    q, k = torch.randn(2, 3, 9, 8, dtype=f64), torch.randn(2, 3, 9, 8, dtype=f64)
    angles = rope.rope_angles(torch.arange(9), 8, theta=500.0)
    emb = torch.cat([angles, angles], -1)[None]  # (1, T, d)
    hq, hk = hf.apply_rotary_pos_emb(q, k, emb.cos(), emb.sin())
    assert torch.allclose(rope.apply_rope(q, torch.arange(9), 500.0, "half"), hq, atol=1e-14)
    assert torch.allclose(rope.apply_rope(k, torch.arange(9), 500.0, "half"), hk, atol=1e-14)


def test_position_interpolation_divides_positions():
    x = torch.randn(1, 4, 8, dtype=f64)
    assert torch.allclose(rope.apply_rope(x, torch.tensor([0, 4, 8, 12]), scale=4.0),
                          rope.apply_rope(x, torch.tensor([0, 1, 2, 3])))


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="even"):
        rope.apply_rope(torch.zeros(2, 5), torch.arange(2))
    with pytest.raises(ValueError, match="pairing"):
        rope.apply_rope(torch.zeros(2, 4), torch.arange(2), pairing="odd")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="positions"):
        rope.apply_rope(torch.zeros(2, 4), torch.arange(3))
