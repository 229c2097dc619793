"""An LMS zip extracted safely: no path outside the folder, no link, every entry capped.

Never extracted (each appended to the ``skipped`` list with its reason): absolute or ``..``
names, symbolic links, entries that cannot be read (encrypted, corrupt). Each entry is copied up
to ``MAX_FILE_BYTES + 1`` bytes (so that an oversized entry fails validation with its reason).
Caps: :data:`MAX_ZIP_FILES` entries, :data:`MAX_ZIP_BYTES` declared in all.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
import zipfile
from pathlib import Path
from typing import IO

from autograder.ingest.validate import MAX_FILE_BYTES
from autograder.ingest.walk import SKIP_NAMES, SkippedEntry
from autograder.printable import printable

MAX_ZIP_BYTES = 2 << 30
MAX_ZIP_FILES = 10_000


class _Capped:
    """A file-like reader that yields at most ``limit`` bytes of ``src``."""

    def __init__(self, src: IO[bytes], limit: int) -> None:
        self.src, self.left = src, limit

    def read(self, n: int = -1) -> bytes:
        """At most ``n`` bytes (all that is left under the cap when ``n`` is negative)."""
        if self.left <= 0:
            return b""
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = self.src.read(n)
        self.left -= len(data)
        return data


def _stamp(info: zipfile.ZipInfo) -> float:
    """The entry's date as a time stamp (0 when the zip's date is impossible)."""
    try:
        return time.mktime(info.date_time + (0, 0, -1))
    except (OverflowError, ValueError):
        return 0.0


def _extract_entry(z: zipfile.ZipFile, info: zipfile.ZipInfo, dest: Path,
                   skipped: list[SkippedEntry]) -> None:
    """Extract one entry under ``dest``, or append why not to ``skipped``."""
    name = info.filename.replace("\\", "/")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if not parts or info.is_dir() or parts[0] in SKIP_NAMES:
        return
    stamp = _stamp(info)
    if ".." in parts or name.startswith("/") or ":" in parts[0]:
        skipped.append(SkippedEntry(printable(name), "a path outside the zip's folder "
                                    "(absolute or with ..): not extracted", stamp))
        return
    if info.create_system == 3 and stat.S_ISLNK(info.external_attr >> 16):
        skipped.append(SkippedEntry("/".join(parts), "a symbolic link in the zip: not "
                                    "extracted (only regular files are graded)", stamp, link=True))
        return
    target = dest.joinpath(*parts)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with z.open(info) as src, open(target, "wb") as out:
            shutil.copyfileobj(_Capped(src, MAX_FILE_BYTES + 1), out)
        os.utime(target, (stamp, stamp))
    except (OSError, RuntimeError, ValueError, zipfile.BadZipFile, EOFError) as err:
        skipped.append(SkippedEntry("/".join(parts), f"could not be extracted "
                                    f"({type(err).__name__}: {str(err)[:200]})", stamp))
        if target.is_file():
            target.unlink()


def _unwrap(dest: Path, skipped: list[SkippedEntry]) -> Path:
    """The folder to grade: an LMS zip may wrap per-student folders in one top folder."""
    entries = [p for p in dest.iterdir() if not p.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir() and any(p.is_dir() for p in entries[0].iterdir()):
        top = entries[0].name + "/"
        skipped[:] = [SkippedEntry(s.name[len(top):], s.reason, s.mtime, s.link)
                      if s.name.startswith(top) else s for s in skipped]
        return entries[0]
    return dest


def extract_zip(zip_path: Path, dest: Path, skipped: list[SkippedEntry] | None = None) -> Path:
    """Extract an LMS zip safely (see the module docstring); return the folder to grade.

    Args:
        zip_path: the zip an LMS wrote.
        dest: an empty folder to extract into (emptied first when it exists).
        skipped: where the entries that were not extracted are appended.

    Returns:
        ``dest``, or its only top folder when the zip wraps the student folders in one.

    Raises:
        SystemExit: the zip itself cannot be read, or is over the caps (the whole batch is bad).
    """
    skipped = [] if skipped is None else skipped
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    try:
        z = zipfile.ZipFile(zip_path)
    except (zipfile.BadZipFile, OSError) as err:
        raise SystemExit(f"{zip_path}: not a readable zip ({err})") from None
    with z:
        infos = z.infolist()
        if len(infos) > MAX_ZIP_FILES:
            raise SystemExit(f"{zip_path}: {len(infos)} entries; at most {MAX_ZIP_FILES}")
        if sum(i.file_size for i in infos) > MAX_ZIP_BYTES:
            raise SystemExit(f"{zip_path}: more than {MAX_ZIP_BYTES >> 30} GiB uncompressed")
        for info in infos:
            _extract_entry(z, info, dest, skipped)
    return _unwrap(dest, skipped)
