"""Finding submitted notebooks, mapping them to students, and validating each file.

Mapping rules (every decision is written to ``mapping.csv``; a file that matches no rule is
reported as unmapped, never guessed):

* one folder per student (``SUBMISSIONS/<student>/<any name>.ipynb``): the folder names the
  student; with ``--roster``, the folder must match a roster id, alias, e-mail or name;
* flat files with ``--roster``: the file name must contain exactly one roster id / alias / e-mail
  local part as a whole token (LMS names such as ``doejane_12345_67890_seq2seq.ipynb`` or
  ``Jane Doe_12345_assignsubmission_file_seq2seq.ipynb``);
* flat files without a roster: ``<id>.ipynb`` or ``<id>_<anything>.ipynb``, unless the name is
  just the chapter's notebook name (``seq2seq.ipynb``, ``Copy of seq2seq.ipynb``,
  ``seq2seq (1).ipynb``), which names no student;
* two files of one student: the newest (modification time, or the zip entry's date) is graded, the
  other is reported as superseded.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import shutil
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

MAX_FILE_BYTES = 20 << 20
MAX_ZIP_BYTES = 2 << 30
MAX_ZIP_FILES = 10_000
_TOKEN = re.compile(r"[A-Za-z0-9@.+-]+")
_COPY = re.compile(r"^(copy of )+|\s*\(\d+\)$|\s*-\s*copy$|_\d+$", re.I)


@dataclass
class SubmissionFile:
    path: Path
    rel: str  # path relative to the submissions root, for reports
    mtime: float
    student: str | None = None
    rule: str = ""
    problem: str = ""


def extract_zip(zip_path: Path, dest: Path) -> Path:
    """Extract an LMS zip safely (no absolute or ``..`` paths, size and count caps)."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with zipfile.ZipFile(zip_path) as z:
        infos = z.infolist()
        if len(infos) > MAX_ZIP_FILES:
            raise SystemExit(f"{zip_path}: {len(infos)} entries; at most {MAX_ZIP_FILES}")
        if sum(i.file_size for i in infos) > MAX_ZIP_BYTES:
            raise SystemExit(f"{zip_path}: more than {MAX_ZIP_BYTES >> 30} GiB uncompressed")
        for info in infos:
            name = info.filename.replace("\\", "/")
            parts = [p for p in name.split("/") if p not in ("", ".")]
            if (not parts or ".." in parts or info.is_dir() or name.startswith(("/", "__MACOSX"))
                    or ":" in parts[0]):
                continue
            target = dest.joinpath(*parts)
            target.parent.mkdir(parents=True, exist_ok=True)
            with z.open(info) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
            stamp = time.mktime(info.date_time + (0, 0, -1))
            os.utime(target, (stamp, stamp))
    # an LMS zip may wrap per-student folders in one top folder: unwrap it
    entries = [p for p in dest.iterdir() if not p.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir() and any(p.is_dir() for p in entries[0].iterdir()):
        return entries[0]
    return dest


def read_roster(path: Path) -> dict[str, str]:
    """``token -> student_id`` from a CSV with ``student_id`` and optional name/email/aliases."""
    tokens: dict[str, str] = {}
    with open(path, newline="", encoding="utf-8-sig") as f:
        for row in csv.DictReader(f):
            sid = (row.get("student_id") or row.get("id") or "").strip()
            if not sid:
                continue
            keys = {sid}
            for col in ("aliases", "alias", "lms_id", "username"):
                keys |= {a.strip() for a in (row.get(col) or "").replace(";", ",").split(",")}
            email = (row.get("email") or "").strip()
            if email:
                keys |= {email, email.split("@", 1)[0]}
            name = (row.get("name") or "").strip()
            if name:
                keys |= {name, name.replace(" ", "").lower(),
                         "".join(reversed(name.lower().split()))}
            for key in keys:
                if key:
                    tokens[key.lower()] = sid
    return tokens


def _roster_match(text: str, roster: dict[str, str]) -> set[str]:
    low = text.lower()
    hits = {sid for key, sid in roster.items() if " " in key and key in low}
    for token in _TOKEN.findall(low.replace("_", " ")):
        if token in roster:
            hits.add(roster[token])
    return hits


def _map_by_roster(sf: SubmissionFile, text: str, kind: str, subject: str,
                   roster: dict[str, str]) -> None:
    """Map ``sf`` to the one roster entry ``text`` (a folder or file name) names, else say why."""
    hits = _roster_match(text, roster)
    if len(hits) == 1:
        sf.student, sf.rule = hits.pop(), f"{kind} matches the roster"
    else:
        sf.problem = f"{subject} matches {'no' if not hits else 'several'} roster entries"


def discover(root: Path, slug: str, roster: dict[str, str] | None) -> list[SubmissionFile]:
    """Every ``.ipynb`` under ``root``, mapped to a student id or given a problem."""
    files = []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or ".ipynb_checkpoints" in path.parts or path.name.startswith("."):
            continue
        rel = path.relative_to(root).as_posix()
        sf = SubmissionFile(path, rel, path.stat().st_mtime)
        if path.suffix.lower() != ".ipynb":
            if path.suffix.lower() in (".json", ".txt", ".py", ".zip", ""):
                sf.problem = "not a .ipynb file"
                files.append(sf)
            continue
        parts = path.relative_to(root).parts
        if len(parts) > 1:
            folder = parts[0]
            if roster is not None:
                _map_by_roster(sf, folder, "folder", f"folder {folder!r}", roster)
            else:
                sf.student, sf.rule = folder, "folder name"
        else:
            stem = path.stem
            if roster is not None:
                _map_by_roster(sf, stem, "file name", "file name", roster)
            else:
                bare = stem
                while True:
                    new = _COPY.sub("", bare).strip()
                    if new == bare:
                        break
                    bare = new
                candidate = stem.split("_", 1)[0].strip()
                if bare.lower() in (slug.lower(), slug.replace("-", "_").lower()):
                    sf.problem = ("the file name is the chapter's notebook name and names no "
                                  "student: put it in a folder named after the student or pass "
                                  "--roster")
                elif re.fullmatch(r"[A-Za-z0-9@.+-]+", candidate):
                    sf.student, sf.rule = candidate, "file name (<id> or <id>_...)"
                else:
                    sf.problem = "the file name names no student id; pass --roster"
        files.append(sf)
    # one file per student: the newest
    by_student: dict[str, list[SubmissionFile]] = {}
    for sf in files:
        if sf.student:
            by_student.setdefault(sf.student, []).append(sf)
    for sid, group in by_student.items():
        if len(group) > 1:
            group.sort(key=lambda s: (s.mtime, s.rel))
            for old in group[:-1]:
                old.problem = f"superseded by the newer {group[-1].rel} of {sid}"
                old.student = None
    return files


class InvalidSubmission(Exception):
    """The file cannot be graded; the message says why in words a student understands."""


def load_notebook(path: Path, max_bytes: int = MAX_FILE_BYTES) -> tuple[nbformat.NotebookNode, list[str], str]:
    """Validate and normalise a submitted notebook.

    Returns:
        ``(notebook as nbformat v4, notes on repairs, sha256 of the file)``.

    Raises:
        InvalidSubmission: empty, too large, not JSON, not a notebook.
    """
    size = path.stat().st_size
    if size == 0:
        raise InvalidSubmission("the file is empty (0 bytes)")
    if size > max_bytes:
        raise InvalidSubmission(f"the file is {size / 2**20:.1f} MiB; the limit is "
                                f"{max_bytes / 2**20:.0f} MiB (clear the outputs and resubmit)")
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise InvalidSubmission("the file is not text (UTF-8)") from None
    except ValueError as err:
        raise InvalidSubmission(f"the file is not valid JSON ({err})") from None
    if not isinstance(data, dict) or ("cells" not in data and "worksheets" not in data):
        raise InvalidSubmission("the file is JSON but not a Jupyter notebook (no cells)")
    notes = []
    major = data.get("nbformat")
    try:
        nb = nbformat.reads(json.dumps(data), as_version=4)
    except Exception as err:  # noqa: BLE001 - nbformat raises many kinds
        raise InvalidSubmission(f"the notebook could not be read ({type(err).__name__}: "
                                f"{str(err)[:200]})") from None
    if major != 4:
        notes.append(f"the notebook was in format {major}; it was upgraded to format 4")
    for cell in nb.cells:
        if isinstance(cell.get("source"), list):
            cell["source"] = "".join(cell["source"])
        cell.setdefault("metadata", {})
    return nb, notes, digest
