"""Device placement checked without a GPU: nothing in course_lib lands on the default device.

"GPU-ready" means a model and its inputs moved to one device compute there: every tensor that
course_lib creates takes its device (and dtype) from its inputs, and constant tables are buffers
that ``.to(device)`` moves. A GPU is not needed to check that. Each call of :data:`TABLE` is built
on the CPU and then run inside ``with torch.device("meta"):`` (the scoped form of
``torch.set_default_device("meta")``), so a tensor created without ``device=`` lands on ``meta``.

What torch does when such a ``meta`` tensor meets the CPU inputs (checked by
:func:`test_torch_mixes_meta_and_cpu_as_this_file_assumes`):

* elementwise ops, ``cat``, ``stack``, ``torch.where``, ``masked_fill``, a loss, ``.item()``
  raise (a 0-d ``meta`` tensor too: only 0-d *CPU* tensors mix with other devices);
* but a ``meta`` index into a CPU tensor (``x[idx]``, ``gather``, ``index_select``, an embedding),
  a CPU tensor times a ``meta`` matrix, and a ``meta`` value written into a CPU tensor run
  silently, and return a CPU tensor holding garbage (or leave the tensor unchanged);
* ``einsum`` with one ``meta`` operand, and a comparison with a ``meta`` tensor, return ``meta``.

So every call runs twice from the same seeds, once as usual and once under ``meta``, and the
second must return the same values, on the CPU, and leave its arguments (a model's parameters
after a training step, a cache) as the first did. A call that takes no tensor and no ``device=``
(a data generator, a model builder) must put what it creates on the default device: its entry
says ``creates=True``, and its tensors must all come back on ``meta``.

:data:`TABLE` holds every entry of ``tests/test_bad_input.py``'s ``CASES`` (every taught function
and ``nn.Module`` that takes a tensor, with valid arguments) and the entries below for the rest:
functions that return tensors or train a model without taking a tensor, and the methods of
course_lib's models and tensor records. :func:`test_every_public_callable_is_placed` fails when a
public callable of course_lib has neither an entry nor a reason in :data:`EXCLUDED`.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import pkgutil
import random
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from torch import nn

import course_lib
from tests import test_bad_input as bad_input

Call = tuple[Callable[..., Any], dict[str, Any]]
META = torch.device("meta")


# --- running a call twice and comparing -------------------------------------------------------

@dataclass(frozen=True)
class Placed:
    """How to call one course_lib callable with valid arguments built on the CPU.

    ``creates`` marks a call that takes no tensor and no ``device=``: what it creates must follow
    the default device (``meta`` here), so its tensors are checked to be on ``meta`` and not
    compared with a plain run.
    """

    build: Callable[[], Call]
    creates: bool = False


def _leaves(value: Any, path: str, seen: set[int]) -> Iterator[tuple[str, Any]]:
    """The tensors and plain values inside ``value``, each with where it was found."""
    if id(value) in seen:
        return
    if isinstance(value, torch.Tensor) or value is None or isinstance(value, (bool, int, float,
                                                                              str, bytes)):
        yield path, value
        return
    seen.add(id(value))
    if isinstance(value, nn.Module):
        yield from _leaves(value.state_dict(keep_vars=True), path, seen)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, f"{path}[{key!r}]", seen)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _leaves(item, f"{path}[{i}]", seen)
    elif isinstance(value, types.MethodType):
        yield from _leaves(value.__self__, f"{path}.__self__", seen)
    elif dataclasses.is_dataclass(value) or type(value).__module__.startswith("course_lib"):
        for key, item in vars(value).items():
            yield from _leaves(item, f"{path}.{key}", seen)
    # anything else (a Generator, a figure, a closure) holds nothing to compare


def _flatten(value: Any, path: str) -> list[tuple[str, Any]]:
    return list(_leaves(value, path, set()))


def _seed(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def _run(placed: Placed, on_meta: bool) -> list[tuple[str, Any]]:
    """Build the call on the CPU, run it (under ``meta`` if asked): its output and arguments."""
    _seed(0)
    fn, kwargs = placed.build()
    _seed(1)
    if on_meta:
        with torch.device(META):
            out = fn(**kwargs)
    else:
        out = fn(**kwargs)
    return _flatten(out, "output") + _flatten((fn, kwargs), "arguments")


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape
                and bool(torch.equal(a.detach().nan_to_num(), b.detach().nan_to_num()))
                and bool(torch.equal(a.detach().isnan(), b.detach().isnan())))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a):
        return math.isnan(b)
    return bool(a == b)


def check_placement(placed: Placed) -> None:
    """Run ``placed`` plainly and under ``meta``; fail on any tensor that left the inputs' device."""
    try:
        on_meta = _run(placed, on_meta=True)
    except Exception as error:  # any error: the call cannot run with another default device
        raise AssertionError(
            f"fails with torch.device('meta') as the default device, so a tensor was created "
            f"without device= (or from a Python list) and met the inputs: {error!r}") from error
    tensors = [(path, v) for path, v in on_meta if isinstance(v, torch.Tensor)]
    if placed.creates:
        wrong = [f"{path} on {v.device}" for path, v in tensors if v.device != META]
        assert not wrong, f"created off the default device: {', '.join(wrong)}"
        return
    wrong = [f"{path} on {v.device}" for path, v in tensors if v.device.type != "cpu"]
    assert not wrong, f"inputs on the CPU, results elsewhere: {', '.join(wrong)}"
    plain = _run(placed, on_meta=False)
    assert [path for path, _ in on_meta] == [path for path, _ in plain]
    differ = [path for (path, a), (_, b) in zip(plain, on_meta) if not _same(a, b)]
    assert not differ, ("a value differs under torch.device('meta') (a meta index, matrix or "
                        f"value met a CPU tensor silently): {', '.join(differ)}")


# --- the table --------------------------------------------------------------------------------

#: Every taught function and model that takes a tensor, with the valid arguments of test_bad_input.
FROM_BAD_INPUT: dict[str, Placed] = {name: Placed(entry.build)
                                     for name, entry in bad_input.CASES.items()}

TABLE: dict[str, Placed] = {**FROM_BAD_INPUT}


# --- the tests --------------------------------------------------------------------------------

@pytest.fixture(autouse=True)
def _close_figures() -> Iterator[None]:
    """The plotting entries draw figures: close them, so that they do not pile up."""
    yield
    plt.close("all")


@pytest.mark.parametrize("name", sorted(TABLE))
def test_runs_on_its_inputs_device(name: str) -> None:
    check_placement(TABLE[name])
