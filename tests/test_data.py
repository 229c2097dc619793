"""Tests of course_lib.data: vocabularies, the two tasks, splits, batches."""

from __future__ import annotations

import datetime as dt
import random
import re

import pytest
import torch

from course_lib import data
from course_lib.data import (
    DATE_FORMATS,
    Batch,
    DateTaskConfig,
    ReorderTaskConfig,
    Seq2SeqDataset,
    Vocab,
    batch_iterator,
    collate,
    date_task,
    format_date,
    group_by_length,
    ordinal,
    pad_sequences,
    reorder_sentence,
    reorder_task,
)

SMALL_DATES = DateTaskConfig(n_train=300, n_val=50, n_test=50, seed=3)
SMALL_REORDER = ReorderTaskConfig(n_train=300, n_val=50, n_test=50, min_len=4, max_len=12, seed=3)


# Known answers ------------------------------------------------------------------------------

def test_vocab_specials_and_round_trip() -> None:
    v = Vocab("abc")
    assert (v.pad_id, v.bos_id, v.eos_id, v.unk_id) == (0, 1, 2, 3)
    assert v.itos[:4] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert v.encode("cab", add_bos=True, add_eos=True) == [1, 6, 4, 5, 2]
    assert v.encode("zab") == [3, 4, 5]
    assert v.decode([1, 6, 4, 2, 5, 5]) == "ca"  # stops at <eos>
    assert v.decode(torch.tensor([6, 0, 0])) == "c"
    assert v.decode([1, 6], strip_special=False) == "<bos>c"


def test_word_vocab() -> None:
    v = Vocab(["dog", "cat"], sep=" ")
    assert v.encode("cat dog") == [5, 4]
    assert v.decode([5, 4, 2]) == "cat dog"
    assert v.tokens([1, 4]) == ["<bos>", "dog"]


def test_ordinals() -> None:
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 31)] == \
        ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "31st"]


def test_date_formats_known_answers() -> None:
    d = dt.date(2021, 3, 2)  # a Tuesday
    assert format_date(d, "weekday_d_month_y") == "Tuesday, 2 March 2021"
    assert format_date(d, "dd/mm/yy") == "02/03/21"
    assert format_date(d, "month_dth_y") == "March 2nd, 2021"
    assert format_date(d, "d_mon_y") == "2 Mar 2021"
    assert format_date(d, "yyyy.mm.dd") == "2021.03.02"
    assert format_date(d, "wd_mon_d_y") == "Tue, Mar 2, 2021"
    with pytest.raises(ValueError, match="unknown date format"):
        format_date(d, "nope")


def test_pad_sequences() -> None:
    ids, mask = pad_sequences([[5, 6, 7], [8]], pad_id=0)
    assert ids.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert mask.dtype == torch.bool and mask.tolist() == [[True] * 3, [True, False, False]]
    with pytest.raises(ValueError):
        pad_sequences([])


def test_collate_shifts_targets_for_teacher_forcing() -> None:
    src_v, tgt_v = Vocab("ab"), Vocab("xy")
    batch = collate([("ab", "xyx"), ("b", "y")], src_v, tgt_v)
    assert batch.src.tolist() == [[4, 5], [5, 0]]
    assert batch.src_mask.tolist() == [[True, True], [True, False]]
    assert batch.tgt_in.tolist() == [[1, 4, 5, 4], [1, 5, 0, 0]]
    assert batch.tgt_out.tolist() == [[4, 5, 4, 2], [5, 2, 0, 0]]
    assert batch.tgt_mask.tolist() == [[True] * 4, [True, True, False, False]]
    assert len(batch) == 2 and isinstance(batch.to("cpu"), Batch)


# Properties ---------------------------------------------------------------------------------

def test_date_task_is_deterministic_and_seed_dependent() -> None:
    a, b = date_task(SMALL_DATES), date_task(SMALL_DATES)
    assert a.train == b.train and a.val == b.val and a.test == b.test
    c = date_task(DateTaskConfig(n_train=300, n_val=50, n_test=50, seed=4))
    assert c.train != a.train


@pytest.mark.parametrize("make, config", [(date_task, SMALL_DATES), (reorder_task, SMALL_REORDER)])
def test_splits_are_disjoint_and_sized(make, config) -> None:
    s = make(config)
    assert (len(s.train), len(s.val), len(s.test)) == (config.n_train, config.n_val, config.n_test)
    srcs = [set(src for src, _ in part) for part in (s.train, s.val, s.test)]
    assert sum(len(x) for x in srcs) == config.n_train + config.n_val + config.n_test  # no repeats
    assert not (srcs[0] & srcs[1]) and not (srcs[0] & srcs[2]) and not (srcs[1] & srcs[2])


def test_dates_are_valid_and_weekdays_right() -> None:
    s = date_task(SMALL_DATES)
    weekday_of = {name: i for i, name in enumerate(data.WEEKDAYS)}
    for src, tgt in s.train + s.val + s.test:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", tgt)
        date = dt.date.fromisoformat(tgt)  # raises on an invalid calendar date
        assert 1950 <= date.year <= 2049
        assert str(date.day) in src
        for name, i in weekday_of.items():
            if src.startswith(name) or src.startswith(name[:3] + ","):
                assert date.weekday() == i, (src, tgt)
        assert all(ch in s.src_vocab.stoi for ch in src)


def test_every_format_appears_and_round_trips_through_the_vocab() -> None:
    src_v, _ = data.date_vocabs()
    rng = random.Random(0)
    for fmt in DATE_FORMATS:
        d = dt.date.fromordinal(rng.randint(dt.date(1950, 1, 1).toordinal(),
                                            dt.date(2049, 12, 31).toordinal()))
        text = format_date(d, fmt)
        assert src_v.decode(src_v.encode(text)) == text
        assert src_v.unk_id not in src_v.encode(text)


def test_two_digit_years_need_a_century() -> None:
    with pytest.raises(ValueError, match="two-digit"):
        date_task(DateTaskConfig(n_train=1, n_val=1, n_test=1, min_year=1900, max_year=2049))


@pytest.mark.parametrize("length", [1, 2, 3, 4, 5, 9, 20])
def test_reorder_sentence_length_and_reordering(length: int) -> None:
    rng = random.Random(length)
    for _ in range(20):
        src, tgt = reorder_sentence(rng, length)
        s, t = src.split(), tgt.split()
        assert len(s) == len(t) == length
        for i, word in enumerate(s):
            if word in data.ADJECTIVES:  # adjective noun -> noun' adjective'
                assert s[i + 1] in data.NOUNS
                assert t[i] == data.NOUNS[s[i + 1]] and t[i + 1] == data.ADJECTIVES[word]
            elif word in data.VERBS:
                assert t[i] == data.VERBS[word]
            elif i == 0 or s[i - 1] not in data.ADJECTIVES:
                assert t[i] == data.NOUNS[word]


def test_reorder_lengths_cover_the_range_and_group() -> None:
    s = reorder_task(SMALL_REORDER)
    groups = group_by_length(s.train, s.src_vocab)
    assert list(groups) == list(range(4, 13))
    assert all(len(src.split()) == n for n, pairs in groups.items() for src, _ in pairs)
    with pytest.raises(ValueError, match="too few"):
        reorder_task(ReorderTaskConfig(n_train=100, n_val=0, n_test=0, min_len=1, max_len=1))


def test_batch_iterator_epochs_shuffle_and_determinism() -> None:
    s = date_task(SMALL_DATES)
    batches = list(batch_iterator(s.train, s.src_vocab, s.tgt_vocab, 64, epochs=1, seed=1))
    assert [len(b) for b in batches] == [64] * 4 + [300 - 256]
    seen = sorted(s.src_vocab.decode(row) for b in batches for row in b.src)
    assert seen == sorted(src for src, _ in s.train)  # each pair exactly once per epoch
    again = list(batch_iterator(s.train, s.src_vocab, s.tgt_vocab, 64, epochs=1, seed=1))
    assert all(torch.equal(a.src, b.src) for a, b in zip(batches, again))
    endless = batch_iterator(s.train, s.src_vocab, s.tgt_vocab, 64, seed=1)
    assert sum(1 for _, _ in zip(range(12), endless)) == 12  # more than two epochs
    drop = list(batch_iterator(s.train, s.src_vocab, s.tgt_vocab, 64, epochs=1, drop_last=True))
    assert [len(b) for b in drop] == [64] * 4


def test_dataset_with_a_dataloader() -> None:
    s = date_task(SMALL_DATES)
    ds = Seq2SeqDataset(s.train, s.src_vocab, s.tgt_vocab)
    loader = torch.utils.data.DataLoader(ds, batch_size=16, collate_fn=ds.collate)
    batch = next(iter(loader))
    assert batch.src.shape[0] == 16 and batch.src_mask.sum(1).tolist() == \
        [len(src) for src, _ in s.train[:16]]
