"""Time attention forward + backward: course_lib's reference path, its fast path, and torch's SDPA.

Usage:  .venv/bin/python bench/attention_speed.py [--lengths 128 256 ...] [--batch 1] [--heads 4]
                                                   [--d-head 64] [--dtype float32] [--threads N]
                                                   [--mask none|causal] [--device cpu]

For each sequence length it times ``out = attention(q, k, v); out.sum().backward()`` for

* ``reference``: ``course_lib.attention.scaled_dot_product_attention(..., impl="reference")``
  (scores, masked softmax, weighted sum: materialises the ``T x T`` weights);
* ``fast``: the same function with ``impl="fast"`` (checks, then torch's fused kernel);
* ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention`` called directly;

and prints the fastest time of each (the minimum over rounds: on a shared machine, other load only
ever adds time, so the minimum is the steadiest estimate of what the code costs) and the ratios
reference/sdpa and fast/sdpa. The fast path is a thin
wrapper, so fast/sdpa must stay within 1.2x; the script exits 1 when it does not. The three
variants are timed in interleaved rounds so that a load change on a shared machine hits them
alike. A benchmark, not a test: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import platform
import shlex
import sys
import time
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from course_lib import attention

MAX_FAST_OVER_SDPA = 1.2


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _step(fn: Callable[..., torch.Tensor], q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
          device: torch.device) -> float:
    for t in (q, k, v):
        t.grad = None
    _sync(device)
    start = time.perf_counter()
    fn(q, k, v).sum().backward()
    _sync(device)
    return time.perf_counter() - start


def repeats_for(length: int, base: int) -> int:
    """Fewer rounds at long lengths (the reference path is quadratic in memory and time)."""
    return max(3, min(base, int(base * 512 / length)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+",
                        default=[128, 256, 512, 1024, 2048, 4096])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--d-head", type=int, default=64)
    parser.add_argument("--dtype", choices=["float32", "float64", "bfloat16", "float16"],
                        default="float32")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--mask", choices=["none", "causal"], default="none")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=10, help="rounds at length <= 512")
    args = parser.parse_args(argv)

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    print(f"attention forward+backward: batch {args.batch}, {args.heads} heads, d_head "
          f"{args.d_head}, {args.dtype}, mask {args.mask}, device {device}, "
          f"{torch.get_num_threads()} threads")
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"python {platform.python_version()}")
    print(f"{'T':>6s} {'rounds':>6s} {'reference ms':>13s} {'fast ms':>9s} {'sdpa ms':>9s} "
          f"{'ref/sdpa':>9s} {'fast/sdpa':>10s}")
    ok = True
    for length in args.lengths:
        g = torch.Generator().manual_seed(length)
        shape = (args.batch, args.heads, length, args.d_head)
        q, k, v = (torch.randn(shape, generator=g).to(device, dtype).requires_grad_()
                   for _ in range(3))
        mask = attention.causal_mask(length, device) if args.mask == "causal" else None
        variants: dict[str, Callable[..., torch.Tensor]] = {
            "reference": partial(attention.scaled_dot_product_attention, mask=mask,
                                 impl="reference"),
            "fast": partial(attention.scaled_dot_product_attention, mask=mask, impl="fast"),
            "sdpa": partial(F.scaled_dot_product_attention, attn_mask=mask),
        }
        for fn in variants.values():  # warm-up: allocator, kernel selection
            _step(fn, q, k, v, device)
        rounds = repeats_for(length, args.repeats)
        times: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(rounds):
            for name, fn in variants.items():
                times[name].append(_step(fn, q, k, v, device))
        ms = {name: 1000 * min(t) for name, t in times.items()}
        fast_ratio = ms["fast"] / ms["sdpa"]
        flag = "" if fast_ratio <= MAX_FAST_OVER_SDPA else "  <-- over 1.2x"
        ok &= fast_ratio <= MAX_FAST_OVER_SDPA
        print(f"{length:6d} {rounds:6d} {ms['reference']:13.2f} {ms['fast']:9.2f} "
              f"{ms['sdpa']:9.2f} {ms['reference'] / ms['sdpa']:9.2f} {fast_ratio:10.2f}{flag}")
        del q, k, v
    command = " ".join(shlex.quote(a) for a in [".venv/bin/python", "bench/attention_speed.py",
                                                *(argv if argv is not None else sys.argv[1:])])
    print(f"reproduce: {command}")
    print("fast/sdpa within 1.2x at every length" if ok else
          f"fast/sdpa exceeded {MAX_FAST_OVER_SDPA}x at some length")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
