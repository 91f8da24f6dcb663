"""triton_dist.tune.autotune over triton-ascend kernels, on the NPU backend (TRITON_DIST_DEVICE=npu)
driving the torch_npu stand-in: interleaved rounds timed with NPU events, graph mode with
NPUGraph, the in-place guard in graph mode, and the hardware fingerprint of an Ascend device."""

from __future__ import annotations

import json
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch
import triton

from triton_dist import autotune
from triton_dist._backends import get_backend
from triton_dist._backends.npu import NpuBackend

from .kernels import add_kernel, increment_kernel


def zero_output(nargs):
    nargs["output_ptr"].zero_()


CONFIGS = [{"cfg": triton.Config({"BLOCK_SIZE": b}, num_warps=w, multibuffer=True, pre_hook=hook)}
           for b, w, hook in ((64, 4, None), (128, 4, zero_output), (256, 8, None))]


def only_entry(root: Path) -> dict:
    files = [p for p in root.glob("*/*.json")]  # <root>/<function>/<entry>.json, history excluded
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def make_add(order: list[int], **options):
    def add(x, y, *, cfg):
        order.append(cfg.kwargs["BLOCK_SIZE"])
        out = torch.empty_like(x)
        # a user's launch: the meta-parameters of the Config, its warps
        add_kernel[(triton.cdiv(x.numel(), cfg.kwargs["BLOCK_SIZE"]),)](
            x, y, out, x.numel(), BLOCK_SIZE=cfg.kwargs["BLOCK_SIZE"], num_warps=cfg.num_warps)
        return out

    return autotune(CONFIGS, lambda x, y: (x.numel(), str(x.dtype)), **options)(add)


def test_the_npu_backend_is_selected_on_the_stand_in(npu):
    backend = get_backend()
    assert isinstance(backend, NpuBackend) and backend.dist_backend == "hccl" and backend.ray_resource == "NPU"
    assert npu.calls["is_available"] >= 1


def test_interleaved_rounds_timed_with_npu_events(npu, cache_dir):
    order: list[int] = []
    add = make_add(order, n_warmup=1, n_repeat=3, graphs=False)  # eager runs (graphs: the default)
    x, y = torch.randn(1000), torch.randn(1000)
    torch.testing.assert_close(add(x, y), x + y)
    entry = only_entry(cache_dir)
    assert entry["measurement"]["timer"] == "npu" and entry["hardware"]["name"] == "Ascend910B3"
    runs = [c["runs"] for c in entry["candidates"]]
    assert len(set(runs)) == 1 and runs[0] >= 3
    # every timed run between an NPU event pair, read with elapsed_time after a synchronize
    assert npu.calls["Event.elapsed_time"] >= 3 * 3 and npu.calls["Event.record"] >= 2 * npu.calls["Event.elapsed_time"]
    assert npu.calls["synchronize"] >= 1
    tuning = order[:-1]  # the final call is the last
    assert Counter(tuning) == {b: len(tuning) // 3 for b in (64, 128, 256)}
    switches = sum(a != b for a, b in zip(tuning, tuning[1:], strict=False))
    assert switches > 2 * runs[0], f"rounds of one run per config, not one config after the other: {tuning}"
    best = entry["best"]["index"]
    assert entry["candidates"][best]["time_ms"] == min(c["time_ms"] for c in entry["candidates"])
    # the entry keeps the triton-ascend Config, bishengir option included
    assert entry["candidates"][0]["config"]["cfg"]["triton.Config"]["multibuffer"] is True
    # the hook by its name and a digest of its source (an edited hook is another config)
    assert entry["candidates"][1]["config"]["cfg"]["triton.Config"]["pre_hook"].startswith("zero_output source sha256:")
    before = len(order)
    torch.testing.assert_close(add(x, y), x + y)
    assert len(order) == before + 1  # a hit: one call, nothing measured


def test_graph_mode_captures_and_replays_npu_graphs(npu, cache_dir):
    order: list[int] = []
    add = make_add(order, n_warmup=1, n_repeat=2)  # graph replay is the default on an NPU
    x, y = torch.randn(2048), torch.randn(2048)
    torch.testing.assert_close(add(x, y), x + y)
    entry = only_entry(cache_dir)
    assert entry["measurement"]["graphs"] is True and entry["measurement"]["placements"] == 2
    # every config captured twice: its second placement, in a pool of its own, halfway through
    assert npu.calls["NPUGraph.capture_begin"] == npu.calls["NPUGraph.capture_end"] >= 3 * 2
    assert npu.calls["graph_pool_handle"] >= 2
    assert npu.calls["NPUGraph.replay"] >= 3 * 2
    assert all(c["error"] is None and c["time_ms"] > 0 for c in entry["candidates"])
    # host calls per config here: the first (eager) run and a capture in each placement; then the
    # final call. The timed runs were replays (eager timing would add n_warmup + n_repeat per config).
    assert len(order) <= 3 * 3 + 1


def test_with_triton_ascend_the_compile_pass_compiles_on_its_threads(npu, cache_dir):
    """triton-ascend 3.2 has no AsyncCompileMode: the pass keeps its compiles on its threads."""
    order: list[int] = []
    add = make_add(order, n_warmup=1, n_repeat=2, compile_workers=2)  # explicit: a pass under the interpreter
    x, y = torch.randn(1000), torch.randn(1000)
    torch.testing.assert_close(add(x, y), x + y)
    log = next(cache_dir.rglob("*.log")).read_text()
    # (how many compiled is the interpreter's business: triton-ascend's launches really run in the
    # pass, and its interpreter's grid state is shared by threads, so a config may go eager)
    assert "compile pass: 3 configs on 2 threads" in log and "0 compile errors" in log, log
    assert "compile pass: compiled on the pass's threads (this Triton has no AsyncCompileMode)" in log


def test_in_place_guard_in_graph_mode(npu, cache_dir):
    def bump(x, *, cfg):
        increment_kernel[(triton.cdiv(x.numel(), cfg.kwargs["BLOCK"]),)](x, x.numel(), BLOCK=cfg.kwargs["BLOCK"])
        return x

    space = [{"cfg": triton.Config({"BLOCK": b})} for b in (32, 64, 128)]
    tuned = autotune(space, lambda x: (x.numel(),), n_warmup=1, n_repeat=2, graphs=True)(bump)
    x = torch.arange(300, dtype=torch.float32)
    expected = x + 1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tuned(x)
    torch.testing.assert_close(x, expected)  # tuning launched it many times; one call's effect stays
    messages = [str(w.message) for w in caught]
    # the queued comparison (the Triton pass of the guard, through triton-ascend) ran, or the guard
    # said why it compared after a synchronisation instead
    assert not any("comparing the arguments on the device failed" in m for m in messages), messages
    assert only_entry(cache_dir)["measurement"]["graphs"] is True


def test_hardware_fingerprint_of_an_ascend_device(npu, monkeypatch):
    from triton_dist._store import fingerprint as _fingerprint

    backend = get_backend()
    info = _fingerprint.hardware_info(backend)
    assert info["device"] == "npu" and info["name"] == "Ascend910B3" and info["soc_version"] == 220
    assert info["cube_core_num"] == 20 and info["vector_core_num"] == 40 and info["total_memory"] == 64
    versions = _fingerprint.software_versions(backend)
    assert versions["torch_npu"] == "2.7.1.post4" and versions["cann"] == "8.1.RC1"
    assert versions.get("triton") == "3.2.0" or "3.2.0" in json.dumps(versions)
    # a Ray actor sees one device, the training job eight: the same digest
    for visible in ("3", "0,1,2,3,4,5,6,7"):
        monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", visible)
        assert _fingerprint.digest(NpuBackend().hardware()) == info["digest"]
    # another SoC is another digest
    monkeypatch.setattr(torch.npu, "DEVICE_NAME", "Ascend910B4")
    assert _fingerprint.digest(NpuBackend().hardware()) != info["digest"]


def test_set_device_beyond_the_visible_devices_is_torch_npus_error(npu, monkeypatch):
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "4,5")
    backend = NpuBackend()
    backend.set_device(3)  # local index modulo the visible devices, as in a 2-NPU actor
    assert torch.npu.current_device() == 1
    with pytest.raises(RuntimeError, match="Invalid device ID 2"):
        torch.npu.set_device(2)


def test_graph_capture_with_a_torch_npu_whose_capture_begin_has_no_error_mode(npu, cache_dir, monkeypatch):
    # torch_npu releases before capture_error_mode: capture_begin(pool=None) only
    original = npu.NPUGraph.capture_begin

    def capture_begin(self, pool=None):
        return original(self, pool=pool)

    monkeypatch.setattr(npu.NPUGraph, "capture_begin", capture_begin)
    order: list[int] = []
    add = make_add(order, n_warmup=1, n_repeat=2, graphs=True)
    x, y = torch.randn(512), torch.randn(512)
    torch.testing.assert_close(add(x, y), x + y)
    assert npu.calls["NPUGraph.replay"] >= 3 and only_entry(cache_dir)["measurement"]["graphs"] is True


def test_without_torch_npu_forcing_the_npu_names_the_variable(npu, monkeypatch):
    from triton_dist._backends import npu as npu_module
    from triton_dist.errors import DeviceUnavailableError

    class NoCann:  # how torch_npu fails to import on a machine without CANN
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name == "torch_npu":
                raise OSError("libhccl.so: cannot open shared object file: No such file or directory")

    monkeypatch.delitem(sys.modules, "torch_npu")
    monkeypatch.setattr(sys, "meta_path", [NoCann, *sys.meta_path])
    npu_module._import_torch_npu.cache_clear()
    assert "torch_npu cannot be imported: OSError: libhccl.so" in NpuBackend.probe()
    with pytest.raises(DeviceUnavailableError, match="TRITON_DIST_DEVICE"):
        get_backend()
    with pytest.raises(DeviceUnavailableError, match="NPU backend unusable: torch_npu cannot be imported"):
        NpuBackend().synchronize()
    npu_module._import_torch_npu.cache_clear()


def test_a_torch_npu_whose_runtime_fails_means_no_npu(npu, monkeypatch):
    from triton_dist._backends import npu as npu_module

    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "")  # a node whose NPUs are all hidden
    npu_module._import_torch_npu.cache_clear()
    assert "torch.npu.is_available() is False" in NpuBackend.probe()
    monkeypatch.delenv("ASCEND_RT_VISIBLE_DEVICES")

    def no_driver():
        raise RuntimeError("call aclrtGetDeviceCount failed, error code 100000 (no driver)")

    monkeypatch.setattr(npu, "is_available", no_driver)
    npu_module._import_torch_npu.cache_clear()
    assert "torch.npu is unusable: call aclrtGetDeviceCount failed" in NpuBackend.probe()
    monkeypatch.delenv("TRITON_DIST_DEVICE")
    assert get_backend().kind == "cpu"
    npu_module._import_torch_npu.cache_clear()


def test_the_backends_device_is_torch_npus_current_device(npu, monkeypatch):
    import npu_standin

    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "4,5")
    backend = NpuBackend()
    backend.set_device(1)
    assert npu_standin.original_device(backend) == torch.device("npu", 1)
    backend.set_device(0)


def test_cann_version_without_get_cann_version(npu, monkeypatch):
    import torch_npu

    monkeypatch.delattr(torch_npu.npu.utils, "get_cann_version")  # torch_npu < 2.1
    monkeypatch.setenv("ASCEND_TOOLKIT_VERSION", "8.0.0")
    assert NpuBackend().software() == {"torch_npu": "2.7.1.post4", "cann": "8.0.0"}


def test_gemm_examples_shared_memory_budget_on_a_driver_without_properties(monkeypatch):
    # examples/gemm.py asks the active Triton driver for max_shared_mem; triton-ascend's test driver
    # (like some triton-ascend versions) reports none: the conservative budget is used
    from examples import gemm

    monkeypatch.delenv("TRITON_INTERPRET")
    assert gemm.shared_memory_budget() == gemm.INTERPRETER_SMEM_BYTES


def test_flush_l2_writes_a_buffer_beyond_the_npus_l2_before_timed_samples(npu, cache_dir):
    from triton_dist._backends.npu import FLUSH_BYTES

    order: list[int] = []
    add = make_add(order, n_warmup=0, n_repeat=1, flush_l2=True)
    x, y = torch.randn(256), torch.randn(256)
    torch.testing.assert_close(add(x, y), x + y)
    assert only_entry(cache_dir)["measurement"].get("flush_l2") is True
    backend = get_backend()
    assert backend._flush_buffer.numel() == FLUSH_BYTES >= 4 * 192 * 2**20  # 910B: 192 MB of L2
    assert not backend._flush_buffer.any()  # zeroed


def test_the_default_benchmarker_times_each_run_between_npu_events(npu):
    # what benchmarks/ and a custom measurement call: Backend.measure -> NpuBackend.time_runs
    runs: list[int] = []
    times = get_backend().measure(lambda: (runs.append(1), time.sleep(0.002)), 1, 3)
    assert len(runs) == 4 and len(times) == 3 and all(t >= 2.0 for t in times)
    assert npu.calls["Event.elapsed_time"] == 3 and npu.calls["synchronize"] >= 2
