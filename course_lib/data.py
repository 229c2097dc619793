"""Synthetic sequence-to-sequence tasks, vocabularies and padded batches; offline and seeded.

Taught in chapter 1 (dates, reordering), reused by chapter 3 (a Transformer on the date task).

Two tasks, both generated from a seed with Python's ``random.Random`` (the same pairs on every
machine), with train, validation and test splits that share no source string:

* **Date normalisation** (:func:`date_task`): a date written in one of many human formats
  (``"Tuesday, 2 March 2021"``, ``"02/03/21"``, ``"March 2nd, 2021"``, ``"2021.03.02"``, ...)
  to its ISO form ``"2021-03-02"``; character level. Every date is a valid calendar date and the
  weekday, when written, is the right one. Numeric formats put the day first (European order),
  except those that start with the year.
* **Reordering** (:func:`reorder_task`): sentences of a toy grammar translated word by word into a
  second language in which adjectives follow their noun (``"big dog sees cat"`` ->
  ``"chien grand voit chat"``); word level, with the sentence length chosen by the caller
  (:func:`reorder_sentence`), for accuracy against input length.

Batches (:func:`collate`, :func:`batch_iterator`, :class:`Seq2SeqDataset`) hold padded source and
target tensors and boolean padding masks (``True`` = real token, the course's mask convention).
The target comes twice, shifted for teacher forcing: ``tgt_in = <bos> y`` and ``tgt_out = y <eos>``.

Example:
    >>> splits = date_task(DateTaskConfig(n_train=8, n_val=2, n_test=2))
    >>> src, tgt = splits.train[0]
    >>> batch = collate(splits.train[:4], splits.src_vocab, splits.tgt_vocab)
    >>> batch.src.shape[0], batch.tgt_in.shape == batch.tgt_out.shape
    (4, True)
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch.utils.data import Dataset

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIALS = (PAD, BOS, EOS, UNK)  # ids 0, 1, 2, 3 in every vocabulary

Pair = tuple[str, str]


# --------------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------------


class Vocab:
    """A token <-> id table with the special tokens ``<pad>=0, <bos>=1, <eos>=2, <unk>=3``.

    Args:
        tokens: the ordinary tokens (characters, or words); duplicates and specials are ignored,
            the order is kept (sort them for a vocabulary that does not depend on data order).
        sep: how a string is split into tokens and joined back: ``""`` for characters,
            ``" "`` for words.

    Example:
        >>> v = Vocab("ab")
        >>> v.encode("ba", add_eos=True)
        [5, 4, 2]
        >>> v.decode([1, 5, 4, 2, 0])
        'ba'
    """

    def __init__(self, tokens: Iterable[str], sep: str = "") -> None:
        self.sep = sep
        self.itos: list[str] = list(SPECIALS)
        for tok in tokens:
            if tok not in self.itos:
                self.itos.append(tok)
        self.stoi: dict[str, int] = {tok: i for i, tok in enumerate(self.itos)}

    pad_id = 0
    bos_id = 1
    eos_id = 2
    unk_id = 3

    def __len__(self) -> int:
        return len(self.itos)

    def __repr__(self) -> str:
        return f"Vocab(size={len(self)}, sep={self.sep!r})"

    def tokenize(self, text: str) -> list[str]:
        """Split ``text`` into tokens: characters when ``sep == ""``, else ``text.split(sep)``."""
        return list(text) if self.sep == "" else text.split(self.sep)

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """Token ids of ``text``; unknown tokens map to ``<unk>``."""
        ids = [self.stoi.get(tok, self.unk_id) for tok in self.tokenize(text)]
        return ([self.bos_id] if add_bos else []) + ids + ([self.eos_id] if add_eos else [])

    def decode(self, ids: Iterable[int] | torch.Tensor, strip_special: bool = True) -> str:
        """The string of ``ids``; stops at the first ``<eos>`` and drops ``<pad>``/``<bos>``.

        With ``strip_special=False`` every id is written, specials included.
        """
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        out: list[str] = []
        for i in ids:
            i = int(i)
            if strip_special:
                if i == self.eos_id:
                    break
                if i in (self.pad_id, self.bos_id):
                    continue
            out.append(self.itos[i] if 0 <= i < len(self.itos) else UNK)
        return self.sep.join(out)

    def tokens(self, ids: Iterable[int] | torch.Tensor) -> list[str]:
        """The token strings of ``ids``, specials included (labels for attention heatmaps)."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return [self.itos[int(i)] for i in ids]


# --------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Splits:
    """Train, validation and test pairs of a task, with its two vocabularies.

    No source string appears in two splits.
    """

    train: list[Pair]
    val: list[Pair]
    test: list[Pair]
    src_vocab: Vocab
    tgt_vocab: Vocab


def _unique_pairs(make: Callable[[random.Random], Pair], n: int, rng: random.Random,
                  what: str, exclude: frozenset[str] = frozenset()) -> list[Pair]:
    """``n`` pairs with distinct sources (none in ``exclude``), drawn with ``make(rng)``."""
    seen: set[str] = set(exclude)
    pairs: list[Pair] = []
    attempts = 0
    while len(pairs) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise ValueError(f"could not draw {n} distinct {what} examples; the task has too few "
                             "different inputs for this many examples (ask for fewer)")
        src, tgt = make(rng)
        if src not in seen:
            seen.add(src)
            pairs.append((src, tgt))
    return pairs


def _split(pairs: list[Pair], n_train: int, n_val: int,
           n_test: int) -> tuple[list[Pair], list[Pair], list[Pair]]:
    end_val = n_train + n_val
    return pairs[:n_train], pairs[n_train:end_val], pairs[end_val:end_val + n_test]


# --------------------------------------------------------------------------------------------
# Task 1: date normalisation
# --------------------------------------------------------------------------------------------

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def ordinal(n: int) -> str:
    """``1 -> "1st"``, ``2 -> "2nd"``, ``11 -> "11th"``, ``23 -> "23rd"``."""
    suffix = "th" if 11 <= n % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _fmt(d: dt.date, kind: str) -> str:
    day, month, year = d.day, d.month, d.year
    mon, wd = MONTHS[month - 1], WEEKDAYS[d.weekday()]
    table = {
        "weekday_d_month_y": f"{wd}, {day} {mon} {year}",    # Tuesday, 2 March 2021
        "dd/mm/yy": f"{day:02d}/{month:02d}/{year % 100:02d}",  # 02/03/21
        "month_dth_y": f"{mon} {ordinal(day)}, {year}",        # March 2nd, 2021
        "d_mon_y": f"{day} {mon[:3]} {year}",                  # 2 Mar 2021
        "yyyy.mm.dd": f"{year}.{month:02d}.{day:02d}",         # 2021.03.02
        "d/m/yyyy": f"{day}/{month}/{year}",                   # 2/3/2021
        "dd-mm-yyyy": f"{day:02d}-{month:02d}-{year}",         # 02-03-2021
        "the_dth_of_month_y": f"the {ordinal(day)} of {mon} {year}",  # the 2nd of March 2021
        "MONTH_d_y": f"{mon.upper()} {day}, {year}",           # MARCH 2, 2021
        "yyyymmdd": f"{year}{month:02d}{day:02d}",             # 20210302
        "wd_mon_d_y": f"{wd[:3]}, {mon[:3]} {day}, {year}",    # Tue, Mar 2, 2021
        "d.m.yyyy": f"{day}.{month}.{year}",                   # 2.3.2021
        "yyyy/mm/dd": f"{year}/{month:02d}/{day:02d}",         # 2021/03/02
        "d_month_yy": f"{day} {mon.lower()} '{year % 100:02d}",  # 2 march '21
    }
    return table[kind]


_TWO_DIGIT_YEAR = {"dd/mm/yy", "d_month_yy"}

#: The source formats of the date task, by name (each name shows the shape of the format).
DATE_FORMATS: tuple[str, ...] = (
    "weekday_d_month_y", "dd/mm/yy", "month_dth_y", "d_mon_y", "yyyy.mm.dd", "d/m/yyyy",
    "dd-mm-yyyy", "the_dth_of_month_y", "MONTH_d_y", "yyyymmdd", "wd_mon_d_y", "d.m.yyyy",
    "yyyy/mm/dd", "d_month_yy",
)


def format_date(date: dt.date, fmt: str) -> str:
    """Write ``date`` in the named format of :data:`DATE_FORMATS`.

    Example:
        >>> format_date(dt.date(2021, 3, 2), "weekday_d_month_y")
        'Tuesday, 2 March 2021'
        >>> format_date(dt.date(2021, 3, 2), "dd/mm/yy")
        '02/03/21'
    """
    if fmt not in DATE_FORMATS:
        raise ValueError(f"unknown date format {fmt!r}; choose one of {', '.join(DATE_FORMATS)}")
    return _fmt(date, fmt)


@dataclass(frozen=True)
class DateTaskConfig:
    """The date-normalisation task."""

    n_train: int = 20000  # training pairs
    n_val: int = 1000  # validation pairs
    n_test: int = 2000  # test pairs (exact match is measured here)
    min_year: int = 1950  # two-digit years are unambiguous within a century: 1950..2049
    max_year: int = 2049
    formats: tuple[str, ...] = DATE_FORMATS  # source formats, drawn uniformly
    seed: int = 0  # the pairs and their split depend on nothing else


def random_date_pair(rng: random.Random, config: DateTaskConfig = DateTaskConfig()) -> Pair:
    """One ``(human date, ISO date)`` pair: a uniform day in the year range, a uniform format."""
    start = dt.date(config.min_year, 1, 1).toordinal()
    end = dt.date(config.max_year, 12, 31).toordinal()
    date = dt.date.fromordinal(rng.randint(start, end))
    return format_date(date, rng.choice(config.formats)), date.isoformat()


def date_vocabs() -> tuple[Vocab, Vocab]:
    """Character vocabularies of the date task, independent of the seed and the split.

    The source vocabulary holds every character any format can write (found by writing every
    day of a leap year in every format); the target one the digits and ``-``.
    """
    chars: set[str] = set()
    for k in range(366):
        date = dt.date.fromordinal(dt.date(2000, 1, 1).toordinal() + k)
        for fmt in DATE_FORMATS:
            chars.update(format_date(date, fmt))
    return Vocab(sorted(chars)), Vocab("0123456789-")


def date_task(config: DateTaskConfig = DateTaskConfig()) -> Splits:
    """Train/validation/test pairs of the date-normalisation task (disjoint sources).

    Example:
        >>> s = date_task(DateTaskConfig(n_train=3, n_val=1, n_test=1, seed=1))
        >>> [len(s.train), len(s.val), len(s.test)]
        [3, 1, 1]
    """
    if config.min_year < 1 or config.max_year > 9999 or config.min_year > config.max_year:
        raise ValueError("need 1 <= min_year <= max_year <= 9999, got "
                         f"{config.min_year}..{config.max_year}")
    if config.max_year - config.min_year >= 100 and set(config.formats) & _TWO_DIGIT_YEAR:
        raise ValueError("two-digit years are ambiguous over more than 100 years; narrow the range")
    rng = random.Random(config.seed)
    n = config.n_train + config.n_val + config.n_test
    pairs = _unique_pairs(lambda r: random_date_pair(r, config), n, rng, "date")
    src_vocab, tgt_vocab = date_vocabs()
    return Splits(*_split(pairs, config.n_train, config.n_val, config.n_test), src_vocab, tgt_vocab)


# --------------------------------------------------------------------------------------------
# Task 2: reordering (adjective-noun order flips between the two languages)
# --------------------------------------------------------------------------------------------

#: Source word -> target word. Adjectives come before their noun in the source language and
#: after it in the target language; verbs join noun phrases.
ADJECTIVES = {"big": "grand", "small": "petit", "red": "rouge", "blue": "bleu", "old": "vieux",
              "young": "jeune", "happy": "heureux", "sad": "triste"}
NOUNS = {"dog": "chien", "cat": "chat", "bird": "oiseau", "fish": "poisson", "horse": "cheval",
         "cow": "vache", "mouse": "souris", "fox": "renard"}
VERBS = {"sees": "voit", "likes": "aime", "chases": "chasse", "eats": "mange", "bites": "mord",
         "helps": "aide"}


def _noun_phrase(rng: random.Random, size: int) -> tuple[list[str], list[str]]:
    noun = rng.choice(sorted(NOUNS))
    if size == 1:
        return [noun], [NOUNS[noun]]
    adj = rng.choice(sorted(ADJECTIVES))
    return [adj, noun], [NOUNS[noun], ADJECTIVES[adj]]  # the order flips


def reorder_sentence(rng: random.Random, length: int) -> Pair:
    """A source sentence of exactly ``length`` words and its translation (same length).

    Grammar: ``S -> NP | NP VERB S`` with ``NP -> NOUN | ADJ NOUN``; the translation maps each
    word and writes every ``ADJ NOUN`` as ``NOUN' ADJ'``.

    Example:
        >>> reorder_sentence(random.Random(0), 5)
        ('big horse eats small mouse', 'cheval grand mange souris petit')
        >>> len(reorder_sentence(random.Random(0), 7)[0].split())
        7
    """
    if length < 1:
        raise ValueError(f"length must be at least 1, got {length}")
    src: list[str] = []
    tgt: list[str] = []
    remaining = length
    while True:
        if remaining <= 2:
            s, t = _noun_phrase(rng, remaining)
            src += s
            tgt += t
            break
        # The first phrase takes 1 or 2 words; a verb and at least one more word follow.
        size = rng.choice([1, 2]) if remaining >= 4 else 1
        s, t = _noun_phrase(rng, size)
        verb = rng.choice(sorted(VERBS))
        src += s + [verb]
        tgt += t + [VERBS[verb]]
        remaining -= size + 1
    return " ".join(src), " ".join(tgt)


@dataclass(frozen=True)
class ReorderTaskConfig:
    """The reordering task; lengths are drawn uniformly from ``min_len..max_len`` words."""

    n_train: int = 20000  # training pairs
    n_val: int = 1000  # validation pairs
    n_test: int = 3000  # test pairs, spread over the lengths (accuracy against length)
    min_len: int = 4  # shortest sentence, in words
    max_len: int = 30  # longest sentence, in words
    seed: int = 0


def reorder_vocabs() -> tuple[Vocab, Vocab]:
    """Word vocabularies of the reordering task (sorted, independent of the seed)."""
    src = sorted({*ADJECTIVES, *NOUNS, *VERBS})
    tgt = sorted({*ADJECTIVES.values(), *NOUNS.values(), *VERBS.values()})
    return Vocab(src, sep=" "), Vocab(tgt, sep=" ")


def reorder_task(config: ReorderTaskConfig = ReorderTaskConfig()) -> Splits:
    """Train/validation/test pairs of the reordering task (disjoint sources).

    Example:
        >>> s = reorder_task(ReorderTaskConfig(n_train=4, n_val=1, n_test=1, min_len=5, max_len=6))
        >>> all(5 <= len(src.split()) <= 6 for src, _ in s.train)
        True
    """
    if not 1 <= config.min_len <= config.max_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got {config.min_len}..{config.max_len}")
    rng = random.Random(config.seed)
    n = config.n_train + config.n_val + config.n_test

    def make(r: random.Random) -> Pair:
        return reorder_sentence(r, r.randint(config.min_len, config.max_len))

    pairs = _unique_pairs(make, n, rng, "reordering")
    src_vocab, tgt_vocab = reorder_vocabs()
    return Splits(*_split(pairs, config.n_train, config.n_val, config.n_test), src_vocab, tgt_vocab)


def group_by_length(pairs: Sequence[Pair], vocab: Vocab) -> dict[int, list[Pair]]:
    """Pairs bucketed by source length in ``vocab``'s tokens, lengths sorted ascending."""
    groups: dict[int, list[Pair]] = {}
    for pair in pairs:
        groups.setdefault(len(vocab.tokenize(pair[0])), []).append(pair)
    return dict(sorted(groups.items()))


# --------------------------------------------------------------------------------------------
# Batches
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Batch:
    """A padded batch of pairs. ``B`` pairs, ``S`` source and ``T`` target positions.

    Attributes:
        src: ``(B, S)`` long, source ids padded with ``<pad>``.
        src_mask: ``(B, S)`` bool, ``True`` at real tokens.
        tgt_in: ``(B, T)`` long, ``<bos> y_1 .. y_n`` (the decoder's inputs, teacher forcing).
        tgt_out: ``(B, T)`` long, ``y_1 .. y_n <eos>`` (what the decoder must predict).
        tgt_mask: ``(B, T)`` bool, ``True`` where ``tgt_out`` is a real token (``<eos>`` included).
    """

    src: torch.Tensor
    src_mask: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    tgt_mask: torch.Tensor

    def to(self, device: torch.device | str) -> Batch:
        """The same batch on ``device``."""
        return Batch(*(t.to(device) for t in (self.src, self.src_mask, self.tgt_in,
                                              self.tgt_out, self.tgt_mask)))

    def __len__(self) -> int:
        return self.src.shape[0]


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int = 0, *,
                  device: torch.device | str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists into ``(B, L)`` long ids and a ``(B, L)`` bool mask (True = real).

    Both are made on ``device`` (the default device when ``None``).

    Example:
        >>> ids, mask = pad_sequences([[5, 6], [7]])
        >>> ids.tolist(), mask.tolist()
        ([[5, 6], [7, 0]], [[True, True], [True, False]])
    """
    if len(seqs) == 0:
        raise ValueError("cannot pad an empty list of sequences")
    lengths = [len(s) for s in seqs]
    width = max(lengths)
    # One tensor from nested lists: much faster than filling row by row.
    ids = torch.tensor([list(s) + [pad_id] * (width - n) for s, n in zip(seqs, lengths)],
                       dtype=torch.long, device=device).reshape(len(seqs), width)
    mask = (torch.arange(width, device=device)[None, :]
            < torch.tensor(lengths, device=device)[:, None])  # (B, width)
    return ids, mask


def collate(pairs: Sequence[Pair], src_vocab: Vocab, tgt_vocab: Vocab, *,
            device: torch.device | str | None = None) -> Batch:
    """Encode and pad ``(source, target)`` string pairs into a :class:`Batch` on ``device``."""
    return _collate_ids([(src_vocab.encode(s), tgt_vocab.encode(t)) for s, t in pairs],
                        src_vocab, tgt_vocab, device)


def _collate_ids(encoded: Sequence[tuple[list[int], list[int]]], src_vocab: Vocab,
                 tgt_vocab: Vocab, device: torch.device | str | None = None) -> Batch:
    """:func:`collate` of pairs already encoded as id lists (without specials)."""
    src, src_mask = pad_sequences([s for s, _ in encoded], src_vocab.pad_id, device=device)
    tgt_in, _ = pad_sequences([[tgt_vocab.bos_id] + t for _, t in encoded], tgt_vocab.pad_id,
                              device=device)
    tgt_out, tgt_mask = pad_sequences([t + [tgt_vocab.eos_id] for _, t in encoded],
                                      tgt_vocab.pad_id, device=device)
    return Batch(src, src_mask, tgt_in, tgt_out, tgt_mask)


class Seq2SeqDataset(Dataset[Pair]):
    """A ``torch.utils.data.Dataset`` of string pairs; use ``collate_fn=dataset.collate``.

    Example:
        >>> s = date_task(DateTaskConfig(n_train=8, n_val=1, n_test=1))
        >>> ds = Seq2SeqDataset(s.train, s.src_vocab, s.tgt_vocab)
        >>> loader = torch.utils.data.DataLoader(ds, batch_size=4, collate_fn=ds.collate)
        >>> next(iter(loader)).src.shape[0]
        4
    """

    def __init__(self, pairs: Sequence[Pair], src_vocab: Vocab, tgt_vocab: Vocab) -> None:
        self.pairs = list(pairs)
        self.src_vocab = src_vocab
        self.tgt_vocab = tgt_vocab

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, index: int) -> Pair:
        return self.pairs[index]

    def collate(self, pairs: Sequence[Pair]) -> Batch:
        return collate(pairs, self.src_vocab, self.tgt_vocab)


def batch_iterator(pairs: Sequence[Pair], src_vocab: Vocab, tgt_vocab: Vocab, batch_size: int,
                   *, shuffle: bool = True, seed: int = 0, epochs: int | None = None,
                   drop_last: bool = False) -> Iterator[Batch]:
    """Batches of ``pairs``, reshuffled every epoch from ``seed``; endless when ``epochs=None``.

    Example:
        >>> s = date_task(DateTaskConfig(n_train=10, n_val=1, n_test=1))
        >>> [len(b) for b in batch_iterator(s.train, s.src_vocab, s.tgt_vocab, 4, epochs=1)]
        [4, 4, 2]
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if len(pairs) == 0:
        raise ValueError("no pairs to batch")
    rng = random.Random(seed)
    order = list(range(len(pairs)))
    encoded = [(src_vocab.encode(s), tgt_vocab.encode(t)) for s, t in pairs]  # once, not per epoch
    epoch = 0
    while epochs is None or epoch < epochs:
        if shuffle:
            rng.shuffle(order)
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            if drop_last and len(chunk) < batch_size:
                break
            yield _collate_ids([encoded[i] for i in chunk], src_vocab, tgt_vocab)
        epoch += 1
