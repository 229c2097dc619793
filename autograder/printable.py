"""Text that is safe on the instructor's terminal: controls and bidi characters escaped.

File names and reasons carry students' text; a control character (ESC, a bidi override) would
reach the instructor's terminal raw, so every line the grader prints goes through
:func:`printable`, and so does every file name written into a report.
"""

from __future__ import annotations

import unicodedata

#: Unicode categories escaped by :func:`printable`: controls (C0, DEL, C1), format characters
#: (the bidi overrides and isolates U+202A-U+202E, U+2066-U+2069, the marks U+200E, U+200F,
#: U+061C, zero-width characters), line and paragraph separators, lone surrogates.
_UNPRINTABLE = {"Cc", "Cf", "Zl", "Zp", "Cs"}


def _escape(char: str) -> str:
    """One character as a Python-style backslash escape (``\\x1b``, ``\\u202e``)."""
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 \
        else f"\\U{code:08x}"


def printable(text: str) -> str:
    """``text`` safe to show on a terminal and write as UTF-8, on one line: every control
    character (C0 such as ESC and newline, DEL, C1), every format character (bidi overrides such
    as U+202E, which reorder what a terminal shows), line separators, and lone surrogates (the
    undecodable bytes of a file name) become backslash escapes.

    Args:
        text: any text, possibly holding a student's file name or message.

    Returns:
        The same text with each unprintable character escaped.

    Example:
        >>> printable("caf\\udce9 \\x1b[2Jred\\u202egnp.ipynb\\n")
        'caf\\\\udce9 \\\\x1b[2Jred\\\\u202egnp.ipynb\\\\x0a'
    """
    if text.isprintable():  # the common case: no control, format or separator character
        return text
    return "".join(_escape(c) if unicodedata.category(c) in _UNPRINTABLE else c for c in text)
