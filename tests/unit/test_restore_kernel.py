"""triton_dist._measure.restore_kernel: the one-pass "find and undo a mutation" kernel of the in-place
guard's graph-mode checks, on the tensors of the machine's kernels (``kernel_device``): under
Triton's interpreter on CPU tensors, compiled for the GPU on GPU tensors (which also runs it in
tests/gpu/test_cuda_graphs.py through graph-mode tunings)."""

from __future__ import annotations

import math

import pytest
import torch

from tests.unit.helpers import kernel_device
from triton_dist._measure import restore_kernel as _restore_kernel

DEV = kernel_device()


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


@pytest.mark.parametrize("dtype, n", [(torch.float32, 10_000), (torch.float16, 3), (torch.int8, 7),
                                      (torch.bfloat16, 4097)])
def test_changed_bytes_are_put_back_and_flagged(dtype, n):
    snapshot = (torch.arange(n) % 100).to(dtype).to(DEV)
    t = snapshot.clone()
    flag = torch.zeros(1, dtype=torch.int32, device=DEV)
    _restore_kernel.restore_changed(t, snapshot, flag)
    assert int(flag) == 0 and _bits_equal(t, snapshot)  # untouched: nothing written, no flag
    t[n // 2] += 1
    t[-1] -= 3
    _restore_kernel.restore_changed(t, snapshot, flag)
    assert int(flag) == 1 and _bits_equal(t, snapshot)


def test_bytes_not_values_nan_payloads_and_signed_zeros():
    snapshot = torch.tensor([math.nan, 0.0, 1.0, -2.0], device=DEV)
    t = snapshot.clone()
    flag = torch.zeros(1, dtype=torch.int32, device=DEV)
    _restore_kernel.restore_changed(t, snapshot, flag)
    assert int(flag) == 0  # NaN == NaN bit for bit: not a change
    t[1] = -0.0  # equal as a value, another bit pattern: a write, put back
    _restore_kernel.restore_changed(t, snapshot, flag)
    assert int(flag) == 1 and _bits_equal(t, snapshot)


def test_only_contiguous_tensors_on_the_measurement_device():
    assert _restore_kernel.runs_on(torch.zeros(4, 4, device=DEV), DEV.type)
    assert not _restore_kernel.runs_on(torch.zeros(4, 4, device=DEV).t(), DEV.type)
    assert not _restore_kernel.runs_on(torch.zeros(4, device="meta"), DEV.type)
    with pytest.raises(ValueError, match="restore_changed"):
        _restore_kernel.restore_changed(torch.zeros(4, device=DEV), torch.zeros(5, device=DEV),
                                        torch.zeros(1, dtype=torch.int32, device=DEV))
