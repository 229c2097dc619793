"""The one sanitiser of every text cell of every CSV the grader writes.

A student chooses their folder or file name, and through it their ``student_id``; roster cells
and failure reasons quote what students wrote. A spreadsheet opening ``grades.csv`` runs a cell
that starts with ``=`` (``=HYPERLINK(...)``, ``=WEBSERVICE(...)``), ``+``, ``-`` or ``@`` as a
formula, and some also one that starts with a tab or a carriage return (OWASP, "CSV
injection"). Every such text cell gets a leading ``'``, which spreadsheets show as text and do
not run; a cell that is a plain number (``-1``, ``+2.5``, ``1e-3``) is left as it is.

Use :func:`writer` and :func:`dict_writer` in place of ``csv.writer`` and ``csv.DictWriter``:
they sanitise every ``str`` cell, headers included. Numbers that are not strings pass through.

Example:
    >>> import io
    >>> f = io.StringIO()
    >>> _ = writer(f).writerow(["=HYPERLINK(\\"http://x\\")", "-1", "-1+2", "@SUM(A1)", 3.5, "bob"])
    >>> f.getvalue()
    '"\\'=HYPERLINK(""http://x"")",-1,\\'-1+2,\\'@SUM(A1),3.5,bob\\r\\n'
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from typing import IO, Any

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?")


def safe_cell(value: Any) -> Any:
    """``value`` as a CSV cell no spreadsheet runs as a formula (non-strings unchanged).

    Example:
        >>> safe_cell("=1+1"), safe_cell("-2.5"), safe_cell("s1001"), safe_cell(4)
        ("'=1+1", '-2.5', 's1001', 4)
    """
    if isinstance(value, str) and value.startswith(FORMULA_STARTS) \
            and not _NUMBER.fullmatch(value):
        return "'" + value
    return value


def safe_row(row: Iterable[Any]) -> list[Any]:
    """Every cell of ``row`` through :func:`safe_cell`."""
    return [safe_cell(v) for v in row]


class _SafeWriter:
    """``csv.writer`` whose rows go through :func:`safe_row`."""

    def __init__(self, f: IO[str], **kwargs: Any):
        self._w = csv.writer(f, **kwargs)

    def writerow(self, row: Iterable[Any]) -> Any:
        return self._w.writerow(safe_row(row))

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self.writerow(row)


class _SafeDictWriter:
    """``csv.DictWriter``'s interface; the header and every row go through :func:`safe_row`."""

    def __init__(self, f: IO[str], fieldnames: Iterable[str], restval: Any = "",
                 extrasaction: str = "raise", **kwargs: Any):
        self.fieldnames = list(fieldnames)
        self.restval, self.extrasaction = restval, extrasaction
        self._w = _SafeWriter(f, **kwargs)

    def writeheader(self) -> Any:
        return self._w.writerow(self.fieldnames)

    def writerow(self, rowdict: dict[str, Any]) -> Any:
        if self.extrasaction == "raise":
            extra = [k for k in rowdict if k not in self.fieldnames]
            if extra:
                raise ValueError(f"dict contains fields not in fieldnames: {extra!r}")
        return self._w.writerow([rowdict.get(k, self.restval) for k in self.fieldnames])

    def writerows(self, rowdicts: Iterable[dict[str, Any]]) -> None:
        for rowdict in rowdicts:
            self.writerow(rowdict)


def writer(f: IO[str], **kwargs: Any) -> _SafeWriter:
    """A ``csv.writer`` on ``f`` that sanitises every text cell (see the module docstring)."""
    return _SafeWriter(f, **kwargs)


def dict_writer(f: IO[str], fieldnames: Iterable[str], **kwargs: Any) -> _SafeDictWriter:
    """A ``csv.DictWriter`` on ``f`` that sanitises every text cell, the header included.

    Example:
        >>> import io
        >>> f = io.StringIO()
        >>> w = dict_writer(f, ["file", "student_id"])
        >>> _ = w.writeheader(), w.writerow({"file": "a.ipynb", "student_id": "+cmd"})
        >>> f.getvalue().splitlines()
        ['file,student_id', "a.ipynb,'+cmd"]
    """
    return _SafeDictWriter(f, fieldnames, **kwargs)
