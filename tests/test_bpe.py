"""Byte-level BPE: known answers, the four properties, and two peers.

Peers: the merges and vocabulary of Stanford CS336's reference BPE run (``corpus.en``, vocabulary
500, ``<|endoftext|>``), exactly and in order; and GPT-2's real tokenizer loaded from its released
files, against ``tiktoken`` built offline from the same files. The fixtures are read from
``../shared/peer-fixtures/`` (see its README); they are never copied into the repository.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from course_lib import bpe
from course_lib.bpe import Tokenizer, merge, pair_counts, split_on_special, train_bpe
from course_lib.corpus import load_shakespeare
from tests.conftest import PEER_FIXTURES

pytestmark = pytest.mark.ch04

FIXTURES = PEER_FIXTURES / "cs336-a1"
EOT = "<|endoftext|>"

TRICKY = [
    "",
    "a",
    " ",
    "hello world",
    "Hello, world! It's 2024... isn't it?",
    "🙂🙃 👩‍👩‍👧‍👦 🏳️‍🌈",               # emoji, zero-width joiners, variation selectors
    "e\u0301 a\u0308\u0323 n\u0303",     # combining marks
    "\x00\x01\x07\x1b[31m\x7f\t\r\n\x0b\x0c",  # control characters
    "   leading and trailing   \n\n\n",
    "中文字符 日本語 한국어 العربية עברית हिन्दी",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \U0010ffff \ufeff\u200b",
    "'s 'S 'LL 've're'd 123 4567.89",
    "a" * 300,
    f"{EOT}",
    f"x{EOT}{EOT}y {EOT}\n",
]


def _fixture(name: str) -> Path:
    path = FIXTURES / name
    assert path.exists(), (f"peer fixture {path} not found: ../shared/peer-fixtures beside the "
                           "checkout, or set COURSE_PEER_FIXTURES")
    return path


def _random_unicode(rng: random.Random, n: int) -> str:
    """Any code points except surrogates (which are not Unicode text)."""
    out = []
    while len(out) < n:
        cp = rng.choice([rng.randrange(0x80), rng.randrange(0x800), rng.randrange(0x10000),
                         rng.randrange(0x110000)])
        if not 0xD800 <= cp <= 0xDFFF:
            out.append(chr(cp))
    return "".join(out)


@pytest.fixture(scope="module")
def shakespeare_tok() -> Tokenizer:
    return Tokenizer.train(load_shakespeare("train")[:60_000], 400, [EOT])


@pytest.fixture(scope="module")
def gpt2_tok() -> Tokenizer:
    return Tokenizer.from_gpt2_files(_fixture("gpt2_vocab.json"), _fixture("gpt2_merges.txt"))


@pytest.fixture(scope="module")
def tiktoken_gpt2(tmp_path_factory: pytest.TempPathFactory):
    import tiktoken  # a development requirement (requirements-dev.txt)
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    # tiktoken skips the first line of vocab.bpe (OpenAI's "#version: 0.2"), which the fixture
    # lacks: give it a temporary file with the header back, and no download cache.
    vocab_bpe = tmp_path_factory.mktemp("gpt2") / "vocab.bpe"
    vocab_bpe.write_text("#version: 0.2\n" + _fixture("gpt2_merges.txt").read_text("utf-8"),
                         encoding="utf-8")
    mp = pytest.MonkeyPatch()
    mp.setenv("TIKTOKEN_CACHE_DIR", "")
    try:
        ranks = data_gym_to_mergeable_bpe_ranks(str(vocab_bpe), str(_fixture("gpt2_vocab.json")))
    finally:
        mp.undo()
    return tiktoken.Encoding("gpt2-offline", pat_str=bpe.GPT2_PATTERN, mergeable_ranks=ranks,
                             special_tokens={EOT: 50256})


# --- known answers ----------------------------------------------------------------------------

def test_pair_counts_and_merge_by_hand() -> None:
    assert pair_counts([1, 1, 1, 2]) == {(1, 1): 2, (1, 2): 1}
    assert pair_counts([7]) == {} and pair_counts([]) == {}
    assert merge([1, 1, 1, 1], (1, 1), 5) == [5, 5]
    assert merge([1, 2, 1, 3], (1, 3), 9) == [1, 2, 9]
    assert merge([], (1, 2), 9) == []


def test_special_tokens_are_split_first_and_the_longest_wins() -> None:
    specials = [EOT, EOT + EOT, "<|end"]
    assert split_on_special(f"a{EOT}{EOT}{EOT}b", specials) == [
        ("a", False), (EOT + EOT, True), (EOT, True), ("b", False)]
    assert split_on_special("<|endx", specials) == [("<|end", True), ("x", False)]
    assert split_on_special("plain", []) == [("plain", False)]
    tok = Tokenizer({i: bytes([i]) for i in range(256)}, [], [EOT, EOT + EOT])
    assert tok.encode(EOT * 3) == [tok.special_ids[EOT + EOT], tok.special_ids[EOT]]


def test_training_never_merges_across_special_tokens_or_pretokens() -> None:
    vocab, merges = train_bpe(f"ab{EOT}ab{EOT}ab cd cd", 300, [EOT])
    assert vocab[len(vocab) - 1] == EOT.encode()
    assert all(b"<|" not in a + b and b" " not in (a + b)[1:] for a, b in merges)


def _naive_train(text: str, vocab_size: int) -> list[tuple[bytes, bytes]]:
    """A reference trainer that recounts every pair of every pre-token at each merge."""
    words = [list(p.encode()) for p in bpe.pretokenize(text)]
    vocab = {i: bytes([i]) for i in range(256)}
    merges = []
    while len(vocab) < vocab_size:
        counts: dict[tuple[int, int], int] = {}
        for w in words:
            pair_counts(w, counts)
        if not counts:
            break
        best = max(counts, key=lambda p: (counts[p], vocab[p[0]], vocab[p[1]]))
        vocab[len(vocab)] = vocab[best[0]] + vocab[best[1]]
        merges.append((vocab[best[0]], vocab[best[1]]))
        words = [merge(w, best, len(vocab) - 1) for w in words]
    return merges


@pytest.mark.parametrize("seed", range(4))
def test_incremental_training_equals_recounting_from_scratch(seed: int) -> None:
    rng = random.Random(seed)
    alphabet = ["a", "b", "ab", "ba", " ", "aa", "é", "\n"]  # many ties, overlapping pairs
    text = "".join(rng.choice(alphabet) for _ in range(400))
    assert train_bpe(text, 300)[1] == _naive_train(text, 300)


def test_ties_go_to_the_lexicographically_greater_pair() -> None:
    _, merges = train_bpe("ab ab cd cd", 257)  # (a,b), (c,d), ( ,a), ( ,c) all occur twice
    assert merges == [(b"c", b"d")]
    _, merges = train_bpe("ba za", 257)  # (b,a) and (z,a) once each: b"z" > b"b"
    assert merges == [(b"z", b"a")]


def test_training_stops_when_no_pair_is_left() -> None:
    vocab, merges = train_bpe("aaaa", 1000)
    assert merges == [(b"a", b"a"), (b"aa", b"aa")] and len(vocab) == 258


# --- the four properties ----------------------------------------------------------------------

@pytest.mark.parametrize("text", TRICKY)
def test_reversible_on_tricky_strings(text: str, shakespeare_tok: Tokenizer,
                                      gpt2_tok: Tokenizer) -> None:
    for tok in (shakespeare_tok, gpt2_tok):
        assert tok.decode(tok.encode(text)) == text


def test_reversible_on_random_unicode(shakespeare_tok: Tokenizer) -> None:
    rng = random.Random(0)
    for n in (1, 2, 5, 50, 500):
        text = _random_unicode(rng, n)
        assert shakespeare_tok.decode(shakespeare_tok.encode(text)) == text


def test_general_text_unlike_the_training_text(shakespeare_tok: Tokenizer) -> None:
    german = _fixture("german.txt").read_text(encoding="utf-8")
    for text in (german, "def f(x):\n    return {'k': [1, 2]}\n", "🙂" * 20):
        ids = shakespeare_tok.encode(text)
        assert shakespeare_tok.decode(ids) == text
        assert len(ids) <= len(text.encode("utf-8"))  # never worse than bytes


def test_compressive_more_merges_fewer_tokens() -> None:
    train = load_shakespeare("train")[:100_000]
    held_out = load_shakespeare("val")[:20_000]
    ratios = [bpe.bytes_per_token(Tokenizer.train(train, v), held_out) for v in (256, 300, 500,
                                                                                  1000)]
    assert ratios[0] == 1.0
    assert all(a < b for a, b in zip(ratios, ratios[1:])) and ratios[-1] > 2.2, ratios


def test_statistical_frequent_strings_become_single_tokens(shakespeare_tok: Tokenizer) -> None:
    text = load_shakespeare("train")[:60_000]
    # The first merge is the most frequent pair of bytes inside pre-tokens.
    counts: dict[tuple[int, int], int] = {}
    for piece in bpe.pretokenize(text.replace(EOT, "")):
        pair_counts(list(piece.encode()), counts)
    top = max(counts, key=lambda p: (counts[p], bytes([p[0]]), bytes([p[1]])))
    assert shakespeare_tok.merges[0] == (bytes([top[0]]), bytes([top[1]]))
    for word in (" the", " and", " I", " my"):
        assert len(shakespeare_tok.encode(word)) == 1, word
    rare = " Polixenes"  # a name that does not occur in the first 60,000 characters
    assert rare not in text and len(shakespeare_tok.encode(rare)) > 2


# --- peer checks ------------------------------------------------------------------------------

def _from_gpt2_alphabet(s: str) -> bytes:
    decode = {c: b for b, c in bpe.bytes_to_unicode().items()}
    return bytes(decode[c] for c in s)


def test_merges_and_vocabulary_equal_the_cs336_reference() -> None:
    text = _fixture("corpus.en").read_text(encoding="utf-8")
    vocab, merges = train_bpe(text, 500, [EOT])
    reference_merges = [tuple(_from_gpt2_alphabet(part) for part in line.split(" "))
                        for line in _fixture("train-bpe-reference-merges.txt")
                        .read_text(encoding="utf-8").splitlines() if line]
    assert merges == reference_merges  # exactly, and in order
    reference = json.loads(_fixture("train-bpe-reference-vocab.json").read_text("utf-8"))
    reference_vocab = {i: _from_gpt2_alphabet(s) for s, i in reference.items()}
    assert len(vocab) == len(reference_vocab) == 500
    assert set(vocab.values()) == set(reference_vocab.values())
    # The ids differ only by layout: the reference puts the special first and the 256 bytes in
    # GPT-2's order; both number the merged tokens in the order they were learned.
    ours_merged = [vocab[i] for i in range(256, 256 + len(merges))]
    theirs_merged = [reference_vocab[i] for i in range(257, 500)]
    assert ours_merged == theirs_merged


def test_gpt2_alphabet_is_a_bijection_onto_printable_characters() -> None:
    b2u = bpe.bytes_to_unicode()
    assert len(set(b2u.values())) == 256 and all(c.isprintable() for c in b2u.values())
    assert _from_gpt2_alphabet("".join(b2u[b] for b in range(256))) == bytes(range(256))


@pytest.mark.parametrize("name", ["address.txt", "german.txt", "tinystories_sample.txt",
                                  "corpus.en"])
def test_gpt2_ids_equal_tiktoken_on_the_peer_texts(name: str, gpt2_tok: Tokenizer,
                                                   tiktoken_gpt2) -> None:
    text = _fixture(name).read_text(encoding="utf-8")
    ids = gpt2_tok.encode(text)
    assert ids == tiktoken_gpt2.encode(text, allowed_special="all")
    assert gpt2_tok.decode(ids) == text


def test_gpt2_ids_equal_tiktoken_on_tricky_and_random_strings(gpt2_tok: Tokenizer,
                                                              tiktoken_gpt2) -> None:
    rng = random.Random(1)
    texts = TRICKY + [_random_unicode(rng, n) for n in (3, 30, 300)]
    for text in texts:
        assert gpt2_tok.encode(text) == tiktoken_gpt2.encode(text, allowed_special="all"), text


def test_gpt2_known_ids(gpt2_tok: Tokenizer) -> None:
    assert gpt2_tok.encode("Hello world") == [15496, 995]
    assert gpt2_tok.encode(EOT) == [50256] and len(gpt2_tok) == 50257


# --- errors -----------------------------------------------------------------------------------

def test_bad_input_gets_a_clear_error(shakespeare_tok: Tokenizer) -> None:
    with pytest.raises(TypeError, match="encode takes a str"):
        shakespeare_tok.encode(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lone surrogate"):
        shakespeare_tok.encode("ok \ud800")
    with pytest.raises(ValueError, match="token id 400 is not in the vocabulary"):
        shakespeare_tok.decode([1, 400])
    with pytest.raises(ValueError, match="token id -1"):
        shakespeare_tok.decode([-1])
    with pytest.raises(ValueError, match="below the 256 byte tokens plus 1 special"):
        train_bpe("abc", 256, [EOT])
    with pytest.raises(ValueError, match="non-empty strings"):
        train_bpe("abc", 300, [""])
    with pytest.raises(TypeError, match="text must be a str"):
        train_bpe(["abc"], 300)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="lacks the single bytes"):
        Tokenizer({0: b"a"}, [])


def test_a_cut_multibyte_character_decodes_to_the_replacement_character(
        gpt2_tok: Tokenizer) -> None:
    ids = gpt2_tok.encode("🙂")
    assert len(ids) > 1 and "\ufffd" in gpt2_tok.decode(ids[:1])


def test_truncated_equals_training_to_the_smaller_vocabulary() -> None:
    text = load_shakespeare("val")[:20000]
    big = Tokenizer.train(text, 320)
    for size in (256, 270, 300):
        small = Tokenizer.train(text, size)
        cut = bpe.truncated(big, size - 256)
        assert cut.merges == small.merges and cut.vocab == small.vocab
        assert cut.encode(text[:2000]) == small.encode(text[:2000])
    with pytest.raises(ValueError, match="n_merges"):
        bpe.truncated(big, 65)


def test_token_lengths_are_the_tokens_byte_lengths() -> None:
    tok = Tokenizer.train("the cat sat on the mat<|endoftext|>", 262, [EOT])
    lengths = bpe.token_lengths(tok)
    assert len(lengths) == len(tok)
    assert all(lengths[i] == len(t) for i, t in tok.vocab.items())
    ids = tok.encode("the mat")
    assert sum(lengths[i] for i in ids) == len(b"the mat")
