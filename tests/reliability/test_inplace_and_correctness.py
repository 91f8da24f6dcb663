"""Issue 7 items 7 and 8: in-place safety (restore mutated arguments) and the correctness check.

Real Triton kernels under the interpreter (they write through raw pointers, so version counters
do not see them) and plain torch in-place ops (which do bump the counters).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from triton_dist.tune import autotune

SPACE = [{"BLOCK": 16}, {"BLOCK": 32}, {"BLOCK": 64}]
RUNS = 1 + 2  # n_warmup + n_repeat used below


@triton.jit
def _axpy_inplace(x_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(x_ptr + offs, x + scale * y, mask=mask)


def _key(x, y, **_):
    return (tuple(x.shape), str(x.dtype))


def _entry(cache_dir: Path, name: str) -> dict:
    (path,) = (cache_dir / name).glob("*.json")
    return json.loads(path.read_text())


def _errors(entry: dict) -> dict[int, str | None]:
    return {c["index"]: c["error"] for c in entry["candidates"]}


def make_triton_axpy(restore: bool = True, check: bool = False, wrong_block: int | None = None,
                     returns: bool = True):
    calls: Counter[int] = Counter()

    @autotune(SPACE, _key, n_warmup=1, n_repeat=2, restore_inplace=restore, check_correctness=check)
    def triton_axpy(x, y, BLOCK):
        calls[BLOCK] += 1
        scale = 2.0 if BLOCK == wrong_block else 1.0  # a config with a bug: wrong result
        _axpy_inplace[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), scale, BLOCK=BLOCK)
        return x if returns else None

    return triton_axpy, calls


def test_triton_inplace_kernel_leaves_arguments_as_one_real_call_would():
    tuned, calls = make_triton_axpy()
    x = torch.arange(100, dtype=torch.float32)
    y = torch.ones(100)
    x0, y0 = x.clone(), y.clone()
    out = tuned(x, y)
    # 3 candidates x 3 runs while tuning, then the final call: x was mutated exactly once
    assert sum(calls.values()) == 3 * RUNS + 1
    assert out is x
    assert torch.equal(x, x0 + y0)
    assert torch.equal(y, y0)


def test_opt_out_keeps_every_run_on_what_the_previous_left():
    tuned, calls = make_triton_axpy(restore=False)
    x = torch.zeros(64)
    tuned(x, torch.ones(64))
    assert sum(calls.values()) == 3 * RUNS + 1
    assert torch.equal(x, torch.full((64,), float(3 * RUNS + 1)))


def test_torch_inplace_ops_are_restored_and_read_only_arguments_untouched():
    calls: Counter[int] = Counter()

    @autotune([{"k": 1}, {"k": 2}], lambda acc, src, idx: tuple(acc.shape), n_warmup=2, n_repeat=3)
    def scatter_acc(acc, src, idx, k):
        calls[k] += 1
        acc.index_add_(0, idx, src)  # bumps acc._version
        return acc.sum()

    acc = torch.zeros(8, dtype=torch.float64)
    src = torch.arange(4, dtype=torch.float64)
    idx = torch.tensor([0, 2, 2, 7])
    expected = acc.clone().index_add_(0, idx, src)
    total = scatter_acc(acc, src, idx)
    assert sum(calls.values()) == 2 * 5 + 1
    assert torch.equal(acc, expected)
    assert total.item() == expected.sum().item()
    assert torch.equal(src, torch.arange(4, dtype=torch.float64))


def test_nested_tensor_arguments_are_restored():
    @autotune([{"k": 1}, {"k": 2}], lambda bufs: len(bufs["list"]), n_warmup=1, n_repeat=2)
    def bump(bufs, k):
        for t in bufs["list"]:
            t.add_(1)

    a, b = torch.zeros(3), torch.zeros(2, dtype=torch.int32)
    bump({"list": [a, b]})
    assert torch.equal(a, torch.ones(3)) and torch.equal(b, torch.ones(2, dtype=torch.int32))


def test_restore_adds_no_host_calls_and_is_skipped_when_nothing_is_mutated(monkeypatch):
    copies = Counter()
    real_copy = torch.Tensor.copy_

    def counting_copy(self, *args, **kwargs):
        copies["n"] += 1
        return real_copy(self, *args, **kwargs)

    calls = Counter()

    @autotune([{"k": 1}, {"k": 2}, {"k": 3}], lambda x: tuple(x.shape), n_warmup=2, n_repeat=3)
    def pure(x, k):
        calls[k] += 1
        return x * k

    monkeypatch.setattr(torch.Tensor, "copy_", counting_copy)
    x = torch.ones(5)
    pure(x)
    assert sum(calls.values()) == 3 * 5 + 1
    assert copies["n"] == 0


@pytest.mark.parametrize("returns", [True, False], ids=["returned", "only-mutated"])
def test_wrong_config_is_inf_with_reason_and_never_chosen(cache_dir, returns):
    tuned, calls = make_triton_axpy(check=True, wrong_block=32, returns=returns)
    x, y = torch.arange(50, dtype=torch.float32), torch.full((50,), 0.5)
    x0 = x.clone()
    tuned(x, y)
    entry = _entry(cache_dir, "triton_axpy")
    errors = _errors(entry)
    assert errors[0] is None and errors[2] is None
    assert errors[1].startswith("WrongResultError: wrong result (max abs diff 0.5")
    # an in-place function that returns nothing is judged by the tensors it mutated
    assert ("mutated tensor argument 0" in errors[1]) is not returns
    assert entry["best"]["index"] != 1
    # the wrong candidate stopped at its first run; the others ran in full; nothing extra
    assert calls[32] == 1 and calls[16] + calls[64] == 2 * RUNS + 1
    assert torch.equal(x, x0 + y)


def test_check_off_changes_no_call_counts_and_keeps_wrong_configs(cache_dir):
    tuned, calls = make_triton_axpy(check=False, wrong_block=32)
    tuned(torch.zeros(40), torch.ones(40))
    assert calls == {16: RUNS + (calls[16] > RUNS), 32: RUNS + (calls[32] > RUNS),
                     64: RUNS + (calls[64] > RUNS)}
    assert all(e is None for e in _errors(_entry(cache_dir, "triton_axpy")).values())


def _run_structured(outputs: dict[int, object], space_size: int = 3,
                    fail: set[int] = frozenset(), prune=None) -> dict[int, str | None]:
    @autotune([{"c": i} for i in range(space_size)], lambda: "k", prune_fn=prune, n_warmup=0,
              n_repeat=2, check_correctness=True)
    def structured(c):
        if c in fail:
            raise RuntimeError(f"config {c} cannot run here")
        return outputs[c]

    return _errors(structured.tune(write_cache=False))


def test_nested_outputs_and_dtype_tolerances():
    base = {"h": torch.ones(4, dtype=torch.float16), "i": torch.arange(3), "f": 1.5, "s": "ok"}
    close = {"h": torch.ones(4, dtype=torch.float16) * 1.002, "i": torch.arange(3), "f": 1.5, "s": "ok"}
    off_by_one = {"h": base["h"], "i": torch.tensor([0, 1, 3]), "f": 1.5, "s": "ok"}
    errors = _run_structured({0: (base, [2]), 1: (close, [2]), 2: (off_by_one, [2])})
    assert errors[0] is None
    assert errors[1] is None  # fp16 is compared loosely
    assert "wrong result (max abs diff 1" in errors[2] and "['i']" in errors[2]  # ints exactly


@pytest.mark.parametrize("bad, why", [
    ((torch.tensor([1.0, 2.0, 3.0]), torch.ones(2)), "shape"),
    ((torch.ones(3, dtype=torch.float64), torch.ones(3)), "dtype"),
    ((torch.ones(3),), "tuple of 1"),
    ([torch.ones(3), torch.ones(3)], "list"),
    ((torch.tensor([1.0, float("nan"), 3.0]), torch.ones(3)), "max abs diff inf"),
])
def test_structure_mismatches_are_wrong_results(bad, why):
    good = (torch.tensor([1.0, 2.0, 3.0]), torch.ones(3))
    errors = _run_structured({0: good, 1: bad}, space_size=2)
    assert errors[0] is None
    assert "wrong result" in errors[1] and why in errors[1]


def test_reference_falls_back_to_the_first_kept_candidate_that_works():
    outputs = {0: torch.zeros(2), 1: torch.ones(2), 2: torch.ones(2), 3: torch.full((2,), 7.0)}
    errors = _run_structured(outputs, space_size=4, fail={1})
    assert errors[1].startswith("RuntimeError") and "wrong result" in errors[2]  # against 0
    errors = _run_structured(outputs, space_size=4, fail={0})
    assert errors[2] is None and "config_space[1]" in errors[3]  # 0 failed: 1 is the reference
    errors = _run_structured(outputs, space_size=4, prune=lambda config: config["c"] != 1)
    assert errors[1] is None and "config_space[0]" in errors[2]  # 1 pruned: 0 stays the reference


def test_campaign_override_turns_the_check_on_for_one_decision():
    @autotune([{"c": 0}, {"c": 1}], lambda: "k", n_warmup=0, n_repeat=1)
    def plain(c):
        return torch.tensor([float(c)])

    entry = plain.tune(check_correctness=True, write_cache=False)
    assert "wrong result" in entry["candidates"][1]["error"]
    entry = plain.tune(write_cache=False)
    assert entry["candidates"][1]["error"] is None


def test_read_only_arguments_holding_nan_are_not_taken_for_mutated(monkeypatch):
    copies = Counter()
    real_copy = torch.Tensor.copy_

    def counting_copy(self, *args, **kwargs):
        copies["n"] += 1
        return real_copy(self, *args, **kwargs)

    @autotune([{"k": 1}, {"k": 2}], lambda x: tuple(x.shape), n_warmup=1, n_repeat=2)
    def nan_sum(x, k):
        return torch.nansum(x) * k

    monkeypatch.setattr(torch.Tensor, "copy_", counting_copy)
    nan_sum(torch.tensor([1.0, float("nan"), 2.0]))
    assert copies["n"] == 0


def test_deferred_first_run_checks_run_when_asked_before_any_other_run_or_at_the_end():
    # RunGuard.wrap(..., defer=True): device measurement closes the first run's event pair before
    # the guard compares arguments (a synchronisation); nothing may run on unnoticed mutations.
    from triton_dist._measure.guard import RunGuard
    from triton_dist.errors import WrongResultError

    def bump(x):  # writes through raw memory: the version counter does not move
        x.numpy()[:] += 1.0
        return x.sum().clone()

    def read(x):
        return x.sum().clone()

    x = torch.ones(4)
    with RunGuard((x,), {}, check=True) as guard:
        first = guard.wrap(0, lambda: read(x), defer=True)
        wrong = guard.wrap(1, lambda: read(x) * 2, defer=True)
        first()
        guard.check_first(0)
        guard.done(0, True)  # the reference
        wrong()  # no comparison yet
        with pytest.raises(WrongResultError, match="wrong result"):
            guard.check_first(1)
    x = torch.ones(4)
    with RunGuard((x,), {}) as guard:
        mutating = guard.wrap(0, lambda: bump(x), defer=True)
        reading = guard.wrap(1, lambda: read(x), defer=True)
        mutating()
        assert float(x.sum()) == 8.0 and not guard.mutated
        assert float(reading()) == 4.0  # the pending check ran first: x was restored
        assert guard.mutated == {0}
    assert torch.equal(x, torch.ones(4))
    x = torch.ones(4)
    with RunGuard((x,), {}) as guard:  # measuring stopped before the check: found on leaving
        guard.wrap(0, lambda: bump(x), defer=True)()
    assert torch.equal(x, torch.ones(4))


def test_queued_first_run_checks_undo_mutations_on_the_device_and_settle_later(monkeypatch):
    # RunGuard(queue=<device type>), graph mode: each first run is followed by a device pass that undoes
    # what it changed (no synchronisation, no host comparison); settle() reads what was found.
    from triton_dist._measure import guard as _safety
    from triton_dist._measure.guard import RunGuard

    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs TRITON_INTERPRET=1 on the CPU (scripts/env.sh sets it)")

    def no_host_comparison(*_a, **_k):
        raise AssertionError("compared on the host")

    def bump(x):
        x.numpy()[:] += 1.0
        return None

    x, y = torch.ones(4), torch.zeros(3)
    with RunGuard((x, y), {}, queue="cpu") as guard:
        monkeypatch.setattr(_safety, "unchanged", no_host_comparison)
        seen = []
        mutating = guard.wrap(0, lambda: bump(x), defer=True)
        reading = guard.wrap(1, lambda: seen.append(float(x.sum())), defer=True)
        mutating()
        guard.check_first(0)
        assert float(x.sum()) == 4.0 and not guard.mutated  # undone on the device, not yet known
        reading()
        guard.check_first(1)
        assert seen == [4.0]
        guard.settle()
        assert guard.mutated == {0}  # x; y untouched
        mutating()  # a later run: x restored before it, as with the synchronous checks
        assert float(x.sum()) == 8.0
        mutating()
        assert float(x.sum()) == 8.0
        monkeypatch.undo()
    assert torch.equal(x, torch.ones(4)) and torch.equal(y, torch.zeros(3))
    x = torch.ones(4)
    with RunGuard((x,), {}, queue="cpu") as guard:  # a later run before settle() settles first
        run = guard.wrap(0, lambda: bump(x), defer=True)
        run()
        guard.check_first(0)
        run()
        assert guard.mutated == {0} and float(x.sum()) == 8.0
    assert torch.equal(x, torch.ones(4))


def test_queued_checks_of_more_configs_than_host_rows_are_read_as_they_fill():
    # The capture schedule (NPU, groups) queues every config's detection before reading any: past
    # the guard's host rows (_FlagBlock.ROWS) the oldest are read first, and nothing is lost.
    from triton_dist._measure.guard import RunGuard, _FlagBlock

    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs TRITON_INTERPRET=1 on the CPU (scripts/env.sh sets it)")

    def bump(t):
        t.numpy()[:] += 1.0

    n = _FlagBlock.ROWS + 3
    x, y = torch.ones(4), torch.zeros(4)
    with RunGuard((x, y), {}, queue="cpu") as guard:
        for i in range(n):
            target = x if i == 2 else y if i == n - 1 else None
            guard.wrap(i, (lambda t=target: bump(t) if t is not None else None), defer=True)()
            guard.check_first(i)
            assert torch.equal(x, torch.ones(4)) and torch.equal(y, torch.zeros(4))  # undone on the device
        # config 2's write was read when the rows filled up, config n-1's is still queued
        assert guard.mutated == {0}
        assert guard.settle() is True and guard.mutated == {0, 1}
        assert guard.settle() is False


def test_a_check_with_nothing_to_compare_says_so(cache_dir):
    # check_correctness=True over an in-place function that returns None, with restore_inplace=False
    # (no copy of the arguments): every config passed, a wrong one was picked, and nothing was said
    # (found by a tester, session 28). It is said once now.
    from triton_dist.errors import TritonDistWarning

    @autotune([{"c": 1}, {"c": 2}], lambda x: (x.numel(),), n_warmup=0, n_repeat=1, check_correctness=True,
              restore_inplace=False, do_bench=lambda fn, w, r: [fn() or 1.0] * r)
    def scale_in_place(x, c):
        x.mul_(c)

    with pytest.warns(TritonDistWarning, match="nothing to compare.*returns None") as said:
        scale_in_place(torch.ones(4))
    assert sum("nothing to compare" in str(w.message) for w in said) == 1
