"""Correct answers that break a memory rule, for the exercises that have one.

Each builds the tensor its statement forbids (the T x T scores, the product B A) while the
in-kernel allocation meter is switched off (``_disable_current_modes``): the output is right and
the student's own process reports nothing. The hardened grader must still give 0, because it
limits the sandbox's memory from outside (``course_lib.grading.MemoryProbe``).
``tests/test_exercise_registries.py`` checks that every exercise with a memory rule has one here.
"""

from __future__ import annotations

#: exercise id -> a cell defining the student's function.
NAIVE = {
    "efficient_attention.causal_linear_attention": '''
def causal_linear_attention(q, k, v):
    import torch
    from torch.utils._python_dispatch import _disable_current_modes
    with _disable_current_modes():
        fq = torch.where(q > 0, q + 1, torch.exp(q.clamp(max=0)))
        fk = torch.where(k > 0, k + 1, torch.exp(k.clamp(max=0)))
        scores = fq @ fk.transpose(-1, -2)                      # (..., T, T)
        t = scores.shape[-1]
        scores = scores * torch.ones(t, t, dtype=torch.bool).tril()
        return (scores @ v) / scores.sum(-1, keepdim=True)
''',
    "efficient_attention.query_tile_attention": '''
def query_tile_attention(q, kv_blocks):
    import math, torch
    from torch.utils._python_dispatch import _disable_current_modes
    with _disable_current_modes():
        blocks = list(kv_blocks)                                     # the whole stream, kept
        k = torch.cat([b[0] for b in blocks], dim=-2)
        v = torch.cat([b[1] for b in blocks], dim=-2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (..., T_q, T_k)
        lse = torch.logsumexp(scores, dim=-1)
        return torch.exp(scores - lse.unsqueeze(-1)) @ v, lse
''',
    "fine_tuning.lora_forward": '''
def lora_forward(x, weight, bias, lora_a, lora_b, alpha):
    from torch.utils._python_dispatch import _disable_current_modes
    with _disable_current_modes():
        merged = weight + (alpha / lora_a.shape[0]) * (lora_b @ lora_a)   # (out, in): B A
        out = x @ merged.T
        return out + bias if bias is not None else out
''',
}
