"""Contextual tuning's measuring schedule of one inner kernel (``KernelTuning``: which candidate
each launch of the outer function runs) and how a candidate's launch is timed on a device.

How a launch is timed on a device (CUDA, NPU):

An event pair around *one* launch of a kernel that is shorter than the launch's host time
(Triton's launcher and the autotuner's hooks: tens of µs) times the launch, not the kernel: the
start event fires on an idle device, the kernel only arrives when the host has launched it. And
one pair's own fixed cost (~2-4 µs on an H200, differing between configs by ~1 µs) is as long as
a 3 µs kernel. An H200 ranked a 3.6 µs softmax's configs 57 % wrong that way, in every trial
(issue 16). So each timed slot of ``session.Session`` is a *sample*:

- the real launch, followed by ``k - 1`` more launches of the same candidate (with its hooks, as
  stock ``Autotuner._bench`` repeats a launch): the sample's lead-in, untimed; then ``k`` more
  launches between one event pair. Without the lead-in a sample began right after another
  candidate's: an H200 ran softmax 8192 x 8192's best config (16 warps, 4 loop stages) ~2 %
  slower for about a millisecond after another config than after itself, and contextual
  tuning picked a config 3.8 % slower in 2 of 3 trials (``scripts/device/probe_switch.py``).
  Kernels shorter than their launch's host time have no lead-in: their samples are already
  many launches queued behind one sleep, which a lead-in would outrun;
- queued behind a device-side sleep long enough for the host to enqueue them (the keep-ahead of
  ``_measure.rounds``, through the backend's timer), so that the pair times kernels, not launches;
- ``k`` makes a sample last about ``SAMPLE_S`` on the fastest candidate (at most
  ``MAX_LAUNCHES``), from the warm-up launches, which are timed the same way one launch each.

The sample's lead-in starts in the outer function's real state — what ran before it, its memory
and its communication — which is what makes the tuning contextual: the timed launches run in the
state the real launch leaves, with the outer function's concurrent work (communication on other
streams) going on around them, and free of what the previous candidate left behind.
Nothing synchronises after a sample: the events are read once the kernel's last slot
has run (the warm-ups' at its first timed slot, to size the samples), so the device goes on with
the outer function's work as in a real run. A synchronisation after every launch (the seed's
timing) leaves the device idle between samples; an H200 then ran a 150 µs softmax's configs in
bursts after idle gaps, whose ranking differed from the steady state's by up to 3.3 %.
Each kernel has a timer (and an event pool) of its own: a tuning started inside the outer
function never shares it.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Any

from triton_dist._backends import Backend
from triton_dist._backends.base import EventRunTimer
from triton_dist._contextual import triton_compat as compat
from triton_dist._contextual.inner import InnerOptions

__all__ = ["MAX_LAUNCHES", "SAMPLE_S", "Candidate", "KernelTuning", "Samples", "launches_per_sample"]

#: a timed sample lasts about this long on the fastest candidate (graph mode's samples in
#: ``_measure.rounds`` are as long, for the same reason: a sample's fixed cost must not rank configs)
SAMPLE_S = 1e-3
#: at most this many launches per timed sample
MAX_LAUNCHES = 64


@dataclasses.dataclass
class Candidate:
    index: int
    """Position among the kernel's kept (pruned) configs."""
    config: Any
    config_id: int
    """Position in the kernel's ``configs`` (what the log calls config-id)."""
    times: list[float] = dataclasses.field(default_factory=list)
    rows: list[tuple[list[float], bool]] = dataclasses.field(default_factory=list)
    """the inner autotuner's ``do_bench`` results of the timed slots (``timings.bench_row``)"""
    error: str | None = None
    pending: list[tuple[str, Any]] = dataclasses.field(default_factory=list)
    """timed samples not read yet (device timing): (where, token)"""
    unexpected: bool = False
    """it failed with an error of a hook or the launch's own, not Triton's "cannot run here"
    (``_measure.result.is_config_limit``): said in a warning when the kernel is decided"""

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclasses.dataclass
class KernelTuning:
    """The measuring schedule of one inner kernel for one key."""

    at: Any
    key: tuple
    name: str
    key_text: str
    candidates: list[Candidate]
    n_warmup: int
    n_repeat: int
    registered_run: int
    slot: int = 0
    progress_run: int = 0
    done: bool = False
    best: Candidate | None = None
    launches_skipped: int = 0
    inner: InnerOptions = dataclasses.field(default_factory=lambda: InnerOptions(None))  # do_bench, print...
    per_sample: int = 0
    """launches per timed sample (device timing; 0 until the first timed slot decides it)"""
    timer: Any = None
    """this kernel's event timer (device timing)"""
    warm_tokens: list[Any] = dataclasses.field(default_factory=list)
    warm_ms: float = math.inf
    """fastest warm-up launch's device time (device timing)"""
    launch_s: float = math.inf
    """fastest launch's host time (the keep-ahead sleep covers ``per_sample`` of them)"""
    lead_in: bool | None = None
    """whether timed samples follow a lead-in (device timing): decided at the first timed sample,
    the same for every candidate"""

    @property
    def per_candidate(self) -> int:
        return self.n_warmup + self.n_repeat

    @property
    def total(self) -> int:
        return len(self.candidates) * self.per_candidate

    def position(self, slot: int) -> tuple[int, int]:
        """(candidate, launch number r) of a slot: r < n_warmup are warm-ups (candidate by
        candidate), then round r - n_warmup, in which the candidates take turns from a starting
        candidate that rotates."""
        n = len(self.candidates)
        warm = n * self.n_warmup
        if slot < warm:
            return divmod(slot, self.n_warmup)
        round_no, pos = divmod(slot - warm, n)
        return (pos + round_no) % n, self.n_warmup + round_no

    def prefix(self, cand: Candidate) -> str:
        return (f"func: {self.name} | key: {self.key_text} | config-id: {cand.config_id} | "
                f"config: {compat.config_text(cand.config)}")


def launches_per_sample(fastest_ms: float) -> int:
    """Launches per timed sample for a fastest warm-up launch of ``fastest_ms``."""
    if not math.isfinite(fastest_ms) or fastest_ms <= 0:
        return 1
    return max(1, min(MAX_LAUNCHES, math.ceil(SAMPLE_S * 1e3 / fastest_ms)))


class Samples:
    """Times a session's samples; on a device each kernel has a timer of its own (events read when
    its tuning needs them: at the first timed slot for the warm-ups, at the end for the samples)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self._warmed = False

    def _timer(self, state: Any) -> EventRunTimer:
        if state.timer is None:
            if not self._warmed:  # steady clocks first (and a keep-ahead sleep calibrated at them)
                self.backend.warm_up()
                self._warmed = True
            state.timer = self.backend.session_timer()
        return state.timer

    def timed(self, state: Any, fn: Callable[[], Any], k: int, lead_in: bool = False) -> tuple[Any, Any]:
        """Run a sample of ``k`` launches (``fn``: a candidate's launch) and return (what the first
        returned, its token). Off a device the token is the ms per launch, measured now; on a
        device it is read by :meth:`read` after a synchronisation. ``lead_in`` (device): ``k``
        untimed launches first, the first of them the real one (module docstring). ``state``
        (``KernelTuning``) keeps the host time of a launch (``launch_s``), which sizes the
        keep-ahead sleep."""
        if not self.backend.interleaved:
            box: list[Any] = []
            ms = self.backend.time_runs(lambda: box.append(fn()), 1)[0]
            return box[0], float(ms)
        timer = self._timer(state)
        launch_s = state.launch_s if math.isfinite(state.launch_s) else 0.0
        # behind queued work as well when the host is slower than the kernels (the queue would
        # drain before the sample's launches are enqueued); else only on an idle device, so that
        # long kernels run back to back with the outer function's work, as in a real run
        timer.always = not launch_s * 1e3 < state.warm_ms
        # a lead-in only where the device runs behind the host (kernels longer than their launch):
        # where the host is slower, the sample's launches are already many short ones queued behind
        # one sleep, which a lead-in would only make longer than the sleep can cover
        if lead_in and state.lead_in is None:  # once, after the warm-ups: every candidate alike
            state.lead_in = not timer.always
        lead = k if lead_in and state.lead_in else 0
        timer.keep_ahead(launch_s * (k + lead), k + lead)
        token = None
        if not lead:
            token = timer.start()
        try:
            began = time.perf_counter()
            ret = fn()
            state.launch_s = min(state.launch_s, time.perf_counter() - began)
            for _ in range(lead - 1):
                fn()
            if lead:
                token = timer.start()
            for _ in range(k - (0 if lead else 1)):
                fn()
        finally:
            pair = timer.stop(token) if token is not None else None
        return ret, (pair, k)

    def read(self, state: Any, token: Any) -> float:
        """ms per launch of a sample (after :meth:`Backend.synchronize` on a device)."""
        if not isinstance(token, tuple):
            return float(token)
        pair, k = token
        return float(state.timer.elapsed_ms(pair)) / k

    def done(self, state: Any) -> None:
        """The kernel's events have been read: its timer's pool can be reused."""
        if state.timer is not None:
            state.timer.reset()
