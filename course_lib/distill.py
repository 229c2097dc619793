r"""Knowledge distillation (Hinton et al., 2015): a student learns from a teacher's soft targets.

Taught in chapter 8 (from a base model to an assistant), section 3. The teacher's distribution
over the next token says more than the one observed token: which wrong answers are nearly right.
The student matches it at a temperature :math:`T` that softens both distributions,

.. math:: \mathcal L_{KD} = T^2\, \mathrm{KL}\!\left(\mathrm{softmax}(z_t / T) \,\Vert\,
          \mathrm{softmax}(z_s / T)\right),

averaged over positions. The :math:`T^2` keeps the gradients' size independent of :math:`T`
(the gradient of the softened KL scales as :math:`1/T^2`). The full objective mixes it with the
ordinary cross-entropy on the data, :math:`\lambda \mathcal L_{KD} + (1 - \lambda)
\mathcal L_{CE}` (:func:`hinton_loss`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from course_lib import corpus, gpt, training
from course_lib.checks import check_float_tensor, check_ids, check_positive, check_same_dtype


def distillation_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                      temperature: float) -> torch.Tensor:
    r"""``T^2`` times the mean over positions of :math:`\mathrm{KL}(p_T^{t} \Vert p_T^{s})`.

    Args:
        student_logits, teacher_logits: ``(..., V)``, the same shape; every leading position is
            one distribution.
        temperature: :math:`T > 0`; both logits are divided by it before the softmax.

    Returns:
        A 0-d tensor; 0 when the two agree. No gradient flows to the teacher's logits' owner
        only if the caller detaches them (the teacher is usually run under ``no_grad``).

    Example:
        >>> z = torch.randn(2, 5)
        >>> distillation_loss(z, z, 2.0).abs().item() < 1e-6
        True
    """
    check_float_tensor("student_logits", student_logits, min_ndim=1, shape="(..., V)")
    check_float_tensor("teacher_logits", teacher_logits, min_ndim=1, shape="(..., V)")
    check_same_dtype(student_logits=student_logits, teacher_logits=teacher_logits)
    if student_logits.shape != teacher_logits.shape:
        raise ValueError(f"student logits {tuple(student_logits.shape)} and teacher logits "
                         f"{tuple(teacher_logits.shape)} must have the same shape (..., V)")
    check_positive("temperature", temperature)
    log_p_student = F.log_softmax(student_logits / temperature, dim=-1)
    log_p_teacher = F.log_softmax(teacher_logits / temperature, dim=-1)
    kl = (log_p_teacher.exp() * (log_p_teacher - log_p_student)).sum(-1)  # (...,)
    return temperature ** 2 * kl.mean()


def hinton_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                targets: torch.Tensor, temperature: float, weight: float) -> torch.Tensor:
    r""":math:`\lambda \mathcal L_{KD} + (1 - \lambda) \mathrm{CE}(z_s, y)` with ``weight`` = λ.

    Args:
        student_logits, teacher_logits: ``(B, T, V)``; targets: ``(B, T)`` ids.

    Example:
        >>> z, y = torch.zeros(1, 2, 4), torch.tensor([[0, 1]])
        >>> round(hinton_loss(z, z, y, 2.0, 0.5).item(), 4)  # KD 0, CE log 4, halved
        0.6931
    """
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight must lie in [0, 1], got {weight}")
    return (weight * distillation_loss(student_logits, teacher_logits, temperature)
            + (1 - weight) * gpt.lm_loss(student_logits, targets))


def train_student(student: gpt.GPT, teacher: gpt.GPT | None, ids: torch.Tensor, block_size: int,
                  batch_size: int, config: training.TrainConfig, temperature: float = 2.0,
                  weight: float = 0.5, data_seed: int = 0,
                  validate: Callable[[nn.Module], dict[str, float]] | None = None,
                  ) -> training.History:
    """Train ``student`` on random windows of ``ids``: on the data alone (``teacher=None``), or on
    :func:`hinton_loss` with the frozen ``teacher``'s logits. The batches are the same for both
    (``data_seed``), so two runs differ only in their targets."""
    check_ids("ids", ids, student.config.vocab_size, ndim=1, shape="(N,)")
    device = next(student.parameters()).device
    g = torch.Generator().manual_seed(data_seed)

    def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            x, y = corpus.random_windows(ids, block_size, batch_size, g)
            yield x.to(device), y.to(device)

    if teacher is not None:
        teacher.eval()  # its logits come under no_grad: it never changes

    def objective(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        x, y = batch
        logits = model(x)
        if teacher is None:
            return gpt.lm_loss(logits, y)
        with torch.no_grad():
            teacher_logits = teacher(x)
        return hinton_loss(logits, teacher_logits, y, temperature, weight)

    return training.train(student, batches(), objective, config, validate)
