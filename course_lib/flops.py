r"""What a Transformer costs to run and to train, in FLOPs, and what a machine delivers.

Taught in chapter 5 (scaling laws), sections 2 (FLOPs) and 3 (measuring the machine).

A multiply-add is two floating-point operations (FLOPs), so a matrix product of ``(m, k)`` by
``(k, n)`` costs :math:`2 m k n`. A token going through a weight matrix of :math:`P` entries costs
:math:`2P`; through all of a model's non-embedding weights :math:`2N`. Attention adds the products
with the other positions' keys and values. Kaplan et al. (2020, Table 1) count, per token of a
context of :math:`n_{ctx}`:

.. math:: C_{\text{forward}} \approx 2N + 2\, n_{\text{layer}}\, n_{ctx}\, d_{\text{attn}},
          \qquad C_{\text{train}} \approx 3\, C_{\text{forward}} \approx 6N
          \text{ per token}

(the backward pass costs about twice the forward: the gradients with respect to the
activations and to the weights are one product each). A run on :math:`D` tokens costs
:math:`C \approx 6 N D`.

**The exact count** of :class:`course_lib.gpt.GPT`'s matrix products (:func:`gpt_matmul_flops`)
is checked against PyTorch's ``torch.utils.flop_counter.FlopCounterMode`` in
``tests/test_flops.py``. FlopCounterMode counts matrix products only (``mm``, ``addmm``,
``bmm``, and the fused attention kernels it knows); it leaves out LayerNorm, GELU, softmax, the
residual additions, the bias additions and the embedding look-ups, which are all
:math:`O(d)` per token against the products' :math:`O(d^2)`.

**Model FLOPs utilisation** (MFU; Chowdhery et al., 2022, appendix B) is the rate at which a run
does its model's useful FLOPs, divided by the machine's peak: tokens per second times FLOPs per
token, over peak FLOPs per second (:func:`mfu`). :func:`measure_matmul_peak` measures the peak a
matrix product reaches here (the datasheet's number is an upper bound no real code reaches).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from course_lib.checks import check_finite
from course_lib.gpt import GPT, GPTConfig

#: One petaflop/s-day, Kaplan et al.'s and Brown et al.'s unit of compute: 1e15 FLOP/s for a day.
PF_DAY = 1e15 * 24 * 3600
#: GPT-3 175B's training compute, 3.64e3 PF-days (Brown et al., 2020, Table D.1).
GPT3_TRAINING_PF_DAYS = 3.64e3
#: GPT-3 175B's parameters and training tokens (Brown et al., 2020, Table 2.1 and section 2.2).
GPT3_PARAMS, GPT3_TOKENS = 175e9, 300e9
#: NVIDIA A100's dense bf16 tensor-core peak, FLOP/s (NVIDIA's A100 datasheet) and its board
#: power (SXM, watts). Assumptions of the on-paper cost estimate, not measurements.
A100_BF16_PEAK, A100_WATTS = 312e12, 400.0
#: Model FLOPs utilisation of published training runs (Chowdhery et al., 2022, Table 3).
PUBLISHED_MFU: dict[str, float] = {"GPT-3": 0.213, "Gopher": 0.325, "Megatron-Turing NLG": 0.302,
                                   "PaLM": 0.462}
#: Assumed prices of the on-paper estimate: a cloud GPU-hour (USD) and a kilowatt-hour (USD).
PRICE_PER_GPU_HOUR, PRICE_PER_KWH = 2.0, 0.15


def forward_flops_per_token(n_params: float, n_layers: int, n_ctx: int, d_model: int) -> float:
    r"""Kaplan et al.'s forward FLOPs per token: :math:`2N + 2 L\, n_{ctx}\, d`.

    Args:
        n_params: :math:`N`, the non-embedding parameters (every weight a token meets once).
        n_layers, n_ctx, d_model: layers, context length and width (``d_attn = d_model``).

    Example:
        >>> forward_flops_per_token(85e6, 12, 1024, 768) / 1e6  # GPT-2 small, MFLOPs per token
        188.874368
    """
    for name, value in (("n_params", n_params), ("n_layers", n_layers), ("n_ctx", n_ctx),
                        ("d_model", d_model)):
        if check_finite(name, value) < 0:
            raise ValueError(f"counts must be non-negative: {name} = {value}")
    return 2.0 * n_params + 2.0 * n_layers * n_ctx * d_model


def training_flops(n_params: float, n_tokens: float, n_layers: int = 0, n_ctx: int = 0,
                   d_model: int = 0) -> float:
    r"""Training FLOPs of a run, three forward passes per token: :math:`3 D\, C_{\text{forward}}`.

    With the attention term left out (the defaults), this is Kaplan et al.'s :math:`6 N D`.

    Example:
        >>> round(training_flops(175e9, 300e9) / PF_DAY)  # GPT-3 175B: the paper's 3.64e3 PF-days
        3646
    """
    if n_tokens < 0:
        raise ValueError(f"n_tokens must be non-negative, got {n_tokens}")
    return 3.0 * n_tokens * forward_flops_per_token(n_params, n_layers, n_ctx, d_model)


def gpt_matmul_flops(config: GPTConfig, batch: int, seq_len: int) -> dict[str, int]:
    r"""The matrix-product FLOPs of one forward pass of :class:`course_lib.gpt.GPT`, part by part.

    Per token and layer: ``c_attn`` :math:`2 \cdot 3d^2`, ``c_proj`` :math:`2d^2`, the MLP
    :math:`2 \cdot 8 d^2`; per layer and token, the attention scores :math:`Q K^\top` and the
    weighted values :math:`A V`, :math:`2 T d` each over all :math:`T` keys (a fused kernel
    computes the full square, masked entries included); the output layer :math:`2 d V`.

    .. math:: C = B T\,(24 L d^2 + 2 d V) + 4 B L T^2 d

    Returns:
        ``{"linear": ..., "attention": ..., "lm_head": ..., "total": ...}`` in FLOPs.

    Example:
        >>> c = GPTConfig(vocab_size=83, block_size=32, n_layer=2, n_head=2, n_embd=16)
        >>> gpt_matmul_flops(c, batch=3, seq_len=32)["total"]
        1827840
    """
    if seq_len > config.block_size or seq_len < 1 or batch < 1:
        raise ValueError(f"need 1 <= seq_len <= block_size={config.block_size} and batch >= 1, "
                         f"got seq_len={seq_len}, batch={batch}")
    d, L, V, B, T = config.n_embd, config.n_layer, config.vocab_size, batch, seq_len
    parts = {"linear": B * T * 24 * L * d * d, "attention": 4 * B * L * T * T * d,
             "lm_head": 2 * B * T * d * V}
    parts["total"] = sum(parts.values())
    return parts


def attention_share(n_params: float, n_layers: int, n_ctx: int, d_model: int) -> float:
    r"""The share of forward FLOPs per token spent on attention scores, Kaplan's count.

    .. math:: \frac{2 L n_{ctx} d}{2N + 2 L n_{ctx} d}


    With :math:`N \approx 12 L d^2` it is :math:`n_{ctx} / (12 d + n_{ctx})`: small while the
    context is shorter than about :math:`12 d` (Kaplan et al., section 2.1).

    Example:
        >>> round(attention_share(12 * 768**2 * 12, 12, 1024, 768), 3)  # GPT-2 small
        0.1
    """
    total = forward_flops_per_token(n_params, n_layers, n_ctx, d_model)
    if total == 0:
        raise ValueError(f"attention_share of nothing: n_params={n_params}, n_layers={n_layers},"
                         f" n_ctx={n_ctx}, d_model={d_model} give zero FLOPs per token")
    return 2.0 * n_layers * n_ctx * d_model / total


def mfu(tokens_per_second: float, flops_per_token: float, peak_flops: float) -> float:
    r"""Model FLOPs utilisation, a fraction: tokens/s times FLOPs/token over peak FLOP/s.

    .. math:: \mathrm{MFU} = \frac{\text{tokens/s} \times \text{FLOPs/token}}{\text{peak FLOP/s}}


    For training, ``flops_per_token`` is :math:`6N` (or :math:`3\,C_{\text{forward}}` with
    attention); recomputed activations do not count (that would be hardware FLOPs utilisation).

    Example:
        >>> mfu(1000.0, 6 * 1e6, 1e10)
        0.6
    """
    if peak_flops <= 0 or tokens_per_second < 0 or flops_per_token < 0:
        raise ValueError(f"need peak_flops > 0 and non-negative rates, got {tokens_per_second}, "
                         f"{flops_per_token}, {peak_flops}")
    return tokens_per_second * flops_per_token / peak_flops


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_matmul_peak(n: int = 512, dtype: torch.dtype = torch.float32,
                        device: torch.device | str = "cpu", seconds: float = 0.5) -> float:
    """The FLOP/s that repeated ``(n, n) @ (n, n)`` products reach here (best of several timings).

    A square product of :math:`2 n^3` FLOPs large enough to be compute-bound is the best case
    for a machine; a model's small, thin products reach less. The best repetition is kept, so
    a busy machine lowers the figure less.

    Example:
        >>> measure_matmul_peak(64, seconds=0.01) > 1e6
        True
    """
    device = torch.device(device)
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=g, device=g.device).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g, device=g.device).to(device=device, dtype=dtype)
    a @ b  # warm-up (kernel selection, caches)
    _sync(device)
    best, spent = float("inf"), 0.0
    while spent < seconds or best == float("inf"):
        start = time.perf_counter()
        for _ in range(4):
            a @ b
        _sync(device)
        elapsed = (time.perf_counter() - start) / 4
        best, spent = min(best, elapsed), spent + 4 * elapsed
    return 2.0 * n**3 / best


@dataclass(frozen=True)
class Throughput:
    """A measured training speed."""

    tokens_per_second: float
    flops_per_token: float  # 6N + 6 L T d: the model's training FLOPs per token (attention in)
    seconds_per_step: float

    @property
    def flops_per_second(self) -> float:
        return self.tokens_per_second * self.flops_per_token


def measure_training_throughput(config: GPTConfig, batch: int, steps: int = 5,
                                device: torch.device | str = "cpu") -> Throughput:
    """Train a fresh :class:`~course_lib.gpt.GPT` on random tokens and time the steps.

    One warm-up step is not timed; the best of ``steps`` timed steps is kept (a busy machine
    slows some steps, not the model).

    Example:
        >>> c = GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=8)
        >>> measure_training_throughput(c, batch=2, steps=2).tokens_per_second > 0
        True
    """
    device = torch.device(device)
    g = torch.Generator().manual_seed(0)
    with torch.device("cpu"):  # seeded initialisation on the CPU: the same weights on every device
        model = GPT(config)
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    T = config.block_size
    x = torch.randint(config.vocab_size, (batch, T + 1), generator=g, device=g.device).to(device)
    best = float("inf")
    for step in range(steps + 1):
        _sync(device)
        start = time.perf_counter()
        logits = model(x[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        _sync(device)
        if step > 0:
            best = min(best, time.perf_counter() - start)
    n = sum(p.numel() for p in model.parameters()) - model.transformer.wte.weight.numel() \
        - model.transformer.wpe.weight.numel()
    per_token = training_flops(n, 1, config.n_layer, T, config.n_embd)
    return Throughput(batch * T / best, per_token, best)


@dataclass(frozen=True)
class RunCost:
    """What a training run costs on paper."""

    gpu_days: float  # device-days at the given utilisation
    days: float  # wall-clock days on ``n_devices``
    energy_mwh: float  # megawatt-hours drawn by the devices alone (no cooling, no hosts)
    energy_cost: float  # USD at the assumed price per kWh
    rental_cost: float  # USD at the assumed price per GPU-hour


def run_cost(total_flops: float, peak_flops: float = A100_BF16_PEAK, utilisation: float = 0.4,
             n_devices: int = 1024, watts: float = A100_WATTS,
             price_per_kwh: float = PRICE_PER_KWH,
             price_per_gpu_hour: float = PRICE_PER_GPU_HOUR) -> RunCost:
    r"""Time, energy and money of ``total_flops`` on devices of ``peak_flops`` at ``utilisation``.

    .. math:: \text{device-seconds} = \frac{C}{\text{peak} \times \text{MFU}}

    Example:
        >>> cost = run_cost(3.14e23, utilisation=0.5, n_devices=1024)
        >>> round(cost.days, 1)
        22.8
    """
    if not 0 < utilisation <= 1 or peak_flops <= 0 or n_devices < 1:
        raise ValueError(f"need 0 < utilisation <= 1, peak_flops > 0 and n_devices >= 1, got "
                         f"{utilisation}, {peak_flops}, {n_devices}")
    device_seconds = total_flops / (peak_flops * utilisation)
    device_hours = device_seconds / 3600
    kwh = device_hours * watts / 1000
    return RunCost(gpu_days=device_hours / 24, days=device_hours / 24 / n_devices,
                   energy_mwh=kwh / 1000, energy_cost=kwh * price_per_kwh,
                   rental_cost=device_hours * price_per_gpu_hour)
