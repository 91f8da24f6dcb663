"""A tuned host function that draws from torch's random-number generator (a dropout kernel's seed,
as kernel libraries draw it): tuning runs it many times, and used to leave the generator as many
draws on, so a seeded job gave other numbers on a miss than on a hit, and ``check_correctness``
rejected every config but the first (each run drew another seed). Real Triton kernel, interpreter.
"""

from __future__ import annotations

import math

import pytest
import torch
import triton
import triton.language as tl

from triton_dist.tune import autotune, to_hashable


@triton.jit
def _dropout(x_ptr, y_ptr, n, p, seed, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    keep = tl.rand(seed, offsets) > p
    tl.store(y_ptr + offsets, tl.where(keep, x / (1 - p), 0.0), mask=mask)


SPACE = [{"cfg": triton.Config({"BLOCK": b}, num_warps=4)} for b in (32, 64)]


def _key(x, *args, **kwargs):
    return to_hashable(x)


def _make(check: bool, restore: bool = True):
    @autotune(SPACE, _key, check_correctness=check, restore_inplace=restore, n_warmup=1, n_repeat=2)
    def dropout(x, p, cfg):
        seed = int(torch.randint(0, 2**31 - 1, ()).item())  # drawn on the host, per call
        y = torch.empty_like(x)
        n = x.numel()
        _dropout[(triton.cdiv(n, cfg.kwargs["BLOCK"]),)](x, y, n, p, seed, **cfg.all_kwargs())
        return y

    return dropout


@pytest.mark.parametrize(("check", "restore"), [(False, True), (True, True), (False, False)])
def test_a_tuning_call_draws_what_an_untuned_call_draws(check: bool, restore: bool) -> None:
    dropout = _make(check, restore)
    x = torch.randn(100)
    torch.manual_seed(0)
    untuned = dropout(x, 0.5, autotune=False)
    after_untuned = torch.rand(4)

    torch.manual_seed(0)
    tuned = dropout(x, 0.5)  # a miss: tunes, then the call with the best config
    after_tuned = torch.rand(4)

    assert torch.equal(tuned, untuned), "the tuned call drew another seed than an untuned call"
    assert torch.equal(after_tuned, after_untuned), "the tuning moved torch's generator"


def test_check_correctness_compares_runs_that_draw_the_same_numbers() -> None:
    dropout = _make(True)
    torch.manual_seed(0)
    entry = dropout.tune(torch.randn(100), 0.5, force=True, write_cache=False)
    errors = {c["index"]: c["error"] for c in entry["candidates"]}
    assert errors == {0: None, 1: None}, errors  # was: config 1 rejected as a wrong result
    assert all(math.isfinite(c["time_ms"]) for c in entry["candidates"])


class _CapturingCuda:
    """A stand-in for torch.cuda's generator functions (no CUDA GPU here), as CUDAGeneratorImpl
    behaves: reading or setting a generator's state while a graph capture is under way is refused
    ('Cannot call CUDAGeneratorImpl::current_seed during CUDA graph capture')."""

    def __init__(self) -> None:
        self.capturing = False
        self.states = [torch.tensor([1, 2], dtype=torch.uint8), torch.tensor([3, 4], dtype=torch.uint8)]

    def _refused(self, what: str) -> None:
        if self.capturing:
            raise RuntimeError(f"Cannot call CUDAGeneratorImpl::{what} during CUDA graph capture")

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: self.capturing)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_rng_state", self.get_rng_state)
        monkeypatch.setattr(torch.cuda, "set_rng_state", self.set_rng_state)
        for name in ("get_rng_state_all", "set_rng_state_all"):  # one read per visible device
            monkeypatch.setattr(torch.cuda, name, lambda *a, _n=name: pytest.fail(f"{_n}: every device read"))

    def get_rng_state(self, device: int = 0) -> torch.Tensor:
        self._refused("current_seed")
        return self.states[device].clone()

    def set_rng_state(self, state: torch.Tensor, device: int = 0) -> None:
        self._refused("set_current_seed")
        self.states[device] = state.clone()


def test_the_device_generator_is_not_read_during_a_graph_capture(monkeypatch: pytest.MonkeyPatch) -> None:
    """A contextual call whose kernels are all cached captured into a CUDA graph (tune first, then
    capture the model) made its RngState during the capture, and a guard's first run captured there
    asked whether the device generator moved: both read the device's state, which CUDA refuses
    during a capture, so the capture failed with RuntimeError. The device generator is left alone
    during a capture (as restore already did); the CPU generator is still put back."""
    from triton_dist._measure.rng import RngState

    cuda = _CapturingCuda()
    cuda.install(monkeypatch)
    cuda.capturing = True
    state = RngState("cuda")  # was: RuntimeError
    torch.rand(3)
    assert state.moved()  # the CPU generator moved (the device's is not asked)
    state.restore()
    assert not state.moved()

    cuda.capturing = False  # made outside a capture, asked inside one
    state = RngState("cuda")
    cuda.states[0] = torch.tensor([9, 9], dtype=torch.uint8)  # the device generator drew
    cuda.capturing = True
    assert not state.moved()  # was: RuntimeError (the device's state is not read during a capture)
    cuda.capturing = False
    assert state.moved()
    state.restore()
    assert torch.equal(cuda.states[0], torch.tensor([1, 2], dtype=torch.uint8))


def test_only_the_current_devices_generator_is_taken_and_put_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every call of a contextual function takes the state: it read every visible device's."""
    from triton_dist._measure.rng import RngState

    cuda = _CapturingCuda()
    cuda.install(monkeypatch)
    state = RngState("cuda")
    cuda.states[1] = torch.tensor([7, 7], dtype=torch.uint8)  # another device's: not this rank's
    assert not state.moved()
    cuda.states[0] = torch.tensor([9, 9], dtype=torch.uint8)
    assert state.moved()
    state.restore()
    assert torch.equal(cuda.states[0], torch.tensor([1, 2], dtype=torch.uint8))
    assert torch.equal(cuda.states[1], torch.tensor([7, 7], dtype=torch.uint8))


def test_the_generators_of_the_devices_the_call_uses_are_taken_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rank that puts its tensors on cuda:{local_rank} without set_device has current device 0
    and draws from generator local_rank: the tuning moved that one unseen (a reviewer)."""
    from triton_dist._measure.rng import RngState

    cuda = _CapturingCuda()
    cuda.states.append(torch.tensor([5, 6], dtype=torch.uint8))
    cuda.install(monkeypatch)
    state = RngState("cuda", devices=[1])
    cuda.states[1] = torch.tensor([9, 9], dtype=torch.uint8)  # a run's dropout on cuda:1 drew
    assert state.moved()
    state.restore()
    assert torch.equal(cuda.states[1], torch.tensor([3, 4], dtype=torch.uint8))
    cuda.states[2] = torch.tensor([8, 8], dtype=torch.uint8)  # a device the call does not use
    assert not state.moved()


def test_the_devices_a_call_uses_are_read_from_its_tensors() -> None:
    from triton_dist._measure.rng import tensor_devices

    x = torch.zeros(2)
    assert tensor_devices((x, [x], {"y": x}), "cpu") == set()  # the CPU generator is always taken
    assert tensor_devices((x, [x], {"y": x}, 3, "s"), "cuda") == set()  # no tensor on a cuda device
