"""triton_dist._backends.cuda_compose where its pieces are missing: a clear Unavailable, which
makes the CUDA backend capture every call of a sample instead (the composed path itself runs on
the GPU machine: tests/gpu/test_cuda_graphs.py)."""

from __future__ import annotations

import ctypes

import pytest
import torch  # noqa: F401 - loaded before ctypes.CDLL is replaced below

from triton_dist._backends import cuda_compose


def test_no_driver_library_is_unavailable_not_a_crash(monkeypatch):
    monkeypatch.setattr(cuda_compose, "_driver", None)

    def missing(name, *a, **k):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    with pytest.raises(cuda_compose.Unavailable, match="driver API is not reachable.*libcuda"):
        cuda_compose._lib()
    with pytest.raises(cuda_compose.Unavailable):  # remembered: not retried on every capture
        cuda_compose._lib()
    captured = []
    with pytest.raises(cuda_compose.Unavailable):
        cuda_compose.compose(lambda graph_cls: captured.append(graph_cls), 4)
    assert captured == []  # nothing was captured


def test_a_failing_driver_call_is_unavailable():
    with pytest.raises(cuda_compose.Unavailable, match="cuGraphCreate failed with CUDA driver error 3"):
        cuda_compose._check(3, "cuGraphCreate")
    cuda_compose._check(0, "cuGraphCreate")
