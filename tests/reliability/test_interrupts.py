"""Ctrl-C (SIGINT) during a tuning of a function that writes its arguments in place: once the
``KeyboardInterrupt`` is out, the caller's tensors are as they passed them (a tester's interrupt
matrix: the timeout thread ran on after it, a restore was cut in two, the first run's Triton
writes were kept). The signal is sent from inside the tuning, at a chosen moment."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch
import triton
import triton.language as tl
from torch.overrides import TorchFunctionMode

from triton_dist._measure import time_limit
from triton_dist._measure.interrupts import interrupts_held
from triton_dist.errors import TritonDistWarning
from triton_dist.settings import override
from triton_dist.tune import autotune

MAIN = threading.main_thread().ident


def ctrl_c() -> None:
    """SIGINT to this process now; Python raises KeyboardInterrupt in the main thread at its next
    bytecode (a sleep lets it run there)."""
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.01)


def ctrl_c_to_main() -> None:
    """SIGINT to the main thread, sent from the candidate's thread now: the main thread, waiting
    for the run in slices, raises KeyboardInterrupt while the run goes on (no timing assumed)."""
    signal.pthread_kill(MAIN, signal.SIGINT)


def join_candidate_threads() -> None:
    for thread in threading.enumerate():
        if thread.name == "triton_dist-candidate":
            thread.join(30)


@triton.jit
def _add(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(out_ptr + offs, mask=mask) + tl.load(x_ptr + offs, mask=mask), mask=mask)


# ---------------------------------------------------------------------------- the timeout thread

def test_an_interrupted_limited_candidate_runs_no_further_run_after_the_interrupt():
    """With TRITON_DIST_AUTOTUNE_CANDIDATE_TIMEOUT_S the CPU's candidates run in a thread. Ctrl-C
    in a run: the thread finished that run and then did another one, after the arguments were
    restored (x = 4 x0 a second later). Now the caller waits for the run in flight to end, the
    thread starts none after it, and the arguments stay as they were passed."""
    calls = []

    @autotune([{"c": 1}, {"c": 2}], lambda x, out: x.numel(), n_warmup=1, n_repeat=1)
    def host(x, out, c):
        calls.append(c)
        if len(calls) == 3:  # config 1's first run
            ctrl_c_to_main()
        out += x
        time.sleep(1.0)  # a slow run: the interrupt lands inside it (a loaded machine takes its time)
        x.mul_(2)
        return out

    x0, out0 = torch.rand(64), torch.rand(64)
    x, out = x0.clone(), out0.clone()
    with override(TRITON_DIST_AUTOTUNE_CANDIDATE_TIMEOUT_S="30"):
        with pytest.raises(KeyboardInterrupt):
            host(x, out)
    assert torch.equal(x, x0) and torch.equal(out, out0)
    join_candidate_threads()  # the thread has ended: it ran no further run
    assert len(calls) == 3
    assert torch.equal(x, x0) and torch.equal(out, out0)
    assert [t.name for t in threading.enumerate() if t.name == "triton_dist-candidate"] == []


def test_a_run_that_outlasts_the_wait_is_said(monkeypatch):
    monkeypatch.setattr(time_limit, "STOP_WAIT_S", 0.1)  # the wait of run_limited (_measure/time_limit.py)
    calls = []

    @autotune([{"c": 1}, {"c": 2}], lambda x: x.numel(), n_warmup=0, n_repeat=1)
    def host(x, c):
        calls.append(c)
        ctrl_c_to_main()
        time.sleep(2.0)  # far longer than the wait (0.1 s), even on a loaded machine
        x.add_(1)

    x = torch.zeros(4)
    with override(TRITON_DIST_AUTOTUNE_CANDIDATE_TIMEOUT_S="30"):
        with pytest.warns(TritonDistWarning, match="still going on in its measurement thread"):
            with pytest.raises(KeyboardInterrupt):
                host(x)
    join_candidate_threads()  # the run ends (it writes x: the warning's point) and no further one starts
    assert calls == [1]
    # the run in flight wrote x after the restore (the warning's point); its own first-run check
    # may then have put the snapshot back: either way, no further run
    assert torch.equal(x, torch.ones(4)) or torch.equal(x, torch.zeros(4))


# ---------------------------------------------------------------------------- the restore

class _CtrlCInCopyInto(TorchFunctionMode):
    """A SIGINT sent while the tuner copies a snapshot into ``target`` (once, when armed)."""

    def __init__(self, target: torch.Tensor) -> None:
        super().__init__()
        self.target, self.armed, self.fired = target, False, False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if self.armed and func is torch.Tensor.copy_ and args[0] is self.target:
            self.armed, self.fired = False, True
            ctrl_c()
        return func(*args, **(kwargs or {}))


def test_a_ctrl_c_in_the_last_restore_leaves_every_argument_restored():
    """Ctrl-C while the tuner put the arguments back after the last timed run: x was restored,
    out kept that run's update, a state no number of calls produces."""
    x0, out0 = torch.rand(256), torch.rand(256)
    x, out = x0.clone(), out0.clone()
    mode = _CtrlCInCopyInto(out)  # out is restored after x: the interrupt lands between the two
    calls = []

    @autotune([{"c": 1}, {"c": 2}], lambda x, out: x.numel(), n_warmup=1, n_repeat=1)
    def host(x, out, c):
        calls.append(c)
        out += x
        x.mul_(2)
        mode.armed = len(calls) == 4  # the last timed run: the restore after it
        return out

    with mode, pytest.raises(KeyboardInterrupt):
        host(x, out)
    assert mode.fired and len(calls) == 4
    assert torch.equal(x, x0) and torch.equal(out, out0)


def test_interrupts_held_hands_one_ctrl_c_on_at_the_end_and_lets_a_second_through():
    steps = []
    with pytest.raises(KeyboardInterrupt):
        with interrupts_held():
            ctrl_c()
            steps.append("after the first")
    assert steps == ["after the first"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    steps.clear()
    with pytest.raises(KeyboardInterrupt):
        with interrupts_held():
            ctrl_c()
            steps.append("after the first")
            ctrl_c()  # the user insists: raised here
            steps.append("after the second")
    assert steps == ["after the first"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    with interrupts_held():  # none: the block runs through
        steps.append("quiet")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    def elsewhere():
        with interrupts_held():
            steps.append(signal.getsignal(signal.SIGINT) is signal.default_int_handler)

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()
    assert steps[-1] is True


def test_a_users_handler_sees_both_presses_of_a_double_ctrl_c():
    """A handler that counts presses (the first: stop gracefully, the second: abort) saw only the
    second of two SIGINTs that landed in a restore (a tester, 2026-12-05)."""
    presses = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: presses.append(signum))
    try:
        with interrupts_held():
            ctrl_c()
            assert presses == []  # held
            ctrl_c()  # the user insists: both handed on now
            assert presses == [signal.SIGINT, signal.SIGINT]
        assert presses == [signal.SIGINT, signal.SIGINT]  # nothing handed on twice at the end
    finally:
        signal.signal(signal.SIGINT, previous)


def test_an_ignored_ctrl_c_stays_ignored():
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts_held():
            ctrl_c()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


# ---------------------------------------------------------------------------- the first run

def test_a_ctrl_c_in_the_first_run_undoes_its_triton_writes():
    """The first run's Triton writes (no version counter moves) were found by comparing after
    it; a Ctrl-C inside it skipped the comparison and the write was kept. A torch op's write
    was undone (its version counter), so the tuner had the snapshot and the interrupt is the
    tuner's, not an interrupted call of the user's."""
    calls = []

    @autotune([{"B": 1}, {"B": 2}], lambda x, out: x.numel(), n_warmup=1, n_repeat=1)
    def host(x, out, B):
        calls.append(B)
        _add[(1,)](x, out, x.numel(), BLOCK=64)
        if len(calls) == 1:
            ctrl_c()
        return out

    x, out = torch.ones(16), torch.zeros(16)
    with pytest.raises(KeyboardInterrupt):
        host(x, out)
    assert calls == [1]
    assert torch.equal(out, torch.zeros(16))


def test_a_config_that_raises_after_a_triton_write_leaves_the_next_config_the_callers_values():
    seen = []

    @autotune([{"B": 1}, {"B": 2}], lambda x, out: x.numel(), n_warmup=1, n_repeat=1)
    def host(x, out, B):
        seen.append((B, out.clone()))
        _add[(1,)](x, out, x.numel(), BLOCK=64)
        if B == 1:
            raise RuntimeError("config B=1 cannot run here")  # a config's failure, after writing
        return out

    x, out = torch.ones(16), torch.zeros(16)
    host(x, out)
    assert [b for b, _ in seen] == [1, 2, 2, 2]  # config 1's first run, config 2's, the call
    assert all(torch.equal(o, torch.zeros(16)) for _, o in seen)
    assert torch.equal(out, torch.ones(16))
