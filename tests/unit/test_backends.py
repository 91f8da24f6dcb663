"""Device backends: detection, TRITON_DIST_DEVICE, the CPU timer, and the NPU backend driven by a
stand-in ``torch_npu`` (the only device mocked anywhere: NPUs cannot run on these machines)."""

from __future__ import annotations

import subprocess
import sys
import time
import types

import pytest
import torch

from triton_dist._backends import BACKENDS, backend_for, get_backend
from triton_dist._backends.cpu import CpuBackend
from triton_dist._backends.cuda import CudaBackend
from triton_dist._backends.npu import NpuBackend
from triton_dist.errors import DeviceUnavailableError, SettingsError

from .helpers import make_tuner, only_entry

pytestmark = pytest.mark.usefixtures("fresh_backends")


def _no_torch_npu(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch_npu", None)  # `import torch_npu` raises ImportError


def test_detection_order_is_npu_cuda_cpu(monkeypatch):
    monkeypatch.delenv("TRITON_DIST_DEVICE", raising=False)
    assert list(BACKENDS) == ["npu", "cuda", "cpu"]
    expected = next(kind for kind, cls in BACKENDS.items() if cls.probe() is None)
    assert get_backend().kind == expected
    assert get_backend() is get_backend()  # detected once


@pytest.mark.skipif(NpuBackend.probe() is None or CudaBackend.probe() is None, reason="an accelerator is present")
def test_a_machine_without_accelerator_tunes_on_the_cpu(monkeypatch):
    monkeypatch.delenv("TRITON_DIST_DEVICE", raising=False)
    backend = get_backend()
    assert isinstance(backend, CpuBackend)
    assert (backend.kind, backend.dist_backend, backend.ray_resource) == ("cpu", "gloo", "CPU")
    assert backend.device() == torch.device("cpu")


def test_cpu_is_always_available_when_forced(monkeypatch):
    monkeypatch.setenv("TRITON_DIST_DEVICE", "cpu")
    assert get_backend().kind == "cpu"
    monkeypatch.setenv("TRITON_DIST_DEVICE", " CPU ")
    assert get_backend().kind == "cpu"


@pytest.mark.parametrize("value", ["gpu", "cuda:0", "tpu", "1"])
def test_an_unknown_device_value_is_an_error_naming_the_variable(monkeypatch, value):
    monkeypatch.setenv("TRITON_DIST_DEVICE", value)
    with pytest.raises(SettingsError, match="TRITON_DIST_DEVICE") as info:
        get_backend()
    assert "cpu, cuda or npu" in str(info.value)
    tuned, probe = make_tuner()
    with pytest.raises(SettingsError, match="TRITON_DIST_DEVICE"):
        tuned(1)
    assert probe.total == 0


@pytest.mark.skipif(CudaBackend.probe() is None, reason="CUDA is available here")
def test_forcing_cuda_without_cuda_is_an_error_naming_the_variable(monkeypatch):
    monkeypatch.setenv("TRITON_DIST_DEVICE", "cuda")
    with pytest.raises(DeviceUnavailableError, match="TRITON_DIST_DEVICE"):
        get_backend()
    tuned, probe = make_tuner()
    with pytest.raises(DeviceUnavailableError, match="TRITON_DIST_DEVICE"):
        tuned(1)
    assert probe.total == 0
    assert tuned(1, autotune=False)[1] == 0  # the untuned path needs no device decision


def test_forcing_npu_without_torch_npu_is_an_error_naming_the_variable(monkeypatch):
    _no_torch_npu(monkeypatch)
    monkeypatch.setenv("TRITON_DIST_DEVICE", "npu")
    with pytest.raises(DeviceUnavailableError, match="TRITON_DIST_DEVICE") as info:
        get_backend()
    assert "torch_npu" in str(info.value)
    with pytest.raises(DeviceUnavailableError, match="unknown device kind"):
        backend_for("tpu")


def test_cpu_timer_measures_each_run():
    calls = []

    def run():
        calls.append(1)
        time.sleep(0.002)

    times = CpuBackend().time_runs(run, 4)
    assert len(times) == 4 and len(calls) == 4
    assert all(t >= 2.0 for t in times)  # ms, and a 2 ms sleep takes at least 2 ms


def test_hardware_digest_is_stable_and_names_the_device():
    from triton_dist._store.fingerprint import hardware_info

    backend = CpuBackend()
    first = hardware_info(backend)
    assert first["device"] == "cpu" and first["digest"]
    assert hardware_info(CpuBackend())["digest"] == first["digest"]



def test_a_backend_at_the_address_of_a_dead_one_gets_its_own_hardware_and_versions():
    """The descriptions were kept by ``id(backend)``: a backend made where a dead one had lived (a
    test's fake device, a backend of another TRITON_DIST_DEVICE) got the dead one's digest, so its
    entries were written for hardware it is not, and other processes missed them (U15: found as
    spawned children that did not find their parent's entries after the unit suite's fakes)."""
    from triton_dist._store import fingerprint

    class Elsewhere(CpuBackend):
        def hardware(self):
            return {"device": "elsewhere"}

        def software(self):
            return {"stack": "elsewhere"}

    for _ in range(50):  # CPython gives a freed object's memory to the next of its size (it did
        dead = Elsewhere()  # at the first try before the fix; now the cache holds the dead one)
        fingerprint.hardware_info(dead)
        fingerprint.software_versions(dead)
        del dead
        backend = CpuBackend()
        assert fingerprint.hardware_info(backend)["device"] == "cpu"
        assert "stack" not in fingerprint.software_versions(backend)


# ---------------------------------------------------------------- the NPU backend, faked

class _FakeEvent:
    log: list[str]

    def __init__(self, enable_timing: bool = False) -> None:
        assert enable_timing
        self.t = None

    def record(self) -> None:
        self.log.append("record")
        self.t = time.perf_counter()

    def elapsed_time(self, end: _FakeEvent) -> float:
        return (end.t - self.t) * 1000.0


@pytest.fixture
def fake_npu(monkeypatch):
    """A ``torch_npu`` that offers torch_npu's documented API, backed by the CPU clock."""
    log: list[str] = []
    event = type("Event", (_FakeEvent,), {"log": log})
    props = types.SimpleNamespace(name="Ascend910B3", cube_core_num=20, vector_core_num=40,
                                  total_memory=64 * 2**30)
    npu = types.SimpleNamespace(
        Event=event,
        is_available=lambda: True,
        device_count=lambda: 8,
        current_device=lambda: 0,
        synchronize=lambda: log.append("synchronize"),
        set_device=lambda index: log.append(f"set_device {index}"),
        get_device_name=lambda index: "Ascend910B3",
        get_device_properties=lambda index: props,
    )
    utils = types.ModuleType("torch_npu.npu.utils")
    utils.get_cann_version = lambda module="CANN": "8.1.RC1"
    npu_module = types.ModuleType("torch_npu.npu")
    npu_module.get_soc_version = lambda: 220
    npu_module.utils = utils
    torch_npu = types.ModuleType("torch_npu")
    torch_npu.__version__ = "2.5.1.post1"
    torch_npu.npu = npu_module
    monkeypatch.setitem(sys.modules, "torch_npu", torch_npu)
    monkeypatch.setitem(sys.modules, "torch_npu.npu", npu_module)
    monkeypatch.setitem(sys.modules, "torch_npu.npu.utils", utils)
    monkeypatch.setattr(torch, "npu", npu, raising=False)
    monkeypatch.delenv("TRITON_DIST_DEVICE", raising=False)
    return log


def test_npu_is_detected_first_and_names_hccl_and_npu(fake_npu):
    backend = get_backend()
    assert isinstance(backend, NpuBackend)
    assert (backend.kind, backend.dist_backend, backend.ray_resource) == ("npu", "hccl", "NPU")
    assert backend.visible_devices_env == "ASCEND_RT_VISIBLE_DEVICES"
    backend.set_device(9)
    assert fake_npu[-1] == "set_device 1"  # local index modulo the visible devices


def test_npu_times_with_npu_events_between_synchronizes(fake_npu):
    backend = NpuBackend()
    runs = []
    times = backend.time_runs(lambda: (runs.append(1), time.sleep(0.001)), 3)
    assert len(runs) == 3 and len(times) == 3 and all(t >= 1.0 for t in times)
    assert fake_npu == ["synchronize"] + ["record"] * 6 + ["synchronize"]


def test_npu_hardware_and_software_come_from_torch_npu(fake_npu):
    backend = NpuBackend()
    hardware = backend.hardware()
    assert hardware["device"] == "npu" and hardware["name"] == "Ascend910B3"
    assert hardware["soc_version"] == 220
    assert hardware["cube_core_num"] == 20 and hardware["total_memory"] == 64
    assert backend.software() == {"torch_npu": "2.5.1.post1", "cann": "8.1.RC1"}


def test_tuning_on_the_npu_backend_uses_its_timer_and_records_its_stack(fake_npu, cache_dir):
    # the seed's eager schedule (the fake torch_npu has no NPUGraph; graph replay, the default
    # on the NPU, is tested on the simulated devices of test_graph_measure/test_default_mode)
    tuned, probe = make_tuner(sleep_ms={0: 6.0, 1: 1.0, 2: 3.0}, n_warmup=1, n_repeat=3, graphs=False)
    assert tuned(1)[1] == 1
    assert fake_npu.count("record") == 3 * 2 * 3
    entry = only_entry(cache_dir)
    assert entry["hardware"]["device"] == "npu" and entry["hardware"]["soc_version"] == 220
    assert entry["versions"]["torch_npu"] == "2.5.1.post1" and entry["versions"]["cann"] == "8.1.RC1"
    assert entry["measurement"]["timer"] == "npu"


def test_a_broken_torch_npu_means_no_npu(monkeypatch):
    broken = types.ModuleType("torch_npu")
    monkeypatch.setitem(sys.modules, "torch_npu", broken)
    monkeypatch.setattr(torch, "npu", types.SimpleNamespace(is_available=lambda: False), raising=False)
    assert "is_available() is False" in NpuBackend.probe()
    monkeypatch.delenv("TRITON_DIST_DEVICE", raising=False)
    assert get_backend().kind != "npu"


@pytest.mark.parametrize("error", [AttributeError, ValueError])
def test_a_torch_npu_whose_import_raises_anything_means_no_npu_and_forced_names_it(monkeypatch, tmp_path, error):
    # A broken install raises what it raises (Ascend/pytorch#37: an AttributeError of
    # torch_npu.dynamo): it crashed every tuned call, on a CPU or a GPU too (found by a tester,
    # session 28). It is "no NPU" now; forcing the NPU is the error naming the variable and why.
    (tmp_path / "torch_npu.py").write_text(f"raise {error.__name__}('broken install of torch_npu')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "torch_npu", raising=False)
    assert f"{error.__name__}: broken install" in NpuBackend.probe()
    monkeypatch.delenv("TRITON_DIST_DEVICE", raising=False)
    assert get_backend().kind != "npu"
    monkeypatch.setenv("TRITON_DIST_DEVICE", "npu")
    with pytest.raises(DeviceUnavailableError, match=rf"{error.__name__}: broken install.*TRITON_DIST_DEVICE"):
        get_backend()


def test_the_settings_accept_every_kind_of_the_table_in_ascend_first_order():
    from triton_dist import settings

    # one table (triton_dist._kinds): what TRITON_DIST_DEVICE may name is what has a backend
    assert settings.DEVICE_KINDS == ("npu", "cuda", "cpu")  # detection: NPU > CUDA > CPU
    for kind in settings.DEVICE_KINDS:
        assert settings._parse({"TRITON_DIST_DEVICE": f" {kind.upper()} "}).device == kind
        assert BACKENDS[kind].load().kind == kind


def test_the_kinds_are_known_without_importing_a_backend_or_torch():
    # a Ray driver reads each kind's Ray resource (ray_runner._ray.resolve_device) and must not
    # import torch for it; the backend module is imported when its kind is probed or used
    code = ("import sys\n"
            "from triton_dist._backends import BACKENDS\n"
            "facts = {k: (v.ray_resource, v.dist_backend, v.visible_devices_env) for k, v in BACKENDS.items()}\n"
            "loaded = sorted(m for m in sys.modules if m == 'torch' or m.startswith('triton_dist._backends.')"
            " and m != 'triton_dist._backends.base')\n"
            "print(facts['cuda'], loaded)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "('GPU', 'nccl', 'CUDA_VISIBLE_DEVICES') []", out.stdout + out.stderr


@pytest.mark.parametrize("kind", ["npu", "cuda", "cpu"])
def test_each_backend_class_carries_its_kinds_launch_facts(kind):
    from triton_dist._backends import BACKENDS

    facts = BACKENDS[kind]
    cls = facts.load()
    assert (cls.kind, cls.dist_backend, cls.ray_resource, cls.visible_devices_env) == (
        facts.name, facts.dist_backend, facts.ray_resource, facts.visible_devices_env)
