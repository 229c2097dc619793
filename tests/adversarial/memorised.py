"""A "memorised outputs" submission: course_lib's outputs on the hidden inputs, looked up by input.

A student who reads course_lib can build every hidden case with the public package and store the
reference's outputs, keyed by the arguments, in a solution with no implementation at all. The
grading run's secret (``course_lib.exercises._common``) makes such a table useless: it is built
here under a secret the student guessed, and graded under the run's own.

The key of a call is computed by :data:`KEY_SOURCE`, the same code in the table's builder and in
the notebook cell, so a hit is exact.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import torch

from course_lib import grading
from course_lib.exercises import _calls
from course_lib.exercises._common import using_secret

#: The key of a call: a hash of its arguments (tensors by dtype, shape and bytes; objects by the
#: tensors they hold; the rest by ``repr``).
KEY_SOURCE = '''
def _memo_key(args, kwargs):
    import hashlib
    import torch

    h = hashlib.sha256()

    def feed(v):
        if isinstance(v, torch.Tensor):
            h.update(f"T{v.dtype}{tuple(v.shape)}".encode())
            h.update(v.detach().cpu().contiguous().numpy().tobytes())
        elif isinstance(v, (list, tuple)):
            h.update(f"L{len(v)}".encode())
            for x in v:
                feed(x)
        elif isinstance(v, dict):
            for k in sorted(v, key=repr):
                h.update(repr(k).encode())
                feed(v[k])
        elif hasattr(v, "__dict__") and not isinstance(v, type):
            feed(dict(vars(v)))
        else:
            h.update(repr(v).encode())

    feed(list(args))
    feed(dict(kwargs))
    return h.hexdigest()
'''

_namespace: dict[str, Any] = {}
exec(KEY_SOURCE, _namespace)  # noqa: S102 - the one definition, shared with the notebook cell
memo_key: Callable[[tuple, dict], str] = _namespace["_memo_key"]


def memorisable(ex: grading.Exercise) -> bool:
    """Whether a table can stand in for the exercise (not a letter, not a random function, not a
    loss whose gradient is graded: a stored value carries no graph)."""
    return (ex.cases is not grading.answer_case and ex.postprocess is None
            and ex.call is not _calls.loss_and_grad)


def secret(value: str) -> AbstractContextManager[None]:
    """Hidden cases built under ``value`` inside the block (a student's guess, or a run's)."""
    return using_secret(value)


def build_table(ex: grading.Exercise) -> dict[str, str]:
    """``key -> base64 of torch.save(output)`` of every call the reference gets on every case,
    under the current secret."""
    table: dict[str, str] = {}

    def recording(*args: Any, **kwargs: Any) -> Any:
        key = memo_key(args, kwargs)
        out = ex.reference(*args, **kwargs)
        buf = io.BytesIO()
        torch.save(out, buf)
        table[key] = base64.b64encode(buf.getvalue()).decode()
        return out

    for case in ex.cases():
        ex.run(recording, case.inputs())
    return table


def lookup(table: dict[str, str]) -> Callable[..., Any]:
    """The memorised solution as a function (what the notebook cell defines)."""
    def fn(*args: Any, **kwargs: Any) -> Any:
        key = memo_key(args, kwargs)
        if key not in table:
            raise KeyError("input not memorised")
        return torch.load(io.BytesIO(base64.b64decode(table[key])), weights_only=False)
    return fn


def cell_source(function: str, table: dict[str, str]) -> str:
    """A solution cell defining ``function`` as a lookup in ``table`` (no implementation)."""
    return (KEY_SOURCE + f"\n\n_MEMO_{function} = {table!r}\n\n\n"
            f"def {function}(*args, **kwargs):\n"
            "    import base64, io\n"
            "    import torch\n"
            f"    table = _MEMO_{function}\n"
            "    key = _memo_key(args, kwargs)\n"
            "    if key not in table:\n"
            "        raise KeyError('input not memorised')\n"
            "    return torch.load(io.BytesIO(base64.b64decode(table[key])), weights_only=False)\n")
