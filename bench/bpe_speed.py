"""How fast is course_lib's byte-level BPE? Training time and encoding throughput (not a test).

1. Training on ``corpus.en`` (Stanford CS336's fixture, ``../shared/peer-fixtures/cs336-a1``) at
   vocabulary 500 with ``<|endoftext|>``: the other course asks for under 1.5 s.
2. Training on the shipped Shakespeare corpus (training split, 4.3 MB) at several vocabulary
   sizes.
3. Encoding throughput on the shipped validation split (0.5 MB) with GPT-2's released merges,
   beside ``tiktoken`` and Hugging Face ``tokenizers`` loaded from the same files, as ratios
   (after checking that all three give the same ids). Ours is measured on a fresh tokenizer
   (cold: its cache of pre-tokens empty) and again on the same text (warm).

Run:  .venv/bin/python bench/bpe_speed.py [--repeat 3] [--vocab-sizes 512 1024 2048 4096]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course_lib import bpe  # noqa: E402
from course_lib.corpus import load_shakespeare  # noqa: E402

FIXTURES = ROOT.parent / "shared" / "peer-fixtures" / "cs336-a1"
EOT = "<|endoftext|>"


def timed(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    """Median wall time of ``repeat`` calls, and the last result."""
    times, out = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def peers(vocab_json: Path, merges_txt: Path, tmp: Path):
    """tiktoken and HF tokenizers built offline from GPT-2's files (None where not installed)."""
    enc = hf = None
    try:
        import tiktoken
        from tiktoken.load import data_gym_to_mergeable_bpe_ranks
        os.environ["TIKTOKEN_CACHE_DIR"] = ""  # no download cache
        vocab_bpe = tmp / "vocab.bpe"  # tiktoken skips the first line: give it "#version" back
        vocab_bpe.write_text("#version: 0.2\n" + merges_txt.read_text("utf-8"), encoding="utf-8")
        ranks = data_gym_to_mergeable_bpe_ranks(str(vocab_bpe), str(vocab_json))
        enc = tiktoken.Encoding("gpt2-offline", pat_str=bpe.GPT2_PATTERN, mergeable_ranks=ranks,
                                special_tokens={EOT: 50256})
    except ImportError:
        print("tiktoken not installed: skipped")
    try:
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers
        hf = HFTokenizer(models.BPE.from_file(str(vocab_json), str(merges_txt)))
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        hf.decoder = decoders.ByteLevel()
    except ImportError:
        print("tokenizers not installed: skipped")
    return enc, hf


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per timing (median)")
    parser.add_argument("--vocab-sizes", type=int, nargs="+", default=[512, 1024, 2048, 4096])
    args = parser.parse_args()
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, torch {torch.__version__}")

    print("\n## Training")
    if (FIXTURES / "corpus.en").exists():
        text = (FIXTURES / "corpus.en").read_text(encoding="utf-8")
        t, _ = timed(lambda: bpe.train_bpe(text, 500, [EOT]), args.repeat)
        print(f"corpus.en ({len(text):,} B), vocabulary 500: {t:.2f} s "
              f"(target < 1.5 s: {'met' if t < 1.5 else 'MISSED'})")
    else:
        print(f"{FIXTURES} not found: corpus.en timing skipped")
    train = load_shakespeare("train")
    val = load_shakespeare("val")
    t_pre, _ = timed(lambda: bpe.pretokenize(train), 1)
    print(f"Shakespeare train split ({len(train):,} B); pre-tokenisation alone {t_pre:.2f} s")
    print("| vocabulary | training time (s) | bytes per token on the validation split |")
    print("|---|---|---|")
    for size in args.vocab_sizes:
        t, tok = timed(partial(bpe.Tokenizer.train, train, size), 1)
        print(f"| {size} | {t:.2f} | {bpe.bytes_per_token(tok, val):.3f} |")

    print("\n## Encoding throughput, GPT-2's merges, Shakespeare validation split "
          f"({len(val.encode()):,} B)")
    vocab_json, merges_txt = FIXTURES / "gpt2_vocab.json", FIXTURES / "gpt2_merges.txt"
    if not vocab_json.exists():
        print(f"{vocab_json} not found: skipped")
        return
    ours = bpe.Tokenizer.from_gpt2_files(vocab_json, merges_txt)
    with tempfile.TemporaryDirectory() as tmp:
        enc, hf = peers(vocab_json, merges_txt, Path(tmp))
    n_bytes = len(val.encode())
    t_cold, ids = timed(lambda: ours.encode(val), 1)  # a fresh tokenizer: empty cache
    t_warm, _ = timed(lambda: ours.encode(val), args.repeat)
    rows = [("course_lib (cold cache)", t_cold), ("course_lib (warm cache)", t_warm)]
    if enc is not None:
        t, theirs = timed(lambda: enc.encode_ordinary(val), args.repeat)
        assert theirs == ids, "tiktoken gives other ids"
        rows.append(("tiktoken", t))
    if hf is not None:
        t, theirs = timed(lambda: hf.encode(val).ids, args.repeat)
        assert theirs == ids, "HF tokenizers gives other ids"
        rows.append(("HF tokenizers", t))
    print(f"all tokenizers give the same {len(ids):,} ids "
          f"(GPT-2's tokenizer: {n_bytes / len(ids):.3f} bytes per token on this text)")
    print("| tokenizer | time (s) | MB/s | course_lib (cold) time / this time |")
    print("|---|---|---|---|")
    for name, t in rows:
        print(f"| {name} | {t:.3f} | {n_bytes / t / 1e6:.2f} | {t_cold / t:.1f} |")
    print("\nReproduce: .venv/bin/python bench/bpe_speed.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
