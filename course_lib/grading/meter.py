"""The allocation meter: the largest tensor a student's function builds, for exercises that grade
an algorithm's memory ("without building the T x T matrix", ``Exercise.largest_tensor``)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


class AllocationMeter(TorchDispatchMode):
    """The largest tensor (in elements) that any torch operation allocates while it is active.

    Views (``k.T``, ``expand``) and in-place results share an input's storage and do not count;
    a new tensor does, whatever made it (``q @ k.T``, ``torch.zeros(T, T)``, ``softmax``).

    Example:
        >>> q = torch.ones(6, 2)
        >>> with AllocationMeter() as meter:
        ...     _ = (q @ q.T).sum()
        >>> meter.largest
        36
        >>> with AllocationMeter() as meter:
        ...     _ = q.T.expand(3, 2, 6)
        >>> meter.largest
        0
    """

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.largest = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        given = {_storage_ptr(t) for t in tree_leaves((args, kwargs))
                 if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and _storage_ptr(t) not in given:
                self.largest = max(self.largest, t.numel())
        return out


def _storage_ptr(t: torch.Tensor) -> int | None:
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # sparse or other storage-less layouts
        return None
