"""course_lib.checks: valid arguments pass through unchanged, bad ones get an error that names
them."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from course_lib import checks


def test_valid_arguments_come_back_unchanged() -> None:
    x = torch.zeros(2, 3)
    assert checks.check_tensor("x", x, ndim=2) is x
    assert checks.check_float_tensor("x", x, min_ndim=1) is x
    assert checks.check_bool_tensor("m", x > 0, ndim=2) is not None
    ids = torch.tensor([[0, 4], [2, 3]])
    assert checks.check_int_tensor("ids", ids) is ids
    assert checks.check_ids("ids", ids, 5, ndim=2) is ids
    assert checks.check_finite_tensor("x", x) is x
    assert checks.check_positive_tensor("n", x + 1) is not None
    assert checks.check_same_dtype(a=x, b=x.clone()) == torch.float32
    assert checks.check_finite("a", np.float32(2.5)) == 2.5
    assert checks.check_positive("c", 3) == 3.0
    assert checks.check_int("r", np.int64(4), minimum=1) == 4
    assert checks.check_token_id("eos_id", 0, 1) == 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_every_floating_dtype_is_a_float_tensor(dtype: torch.dtype) -> None:
    checks.check_float_tensor("x", torch.zeros(2, dtype=dtype))


@pytest.mark.parametrize("call, error, message", [
    (lambda: checks.check_tensor("lengths", [1, 2]), TypeError, "lengths must be a torch.Tensor"),
    (lambda: checks.check_tensor("x", torch.zeros(2), min_ndim=2), ValueError,
     r"x must have at least 2 dimensions, got shape \(2,\)"),
    (lambda: checks.check_float_tensor("q", torch.zeros(2, dtype=torch.long)), TypeError,
     "q must be a floating-point tensor, got torch.int64"),
    (lambda: checks.check_float_tensor("q", torch.zeros(2, dtype=torch.complex64)), TypeError,
     "q must be a floating-point tensor"),
    (lambda: checks.check_bool_tensor("mask", torch.ones(2)), TypeError,
     "mask must be a boolean tensor"),
    (lambda: checks.check_int_tensor("ids", torch.ones(2, dtype=torch.bool)), TypeError,
     "ids must hold integers, got torch.bool"),
    (lambda: checks.check_ids("idx", torch.tensor([-1, 2])), ValueError,
     r"idx holds ids outside \[0, \.\.\.\): min -1, max 2"),
    (lambda: checks.check_ids("t", torch.tensor([3, -100]), 3, ignore_index=-100), ValueError,
     r"t holds ids outside \[0, 3\) \(or -100, ignored\): min 3, max 3"),
    (lambda: checks.check_ids("t", torch.tensor([1], dtype=torch.int32), dtypes=(torch.long,)),
     TypeError, "t must hold token ids of dtype torch.int64, got torch.int32"),
    (lambda: checks.check_finite_tensor("x", torch.tensor([math.inf])), ValueError,
     r"x holds NaN or infinite values \(1 of 1\)"),
    (lambda: checks.check_positive_tensor("n", torch.tensor([1.0, math.nan])), ValueError,
     "n must be positive and finite everywhere, got nan at index 1"),
    (lambda: checks.check_same_dtype(a=torch.zeros(1), b=torch.zeros(1).double(),
                                     c=torch.zeros(1)), TypeError,
     "a, b and c must have one dtype"),
    (lambda: checks.check_finite("alpha", "1.0"), TypeError, "alpha must be a real number"),
    (lambda: checks.check_finite("alpha", True), TypeError, "alpha must be a real number"),
    (lambda: checks.check_positive("flops", 0), ValueError, "flops must be finite and positive"),
    (lambda: checks.check_positive("flops", math.inf), ValueError, "finite and positive, got inf"),
    (lambda: checks.check_int("k", True), TypeError, "k must be an int, got bool"),
    (lambda: checks.check_int("k", -1, minimum=0), ValueError, "k must be a non-negative integer"),
    (lambda: checks.check_int("k", 2, minimum=3), ValueError, "k must be an int >= 3, got 2"),
    (lambda: checks.check_token_id("mask_id", -1, 5), ValueError,
     "mask_id must be a non-negative integer"),
])
def test_bad_arguments_are_named(call, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        call()


def test_empty_ids_have_no_range_to_check() -> None:
    checks.check_ids("ids", torch.zeros(0, dtype=torch.long), 0)
