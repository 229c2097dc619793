"""Tests of course_lib.entmax: known answers, properties, gradients, the entmax package as peer."""

from __future__ import annotations

from collections.abc import Callable

import entmax as peer  # the authors' package, pinned in requirements-dev.txt
import pytest
import torch

from course_lib.entmax import entmax, entmax15, entmax_attention, entmax_bisect, sparsemax

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
F64 = dict(rtol=1e-10, atol=1e-10)


def _inputs(kind: str, seed: int, shape: tuple[int, ...] = (40, 9)) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "random":
        return torch.randn(*shape, generator=g, dtype=torch.float64) * 2
    if kind == "ties":  # many equal scores, inside and at the edge of the support
        return torch.randint(-2, 3, shape, generator=g).to(torch.float64) / 2
    if kind == "wide":
        return torch.randn(*shape, generator=g, dtype=torch.float64) * 50
    raise ValueError(kind)


KINDS = ["random", "ties", "wide"]


# ---- known answers -------------------------------------------------------------------------

def test_sparsemax_by_hand() -> None:
    z = torch.tensor([[1.0, 0.5, -1.0], [0.0, 0.0, 0.0], [3.0, 0.0, 0.0]], dtype=torch.float64)
    expected = torch.tensor([[0.75, 0.25, 0.0], [1 / 3, 1 / 3, 1 / 3], [1.0, 0.0, 0.0]],
                            dtype=torch.float64)
    torch.testing.assert_close(sparsemax(z), expected, **F64)


def test_entmax15_by_hand() -> None:
    # z/2 = (1, 0): tau = 0 gives (1 - 0)^2 = 1 and (0 - 0)_+ = 0, so p = (1, 0).
    # z/2 = (0.5, 0): both in the support, (0.5 - t)^2 + (0 - t)^2 = 1 -> t = (1 - sqrt 7) / 4.
    torch.testing.assert_close(entmax15(torch.tensor([2.0, 0.0], dtype=torch.float64)),
                               torch.tensor([1.0, 0.0], dtype=torch.float64), **F64)
    t = (1 - 7 ** 0.5) / 4
    expected = torch.tensor([(0.5 - t) ** 2, t ** 2], dtype=torch.float64)
    torch.testing.assert_close(entmax15(torch.tensor([1.0, 0.0], dtype=torch.float64)), expected,
                               **F64)


def test_bisection_special_cases() -> None:
    z = _inputs("random", 0)
    torch.testing.assert_close(entmax_bisect(z, 2.0), sparsemax(z), **F64)
    torch.testing.assert_close(entmax_bisect(z, 1.5), entmax15(z), **F64)
    near_softmax = entmax_bisect(z, 1.001)
    torch.testing.assert_close(near_softmax, torch.softmax(z, -1), rtol=0, atol=5e-3)


# ---- properties ------------------------------------------------------------------------------

@pytest.mark.parametrize("fn", [sparsemax, entmax15, lambda z: entmax_bisect(z, 1.3),
                                lambda z: entmax_bisect(z, 3.0)])
@pytest.mark.parametrize("kind", KINDS)
def test_distribution_with_exact_zeros(fn: Callable[[torch.Tensor], torch.Tensor],
                                      kind: str) -> None:
    z = _inputs(kind, 1)
    p = fn(z)
    assert (p >= 0).all()
    torch.testing.assert_close(p.sum(-1), torch.ones(40, dtype=torch.float64), **F64)
    if kind == "wide":  # scores far apart: most weights are exactly zero
        assert (p == 0).float().mean() > 0.5
    # The order of scores is kept: a larger score never gets a smaller weight.
    order = z.argsort(-1)
    assert (torch.diff(p.gather(-1, order), dim=-1) >= -1e-15).all()


def test_shift_invariance_and_dim() -> None:
    z = _inputs("random", 2, (4, 6, 5))
    for fn in (sparsemax, entmax15):
        torch.testing.assert_close(fn(z + 7.0), fn(z), **F64)
        torch.testing.assert_close(fn(z, dim=1), fn(z.transpose(1, 2)).transpose(1, 2), **F64)


# ---- peer: the entmax package (float64, 1e-10), values and gradients ------------------------

@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", ["sparsemax", "entmax15"])
def test_exact_forms_equal_package(device: str, kind: str, name: str) -> None:
    ours, theirs = {"sparsemax": (sparsemax, peer.sparsemax),
                    "entmax15": (entmax15, peer.entmax15)}[name]
    z = _inputs(kind, 3).to(device)
    a, b = z.clone().requires_grad_(), z.clone().requires_grad_()
    pa, pb = ours(a), theirs(b, dim=-1)
    torch.testing.assert_close(pa, pb, **F64)
    g = torch.randn(z.shape, generator=torch.Generator().manual_seed(4),
                    dtype=torch.float64).to(device)
    torch.testing.assert_close(torch.autograd.grad(pa, a, g)[0], torch.autograd.grad(pb, b, g)[0],
                               **F64)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("alpha", [1.25, 1.5, 2.0, 2.5])
def test_bisection_equals_package(device: str, kind: str, alpha: float) -> None:
    z = _inputs(kind, 5).to(device)
    a_ours = torch.full((40, 1), alpha, dtype=torch.float64, device=device, requires_grad=True)
    a_theirs = a_ours.detach().clone().requires_grad_()
    za, zb = z.clone().requires_grad_(), z.clone().requires_grad_()
    pa = entmax_bisect(za, a_ours)
    pb = peer.entmax_bisect(zb, a_theirs, dim=-1, n_iter=60)
    torch.testing.assert_close(pa, pb, **F64)
    g = torch.randn(z.shape, generator=torch.Generator().manual_seed(6),
                    dtype=torch.float64).to(device)
    ga = torch.autograd.grad(pa, (za, a_ours), g)
    gb = torch.autograd.grad(pb, (zb, a_theirs), g)
    torch.testing.assert_close(ga[0], gb[0], **F64)
    torch.testing.assert_close(ga[1], gb[1], **F64)             # d/d alpha


def test_gradcheck() -> None:
    z = _inputs("random", 7, (3, 6)).requires_grad_()
    alpha = torch.tensor([[1.3], [1.8], [2.6]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(sparsemax, (z,))
    assert torch.autograd.gradcheck(entmax15, (z,))
    assert torch.autograd.gradcheck(lambda x, a: entmax_bisect(x, a), (z, alpha))


def test_per_head_alpha_broadcast() -> None:
    z = _inputs("random", 8, (2, 3, 4, 7))
    alpha = torch.tensor([1.2, 1.5, 2.0], dtype=torch.float64).view(1, 3, 1, 1).requires_grad_()
    p = entmax_bisect(z, alpha)
    for h, a in enumerate((1.2, 1.5, 2.0)):
        torch.testing.assert_close(p[:, h], entmax_bisect(z[:, h], a), **F64)
    (grad,) = torch.autograd.grad((p * z).sum(), alpha)
    assert grad.shape == (1, 3, 1, 1) and torch.isfinite(grad).all()
    short = alpha.detach().view(3, 1, 1).requires_grad_()          # leading 1s may be left out
    p_short = entmax_bisect(z, short)
    torch.testing.assert_close(p_short, p, rtol=0, atol=0)
    (grad_short,) = torch.autograd.grad((p_short * z).sum(), short)
    torch.testing.assert_close(grad_short.view(1, 3, 1, 1), grad, **F64)
    q = torch.randn(2, 3, 4, 5, dtype=torch.float64)
    out, w = entmax_attention(q, q, q, short, mask=torch.ones(4, 4, dtype=torch.bool).tril())
    assert out.shape == (2, 3, 4, 5) and (w.triu(1) == 0).all()


def test_entmax_dispatch() -> None:
    z = _inputs("random", 9)
    torch.testing.assert_close(entmax(z, 2.0), sparsemax(z), rtol=0, atol=0)
    torch.testing.assert_close(entmax(z, 1.5), entmax15(z), rtol=0, atol=0)
    torch.testing.assert_close(entmax(z, 1.7), entmax_bisect(z, 1.7), rtol=0, atol=0)


# ---- attention ---------------------------------------------------------------------------------

@pytest.mark.parametrize("alpha", [1.5, 2.0, 1.7])
def test_attention_masked_weights_are_exactly_zero(alpha: float) -> None:
    g = torch.Generator().manual_seed(10)
    q, k, v = (torch.randn(2, 6, 4, generator=g, dtype=torch.float64) for _ in range(3))
    mask = torch.rand(6, 6, generator=g) < 0.5
    mask[:, 0] = True
    mask[4] = False                                              # query 4 may attend to nothing
    out, w = entmax_attention(q, k, v, alpha, mask)
    assert (w[:, ~mask] == 0).all() and (w[:, 4] == 0).all() and (out[:, 4] == 0).all()
    rows = mask.any(-1)
    torch.testing.assert_close(w[:, rows].sum(-1), torch.ones(2, int(rows.sum()),
                                                              dtype=torch.float64), **F64)
    # Equal to entmax over the allowed scores only, row by row.
    s = q @ k.mT / 2
    for b in range(2):
        for i in torch.nonzero(rows).flatten().tolist():
            allowed = mask[i]
            torch.testing.assert_close(w[b, i, allowed], entmax(s[b, i, allowed], alpha), **F64)


def test_attention_gradients_finite_with_masks() -> None:
    g = torch.Generator().manual_seed(11)
    q, k, v = (torch.randn(1, 5, 3, generator=g, dtype=torch.float64).requires_grad_()
               for _ in range(3))
    mask = torch.ones(5, 5, dtype=torch.bool).tril()
    mask[2] = False
    out, _ = entmax_attention(q, k, v, 1.5, mask)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    assert all(torch.isfinite(t).all() for t in grads)
    assert grads[0][0, 2].abs().sum().item() == 0.0


# ---- bad input -------------------------------------------------------------------------------

def test_errors_name_the_problem() -> None:
    z = torch.randn(3, 4)
    with pytest.raises(ValueError, match="alpha must be greater than 1"):
        entmax_bisect(z, 1.0)
    with pytest.raises(ValueError, match=r"size 1 along dim=1; got alpha \(3, 4\)"):
        entmax_bisect(z, torch.full((3, 4), 1.5))
    with pytest.raises(ValueError, match=r"dim=2 is out of range for scores of shape \(3, 4\)"):
        sparsemax(z, dim=2)
    with pytest.raises(ValueError, match="scores must be finite"):
        entmax15(torch.tensor([0.0, float("-inf")]))
    with pytest.raises(TypeError, match="floating point"):
        sparsemax(torch.tensor([1, 2]))
    with pytest.raises(TypeError, match="boolean"):
        entmax_attention(z[None], z[None], z[None], mask=torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"do not fit.*\(1, 3, 4\), \(1, 3, 2\)"):
        entmax_attention(z[None], z[None, :, :2], z[None])
