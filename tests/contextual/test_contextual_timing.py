"""contextual_autotune's timed launches on a device (issue 16), on a simulated host-bound device.

A real Triton kernel (the interpreter) behind a real ``triton.autotune`` object inside a real
``contextual_autotune``; only the device is simulated (there is none here): each launch costs the
host ``launch_ms`` (Triton's launcher and the hooks; different per config, as the launcher's
argument handling is), after which the device runs the kernel for ``kernel_ms``; an event records
when the device has finished what was queued before it. An event pair around one launch on an
idle device therefore reads launch + kernel: the seed's timing picks the config with the cheapest
launch, not the fastest kernel (the 57 % mis-ranking of a 3.6 µs softmax on an H200).
"""

from __future__ import annotations

import math
import re
import types
from pathlib import Path
from typing import Any

import pytest
import torch
import triton

from triton_dist._backends.base import Backend, EventRunTimer
from triton_dist._contextual import schedule as _contextual_schedule
from triton_dist._contextual import session as _contextual
from triton_dist._contextual.schedule import MAX_LAUNCHES, launches_per_sample
from triton_dist.autotuner import contextual_autotune

from . import _kernels as K

KERNEL_MS = {256: 0.20, 512: 0.15, 1024: 0.25}  # BLOCK 512 is the fastest kernel
LAUNCH_MS = {256: 0.50, 512: 0.90, 1024: 0.50}  # ... and the slowest to launch


class HostBoundDevice(Backend):
    kind = "sim"
    dist_backend = "gloo"
    ray_resource = "CPU"
    interleaved = True

    def __init__(self) -> None:
        self.host = 0.0  # the host's clock, ms
        self.free = 0.0  # when the device has finished everything queued, ms
        self.launches: list[int] = []
        self.sleeps = 0
        self.syncs = 0

    @classmethod
    def probe(cls) -> str | None:
        return None

    def device(self) -> Any:
        return torch.device("cpu")

    def synchronize(self) -> None:
        self.syncs += 1
        self.host = max(self.host, self.free)

    def time_runs(self, fn: Any, n: int) -> list[float]:  # the seed's timing (the CPU path)
        times = []
        for _ in range(n):
            start = Event(self)
            start.record()
            fn()
            end = Event(self)
            end.record()
            self.synchronize()
            times.append(start.elapsed_time(end))
        return times

    def launch(self, block: int) -> None:
        self.launches.append(block)
        self.host += LAUNCH_MS[block]
        self.free = max(self.free, self.host) + KERNEL_MS[block]

    def session_timer(self) -> EventRunTimer:
        device = self

        class Timer(EventRunTimer):
            def keep_ahead(self, host_s: float, n_runs: int) -> None:
                # on an idle device (or behind queued work, ``always``): a sleep covering the launches
                if self.always or device.free <= device.host:
                    device.sleeps += 1
                    device.free = max(device.free, device.host) + (n_runs + 1) * max(LAUNCH_MS.values())

        return Timer(lambda: Event(device))


class Event:
    def __init__(self, device: HostBoundDevice) -> None:
        self.device, self.at = device, math.nan

    def record(self) -> None:
        self.at = max(self.device.free, self.device.host)

    def elapsed_time(self, end: Event) -> float:
        return end.at - self.at


def make_kernel(device: HostBoundDevice):
    def hook(block: int):
        return lambda nargs: device.launch(block)  # the config's pre_hook runs at every launch

    configs = [triton.Config({"BLOCK": b}, num_warps=4, pre_hook=hook(b)) for b in KERNEL_MS]
    return triton.autotune(configs=configs, key=["n"])(K._scale)


@pytest.fixture(autouse=True)
def in_tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def tune(device: HostBoundDevice, monkeypatch: pytest.MonkeyPatch, n_warmup: int = 2, n_repeat: int = 3):
    monkeypatch.setattr(_contextual, "get_backend", lambda: device)
    # the host's clock is the simulation's (a launch's host time sizes the keep-ahead sleep and
    # says whether the kernel is host-bound; real launches take what the machine takes)
    monkeypatch.setattr(_contextual_schedule, "time", types.SimpleNamespace(perf_counter=lambda: device.host / 1e3))
    kernel = make_kernel(device)
    x = torch.randn(1024, device=K.device())

    @contextual_autotune(n_repeat=n_repeat, n_warmup=n_warmup)
    def outer(x):
        y = torch.empty_like(x)
        kernel[K.grid(x.numel())](x, y, 2.0, x.numel())
        return y

    torch.testing.assert_close(outer(x), 2.0 * x)
    (best,) = kernel.cache.values()
    return best, kernel


def test_samples_of_launches_behind_a_sleep_pick_the_fastest_kernel(monkeypatch):
    device = HostBoundDevice()
    best, kernel = tune(device, monkeypatch)
    assert best.kwargs["BLOCK"] == 512
    # the per-launch times are the kernels' own, not launch + kernel
    timings = {c.kwargs["BLOCK"]: t for c, t in kernel.configs_timings.items()}  # [median, 20 %, 80 %]
    assert timings.keys() == KERNEL_MS.keys()
    assert all(timings[b] == pytest.approx([KERNEL_MS[b]] * 3, rel=1e-6) for b in KERNEL_MS)
    # samples of ceil(1 ms / fastest warm-up) launches: 7 for 0.15 ms
    k = launches_per_sample(min(KERNEL_MS.values()))
    assert k == 7
    text = (Path.cwd() / ".autotune_logs" / "rank-0.log").read_text()
    assert "7 launch(es) per timed sample" in text
    # 3 configs x (2 warm-ups of one launch + 3 samples of 7) + the final run's launch (a host-bound
    # kernel's samples have no lead-in)
    assert len(device.launches) == 3 * (2 + 3 * k) + 1
    # no synchronisation after a sample (a real run has none): one to read the warm-ups (the
    # samples' size), one to read the samples
    assert device.syncs == 2


def test_the_seed_timing_picks_the_cheapest_launch_instead(monkeypatch):
    # the same device timed as before issue 16 (one launch per event pair, no keep-ahead):
    # what the fix is measured against; it must read launch + kernel and choose BLOCK 256
    device = HostBoundDevice()
    device.interleaved = False  # the Session then times through time_runs, one launch per pair
    best, kernel = tune(device, monkeypatch)
    timings = {c.kwargs["BLOCK"]: t for c, t in kernel.configs_timings.items()}
    assert all(min(timings[b]) > KERNEL_MS[b] + 0.3 for b in KERNEL_MS)  # the launch is in every figure
    assert best.kwargs["BLOCK"] == 256


def test_timed_launches_are_interleaved_with_a_rotating_start(monkeypatch):
    device = HostBoundDevice()
    tune(device, monkeypatch, n_warmup=1, n_repeat=3)
    k = launches_per_sample(min(KERNEL_MS.values()))
    assert device.launches[:3] == [256, 512, 1024]  # warm-ups first, config by config
    timed = device.launches[3:-1]  # then samples of k launches; the last is the final run's
    samples = [timed[i:i + k] for i in range(0, len(timed), k)]
    assert all(len(set(sample)) == 1 for sample in samples) and len(samples) == 9
    assert [sample[0] for sample in samples] == [256, 512, 1024, 512, 1024, 256, 1024, 256, 512]
    text = (Path.cwd() / ".autotune_logs" / "rank-0.log").read_text()
    assert len(re.findall(r"round: timed \d/3 \| time: [0-9.]+ ms", text)) == 9


def test_launches_per_sample_is_bounded():
    assert launches_per_sample(2.0) == 1
    assert launches_per_sample(0.0036) == MAX_LAUNCHES
    assert launches_per_sample(math.inf) == 1 and launches_per_sample(0.0) == 1


class SwitchDevice(HostBoundDevice):
    """A device-bound kernel whose fastest config runs slower for its first launches after another
    config's (what an H200 did to softmax 8192 x 8192's 16-warp config, probe_switch.py)."""

    KERNEL = {256: 0.16, 512: 0.15, 1024: 0.25}  # 512 is the fastest in steady state
    PENALTY = {256: 0.0, 512: 0.06, 1024: 0.0}  # ... but 0.06 ms slower for 4 launches after a switch

    def __init__(self) -> None:
        super().__init__()
        self.last: int | None = None
        self.transient = 0

    def launch(self, block: int) -> None:
        if block != self.last:
            self.last, self.transient = block, 4
        extra = self.PENALTY[block] if self.transient else 0.0
        self.transient = max(0, self.transient - 1)
        self.launches.append(block)
        self.host += 0.01
        self.free = max(self.free, self.host) + self.KERNEL[block] + extra


def test_a_sample_follows_a_lead_in_of_its_own_config_not_the_previous_candidate(monkeypatch):
    device = SwitchDevice()
    best, kernel = tune(device, monkeypatch, n_warmup=1, n_repeat=3)
    # without the lead-in, 512's samples of 7 launches began with its 4 slow ones (0.184 ms per
    # launch against 256's 0.16) and the tuning picked 256; after it, each sample is steady state
    assert best.kwargs["BLOCK"] == 512
    timings = {c.kwargs["BLOCK"]: t for c, t in kernel.configs_timings.items()}  # [median, 20 %, 80 %]
    assert timings.keys() == SwitchDevice.KERNEL.keys()
    assert all(timings[b] == pytest.approx([ms] * 3, rel=1e-6) for b, ms in SwitchDevice.KERNEL.items())
    k = launches_per_sample(min(SwitchDevice.KERNEL.values()))
    # 3 configs x (1 warm-up + 3 samples of k after a lead-in of k) + the final run's launch
    assert len(device.launches) == 3 * (1 + 3 * 2 * k) + 1


class SpeedingHost(SwitchDevice):
    """The host's launches get cheaper after the warm-ups (a cold launcher path): the lead-in is
    decided once, at the first timed sample, so that every candidate is timed alike."""

    def launch(self, block: int) -> None:
        super().launch(block)
        if len(self.launches) <= 3:  # the three warm-ups: slower to launch than their kernels
            self.host += 0.3


def test_the_lead_in_is_decided_once_for_every_candidate(monkeypatch):
    device = SpeedingHost()
    tune(device, monkeypatch, n_warmup=1, n_repeat=3)
    k = launches_per_sample(min(SwitchDevice.KERNEL.values()))
    # host-bound at the first timed sample: no lead-in then, nor later when launches got cheap
    assert len(device.launches) == 3 * (1 + 3 * k) + 1
