r"""Byte-level byte-pair encoding (BPE), from scratch: training, encoding, decoding.

Taught in chapter 4, section 1 (tokenization). Byte-level BPE (Sennrich et al., 2016; Radford et
al., 2019, GPT-2) starts from the 256 possible bytes, so every string has an encoding, and learns
*merges*: repeatedly, the most frequent pair of adjacent tokens becomes one new token.

The pieces, each a small function the chapter builds on:

* :func:`pair_counts` counts adjacent pairs; :func:`merge` replaces every occurrence of a pair by
  a new id (left to right, without overlaps).
* :func:`split_on_special` cuts text on special tokens first (the longest special wins where
  two start at the same place), so that no merge ever crosses them; :func:`pretokenize` cuts the
  rest with GPT-2's regular expression (:data:`GPT2_PATTERN`: words with their leading space,
  numbers, punctuation, white space), so that merges never cross a word boundary either.
* :func:`train_bpe` learns the merges to a vocabulary size. It counts each distinct pre-token
  once (with its frequency) and, after each merge, updates the pair counts of the pre-tokens that
  contained the merged pair only (no full recount). Ties between equally frequent pairs go to the
  lexicographically greater pair of byte strings (the convention of GPT-2-style trainers such as
  Stanford CS336's, whose reference merges the tests reproduce exactly).
* :class:`Tokenizer` encodes (apply the learned merges in the order they were learned) and decodes
  (concatenate the tokens' bytes and decode UTF-8). It also loads GPT-2's released files
  (:meth:`Tokenizer.from_gpt2_files`), written in GPT-2's byte-to-unicode alphabet
  (:func:`bytes_to_unicode`), and then gives the ids of GPT-2's own tokenizer.
* :func:`truncated` keeps a tokenizer's first merges (every smaller vocabulary from one training
  run); :func:`token_lengths` gives each token's length in bytes (for losses in bits per byte).
* :func:`run_tokens` counts the tokens of a run of one repeated byte under the merges that double
  it (the chapter's exercise on uneven compression).

Layout of a trained vocabulary: ids ``0..255`` are the single bytes (id ``b`` is byte ``b``),
``256, 257, ...`` the merged tokens in the order they were learned, then the special tokens.
"""

from __future__ import annotations

import heapq
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import regex

Pair = tuple[int, int]

#: GPT-2's pre-tokenisation pattern (Radford et al., 2019; as in tiktoken's ``gpt2`` encoding).
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_GPT2_REGEX = regex.compile(GPT2_PATTERN)


def pair_counts(ids: Sequence[int], counts: dict[Pair, int] | None = None,
                weight: int = 1) -> dict[Pair, int]:
    """Count each pair of adjacent ids (adding ``weight`` per occurrence to ``counts``).

    Example:
        >>> pair_counts([1, 2, 3, 1, 2])
        {(1, 2): 2, (2, 3): 1, (3, 1): 1}
    """
    counts = {} if counts is None else counts
    for pair in zip(ids, ids[1:]):
        counts[pair] = counts.get(pair, 0) + weight
    return counts


def merge(ids: Sequence[int], pair: Pair, new_id: int) -> list[int]:
    """Replace every occurrence of ``pair`` in ``ids`` by ``new_id``, left to right, no overlaps.

    Example:
        >>> merge([1, 2, 3, 1, 2], (1, 2), 9)
        [9, 3, 9]
        >>> merge([5, 5, 5], (5, 5), 9)  # "aaa": the first two merge, the third stays
        [9, 5]
    """
    out: list[int] = []
    i = 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def split_on_special(text: str, special_tokens: Iterable[str]) -> list[tuple[str, bool]]:
    """Cut ``text`` into ``(chunk, is_special)`` pieces at the special tokens, in order.

    Scanning left to right, the special that starts first wins; of two that start at the same
    place, the longest. Empty chunks are dropped.

    Example:
        >>> split_on_special("a<|e|><|e|>b", ["<|e|>", "<|e|><|e|>"])
        [('a', False), ('<|e|><|e|>', True), ('b', False)]
    """
    specials = sorted(set(special_tokens), key=len, reverse=True)  # longest first
    if not specials:
        return [(text, False)] if text else []
    parts = regex.split("(" + "|".join(regex.escape(s) for s in specials) + ")", text)
    # regex.split with one group alternates: text, special, text, special, ..., text
    return [(part, i % 2 == 1) for i, part in enumerate(parts) if part]


def pretokenize(text: str) -> list[str]:
    """Cut text (without special tokens) into GPT-2's pre-tokens; merges stay inside each one.

    Example:
        >>> pretokenize("Hello, world! It's 2024.")
        ['Hello', ',', ' world', '!', ' It', "'s", ' 2024', '.']
    """
    pieces: list[str] = _GPT2_REGEX.findall(text)
    return pieces


def _check_specials(special_tokens: Iterable[str]) -> list[str]:
    specials = list(dict.fromkeys(special_tokens))  # unique, in order
    for s in specials:
        if not isinstance(s, str) or not s:
            raise ValueError(f"special tokens must be non-empty strings, got {s!r}")
    return specials


def _descending(token: bytes) -> tuple[int, ...]:
    """A key that sorts byte strings in *decreasing* lexicographic order (for a min-heap).

    Bytes ``x`` become ``255 - x`` and a terminator ``256`` (above any byte) ends the key, so a
    string sorts before its own prefixes; concatenated keys of a pair compare like the pair.
    """
    return (*(255 - x for x in token), 256)


def train_bpe(text: str, vocab_size: int, special_tokens: Iterable[str] = (),
              ) -> tuple[dict[int, bytes], list[tuple[bytes, bytes]]]:
    r"""Learn byte-level BPE merges on ``text`` until the vocabulary has ``vocab_size`` tokens.

    Each step merges the most frequent adjacent pair :math:`(a, b)` (counted over pre-tokens,
    never across a pre-token or a special token), ties going to the lexicographically greater
    :math:`(\text{bytes}(a), \text{bytes}(b))`. Training stops early when no pair is left.

    Args:
        text: the training text.
        vocab_size: the final vocabulary size, ``256 + merges + specials``; at least
            ``256 + len(special_tokens)``.
        special_tokens: strings that are never split or merged; they get the last ids.

    Returns:
        ``(vocab, merges)``: ``vocab`` maps id to the token's bytes (ids ``0..255`` are the bytes,
        then the merges in order, then the specials); ``merges`` lists the merged pairs of byte
        strings in the order they were learned.

    Example:
        >>> vocab, merges = train_bpe("low low lower lowest", 258)
        >>> merges  # "ow" occurs 4 times; then "l" + "ow" (4) beats " " + "l" (3)
        [(b'o', b'w'), (b'l', b'ow')]
        >>> vocab[256], vocab[257]
        (b'ow', b'low')
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    specials = _check_specials(special_tokens)
    if vocab_size < 256 + len(specials):
        raise ValueError(f"vocab_size={vocab_size} is below the 256 byte tokens plus "
                         f"{len(specials)} special tokens = {256 + len(specials)}")
    vocab = {i: bytes([i]) for i in range(256)}
    # Each distinct pre-token once, as a list of ids, with how often it occurs.
    frequency: Counter[str] = Counter()
    for chunk, is_special in split_on_special(text, specials):
        if not is_special:
            frequency.update(pretokenize(chunk))
    words = [list(piece.encode("utf-8")) for piece in frequency]
    weights = list(frequency.values())
    counts: dict[Pair, int] = {}
    where: dict[Pair, set[int]] = {}  # pair -> the words that contain it
    for w, (ids, weight) in enumerate(zip(words, weights)):
        pair_counts(ids, counts, weight)
        for pair in zip(ids, ids[1:]):
            where.setdefault(pair, set()).add(w)

    def entry(pair: Pair) -> tuple[int, tuple[int, ...], Pair]:
        # Min-heap order: highest count first, then the greater pair of byte strings.
        return (-counts[pair], _descending(vocab[pair[0]]) + _descending(vocab[pair[1]]), pair)

    heap = [entry(pair) for pair in counts]
    heapq.heapify(heap)
    merges: list[tuple[bytes, bytes]] = []
    while len(vocab) < vocab_size - len(specials) and heap:
        neg_count, _, pair = heapq.heappop(heap)
        if counts.get(pair, 0) != -neg_count:
            continue  # a stale entry: the count changed since it was pushed
        new_id = len(vocab)
        vocab[new_id] = vocab[pair[0]] + vocab[pair[1]]
        merges.append((vocab[pair[0]], vocab[pair[1]]))
        changed: set[Pair] = set()
        for w in where.pop(pair):  # only the words that contain the pair change
            old, weight = words[w], weights[w]
            new = merge(old, pair, new_id)
            old_pairs, new_pairs = list(zip(old, old[1:])), list(zip(new, new[1:]))
            for p in old_pairs:
                counts[p] -= weight
            for p in new_pairs:
                counts[p] = counts.get(p, 0) + weight
            for p in set(old_pairs) - set(new_pairs):
                if p in where:
                    where[p].discard(w)
            for p in new_pairs:
                where.setdefault(p, set()).add(w)
            changed.update(old_pairs, new_pairs)
            words[w] = new
        for p in changed:
            if counts.get(p, 0) > 0:
                heapq.heappush(heap, entry(p))
            else:
                counts.pop(p, None)
    for s in specials:
        vocab[len(vocab)] = s.encode("utf-8")
    return vocab, merges


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's map from each byte to a printable character (its files are written with it).

    Printable Latin-1 bytes map to themselves; the others (control characters, space, ...) to
    ``chr(256 + n)`` in order, so a space is ``"Ġ"`` and a newline ``"Ċ"``.

    Example:
        >>> b2u = bytes_to_unicode()
        >>> b2u[ord("a")], b2u[ord(" ")], b2u[ord("\\n")]
        ('a', 'Ġ', 'Ċ')
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    table = {b: chr(b) for b in printable}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


class Tokenizer:
    """A byte-level BPE tokenizer: a vocabulary, its merges in order, and special tokens.

    Args:
        vocab: id -> the token's bytes; must contain the 256 single bytes.
        merges: pairs of byte strings, in the order they were learned; each pair's parts and
            their concatenation must be in ``vocab``.
        special_tokens: strings encoded as one token each, never merged; a special missing
            from ``vocab`` is added with the next free id.

    Example:
        >>> tok = Tokenizer.train("the cat sat on the mat<|endoftext|>the end", 262,
        ...                       ["<|endoftext|>"])
        >>> ids = tok.encode("the mat<|endoftext|>")
        >>> [tok.vocab[i] for i in ids]
        [b'the', b' ', b'm', b'at', b'<|endoftext|>']
        >>> tok.decode(ids)
        'the mat<|endoftext|>'
    """

    def __init__(self, vocab: dict[int, bytes], merges: Sequence[tuple[bytes, bytes]],
                 special_tokens: Iterable[str] = ()) -> None:
        self.vocab = dict(vocab)
        self.merges = list(merges)
        specials = _check_specials(special_tokens)
        inverse = {token: i for i, token in self.vocab.items()}
        if missing := [b for b in range(256) if bytes([b]) not in inverse]:
            raise ValueError(f"vocab lacks the single bytes {missing[:5]}...: a byte-level "
                             "vocabulary holds all 256, so that every string can be encoded")
        self.byte_ids = [inverse[bytes([b])] for b in range(256)]
        self.ranks: dict[Pair, tuple[int, int]] = {}  # (a, b) -> (rank, id of a + b)
        for rank, (a, b) in enumerate(self.merges):
            if a not in inverse or b not in inverse or a + b not in inverse:
                raise ValueError(f"merge {rank} {a!r} + {b!r} uses a token not in vocab")
            self.ranks[inverse[a], inverse[b]] = (rank, inverse[a + b])
        self.special_ids: dict[str, int] = {}
        for s in specials:
            token = s.encode("utf-8")
            if token not in inverse:
                inverse[token] = max(self.vocab) + 1
                self.vocab[inverse[token]] = token
            self.special_ids[s] = inverse[token]
        self._cache: dict[str, list[int]] = {}

    @classmethod
    def train(cls, text: str, vocab_size: int, special_tokens: Iterable[str] = ()) -> Tokenizer:
        """Train on ``text`` (:func:`train_bpe`) and return the tokenizer."""
        specials = _check_specials(special_tokens)
        return cls(*train_bpe(text, vocab_size, specials), specials)

    @classmethod
    def from_gpt2_files(cls, vocab_path: str | Path, merges_path: str | Path,
                        special_tokens: Iterable[str] = ("<|endoftext|>",)) -> Tokenizer:
        """Load GPT-2's ``encoder.json``/``vocab.bpe`` (here ``gpt2_vocab.json``/
        ``gpt2_merges.txt``).

        Both files write bytes in GPT-2's alphabet (:func:`bytes_to_unicode`); the merges file
        has one ``"a b"`` pair per line, after an optional ``#version`` line.

        Raises:
            ValueError: a file that is not what its argument names (the two paths swapped, a
                vocabulary that is not a JSON object of token -> id, a merge line that is not a
                pair), naming the file and the line.
        """
        decode = {c: b for b, c in bytes_to_unicode().items()}

        def to_bytes(token: str, where: str) -> bytes:
            if unknown := sorted(set(token) - set(decode)):
                raise ValueError(f"{where}: {token!r} holds {unknown[:3]}, characters outside "
                                 "GPT-2's byte alphabet (bytes_to_unicode)")
            return bytes(decode[c] for c in token)

        text = Path(vocab_path).read_text(encoding="utf-8")
        try:
            table = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"vocab_path {str(vocab_path)!r} is not JSON ({err.msg}, line "
                             f"{err.lineno}); GPT-2's encoder.json is: were vocab_path and "
                             "merges_path swapped?") from None
        if not isinstance(table, dict) or not all(isinstance(i, int) for i in table.values()):
            raise ValueError(f"vocab_path {str(vocab_path)!r} must hold a JSON object of token -> "
                             f"id (GPT-2's encoder.json), got a {type(table).__name__}")
        vocab = {i: to_bytes(s, f"vocab_path {str(vocab_path)!r}") for s, i in table.items()}
        merges = []
        lines = Path(merges_path).read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, start=1):
            if line and not line.startswith("#version"):
                where = f"merges_path {str(merges_path)!r}, line {number}"
                pair = line.split(" ")
                if len(pair) != 2:
                    swapped = "; were vocab_path and merges_path swapped?" * line.startswith("{")
                    raise ValueError(f"{where}: expected a merge 'a b', got {line[:40]!r}"
                                     f"{swapped}")
                merges.append((to_bytes(pair[0], where), to_bytes(pair[1], where)))
        return cls(vocab, merges, special_tokens)

    def __len__(self) -> int:
        return len(self.vocab)

    def __repr__(self) -> str:
        return (f"Tokenizer(vocab_size={len(self)}, merges={len(self.merges)}, "
                f"special_tokens={list(self.special_ids)})")

    def _encode_piece(self, piece: str) -> list[int]:
        """One pre-token: its bytes, then the learned merges, earliest learned first."""
        if piece in self._cache:
            return self._cache[piece]
        ids = [self.byte_ids[b] for b in piece.encode("utf-8")]
        while len(ids) >= 2:
            # The adjacent pair that was merged earliest in training is merged first.
            pair = min(zip(ids, ids[1:]), key=lambda p: self.ranks.get(p, (len(self.ranks),))[0])
            if pair not in self.ranks:
                break
            ids = merge(ids, pair, self.ranks[pair][1])
        if len(self._cache) < 100_000:
            self._cache[piece] = ids
        return ids

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``: split on special tokens, pre-tokenise, merge each pre-token.

        Raises:
            TypeError: ``text`` is not a ``str``.
            ValueError: ``text`` holds a lone surrogate (not valid Unicode, no UTF-8 bytes).
        """
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, got {type(text).__name__} (decode bytes first)")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise ValueError(f"text holds {text[err.start]!r} at position {err.start}, a lone "
                             "surrogate: not valid Unicode, so it has no UTF-8 bytes") from None
        ids: list[int] = []
        for chunk, is_special in split_on_special(text, self.special_ids):
            if is_special:
                ids.append(self.special_ids[chunk])
            else:
                for piece in pretokenize(chunk):
                    ids.extend(self._encode_piece(piece))
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``: the tokens' bytes joined, decoded as UTF-8.

        A sequence that cuts a multi-byte character (e.g. a single token holding half an
        emoji) decodes the broken bytes to U+FFFD, as GPT-2 does.

        Raises:
            ValueError: an id that is not in the vocabulary.
        """
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        try:
            data = b"".join(self.vocab[i] for i in ids)
        except (KeyError, TypeError):
            bad = next(i for i in ids if not isinstance(i, int) or i not in self.vocab)
            raise ValueError(f"token id {bad!r} is not in the vocabulary (ids 0..{max(self.vocab)})"
                             ) from None
        return data.decode("utf-8", errors="replace")


def bytes_per_token(tokenizer: Tokenizer, text: str) -> float:
    """UTF-8 bytes of ``text`` per token: how much the tokenizer compresses it (1 = bytes).

    Example:
        >>> bytes_per_token(Tokenizer({i: bytes([i]) for i in range(256)}, []), "abc")
        1.0
    """
    ids = tokenizer.encode(text)
    return len(text.encode("utf-8")) / max(len(ids), 1)


def token_lengths(tokenizer: Tokenizer) -> list[int]:
    """The length in bytes of each token id ``0..max id`` (0 for an id the vocabulary skips).

    What a loss per token must be divided by to become a loss per byte
    (:func:`course_lib.gpt.bits_per_byte_loss`).

    Example:
        >>> tok = Tokenizer.train("aaab", 257)
        >>> token_lengths(tok)[ord("a")], token_lengths(tok)[256]
        (1, 2)
    """
    lengths = [0] * (max(tokenizer.vocab) + 1)
    for i, token in tokenizer.vocab.items():
        lengths[i] = len(token)
    return lengths


def truncated(tokenizer: Tokenizer, n_merges: int) -> Tokenizer:
    """The same tokenizer with only its first ``n_merges`` merges (and its special tokens).

    BPE learns merges greedily, one after another, so training to a vocabulary of
    ``256 + n_merges`` gives exactly these first merges: one training run gives every smaller
    vocabulary (used to plot compression against vocabulary size). Ids are laid out as
    :func:`train_bpe` lays them out: bytes, merges in order, then the special tokens.

    Example:
        >>> tok = Tokenizer.train("low low lower lowest", 258)
        >>> small = truncated(tok, 1)
        >>> len(small), small.merges
        (257, [(b'o', b'w')])
    """
    if not 0 <= n_merges <= len(tokenizer.merges):
        raise ValueError(f"n_merges must lie in 0..{len(tokenizer.merges)}, got {n_merges}")
    merges = tokenizer.merges[:n_merges]
    vocab = {i: bytes([i]) for i in range(256)}
    vocab.update({256 + i: a + b for i, (a, b) in enumerate(merges)})
    return Tokenizer(vocab, merges, tokenizer.special_ids)


def run_tokens(n: int, k: int) -> int:
    r"""Tokens of a run of ``n`` copies of one byte under the ``k`` merges that double it.

    Merge 0 joins two copies of the byte into token 256, merge :math:`i` two copies of token
    :math:`255 + i` into :math:`256 + i`, so the longest token holds :math:`2^k` copies. Encoding
    applies the merges in order, each left to right without overlaps: the run becomes
    :math:`\lfloor n / 2^k \rfloor` longest tokens, and the :math:`r = n \bmod 2^k` copies left
    at its end one token per binary digit 1 of :math:`r` (a run of :math:`2^k - 1` copies takes
    :math:`k` tokens, one more copy makes it 1).

    Example:
        >>> [run_tokens(n, 2) for n in range(9)]
        [0, 1, 1, 2, 1, 2, 2, 3, 2]
        >>> merge(merge(list(b"======="), (61, 61), 256), (256, 256), 257)  # 4 + 2 + 1 copies
        [257, 256, 61]
    """
    for name, value in (("n", n), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    return (n >> k) + bin(n & ((1 << k) - 1)).count("1")
