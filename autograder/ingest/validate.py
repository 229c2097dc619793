"""Each submitted file read within bounds and validated as a Jupyter notebook.

A notebook is at most :data:`MAX_FILE_BYTES`, read only as a regular file (``O_NOFOLLOW``, so a
link or a named pipe is never read), UTF-8, its JSON at most :data:`MAX_JSON_DEPTH` levels deep
(checked before parsing, so no parser recursion), and it must pass nbformat's schema after the
upgrade to format 4; the reason of a failure names the cell that is wrong. These limits are
stricter than :mod:`coursebook.notebooks`, which reads the course's own notebooks.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import stat
import warnings
from pathlib import Path

import nbformat
import numpy as np

from autograder.ingest.walk import LINK_REASON, OTHER_REASON

MAX_FILE_BYTES = 20 << 20
MAX_JSON_DEPTH = 100


class InvalidSubmission(Exception):
    """The file cannot be graded; the message says why in words a student understands.

    Attributes:
        digest: the sha256 of the bytes read (the cache key), or ``""`` when nothing was read.
    """

    def __init__(self, message: str, digest: str = "") -> None:
        super().__init__(message)
        self.digest = digest


def read_regular_file(path: Path, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of ``path``, read only if it is a regular file (never through a link).

    At most ``max_bytes + 1`` bytes are read, so an oversized file costs no more than that.

    Raises:
        InvalidSubmission: a link, not a regular file, unreadable, empty or too large.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise InvalidSubmission(LINK_REASON) from None
        raise InvalidSubmission(f"the file could not be read ({err.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise InvalidSubmission(OTHER_REASON)
        raw = f.read(max_bytes + 1)
    digest = hashlib.sha256(raw).hexdigest()
    if not raw:
        raise InvalidSubmission("the file is empty (0 bytes)", digest)
    if len(raw) > max_bytes:
        raise InvalidSubmission(f"the file is larger than the {max_bytes / 2**20:.0f} MiB limit "
                                "(clear the outputs and resubmit)", digest)
    return raw


# A JSON string, or an unterminated one up to the end. The possessive quantifiers and the
# match-to-the-end make every attempt succeed without backtracking, so the scan is linear even
# for hostile text like '"\\"\\"\\"...' (a plain string pattern takes quadratic time on it).
_JSON_STRING = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.S)


def json_depth(raw: bytes) -> int:
    """How deeply the arrays and objects of a JSON text nest, without parsing it.

    Brackets inside strings do not count; for malformed text the answer may be too high, never
    too low, so it is a safe bound before a recursive parser runs.

    Example:
        >>> json_depth(b'{"a": [1, {"b": "]]"}]}')
        3
    """
    bare = np.frombuffer(_JSON_STRING.sub(b"", raw), dtype=np.uint8)
    if bare.size == 0:
        return 0
    step = ((bare == ord("[")) | (bare == ord("{"))).astype(np.int32) \
        - ((bare == ord("]")) | (bare == ord("}"))).astype(np.int32)
    return int(np.cumsum(step).max(initial=0))


def _json_kind(value: object) -> str:
    for kind, words in ((dict, "an object"), (list, "a list holding something other than strings"),
                        (str, "a string"), (bool, "a boolean"), (type(None), "null")):
        if isinstance(value, kind):
            return words
    return "a number"


def _describe_validation_error(err: Exception, nb: dict) -> str:
    path = list(getattr(err, "absolute_path", None) or getattr(err, "path", None) or [])
    message = str(getattr(err, "message", "") or str(err).split("\n", 1)[0])[:200]
    if len(path) >= 2 and path[0] == "cells" and isinstance(path[1], int):
        k = path[1]
        cell = nb["cells"][k] if k < len(nb.get("cells", [])) else {}
        kind = cell.get("cell_type", "?") if isinstance(cell, dict) else "?"
        where = "/".join(str(p) for p in path[2:]) or "the cell itself"
        if path[2:] == ["source"] and isinstance(cell, dict):
            message = (f"the source must be text (a string or a list of strings), not "
                       f"{_json_kind(cell.get('source'))}")
        return (f"cell {k + 1} ({kind} cell) is not valid in a Jupyter notebook: {where}: "
                f"{message}")
    where = "/".join(str(p) for p in path) or "the top level"
    return f"the notebook is not valid nbformat ({where}: {message})"


def load_notebook(path: Path, max_bytes: int = MAX_FILE_BYTES
                  ) -> tuple[nbformat.NotebookNode, list[str], str]:
    """Read, bound, validate and normalise a submitted notebook.

    Steps: a regular file only (:func:`read_regular_file`), UTF-8, JSON at most
    :data:`MAX_JSON_DEPTH` levels deep, a notebook, upgraded to nbformat 4, then validated
    against nbformat's schema (a notebook with cell ids but ``nbformat_minor`` below 5 is read
    as 4.5, what Jupyter does).

    Returns:
        ``(notebook as nbformat v4, notes on repairs, sha256 of the file)``.

    Raises:
        InvalidSubmission: with the reason and the file's digest.
    """
    raw = read_regular_file(path, max_bytes)
    digest = hashlib.sha256(raw).hexdigest()
    try:
        return _parse_notebook(raw, digest)
    except InvalidSubmission:
        raise
    except (RecursionError, MemoryError) as err:
        raise InvalidSubmission(f"the notebook is too deeply nested or too large to read "
                                f"({type(err).__name__})", digest) from None


def _json_notebook(raw: bytes, digest: str) -> dict:
    """The file's JSON object, once it is UTF-8, shallow enough and shaped like a notebook."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidSubmission("the file is not text (UTF-8)", digest) from None
    depth = json_depth(raw)
    if depth > MAX_JSON_DEPTH:
        raise InvalidSubmission(f"the file nests JSON {depth} levels deep; a notebook needs "
                                f"far fewer (at most {MAX_JSON_DEPTH} are read)", digest)
    try:
        data = json.loads(text)
    except ValueError as err:
        raise InvalidSubmission(f"the file is not valid JSON ({str(err)[:200]})", digest) from None
    if not isinstance(data, dict) or ("cells" not in data and "worksheets" not in data):
        raise InvalidSubmission("the file is JSON but not a Jupyter notebook (no cells)", digest)
    return data


def _parse_notebook(raw: bytes, digest: str) -> tuple[nbformat.NotebookNode, list[str], str]:
    """:func:`load_notebook` after the file was read: parse, upgrade, validate, normalise."""
    data = _json_notebook(raw, digest)
    notes = []
    major = data.get("nbformat")
    if type(major) is not int or not 1 <= major <= 4:
        raise InvalidSubmission(f"the file says it is in notebook format {str(major)[:20]}; "
                                "Jupyter notebooks are in format 4 (or an older 1 to 3)", digest)
    try:  # nbformat.reads without its own validation (done once, below, with the cell named)
        nb = nbformat.convert(nbformat.from_dict(data), 4)
    except Exception as err:  # noqa: BLE001 - nbformat raises many kinds
        raise InvalidSubmission(f"the notebook could not be read ({type(err).__name__}: "
                                f"{str(err)[:200]})", digest) from None
    if major != 4:
        notes.append(f"the notebook was in format {major}; it was upgraded to format 4")
    cells = nb.get("cells")
    if isinstance(cells, list) and nb.get("nbformat_minor", 0) < 5 and any(
            isinstance(c, dict) and "id" in c for c in cells):
        nb["nbformat_minor"] = 5  # ids belong to 4.5; Jupyter reads such a file as 4.5
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nbformat.validate(nb)
    except nbformat.ValidationError as err:
        raise InvalidSubmission(_describe_validation_error(err, nb), digest) from None
    for cell in nb.cells:
        if isinstance(cell.get("source"), list):
            cell["source"] = "".join(cell["source"])
        cell.setdefault("metadata", {})
    return nb, notes, digest
