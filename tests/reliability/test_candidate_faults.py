"""R4: candidates that raise, run out of memory, exceed resources, hang or poison the device.

Tuning goes on, records why (entry and tuning log), and a hanging candidate is bounded by the
opt-in per-candidate limit ``TRITON_DIST_AUTOTUNE_CANDIDATE_TIMEOUT_S``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from triton_dist import _tuning
from triton_dist._backends.base import Backend
from triton_dist._measure.bench import measure_candidates
from triton_dist.errors import DeviceStateError, TritonDistWarning
from triton_dist.settings import override
from triton_dist.tune import autotune


@triton.jit
def _copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)


def _log_of(cache_dir, name: str) -> str:
    (log,) = (cache_dir / name).glob("*.log")
    return log.read_text()


def test_raising_oom_resources_and_invalid_triton_configs_are_recorded_and_skipped(cache_dir):
    def fail(kind: str) -> None:
        if kind == "runtime":
            raise RuntimeError("launch failed: unspecified launch failure")
        if kind == "torch-oom":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
        if kind == "host-oom":
            raise MemoryError("cannot allocate the workspace")
        if kind == "resources":
            raise OutOfResources(262144, 232448, "shared memory")

    space = [{"kind": k, "BLOCK": b} for k, b in
             [("runtime", 16), ("torch-oom", 16), ("host-oom", 16), ("resources", 16), ("ok", 12), ("ok", 32)]]

    @autotune(space, lambda src: src.numel(), n_warmup=1, n_repeat=2)
    def copy(src, kind, BLOCK):
        fail(kind)
        dst = torch.empty_like(src)
        _copy[(triton.cdiv(src.numel(), BLOCK),)](src, dst, src.numel(), BLOCK=BLOCK)  # 12: not a power of 2
        return dst

    src = torch.arange(40, dtype=torch.float32)
    assert torch.equal(copy(src), src)
    (path,) = (cache_dir / "copy").glob("*.json")
    entry = json.loads(path.read_text())
    errors = [c["error"] for c in entry["candidates"]]
    assert errors[0].startswith("RuntimeError: launch failed")
    assert errors[1].startswith("OutOfMemoryError: CUDA out of memory")
    assert errors[2].startswith("MemoryError: cannot allocate")
    assert errors[3].startswith("OutOfResources: out of resource: shared memory")
    assert "power of 2" in errors[4]
    assert errors[5] is None and entry["best"]["index"] == 5
    log = _log_of(cache_dir, "copy")
    for index in range(5):
        assert f"config {index} " in log and errors[index] in log


@pytest.mark.timeout(60)
def test_a_hanging_candidate_is_abandoned_at_the_limit_and_tuning_goes_on(cache_dir):
    release = threading.Event()
    runs: list[tuple[str, bool]] = []

    @autotune([{"mode": "hang"}, {"mode": "fast"}, {"mode": "fast2"}], lambda x: 1, n_warmup=1, n_repeat=2)
    def maybe_hang(x, mode):
        runs.append((mode, torch.is_grad_enabled()))
        if mode == "hang":
            release.wait(30)  # a run that never ends on its own within the test
        return x + 1

    try:
        with override(TRITON_DIST_AUTOTUNE_CANDIDATE_TIMEOUT_S="0.5"), torch.no_grad():
            assert maybe_hang(1) == 2
    finally:
        release.set()
    (path,) = (cache_dir / "maybe_hang").glob("*.json")
    entry = json.loads(path.read_text())
    assert entry["candidates"][0]["error"] == "CandidateTimeoutError: timed out after 0.5s"
    assert entry["candidates"][0]["time_ms"] is None
    assert entry["best"]["index"] in (1, 2)
    assert "timed out after 0.5s" in _log_of(cache_dir, "maybe_hang")
    # the caller's grad mode reached the worker threads
    assert {grad for _, grad in runs} == {False}
    # the abandoned thread stops at the next run boundary: no run of "hang" after its first
    deadline = time.monotonic() + 10
    while threading.active_count() > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [m for m, _ in runs].count("hang") == 1


def test_a_limited_candidate_runs_under_the_callers_autocast_and_modes(cache_dir):
    """With TRITON_DIST_AUTOTUNE_CANDIDATE_TIMEOUT_S the CPU measures in a worker thread; autocast
    and torch-function modes are per thread, so candidates of a bf16 autocast call under a user's
    mode were timed as float32 matmuls without the mode (a tester, 2026-12-04)."""
    from torch.overrides import TorchFunctionMode

    class Counting(TorchFunctionMode):
        seen = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            Counting.seen += 1
            return func(*args, **(kwargs or {}))

    runs = []

    @autotune([{"c": 1}, {"c": 2}], lambda x: tuple(x.shape), n_warmup=1, n_repeat=2)
    def host(x, c):
        before = Counting.seen
        out = x @ x
        runs.append((threading.current_thread().name, out.dtype, Counting.seen > before))
        return out * c

    x = torch.ones(4, 4)
    with override(TRITON_DIST_AUTOTUNE_CANDIDATE_TIMEOUT_S="30"), torch.autocast("cpu", dtype=torch.bfloat16), \
            Counting():
        host(x)
    measured = [r for r in runs if r[0] == "triton_dist-candidate"]
    assert len(measured) == 2 * 3 and len(runs) == 2 * 3 + 1
    assert {(dtype, moded) for _, dtype, moded in runs} == {(torch.bfloat16, True)}


def test_a_limited_candidates_warning_is_said_at_the_callers_line_and_fails_no_config(cache_dir):
    """Said in the measuring thread, a warning was located in threading.py, and under -W error it
    became config 0's failure, so the other config was picked and saved (a reviewer, 2026-12-04);
    the thread also re-entered the caller's default-device mode, which leaked the global default
    device after torch.set_default_device(None)."""
    import warnings

    import torch.utils._device as device_module

    @autotune([{"c": 1}, {"c": 2}], lambda x: tuple(x.shape), check_correctness=True, restore_inplace=False,
              n_warmup=0, n_repeat=1)
    def host(x, c):
        x.add_(0)  # returns None, writes in place: nothing to compare

    with override(TRITON_DIST_AUTOTUNE_CANDIDATE_TIMEOUT_S="30"), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.set_default_device("cpu")
        try:
            host(torch.zeros(4))
        finally:
            torch.set_default_device(None)
    said = [w for w in caught if issubclass(w.category, TritonDistWarning)]
    assert len(said) == 1 and "nothing to compare" in str(said[0].message) and said[0].filename == __file__
    assert device_module.CURRENT_DEVICE is None
    (entry,) = (cache_dir / "host").glob("*.json")
    assert all(c.get("error") is None for c in json.loads(entry.read_text())["candidates"])


def test_without_a_limit_nothing_runs_in_another_thread():
    threads = set()

    @autotune([{"c": 0}, {"c": 1}], lambda: 1, n_warmup=1, n_repeat=1)
    def where(c):
        threads.add(threading.get_ident())

    where()
    assert threads == {threading.get_ident()}


class _DeviceLike(Backend):
    """A device backend as the core sees one: runs stay on the calling thread; ``sticky`` makes
    every synchronize fail once a candidate has failed (a CUDA illegal memory access)."""

    kind = "fake"
    dist_backend = "gloo"
    ray_resource = "FAKE"

    def __init__(self, sticky: bool = False) -> None:
        self.sticky = sticky
        self.poisoned = False

    @classmethod
    def probe(cls) -> str | None:
        return None

    def device(self) -> Any:
        return torch.device("cpu")

    def synchronize(self) -> None:
        if self.poisoned:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    def time_runs(self, fn: Callable[[], Any], n: int) -> list[float]:
        out = []
        for _ in range(n):
            start = time.perf_counter()
            fn()
            out.append((time.perf_counter() - start) * 1e3)
        return out


def test_on_devices_the_limit_is_checked_between_runs_on_the_calling_thread():
    backend = _DeviceLike()
    seen: dict[int, list[int]] = {0: [], 1: []}

    def make_call(index: int):
        def run() -> None:
            seen[index].append(threading.get_ident())
            time.sleep(0.3 if index == 0 else 0.0)
        return run

    results, bug = measure_candidates(make_call, [0, 1], backend, n_warmup=1, n_repeat=10, timeout_s=0.5)
    assert bug is None
    assert results[0].error == "CandidateTimeoutError: timed out after 0.5s"
    assert 2 <= len(seen[0]) < 11  # stopped between runs, long before its 11 runs
    assert results[1].ok and len(seen[1]) == 11
    assert set(seen[0] + seen[1]) == {threading.get_ident()}


def test_a_candidate_that_poisons_the_device_stops_tuning_with_its_index(monkeypatch):
    backend = _DeviceLike(sticky=True)
    ran = []

    @autotune([{"c": 0}, {"c": 1}, {"c": 2}], lambda buf: 1, n_warmup=1, n_repeat=1)
    def kernel(buf, c):
        ran.append(c)
        buf.add_(1)  # in place: the guard restores it, which a broken device refuses
        if c == 1:
            backend.poisoned = True
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    real_copy = torch.Tensor.copy_

    def device_copy(self, *args, **kwargs):
        if backend.poisoned:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        return real_copy(self, *args, **kwargs)

    monkeypatch.setattr(_tuning, "get_backend", lambda: backend)
    monkeypatch.setattr(torch.Tensor, "copy_", device_copy)
    buf = torch.zeros(4)
    # the restore after tuning fails too (warned), but the error that explains it is what raises
    with pytest.raises(DeviceStateError) as info, pytest.warns(TritonDistWarning, match="could not restore"):
        kernel.tune(buf, write_cache=False)
    assert info.value.details["index"] == 1
    assert "illegal memory access" in str(info.value) and "fresh actor" in str(info.value)
    assert 2 not in ran  # nothing ran on the broken device after the culprit

    # the retry (a fresh process in a campaign) marks the culprit failed without running it
    backend.poisoned, ran[:] = False, []
    buf = torch.zeros(4)
    entry = kernel.tune(buf, write_cache=False, known_failures={1: str(info.value.details["reason"])})
    assert torch.equal(buf, torch.zeros(4))
    assert 1 not in ran
    assert entry["candidates"][1]["time_ms"] is None
    assert "illegal memory access" in entry["candidates"][1]["error"]
    assert entry["best"]["index"] in (0, 2)
