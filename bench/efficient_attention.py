"""Chapter 6's long measurements: what attention costs and what the efficient forms save.

Usage:  .venv/bin/python bench/efficient_attention.py [--threads 1] [--clock process|wall]
                                                      [--device cpu] [--tiled-n 16384] [--quick]

Prints four tables and the command that reproduces them:

1. The complexity table measured: forward time (median) and peak memory against ``n`` of a GRU
   layer, an LSTM layer and softmax self-attention (scores materialised), batch 1, at d = 64 and
   d = 512; log-log slopes; the ``n`` from which attention costs more (time and memory), beside
   the FLOP crossover (n = d for the GRU, 2d for the LSTM). :mod:`course_lib.complexity`.
2. Block-sparse attention (a sliding window of 64 keys on each side, blocks of 64) against dense
   masked attention, time and peak memory against ``n``, with slopes.
   :mod:`course_lib.sparse_attention`.
3. Tiled attention against the naive path at ``n = --tiled-n`` (default 16384), forward and
   backward, one head of width 64, float32: peak memory and time, beside torch's own SDPA
   kernel; the ratio tiled / naive (target: at most 1/10). :mod:`course_lib.tiled_attention`.
4. Generation: time per new token against the prefix length for linear attention (an RNN step
   on a constant-size state) and softmax attention with a key-value cache (append the new key
   and value with ``torch.cat``, as :class:`course_lib.gpt.KVCache` does, then attend to every
   cached key: both grow with the prefix). :mod:`course_lib.linear_attention`.

Peak memory: on CPU, the running sum of the allocation and free events that ``torch.profiler``
records (``profile_memory=True``), maximised over the call (``course_lib.complexity.
peak_memory``); on CUDA, ``torch.cuda.max_memory_allocated``. Tensors allocated before the
call (the inputs) are not counted; what the call returns is. Table 3 also prints the bytes that
autograd saves for backward (``torch.autograd.graph.saved_tensors_hooks``), a second, independent
count.

Time: by default the CPU time of the process (``time.process_time``) with one thread, the median
of a few runs: on a shared machine the wall clock mostly measures waiting for a core (the load is
printed at the start and the end), while CPU time counts the work each path does. ``--clock wall``
and ``--threads N`` measure wall-clock time instead (use on a quiet machine or a GPU).
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable
from functools import partial

import torch
import torch.nn.functional as F

from course_lib.attention import scaled_dot_product_attention
from course_lib.complexity import (
    KINDS,
    crossover,
    flops,
    loglog_slope,
    measure,
    peak_memory,
    time_call,
)
from course_lib.linear_attention import init_state, linear_attention_step
from course_lib.sparse_attention import (
    block_layout,
    block_sparse_attention,
    dense_mask,
    sliding_window,
)
from course_lib.tiled_attention import naive_attention, tiled_attention

MiB = 1 << 20


def _load() -> str:
    try:
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "load average unavailable"


CLOCK: Callable[[], float] = time.process_time


def complexity_table(d: int, ns: list[int], device: str, repeats: int) -> None:
    print(f"\n[1] complexity at d = {d}: forward, batch 1, float32, no gradients")
    results = {kind: measure(kind, ns, d, repeats=repeats, device=device, clock=CLOCK)
               for kind in KINDS}
    print(f"{'n':>6s}" + "".join(f" {k + ' ms':>14s}" for k in KINDS)
          + "".join(f" {k + ' MiB':>15s}" for k in KINDS))
    for i, n in enumerate(ns):
        print(f"{n:6d}" + "".join(f" {results[k].seconds[i] * 1e3:14.2f}" for k in KINDS)
              + "".join(f" {results[k].peak_bytes[i] / MiB:15.2f}" for k in KINDS))
    half = len(ns) // 2  # slopes on the upper half: the asymptotic regime, past fixed overheads
    for k in KINDS:
        print(f"slope {k:9s}: time {loglog_slope(ns[half:], results[k].seconds[half:]):5.2f}, "
              f"memory {loglog_slope(ns[half:], results[k].peak_bytes[half:]):5.2f} "
              f"(n >= {ns[half]})")
    att = results["attention"]
    for rnn in ("gru", "lstm"):
        t = crossover(ns, att.seconds, results[rnn].seconds)
        m = crossover(ns, att.peak_bytes, results[rnn].peak_bytes)
        f = crossover(ns, [flops("attention", n, d) for n in ns], [flops(rnn, n, d) for n in ns])

        def fmt(x: float | None) -> str:
            return "beyond the range" if x is None else f"{x:.0f}"

        print(f"attention costs more than {rnn.upper()} from n = {fmt(t)} (time), {fmt(m)} "
              f"(memory), {fmt(f)} (FLOPs)")


@torch.no_grad()
def block_sparse_table(ns: list[int], dense_max: int, window: int, block: int, device: str,
                       repeats: int) -> None:
    heads, d = 2, 64
    print(f"\n[2] block-sparse vs dense masked attention: sliding window {window} each side, "
          f"blocks of {block}, batch 1, {heads} heads, d = {d}, forward")
    print(f"{'n':>6s} {'sparse ms':>10s} {'dense ms':>10s} {'sparse MiB':>11s} {'dense MiB':>10s}"
          f" {'max err':>9s}")
    pat = sliding_window(window)
    rows: dict[str, list[float]] = {"st": [], "sm": [], "dt": [], "dm": []}
    g = torch.Generator().manual_seed(0)
    for n in ns:
        q, k, v = (torch.randn(1, heads, n, d, generator=g).to(device) for _ in range(3))
        layout = block_layout(pat, n, block, device)  # precomputed once, like a kernel's layout
        sparse = partial(block_sparse_attention, q, k, v, pat, block, layout)
        st, sm = time_call(sparse, repeats=repeats, clock=CLOCK), peak_memory(sparse, device)
        rows["st"].append(st)
        rows["sm"].append(sm)
        line = f"{n:6d} {st * 1e3:10.2f} "
        if n <= dense_max:
            mask = dense_mask(pat, n, device)
            dense = partial(scaled_dot_product_attention, q, k, v, mask)
            dt, dm = time_call(dense, repeats=repeats, clock=CLOCK), peak_memory(dense, device)
            err = (sparse() - dense()).abs().max().item()
            rows["dt"].append(dt)
            rows["dm"].append(dm)
            line += f"{dt * 1e3:10.2f} {sm / MiB:11.2f} {dm / MiB:10.2f} {err:9.1e}"
        else:
            line += f"{'-':>10s} {sm / MiB:11.2f} {'-':>10s} {'-':>9s}"
        print(line)
    nd = [n for n in ns if n <= dense_max]
    print(f"slopes (n >= {ns[1]}): block-sparse time {loglog_slope(ns[1:], rows['st'][1:]):.2f}, "
          f"memory {loglog_slope(ns[1:], rows['sm'][1:]):.2f}; dense time "
          f"{loglog_slope(nd[1:], rows['dt'][1:]):.2f}, memory "
          f"{loglog_slope(nd[1:], rows['dm'][1:]):.2f}")


def _saved_bytes(fn: Callable[[], torch.Tensor]) -> int:
    """Bytes of the tensors autograd keeps for backward while ``fn`` runs (distinct storages)."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def tiled_table(n: int, block: int, device: str) -> None:
    d = 64
    print(f"\n[3] exact attention at n = {n}, 1 head, d = {d}, float32, causal, forward + "
          f"backward; tiles of {block} x {block}")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, n, d, generator=g).to(device).requires_grad_() for _ in range(3))
    d_out = torch.randn(1, 1, n, d, generator=g).to(device)
    paths = {
        "tiled": lambda: tiled_attention(q, k, v, causal=True, block_q=block, block_k=block),
        "naive": lambda: naive_attention(q, k, v, causal=True),
        "torch SDPA": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    }
    print(f"{'path':>11s} {'peak MiB':>10s} {'saved MiB':>10s} {'seconds':>9s}")
    peaks = {}
    outs = {}

    def step(name: str, fn: Callable[[], torch.Tensor]) -> None:
        out = fn()
        out.backward(d_out)
        outs[name] = out.detach()

    for name, fn in paths.items():
        saved = _saved_bytes(fn)
        q.grad = k.grad = v.grad = None
        start = CLOCK()
        peaks[name] = peak_memory(partial(step, name, fn), device)
        seconds = CLOCK() - start  # one run, under the profiler
        print(f"{name:>11s} {peaks[name] / MiB:10.1f} {saved / MiB:10.1f} {seconds:9.2f}")
    err = (outs["tiled"] - outs["torch SDPA"]).abs().max().item()
    ratio = peaks["tiled"] / peaks["naive"]
    print(f"tiled / naive peak memory = {ratio:.4f} (target <= 0.1: "
          f"{'met' if ratio <= 0.1 else 'NOT met'}); max |tiled - SDPA| = {err:.1e}")


def _softmax_step(keys: torch.Tensor, values: torch.Tensor, q: torch.Tensor, k: torch.Tensor,
                  v: torch.Tensor) -> torch.Tensor:
    # As course_lib.gpt.KVCache: append the new key and value, attend to all of them.
    kk, vv = torch.cat([keys, k], dim=2), torch.cat([values, v], dim=2)
    return F.scaled_dot_product_attention(q, kk, vv)


def _linear_step(state: tuple[torch.Tensor, torch.Tensor], q: torch.Tensor, k: torch.Tensor,
                 v: torch.Tensor) -> torch.Tensor:
    return linear_attention_step(state, q[..., 0, :], k[..., 0, :], v[..., 0, :])[0]


@torch.no_grad()
def generation_table(prefixes: list[int], device: str, steps: int) -> None:
    heads, d = 4, 64
    print(f"\n[4] generation, time per new token: batch 1, {heads} heads, d = {d}, float32")
    print(f"{'prefix':>7s} {'softmax+KV cache us':>20s} {'linear (RNN) us':>16s}")
    g = torch.Generator().manual_seed(0)
    soft, lin = [], []
    for p in prefixes:
        keys = torch.randn(1, heads, p, d, generator=g).to(device)
        values = torch.randn(1, heads, p, d, generator=g).to(device)
        q, k, v = (torch.randn(1, heads, 1, d, generator=g).to(device) for _ in range(3))
        softmax_step = partial(_softmax_step, keys, values, q, k, v)
        # The RNN state after the prefix (its size does not depend on p).
        state = init_state(k[..., 0, :], v[..., 0, :])
        state = (state[0] + torch.rand(state[0].shape, generator=g).to(device),
                 state[1] + torch.rand(state[1].shape, generator=g).to(device) + p)
        linear_step = partial(_linear_step, state, q, k, v)

        long = max(1, p // 4096)  # fewer runs at long prefixes: a softmax step copies the cache
        soft.append(time_call(softmax_step, repeats=max(10, steps // long), warmup=3, clock=CLOCK))
        lin.append(time_call(linear_step, repeats=steps, warmup=3, clock=CLOCK))
        print(f"{p:7d} {soft[-1] * 1e6:20.1f} {lin[-1] * 1e6:16.1f}")
    half = len(prefixes) // 2
    print(f"slopes (prefix >= {prefixes[half]}): softmax+cache "
          f"{loglog_slope(prefixes[half:], soft[half:]):.2f}, linear "
          f"{loglog_slope(prefixes[half:], lin[half:]):.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clock", choices=["process", "wall"], default="process")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tiled-n", type=int, default=16384)
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    global CLOCK
    CLOCK = time.process_time if args.clock == "process" else time.perf_counter
    begin = time.perf_counter()
    print(f"torch {torch.__version__}, python {platform.python_version()}, "
          f"{platform.machine()}, {os.cpu_count()} CPUs, {torch.get_num_threads()} threads, "
          f"{args.clock} time, device {args.device}; {_load()}")
    if args.quick:
        ns, sparse_ns, dense_max, prefixes, repeats, steps = \
            [32, 64, 128, 256], [256, 512, 1024], 1024, [64, 256, 1024], 1, 20
    else:
        ns, sparse_ns, dense_max, prefixes, repeats, steps = \
            [32, 64, 128, 256, 512, 1024, 2048, 4096], [1024, 2048, 4096, 8192, 16384], 4096, \
            [256, 1024, 4096, 16384, 65536], 3, 200
    for d in (64, 512):
        complexity_table(d, ns, args.device, repeats)
    block_sparse_table(sparse_ns, dense_max, window=64, block=64, device=args.device,
                       repeats=repeats)
    tiled_table(args.tiled_n if not args.quick else 1024, block=1024 if not args.quick else 256,
                device=args.device)
    generation_table(prefixes, args.device, steps)
    command = " ".join(shlex.quote(a) for a in [".venv/bin/python", "bench/efficient_attention.py",
                                                *(sys.argv[1:] if argv is None else argv)])
    print(f"\nreproduce: {command}")
    print(f"total {time.perf_counter() - begin:.0f} s wall; {_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
