"""Knowledge distillation (course_lib.distill) against torch's KL divergence."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from course_lib import distill, gpt, training

pytestmark = pytest.mark.ch08


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0, 5.0])
def test_distillation_loss_equals_torch_kl_div_times_t_squared(temperature: float) -> None:
    g = torch.Generator().manual_seed(0)
    student = torch.randn(3, 4, 9, generator=g, dtype=torch.float64) * 2
    teacher = torch.randn(3, 4, 9, generator=g, dtype=torch.float64) * 3
    peer = F.kl_div(F.log_softmax(student.reshape(-1, 9) / temperature, -1),
                    F.log_softmax(teacher.reshape(-1, 9) / temperature, -1),
                    reduction="batchmean", log_target=True) * temperature ** 2
    torch.testing.assert_close(distill.distillation_loss(student, teacher, temperature), peer,
                               rtol=1e-12, atol=1e-12)


def test_t_squared_keeps_the_gradient_size_at_high_temperature() -> None:
    """Hinton et al.: the soft gradient scales as 1/T^2, so T^2 L has gradients of one size."""
    g = torch.Generator().manual_seed(1)
    teacher = torch.randn(64, 20, generator=g, dtype=torch.float64)
    student = (teacher + 0.1 * torch.randn(64, 20, generator=g, dtype=torch.float64))
    norms = []
    for t in (10.0, 40.0):
        s = student.clone().requires_grad_(True)
        distill.distillation_loss(s, teacher, t).backward()
        norms.append(s.grad.norm().item())
    # High-temperature limit: grad = (z_s - z_t) / (N V) (zero-mean logits), independent of T.
    assert norms[1] == pytest.approx(norms[0], rel=0.02)


def test_hinton_loss_mixes_soft_and_hard_targets_and_checks_its_inputs() -> None:
    g = torch.Generator().manual_seed(2)
    s, t = torch.randn(2, 3, 5, generator=g), torch.randn(2, 3, 5, generator=g)
    y = torch.randint(5, (2, 3), generator=g)
    expected = 0.3 * distill.distillation_loss(s, t, 2.0) + 0.7 * gpt.lm_loss(s, y)
    torch.testing.assert_close(distill.hinton_loss(s, t, y, 2.0, 0.3), expected)
    with pytest.raises(ValueError, match="same shape"):
        distill.distillation_loss(s, t[..., :4], 2.0)
    with pytest.raises(ValueError, match="temperature"):
        distill.distillation_loss(s, t, 0.0)
    with pytest.raises(ValueError, match="weight"):
        distill.hinton_loss(s, t, y, 2.0, 1.5)


def test_a_student_trained_on_a_teacher_moves_towards_it() -> None:
    torch.manual_seed(0)
    config = gpt.GPTConfig(vocab_size=7, block_size=8, n_layer=1, n_head=1, n_embd=8)
    teacher, student = gpt.GPT(config), gpt.GPT(config)
    ids = torch.randint(7, (400,), generator=torch.Generator().manual_seed(0))
    x = ids[:64].reshape(8, 8)
    before = distill.distillation_loss(student(x), teacher(x), 1.0).item()
    teacher_state = {k: v.clone() for k, v in teacher.state_dict().items()}
    distill.train_student(student, teacher, ids, 8, 16,
                          training.TrainConfig(steps=30, lr=1e-2, progress=False),
                          temperature=1.0, weight=1.0)
    assert all(torch.equal(v, teacher.state_dict()[k]) for k, v in teacher_state.items())
    assert distill.distillation_loss(student(x), teacher(x), 1.0).item() < 0.5 * before
