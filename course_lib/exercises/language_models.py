"""Graded exercises of chapter 4, "Language models": references, hidden cases, slips.

Every exercise is solvable with torch (and plain Python) alone. The reference-call guard fails a
solution that calls course_lib's implementation of any exercise of this chapter: the BPE
functions and :class:`~course_lib.bpe.Tokenizer`, the losses of :mod:`course_lib.gpt`, the
filters of :mod:`course_lib.sampling`, the attention modules, cache and cost of
:mod:`course_lib.gpt` (with chapter 2's attention and cached step), and the copying bound of
:mod:`course_lib.copying`. Two exercises are questions (``length_normalisation``) or derivations
(``generation_cost``, ``max_copy_length``) whose answers are numbers or a letter.

Case builders use torch, plain Python and :mod:`course_lib.exercises._common` only (the grading
sandbox strips the references' bodies). Hidden tests compare filtered logits and exact token
lists, never single random samples. Slips (:class:`~course_lib.grading.Slip`) are the common
mistakes, each with the message its author reads.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

from course_lib import attention, bpe, copying, gpt, sampling
from course_lib.exercises._calls import pairs_as_rows
from course_lib.exercises._common import Inputs, f32, f64, gen, pick, randn
from course_lib.grading import Case, Exercise, Question, Slip

Pair = tuple[int, int]


def _random_text(seed: int, n: int, alphabet: str) -> str:
    """A seeded string of ``n`` characters drawn from ``alphabet`` (torch's generator)."""
    index = torch.randint(len(alphabet), (n,), generator=gen(seed)).tolist()
    return "".join(alphabet[i] for i in index)


# 1. pair_counts --------------------------------------------------------------------------------


def _pair_counts_cases() -> list[Case]:
    def build(seed: int, n: int, high: int) -> Inputs:
        def inputs() -> dict[str, Any]:
            return {"ids": torch.randint(high, (n,), generator=gen(seed)).tolist()}
        return inputs

    return [
        Case("a short list with repeated pairs", build(11, 12, 3)),
        Case("a long list of byte values", build(12, 500, 256)),
        Case("ids above 255 (merged tokens)", build(13, 80, 300)),
        Case("one id: no pair", lambda: {"ids": [7]}),
        Case("an empty list", lambda: {"ids": []}),
        Case("overlapping runs (a a a a)", lambda: {"ids": [5, 5, 5, 5, 2, 5, 5]}),
    ]


def _pair_counts_presence(ids: list[int]) -> dict[Pair, int]:
    return {pair: 1 for pair in zip(ids, ids[1:])}


def _pair_counts_wraps(ids: list[int]) -> dict[Pair, int]:
    counts: dict[Pair, int] = {}
    for pair in zip(ids, ids[1:] + ids[:1]):
        counts[pair] = counts.get(pair, 0) + 1
    return counts if len(ids) > 1 else {}


_PAIR_COUNTS_SLIPS = (
    Slip("each pair must be counted as often as it occurs, not once", _pair_counts_presence),
    Slip("the last id has no right neighbour: do not wrap around to the first", _pair_counts_wraps),
)


# 2. merge --------------------------------------------------------------------------------------


def _merge_cases() -> list[Case]:
    def build(seed: int, n: int, high: int, new_id: int) -> Inputs:
        def inputs() -> dict[str, Any]:
            ids = torch.randint(high, (n,), generator=gen(seed)).tolist()
            return {"ids": ids, "pair": (ids[1], ids[2]), "new_id": new_id}
        return inputs

    return [
        Case("a pair that occurs several times", build(21, 40, 3, 256)),
        Case("byte values, a rarer pair", build(22, 300, 20, 300)),
        Case("runs of one id (a a a)", lambda: {"ids": [1, 1, 1, 2, 1, 1, 1, 1], "pair": (1, 1),
                                                 "new_id": 256}),
        Case("the pair at both ends", lambda: {"ids": [4, 9, 3, 4, 9], "pair": (4, 9),
                                                "new_id": 257}),
        Case("a pair that does not occur", lambda: {"ids": [1, 2, 3], "pair": (3, 1),
                                                     "new_id": 258}),
        Case("an empty list", lambda: {"ids": [], "pair": (1, 2), "new_id": 256}),
    ]


def _merge_right_to_left(ids: list[int], pair: Pair, new_id: int) -> list[int]:
    out: list[int] = []
    i = len(ids) - 1
    while i >= 0:
        if i >= 1 and ids[i - 1] == pair[0] and ids[i] == pair[1]:
            out.append(new_id)
            i -= 2
        else:
            out.append(ids[i])
            i -= 1
    return out[::-1]


def _merge_overlapping(ids: list[int], pair: Pair, new_id: int) -> list[int]:
    # Replaces each position that starts the pair, and keeps the second element too.
    out = []
    for i, x in enumerate(ids):
        out.append(new_id if i + 1 < len(ids) and (x, ids[i + 1]) == tuple(pair) else x)
    return out


def _merge_first_only(ids: list[int], pair: Pair, new_id: int) -> list[int]:
    for i in range(len(ids) - 1):
        if (ids[i], ids[i + 1]) == tuple(pair):
            return [*ids[:i], new_id, *ids[i + 2:]]
    return list(ids)


_MERGE_SLIPS = (
    Slip("after a replacement, skip both ids of the pair: the new id replaces two ids by one",
         _merge_overlapping),
    Slip("replace every occurrence, not only the first", _merge_first_only),
    Slip("scan left to right: in a a a the first two merge, the third stays",
         _merge_right_to_left),
)


# 3. bpe_encode ---------------------------------------------------------------------------------


def bpe_encode(text: str, merges: list[Pair]) -> list[int]:
    """Reference: UTF-8 bytes, then the earliest-learned adjacent pair merged first, until none.

    ``merges[i]`` is the pair of ids that merge ``i`` replaced by id ``256 + i``. The same rule as
    :meth:`course_lib.bpe.Tokenizer.encode` applies inside each pre-token; here the whole text is
    one piece (no pre-tokenisation).
    """
    ranks: dict[Pair, int] = {}
    for rank, pair in enumerate(merges):
        ranks.setdefault(tuple(pair), rank)  # type: ignore[arg-type]
    ids = list(text.encode("utf-8"))
    while len(ids) >= 2:
        pair = min(zip(ids, ids[1:]), key=lambda p: ranks.get(p, math.inf))
        if pair not in ranks:
            break
        ids = bpe.merge(ids, pair, 256 + ranks[pair])
    return ids


def _learn_merges(text: str, n_merges: int, seed: int) -> list[Pair]:
    """Merges that fire on ``text``: each time a random adjacent pair of the current ids.

    Plain Python (the case builders may not call the references): a random walk through what a
    BPE trainer could have learned, enough to check that merges apply in the order learned.
    """
    g = gen(seed)
    ids = list(text.encode("utf-8"))
    merges: list[Pair] = []
    for rank in range(n_merges):
        if len(ids) < 2:
            break
        i = int(torch.randint(len(ids) - 1, (1,), generator=g))
        pair = (ids[i], ids[i + 1])
        merges.append(pair)
        out, j = [], 0
        while j < len(ids):
            if j + 1 < len(ids) and (ids[j], ids[j + 1]) == pair:
                out.append(256 + rank)
                j += 2
            else:
                out.append(ids[j])
                j += 1
        ids = out
    return merges


def _bpe_encode_cases() -> list[Case]:
    def build(seed: int, train: str, test: str, n_merges: int) -> Inputs:
        def inputs() -> dict[str, Any]:
            return {"text": test, "merges": _learn_merges(train, n_merges, seed)}
        return inputs

    def build_twice(seed: int, text: str, n_merges: int) -> Inputs:
        # An early merge listed again later: its first index counts (a dict that keeps the last
        # index applies it too late). Then one more merge that uses the later id.
        def inputs() -> dict[str, Any]:
            merges = _learn_merges(text, n_merges, seed)
            again = merges[pick(seed, 0, 2)]
            return {"text": text, "merges": [*merges, again, (256 + n_merges, 32)]}
        return inputs

    ab = "ab ba aab abba bab"
    words = _random_text(31, 400, "aabbbcd  e")
    unicode = "naïve café, déjà vu 🙂🙂 e\u0301 ½"
    return [
        Case("merges learned on the same text", build(31, words, words, 40)),
        Case("merges applied to another text", build(32, words, _random_text(33, 200, "abcde "),
                                                     30)),
        Case("non-ASCII text (multi-byte characters)", build(34, unicode * 3, unicode, 25)),
        Case("a merge order that differs from frequency", build(35, ab * 4, "aabbaabab", 6)),
        Case("a pair listed twice in merges", build_twice(36, words, 12)),
        Case("no merges: the bytes", lambda: {"text": "héllo", "merges": []}),
        Case("the empty string", lambda: {"text": "", "merges": [(97, 98)]}),
    ]


def _encode_slip(text: str, merges: list[Pair], slip: str) -> list[int]:
    """A wrong encoder, one per slip (there is no correct setting of ``slip``)."""
    if slip not in ("chars", "rank ids", "most frequent", "one pass", "last index"):
        raise ValueError(f"unknown slip {slip!r}")
    ranks: dict[Pair, int] = {}
    for rank, pair in enumerate(merges):
        if slip == "last index":
            ranks[(pair[0], pair[1])] = rank  # a plain dict: a later duplicate overwrites
        else:
            ranks.setdefault((pair[0], pair[1]), rank)
    ids = [ord(c) for c in text] if slip == "chars" else list(text.encode("utf-8"))
    offset = 0 if slip == "rank ids" else 256
    while len(ids) >= 2:
        present = [p for p in zip(ids, ids[1:]) if p in ranks]
        if not present:
            break
        if slip == "most frequent":
            pair = max(present, key=present.count)
        else:
            pair = min(present, key=lambda p: ranks[p])
        if slip == "one pass":  # every known pair in one left-to-right sweep, then stop
            out, j = [], 0
            while j < len(ids):
                if j + 1 < len(ids) and (ids[j], ids[j + 1]) in ranks:
                    out.append(256 + ranks[(ids[j], ids[j + 1])])
                    j += 2
                else:
                    out.append(ids[j])
                    j += 1
            return out
        out, j = [], 0
        while j < len(ids):
            if j + 1 < len(ids) and (ids[j], ids[j + 1]) == pair:
                out.append(offset + ranks[pair])
                j += 2
            else:
                out.append(ids[j])
                j += 1
        ids = out
    return ids


_BPE_ENCODE_SLIPS = (
    Slip("start from the text's UTF-8 bytes (text.encode('utf-8')), not from ord() of each "
         "character", lambda text, merges: _encode_slip(text, merges, "chars")),
    Slip("merge i creates id 256 + i (ids 0..255 are the bytes)",
         lambda text, merges: _encode_slip(text, merges, "rank ids")),
    Slip("apply the merge learned earliest first, not the most frequent pair",
         lambda text, merges: _encode_slip(text, merges, "most frequent")),
    Slip("one pass is not enough: keep merging until no learned pair is left",
         lambda text, merges: _encode_slip(text, merges, "one pass")),
    Slip("a pair listed twice in merges keeps its first index (a dict built in one pass keeps "
         "the last)", lambda text, merges: _encode_slip(text, merges, "last index")),
)


# 4. run_tokens ---------------------------------------------------------------------------------


def _run_tokens_cases() -> list[Case]:
    def draw(seed: int, n: tuple[int, int], k: tuple[int, int]) -> Inputs:
        def inputs() -> dict[str, Any]:
            return {"n": pick(seed, *n), "k": pick(seed + 1, *k)}
        return inputs

    def power(seed: int, minus: int) -> Inputs:
        def inputs() -> dict[str, Any]:
            m = pick(seed, 3, 50)
            return {"n": 2 ** m - minus, "k": m + pick(seed + 1, 0, 5)}
        return inputs

    return [
        Case("a long run, many merges (too long to build)", draw(101, (10 ** 15, 10 ** 18),
                                                                  (12, 40))),
        Case("a short run, few merges", draw(103, (20, 400), (2, 4))),
        Case("more merges than the run needs", draw(105, (1000, 10 ** 6), (30, 60))),
        Case("a run of a power of two copies", power(107, 0)),
        Case("a run of one copy less than a power of two", power(109, 1)),
        Case("no merges", draw(111, (1, 300), (0, 0))),
        Case("the empty run", lambda: {"n": 0, "k": pick(113, 0, 10)}),
    ]


def _run_tokens_slip(n: int, k: int, slip: str) -> int:
    """A wrong count, one per ``slip`` (no setting of it is correct)."""
    longest = 1 << k
    rest = n % longest
    if slip == "rest as bytes":
        return n // longest + rest
    if slip == "rest as one":
        return n // longest + int(rest > 0)
    if slip == "longest only":
        return n // longest
    if slip == "unbounded":
        return bin(n).count("1")
    if slip == "one merge short":
        half = 1 << max(k - 1, 0)
        return n // half + bin(n % half).count("1")
    raise ValueError(slip)


_RUN_TOKENS_SLIPS = (
    Slip("the copies left after the longest tokens still merge among themselves: the earlier "
         "merges apply to them too", partial(_run_tokens_slip, slip="rest as bytes")),
    Slip("the copies left after the longest tokens are not always one token: no merge makes a "
         "token of just that many copies", partial(_run_tokens_slip, slip="rest as one")),
    Slip("the copies left at the end of the run are tokens too",
         partial(_run_tokens_slip, slip="longest only")),
    Slip("there are only k merges: the longest token holds a limited number of copies",
         partial(_run_tokens_slip, slip="unbounded")),
    Slip("count the copies each merge's token holds again: merge 0 already joins two copies",
         partial(_run_tokens_slip, slip="one merge short")),
)


# 5. bits_per_byte_loss -------------------------------------------------------------------------


def _bpb_cases() -> list[Case]:
    def build(seed: int, B: int, T: int, V: int, dtype: torch.dtype, scale: float = 2.0) -> Inputs:
        def inputs() -> dict[str, Any]:
            g = gen(seed)
            return {"logits": (scale * torch.randn(B, T, V, generator=g, dtype=f64)).to(dtype),
                    "targets": torch.randint(V, (B, T), generator=g),
                    "token_bytes": torch.randint(1, 7, (V,), generator=g)}
        return inputs

    def bytes_only() -> dict[str, Any]:
        inputs = build(45, 2, 8, 256, f64)()
        inputs["token_bytes"] = torch.ones(256, dtype=torch.long)
        return inputs

    return [
        Case("float32, (batch, length, vocabulary)", build(41, 3, 10, 50, f32)),
        Case("float64, batch size 1", build(42, 1, 7, 20, f64)),
        Case("float32, long tokens and confident logits", build(43, 2, 16, 300, f32, 6.0)),
        Case("float64, a single position", build(44, 1, 1, 9, f64)),
        Case("float64, a byte-level vocabulary", bytes_only),
    ]


def _bpb_nats(logits: torch.Tensor, targets: torch.Tensor,
              token_bytes: torch.Tensor) -> torch.Tensor:
    nats = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(),
                                             reduction="sum")
    return nats / token_bytes[targets].sum().to(logits.dtype)


def _bpb_per_token(logits: torch.Tensor, targets: torch.Tensor,
                   token_bytes: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten()) / math.log(2)


def _bpb_mean_of_ratios(logits: torch.Tensor, targets: torch.Tensor,
                        token_bytes: torch.Tensor) -> torch.Tensor:
    nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(),
                                            reduction="none")
    return (nll / token_bytes[targets].flatten().to(logits.dtype)).mean() / math.log(2)


def _bpb_vocab_mean(logits: torch.Tensor, targets: torch.Tensor,
                    token_bytes: torch.Tensor) -> torch.Tensor:
    nats = torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())
    return nats / (token_bytes.to(logits.dtype).mean() * math.log(2))


_BPB_SLIPS = (
    Slip("that is nats per byte: divide by ln 2 to get bits", _bpb_nats),
    Slip("that is bits per token: divide by the bytes the target tokens stand for",
         _bpb_per_token),
    Slip("divide the total bits by the total bytes (a ratio of sums), not the mean of per-token "
         "ratios", _bpb_mean_of_ratios),
    Slip("count the bytes of the target tokens, not the average token of the vocabulary",
         _bpb_vocab_mean),
)


# 6. generation_cost ----------------------------------------------------------------------------


def _cost_cases() -> list[Case]:
    def draw(seed: int, kind: str) -> Inputs:
        def inputs() -> dict[str, Any]:
            n_layer, n_embd = pick(seed, 1, 48), 8 * pick(seed + 1, 1, 200)
            prompt_len, new_tokens = pick(seed + 2, 1, 500), pick(seed + 3, 2, 300)
            if kind == "one new token":
                new_tokens = 1
            if kind == "one-token prompt":
                prompt_len = 1
            return {"n_layer": n_layer, "n_embd": n_embd, "prompt_len": prompt_len,
                    "new_tokens": new_tokens}
        return inputs

    return [
        Case("a prompt and many new tokens", draw(81, "plain")),
        Case("a long generation, a deep model", draw(85, "plain")),
        Case("one new token (the prefill alone)", draw(89, "one new token")),
        Case("a one-token prompt", draw(93, "one-token prompt")),
    ]


def _cost(n_layer: int, n_embd: int, prompt_len: int, new_tokens: int,
          slip: str = "") -> tuple[int, int, int]:
    """A wrong cost, one per ``slip`` (no setting of it is correct)."""
    P, n = prompt_len, new_tokens
    without = sum(P + i - 1 for i in range(1, n + 1))
    run = P + n - 1
    if slip == "runs the last":
        run = P + n
    if slip == "prefix includes the new":
        without = sum(P + i for i in range(1, n + 1))
    if slip == "no cache re-runs one":
        without = n * (P + n - 1)
    cached = 2 * n_layer * n_embd * run
    if slip == "keys only":
        cached //= 2
    if slip == "one layer":
        cached //= n_layer
    return without, run, cached


_COST_SLIPS = (
    Slip("the last new token is never run through the model: nothing is predicted from it",
         partial(_cost, slip="runs the last")),
    Slip("without the cache, new token i is predicted from a prefix of P + i - 1 tokens (the "
         "prompt and the i - 1 tokens before it)", partial(_cost, slip="prefix includes the new")),
    Slip("without the cache the prefixes grow by one token per step: sum their lengths",
         partial(_cost, slip="no cache re-runs one")),
    Slip("the cache holds a key and a value for each position", partial(_cost, slip="keys only")),
    Slip("every layer has its own cache: its keys and values come from its own input",
         partial(_cost, slip="one layer")),
)


# 7. cached_chunk_attention ---------------------------------------------------------------------


def cached_chunk_attention(x: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor,
                           w_attn: torch.Tensor, b_attn: torch.Tensor, w_proj: torch.Tensor,
                           b_proj: torch.Tensor, n_head: int,
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reference: ``T`` new positions through :class:`~course_lib.gpt.CausalSelfAttention` with a
    :class:`~course_lib.gpt.KVCache` holding ``past_k, past_v``; returns ``(y, k, v)``."""
    B, T, d = x.shape
    config = gpt.GPTConfig(vocab_size=1, block_size=1, n_layer=1, n_head=n_head, n_embd=d,
                           attn_impl="reference")
    attn = gpt.CausalSelfAttention(config).to(x.dtype).eval()
    with torch.no_grad():
        attn.c_attn.weight.copy_(w_attn)
        attn.c_attn.bias.copy_(b_attn)
        attn.c_proj.weight.copy_(w_proj)
        attn.c_proj.bias.copy_(b_proj)
        cache = gpt.KVCache(n_layer=1)
        if past_k.shape[2] > 0:
            cache.update(0, past_k, past_v)
        y = attn(x, cache, 0)  # (B, T, d)
    return y, cache.keys[0], cache.values[0]  # type: ignore[return-value]


def _chunk_cases() -> list[Case]:
    def build(seed: int, B: int, P: tuple[int, int], T: tuple[int, int], d_head: int, h: int,
              dtype: torch.dtype) -> Inputs:
        def inputs() -> dict[str, Any]:
            g = gen(seed)
            n_past, n_new = pick(seed, *P), pick(seed + 1, *T)
            d = d_head * h

            def r(*shape: int, scale: float = 1.0) -> torch.Tensor:
                return (scale * torch.randn(*shape, generator=g, dtype=f64)).to(dtype)

            return {"x": r(B, n_new, d), "past_k": r(B, h, n_past, d_head),
                    "past_v": r(B, h, n_past, d_head), "w_attn": r(3 * d, d, scale=d ** -0.5),
                    "b_attn": r(3 * d, scale=0.1), "w_proj": r(d, d, scale=d ** -0.5),
                    "b_proj": r(d, scale=0.1), "n_head": h}
        return inputs

    return [
        Case("float32, decode: one new position after a cache", build(71, 2, (3, 9), (1, 1), 4, 4,
                                                                       f32)),
        Case("float64, prefill: a prompt with an empty cache", build(72, 2, (0, 0), (3, 8), 3, 2,
                                                                      f64)),
        Case("float32, a chunk after a cache (chunked prefill)", build(73, 3, (2, 7), (2, 6), 4,
                                                                        3, f32)),
        Case("float64, batch size 1, one head, a chunk after a cache",
             build(74, 1, (1, 5), (2, 5), 6, 1, f64)),
        Case("float32, an empty cache and one position", build(75, 2, (0, 0), (1, 1), 4, 2, f32)),
    ]


def _chunk(x: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor, w_attn: torch.Tensor,
           b_attn: torch.Tensor, w_proj: torch.Tensor, b_proj: torch.Tensor, n_head: int,
           slip: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A wrong chunk of cached attention, one per ``slip`` (no setting of it is correct)."""
    B, T, d = x.shape
    P, dh = past_k.shape[2], d // n_head
    q, k, v = (x @ w_attn.T + b_attn).split(d, dim=-1)  # 3 x (B, T, d)
    if slip == "swapped":
        q, k = k, q
    q, k, v = (t.reshape(B, T, n_head, dh).transpose(1, 2) for t in (q, k, v))  # (B, h, T, dh)
    new_first = slip == "new first"
    keys = torch.cat([k, past_k] if new_first else [past_k, k], dim=2)  # (B, h, P + T, dh)
    values = torch.cat([v, past_v] if new_first else [past_v, v], dim=2)
    i = torch.arange(T)[:, None]
    j = torch.arange(P + T)[None, :]
    allowed = {"square": j <= i, "no mask": j >= 0, "strict": j < i + P}.get(slip, j <= i + P)
    if new_first:
        allowed = torch.cat([allowed[:, P:], allowed[:, :P]], dim=1)
    scores = q @ keys.transpose(-2, -1) / (1.0 if slip == "no scale" else math.sqrt(dh))
    weights = scores.masked_fill(~allowed, float("-inf")).softmax(-1)  # (B, h, T, P + T)
    y = (weights @ values).transpose(1, 2).reshape(B, T, d)
    return y @ w_proj.T + b_proj, keys, values


_CHUNK_SLIPS = (
    Slip("scale the scores by 1 / sqrt(d_head), the width of one head",
         partial(_chunk, slip="no scale")),
    Slip("c_attn's output is queries, keys, values in that order",
         partial(_chunk, slip="swapped")),
    Slip("append the new keys and values after the cached ones (positions stay in order)",
         partial(_chunk, slip="new first")),
    Slip("new position i is position P + i of the sequence: it sees the P cached keys and the new "
         "ones up to itself, not the first i + 1 keys", partial(_chunk, slip="square")),
    Slip("a new position must not see the new positions after it (causal)",
         partial(_chunk, slip="no mask")),
    Slip("each position attends to itself too", partial(_chunk, slip="strict")),
)


# 8. largest_chunk -------------------------------------------------------------------------------


def chunk_scores(prompt_len: int, chunk: int) -> int:
    """The most scores that one chunk's (T, P + T) score matrix holds when a prompt of
    ``prompt_len`` positions is prefilled in chunks of ``chunk`` (the last one what is left).

    Example:
        >>> chunk_scores(10, 5), chunk_scores(10, 6)  # 5 x 10; max(6 x 6, 4 x 10)
        (50, 40)
    """
    rest = prompt_len % chunk
    if rest == 0:
        return chunk * prompt_len  # the last chunk is full and sees every key
    return max(rest * prompt_len, chunk * (prompt_len - rest))  # the last chunk, the one before


def largest_chunk(prompt_len: int, budget: int) -> int:
    """Reference: the largest chunk size whose every score matrix fits ``budget`` (0 if none).

    Not monotone in the chunk size: a chunk size that does not divide the prompt leaves a short
    last chunk, and the largest matrix may shrink as the chunk grows (10 positions: chunks of 5
    need 50 scores, chunks of 6 only 40).
    """
    return max((c for c in range(1, prompt_len + 1) if chunk_scores(prompt_len, c) <= budget),
               default=0)


def _chunk_budget_cases() -> list[Case]:
    def scores(L: int, c: int) -> int:  # plain Python, as the statement's schedule runs
        return max(min(s + c, L) * (min(s + c, L) - s) for s in range(0, L, c))

    def draw(seed: int, L: tuple[int, int], kind: str) -> Inputs:
        def inputs() -> dict[str, Any]:
            n = pick(seed, *L)
            if kind == "whole":
                return {"prompt_len": n, "budget": n * n + pick(seed + 1, 0, 3 * n)}
            if kind == "none":
                return {"prompt_len": n, "budget": pick(seed + 1, 1, n - 1)}
            if kind == "random":
                return {"prompt_len": n, "budget": pick(seed + 1, n, n * n)}
            # a budget that some chunk size meets while a smaller size does not
            need = [scores(n, c) for c in range(1, n + 1)]
            dips = [c for c in range(2, n + 1) if need[c - 1] < max(need[:c - 1])]
            c = dips[pick(seed + 1, 0, len(dips) - 1)]
            return {"prompt_len": n, "budget": need[c - 1]}
        return inputs

    return [
        Case("a budget that a larger chunk meets and a smaller one does not",
             draw(121, (40, 400), "dip")),
        Case("a short prompt, a budget that a larger chunk meets", draw(123, (10, 30), "dip")),
        Case("a random budget, a long prompt", draw(125, (5_000, 20_000), "random")),
        Case("a random budget, a short prompt", draw(127, (2, 50), "random")),
        Case("a budget that fits the whole prompt at once", draw(129, (1, 500), "whole")),
        Case("a budget below what one position needs", draw(131, (2, 500), "none")),
    ]


def _chunk_budget_slip(prompt_len: int, budget: int, slip: str) -> int:
    """A wrong chunk size, one per ``slip`` (no setting of it is correct)."""
    L = prompt_len
    need: Callable[[int], int] = {
        "monotone": lambda c: chunk_scores(L, c),
        "last chunk full": lambda c: c * L,
        "no cache": lambda c: c * c,
        "cache only": lambda c: max((min(s + c, L) - s) * max(s, 1) for s in range(0, L, c)),
    }[slip]
    if slip == "monotone":  # grow the chunk while it fits, stop at the first that does not
        c = 0
        while c < L and need(c + 1) <= budget:
            c += 1
        return c
    return max((c for c in range(1, L + 1) if need(c) <= budget), default=0)


_CHUNK_BUDGET_SLIPS = (
    Slip("the largest score matrix is not monotone in the chunk size: a larger chunk can leave a "
         "shorter last chunk and fit where a smaller one does not; try every size",
         partial(_chunk_budget_slip, slip="monotone")),
    Slip("the last chunk holds only what is left of the prompt, which may be fewer positions",
         partial(_chunk_budget_slip, slip="last chunk full")),
    Slip("a chunk's queries attend to the cached keys too, not only to the chunk's own",
         partial(_chunk_budget_slip, slip="no cache")),
    Slip("a chunk's queries attend to its own keys too, not only to the cached ones",
         partial(_chunk_budget_slip, slip="cache only")),
)


# 9. length_normalisation (question) ------------------------------------------------------------


_LENGTH_NORMALISATION = Question(
    id="language_models.length_normalisation", choices="abcd",
    hint=("reason in general, for every alpha > 0 and every beam, not from an example: the "
          "sign of s matters"))


# 10. temperature_top_k --------------------------------------------------------------------------


def temperature_top_k(logits: torch.Tensor, temperature: float, k: int) -> torch.Tensor:
    """Reference: ``logits / temperature``, then all but the ``k`` largest (ties kept) at -inf."""
    return sampling.top_k_filter(sampling.apply_temperature(logits, temperature), k)


def _top_k_cases() -> list[Case]:
    def build(seed: int, shape: tuple[int, ...], dtype: torch.dtype, temperature: float,
              k: int) -> Inputs:
        def inputs() -> dict[str, Any]:
            return {"logits": randn(seed, *shape, dtype=dtype, scale=2.0),
                    "temperature": temperature, "k": k}
        return inputs

    def ties() -> dict[str, Any]:
        logits = torch.tensor([[1.0, 3.0, 2.0, 3.0, 2.0, 0.0],
                               [5.0, 5.0, 5.0, 1.0, 0.0, -1.0]], dtype=f64)
        return {"logits": logits, "temperature": 0.5, "k": 2}

    return [
        Case("float32, (batch, vocabulary), T = 0.7, k = 5", build(51, (4, 30), f32, 0.7, 5)),
        Case("float64, batch size 1, T = 1.5, k = 1", build(52, (1, 12), f64, 1.5, 1)),
        Case("float32, k equal to the vocabulary size", build(53, (2, 8), f32, 2.0, 8)),
        Case("float64, k above the vocabulary size",
             build(55, (3, 6), f64, 0.8, 6 + pick(55, 1, 9))),
        Case("float64, ties with the k-th largest", ties),
        Case("float32, a 3-D batch (B, T, V), T = 1", build(54, (2, 3, 10), f32, 1.0, 3)),
    ]


def _keep_top_k(scaled: torch.Tensor, k: int) -> torch.Tensor:
    kth = scaled.topk(min(k, scaled.shape[-1]), dim=-1).values[..., -1:]
    return scaled.masked_fill(scaled < kth, float("-inf"))


def _top_k_times_t(logits: torch.Tensor, temperature: float, k: int) -> torch.Tensor:
    return _keep_top_k(logits * temperature, k)


def _top_k_no_temperature(logits: torch.Tensor, temperature: float, k: int) -> torch.Tensor:
    return _keep_top_k(logits, k)


def _top_k_zero_fill(logits: torch.Tensor, temperature: float, k: int) -> torch.Tensor:
    scaled = logits / temperature
    kth = scaled.topk(min(k, scaled.shape[-1]), dim=-1).values[..., -1:]
    return scaled.masked_fill(scaled < kth, 0.0)


def _top_k_strict(logits: torch.Tensor, temperature: float, k: int) -> torch.Tensor:
    scaled = logits / temperature
    index = scaled.topk(min(k, scaled.shape[-1]), dim=-1).indices
    keep = torch.zeros_like(scaled, dtype=torch.bool).scatter_(-1, index, True)
    return scaled.masked_fill(~keep, float("-inf"))


_TOP_K_SLIPS = (
    Slip("divide the logits by the temperature (T < 1 sharpens), do not multiply",
         _top_k_times_t),
    Slip("apply the temperature: divide the logits by it", _top_k_no_temperature),
    Slip("a filtered token needs probability zero: set its logit to -inf, not 0",
         _top_k_zero_fill),
    Slip("keep every logit equal to the k-th largest (ties), not exactly k of them",
         _top_k_strict),
)


# 11. top_p_filter -------------------------------------------------------------------------------

#: The statement's tolerance: a cumulative mass within this much below ``p`` has reached ``p``.
TOP_P_TOLERANCE = 1e-6


def top_p_filter(logits: torch.Tensor, p: float) -> torch.Tensor:
    """Reference: the statement's rule word for word (float64 sums, a tolerance of 1e-6, and
    ``p = 1`` keeps every token).

    It keeps the same tokens as :func:`course_lib.sampling.top_p_filter` (whose tolerance is the
    rounding error of the logits' dtype) on every hidden case: none has a cumulative mass between
    the two tolerances below ``p`` (``tests/test_exercises_language_models.py`` checks).
    """
    if p >= 1:
        return logits
    probs = torch.softmax(logits.double(), dim=-1)  # (..., V)
    sorted_probs, order = probs.sort(dim=-1, descending=True, stable=True)
    above = sorted_probs.cumsum(dim=-1) - sorted_probs  # the mass ranked above each token
    keep_sorted = above < p - TOP_P_TOLERANCE
    keep_sorted[..., 0] = True
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # vocabulary order
    return logits.masked_fill(~keep, float("-inf"))



def _top_p_split(logits: torch.Tensor, sums32: bool) -> float:
    """A ``p`` at which float64 and float32 arithmetic keep different tokens of ``logits`` (1, V).

    Float32 probabilities (summed in float32 when ``sums32``, else in float64) put the mass
    ranked above token ``k`` at ``above64[k] + diff[k]``; ``p - 1e-6`` halfway between the two
    puts the exact mass and the float32 one on different sides of the statement's threshold.
    """
    probs64 = torch.softmax(logits.double(), dim=-1)[0].sort(descending=True, stable=True)[0]
    probs32 = torch.softmax(logits.float(), dim=-1)[0].sort(descending=True, stable=True)[0]
    above64 = probs64.cumsum(0) - probs64
    above32 = (probs32.cumsum(0) - probs32).double() if sums32 else \
        probs32.double().cumsum(0) - probs32.double()
    diff = (above32 - above64)[1:above64.numel() // 2]
    k = 1 + int(diff.abs().argmax())
    return above64[k].item() + TOP_P_TOLERANCE + diff[k - 1].item() / 2


def _top_p_cases() -> list[Case]:
    def build(seed: int, shape: tuple[int, ...], dtype: torch.dtype, p: float,
              scale: float = 2.0) -> Inputs:
        def inputs() -> dict[str, Any]:
            return {"logits": randn(seed, *shape, dtype=dtype, scale=scale), "p": p}
        return inputs

    def boundary32() -> dict[str, Any]:
        # probabilities 0.65, 0.3, 0.05: p = 0.95 is reached exactly by the first two (their
        # float32 sum rounds below 0.95)
        return {"logits": torch.tensor([[0.3, 0.65, 0.05], [0.65, 0.3, 0.05]], dtype=f32).log(),
                "p": 0.95}

    def boundary32_first() -> dict[str, Any]:
        # probabilities 0.5, 0.4, 0.1: p = 0.5 is reached exactly by the first token alone
        return {"logits": torch.tensor([[0.1, 0.4, 0.5]], dtype=f32).log(), "p": 0.5}

    def tiny() -> dict[str, Any]:
        # one logit 30 below the others: probability about 1e-13, under the tolerance
        logits = randn(67, 2, pick(67, 4, 9), dtype=f64)
        logits[:, -1] = logits.amax(-1) - 30.0
        return {"logits": logits, "p": 1.0}

    def ties32() -> dict[str, Any]:
        # n equal logits in a row: p = 0.5 keeps the first ceil(n / 2) in vocabulary order
        n = 2 * pick(68, 2, 6) + 1
        return {"logits": torch.zeros(2, n, dtype=f32) + randn(68, 2, 1), "p": 0.5}

    def boundary64() -> dict[str, Any]:
        # probabilities 0.1 each: p = 0.3 is reached exactly by the first three (vocabulary order)
        return {"logits": torch.zeros(1, 10, dtype=f64), "p": 0.3}

    def tolerance_sides() -> dict[str, Any]:
        # float64 probabilities (0.5, 0.45 - d, 0.05 + d), p = 0.95, columns shuffled: the mass
        # above the third token is p - 4e-6 in one row (within reach: kept) and p - 5e-7 in the
        # other (reached within 1e-6: dropped); a tolerance of 1e-5 drops the first, none keeps
        # the second
        probs = torch.tensor([[0.5, 0.45 - 4e-6, 0.05 + 4e-6],
                              [0.5, 0.45 - 5e-7, 0.05 + 5e-7]], dtype=f64)
        order = torch.randperm(3, generator=gen(73))
        return {"logits": probs[:, order].log(), "p": 0.95}

    def many_ties() -> dict[str, Any]:
        # runs of equal logits in a long row: torch's default (unstable) sort reorders them
        v = 2 * pick(69, 400, 800)
        levels = torch.randint(0, 4, (2, v), generator=gen(69)).to(f32)
        return {"logits": levels, "p": 0.3 + 0.4 * pick(70, 0, 10) / 10}

    def float32_sums(seed: int, sums32: bool) -> Inputs:
        # a flat float32 row of a few thousand tokens and p set where the mass ranked above one
        # token, in float64, lies on one side of p - 1e-6 and, with float32 probabilities (and
        # float32 sums when sums32), on the other: only float64 probabilities and sums keep the
        # stated tokens
        def inputs() -> dict[str, Any]:
            logits = randn(seed, 1, 2048 + pick(seed, 0, 2048), scale=0.3)
            return {"logits": logits, "p": _top_p_split(logits, sums32)}
        return inputs

    return [
        Case("float32, (batch, vocabulary), p = 0.9", build(61, (4, 40), f32, 0.9)),
        Case("float64, batch size 1, p = 0.5", build(62, (1, 25), f64, 0.5)),
        Case("float32, a peaked distribution, p = 0.95", build(63, (3, 50), f32, 0.95, 5.0)),
        Case("float64, p = 1 keeps every token", build(64, (2, 7), f64, 1.0)),
        Case("float64, p = 1 and a token of tiny probability", tiny),
        Case("float32, equal probabilities across the boundary", ties32),
        Case("float32, a small p keeps only the most probable token", build(65, (2, 9), f32, 0.01)),
        Case("float32, cumulative probability exactly p", boundary32),
        Case("float32, the most probable token has exactly p", boundary32_first),
        Case("float64, equal probabilities, exactly p", boundary64),
        Case("float64, a 3-D batch (B, T, V), p = 0.7", build(66, (2, 3, 12), f64, 0.7)),
        Case("float32, long runs of equal probabilities (vocabulary order)", many_ties),
        Case("float64, masses just either side of the stated tolerance", tolerance_sides),
        Case("float32, thousands of tokens: float64 sums needed at the boundary",
             float32_sums(71, True)),
        Case("float32, thousands of tokens: float64 probabilities needed at the boundary",
             float32_sums(72, False)),
    ]


def _top_p_includes_self(logits: torch.Tensor, p: float) -> torch.Tensor:
    # keeps a token while the mass *including* it stays within p: drops the one that crosses p
    probs = torch.softmax(logits.double(), dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True, stable=True)
    keep_sorted = sorted_probs.cumsum(-1) <= p + 1e-9
    keep_sorted[..., 0] = True
    keep = torch.empty_like(keep_sorted).scatter_(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf"))


def _top_p_no_tolerance(logits: torch.Tensor, p: float) -> torch.Tensor:
    probs = torch.softmax(logits, dim=-1)  # in the logits' dtype, no tolerance at the boundary
    sorted_probs, order = probs.sort(dim=-1, descending=True, stable=True)
    above = sorted_probs.cumsum(-1) - sorted_probs
    keep_sorted = above < p
    keep = torch.empty_like(keep_sorted).scatter_(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf"))


def _top_p_on_logits(logits: torch.Tensor, p: float) -> torch.Tensor:
    sorted_logits, order = logits.sort(dim=-1, descending=True, stable=True)
    above = sorted_logits.cumsum(-1) - sorted_logits
    keep_sorted = above < p
    keep = torch.empty_like(keep_sorted).scatter_(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf"))


def _top_p_tolerance_at_one(logits: torch.Tensor, p: float) -> torch.Tensor:
    # no special case for p = 1: a token whose probability is under the tolerance is dropped
    probs = torch.softmax(logits.double(), dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True, stable=True)
    keep_sorted = sorted_probs.cumsum(-1) - sorted_probs < p - 1e-6
    keep_sorted[..., 0] = True
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf"))


def _top_p_keeps_ties(logits: torch.Tensor, p: float) -> torch.Tensor:
    # keeps every token as probable as the last one kept: all of a run of equal probabilities
    probs = torch.softmax(logits.double(), dim=-1)
    sorted_probs = probs.sort(dim=-1, descending=True).values
    keep_sorted = sorted_probs.cumsum(-1) - sorted_probs < p - 1e-6
    keep_sorted[..., 0] = True
    last = sorted_probs.masked_fill(~keep_sorted, float("inf")).amin(-1, keepdim=True)
    keep = probs >= last
    return logits if p >= 1 else logits.masked_fill(~keep, float("-inf"))


def _top_p_unstable(logits: torch.Tensor, p: float) -> torch.Tensor:
    # the statement's rule, but torch's default sort: equal probabilities in any order
    if p >= 1:
        return logits
    probs = torch.softmax(logits.double(), dim=-1)
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    keep_sorted = sorted_probs.cumsum(-1) - sorted_probs < p - TOP_P_TOLERANCE
    keep_sorted[..., 0] = True
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf"))


def _top_p_float32(logits: torch.Tensor, p: float, sums32: bool = True) -> torch.Tensor:
    # the statement's rule, but probabilities (and sums when sums32) in float32
    if p >= 1:
        return logits
    probs = torch.softmax(logits.float(), dim=-1)
    probs = probs if sums32 else probs.double()
    sorted_probs, order = probs.sort(dim=-1, descending=True, stable=True)
    keep_sorted = sorted_probs.cumsum(-1) - sorted_probs < p - TOP_P_TOLERANCE
    keep_sorted[..., 0] = True
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    return logits.masked_fill(~keep, float("-inf"))


_TOP_P_SLIPS = (
    Slip("sort with stable=True: equal probabilities must be taken in vocabulary order, and "
         "torch's default sort may reorder them", _top_p_unstable),
    Slip("compute the probabilities (softmax of logits.double()) and their sums in float64: over "
         "thousands of tokens, float32 arithmetic moves the mass ranked above a token across "
         "p - 1e-6", _top_p_float32),
    Slip("p = 1 keeps every token, also one whose probability is below the tolerance",
         _top_p_tolerance_at_one),
    Slip("equal probabilities are taken in vocabulary order (a stable sort): keep only as many "
         "as it takes to reach p", _top_p_keeps_ties),
    Slip("keep the token that crosses p too: a token is kept while the tokens ranked above it "
         "have not reached p", _top_p_includes_self),
    Slip("a cumulative probability that rounds just below p has reached p: sum in float64 and "
         "allow for rounding at the boundary", _top_p_no_tolerance),
    Slip("accumulate probabilities (softmax), not logits", _top_p_on_logits),
)


# 12. max_copy_length ---------------------------------------------------------------------------


def _copy_cases() -> list[Case]:
    def draw(seed: int, alphabet: tuple[int, int], power_of_two: bool) -> Inputs:
        def inputs() -> dict[str, Any]:
            a = 2 ** pick(seed, 1, 8) if power_of_two else pick(seed, *alphabet)
            while power_of_two is False and a & (a - 1) == 0:  # not a power of two
                a += 1
            return {"state_floats": pick(seed + 1, 1, 4096), "bits_per_float":
                    (16, 32, 64)[pick(seed + 2, 0, 2)], "alphabet_size": a}
        return inputs

    def one_bit() -> dict[str, Any]:
        return {"state_floats": pick(98, 1, 40), "bits_per_float": 1, "alphabet_size": 2}

    return [
        Case("an alphabet of a power of two symbols (a whole number of bits each)",
             draw(95, (2, 2), True)),
        Case("an alphabet of a size that is not a power of two", draw(96, (3, 1000), False)),
        Case("a large alphabet", draw(97, (1000, 100_000), False)),
        Case("one bit per float, two symbols", one_bit),
        Case("a state smaller than one symbol", lambda: {"state_floats": 1, "bits_per_float": 8,
                                                          "alphabet_size": 300 + pick(99, 0, 50)}),
    ]


def _copy_bound(state_floats: int, bits_per_float: int, alphabet_size: int, slip: str = "") -> int:
    """A wrong bound, one per ``slip`` (no setting of it is correct)."""
    bits = state_floats * bits_per_float
    if slip == "natural log":
        return math.floor(bits / math.log(alphabet_size))
    if slip == "floats as bits":
        return math.floor(state_floats / math.log2(alphabet_size))
    if slip == "ceil":
        return math.ceil(bits / math.log2(alphabet_size))
    if slip == "strict":  # the longest n with A^n < 2^S
        n = 0
        while alphabet_size ** (n + 1) < 2 ** bits:
            n += 1
        return n
    raise ValueError(slip)


_COPY_SLIPS = (
    Slip("a symbol of A equally likely values carries log2 A bits, not ln A",
         partial(_copy_bound, slip="natural log")),
    Slip("the state holds state_floats * bits_per_float bits", partial(_copy_bound,
                                                                       slip="floats as bits")),
    Slip("round down: a string that needs more bits than the state holds cannot always be "
         "copied", partial(_copy_bound, slip="ceil")),
    Slip("a string of exactly S bits still fits: A^n <= 2^S strings, 2^S states",
         partial(_copy_bound, slip="strict")),
)


# Registry --------------------------------------------------------------------------------------

# Each forbidden callable is listed once (the guard names the exercise it is listed under).
_SAMPLING_FORBIDDEN = (sampling.apply_temperature, sampling.top_k_filter, sampling.filter_logits,
                       sampling.filtered_distribution, sampling.sample_next, sampling.sample)

EXERCISES = {ex.id: ex for ex in [
    Exercise(id="language_models.pair_counts", reference=bpe.pair_counts,
             cases=_pair_counts_cases, slips=_PAIR_COUNTS_SLIPS,
             call=pairs_as_rows),
    Exercise(id="language_models.merge", reference=bpe.merge, cases=_merge_cases,
             slips=_MERGE_SLIPS),
    Exercise(id="language_models.bpe_encode", reference=bpe_encode, cases=_bpe_encode_cases,
             slips=_BPE_ENCODE_SLIPS, forbidden=(bpe.Tokenizer, bpe.train_bpe)),
    Exercise(id="language_models.run_tokens", reference=bpe.run_tokens,
             cases=_run_tokens_cases, slips=_RUN_TOKENS_SLIPS),
    Exercise(id="language_models.bits_per_byte_loss", reference=gpt.bits_per_byte_loss,
             cases=_bpb_cases, slips=_BPB_SLIPS, forbidden=(gpt.lm_loss, gpt.bits_per_byte)),
    Exercise(id="language_models.generation_cost", reference=gpt.generation_cost,
             cases=_cost_cases, slips=_COST_SLIPS),
    Exercise(id="language_models.cached_chunk_attention", reference=cached_chunk_attention,
             cases=_chunk_cases, slips=_CHUNK_SLIPS,
             forbidden=(gpt.CausalSelfAttention, gpt.KVCache, gpt.Block, gpt.GPT,
                        attention.scaled_dot_product_attention, attention.causal_mask)),
    Exercise(id="language_models.largest_chunk", reference=largest_chunk,
             cases=_chunk_budget_cases, slips=_CHUNK_BUDGET_SLIPS),
    _LENGTH_NORMALISATION,
    Exercise(id="language_models.temperature_top_k", reference=temperature_top_k,
             cases=_top_k_cases, slips=_TOP_K_SLIPS, forbidden=_SAMPLING_FORBIDDEN),
    Exercise(id="language_models.top_p_filter", reference=top_p_filter,
             cases=_top_p_cases, slips=_TOP_P_SLIPS, forbidden=(sampling.top_p_filter,)),
    Exercise(id="language_models.max_copy_length", reference=copying.max_copy_length,
             cases=_copy_cases, slips=_COPY_SLIPS),
]}
