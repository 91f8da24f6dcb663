"""Interleaved measurement on a device (CUDA, NPU): candidates take turns, one timed run each per
round, all queued without a synchronisation between candidates.

Measuring candidates one after the other lets drift (clocks ramping up from idle, power and
thermal throttling) bias whichever candidate happens to be measured first or last; a GPU benchmark
on an H200 saw the same config measured up to 12% apart depending on when it ran. In rounds, every
candidate sees the same device states, and the GPU never waits for the host between candidates.

The contract of :func:`triton_dist._bench.measure_candidates` is unchanged: each candidate gets
exactly ``n_warmup`` untimed runs (all of them before any timed run, candidate by candidate, so
that the in-place guard's first-run checks see a reference) then ``n_repeat`` timed runs; a
candidate that fails is recorded as failed and leaves the later rounds; a bug stops measuring; a
device that cannot synchronise after a failure stops it with :class:`DeviceStateError`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._backends import Backend
from .errors import CandidateTimeoutError, DeviceStateError

__all__ = ["measure_rounds"]


def measure_rounds(
    make_call: Callable[[int], Callable[[], Any]],
    indices: Sequence[int],
    backend: Backend,
    *,
    n_warmup: int,
    n_repeat: int,
    on_result: Callable[[Any], None] | None,
    on_warm: Callable[[int], None] | None,
    timeout_s: float | None,
    known_failures: Mapping[int, str] | None,
) -> tuple[list[Any], BaseException | None]:
    from ._bench import CandidateResult, describe, is_candidate_failure, summarize

    clock = time.perf_counter
    failed: dict[int, CandidateResult] = {}
    calls: dict[int, Callable[[], Any]] = {}
    spent: dict[int, float] = {}  # host seconds in each candidate's runs (the time limit)
    per_run: dict[int, float] = {}  # fastest warm-up run's host time: what enqueuing one costs

    def done() -> list[CandidateResult]:
        """What is known when measuring stops early: the failed candidates, in ``indices`` order."""
        return [r for i in indices if (r := failed.get(i)) is not None]

    def run(index: int) -> None:
        if timeout_s is not None and spent[index] > timeout_s:
            raise CandidateTimeoutError(f"timed out after {timeout_s:g}s")
        start = clock()
        calls[index]()
        took = clock() - start
        spent[index] += took
        per_run[index] = min(per_run.get(index, math.inf), took)

    def fail(index: int, exc: BaseException) -> DeviceStateError | None:
        result = CandidateResult(index, math.inf, error=describe(exc))
        failed[index] = result
        try:  # a failed launch may leave queued work; it must not leak into other timings
            backend.synchronize()
        except Exception as sync_exc:  # noqa: BLE001
            result.error += f" (device unusable afterwards: {describe(sync_exc)})"
            return DeviceStateError(
                f"candidate {index} left the {backend.kind} device unusable ({result.error}); "
                "nothing more can run on it in this process, so tuning stopped. Prune that "
                "config, or tune in a Ray campaign, which retries on a fresh actor with the "
                "config marked failed.", index=index, reason=result.error)
        return None

    for index in indices:
        if known_failures and index in known_failures:
            failed[index] = CandidateResult(index, math.inf, error=known_failures[index])
    backend.warm_up()
    timer = backend.run_timer()

    # warm-ups, candidate by candidate (compilation, the in-place guard's first-run checks)
    for index in indices:
        if index in failed:
            continue
        calls[index] = make_call(index)
        spent[index] = 0.0
        try:
            for _ in range(n_warmup):
                run(index)
        except Exception as exc:  # noqa: BLE001 - classified just below
            if not is_candidate_failure(exc):
                return _report(done(), on_result), exc
            stop = fail(index, exc)
            if stop is not None:
                return _report(done(), on_result), stop
            continue
        if on_warm is not None:
            on_warm(index)

    # timed rounds; the starting candidate rotates so that none is always first after a pause
    tokens: dict[int, list[Any]] = {i: [] for i in calls}
    for round_no in range(n_repeat):
        live = [i for i in calls if i not in failed]
        if not live:
            break
        shift = round_no % len(live)
        live = live[shift:] + live[:shift]
        timer.keep_ahead(sum(per_run.get(i, 0.0) for i in live), len(live))
        for index in live:
            token = timer.start()
            try:
                run(index)
            except Exception as exc:  # noqa: BLE001 - classified just below
                try:  # close the pair (its time is never read); a broken device may refuse
                    timer.stop(token)
                except Exception:  # noqa: BLE001 - fail() below reports the device state
                    pass
                if not is_candidate_failure(exc):
                    return _report(done(), on_result), exc
                stop = fail(index, exc)
                if stop is not None:
                    return _report(done(), on_result), stop
                continue
            tokens[index].append(timer.stop(token))
    backend.synchronize()
    results = []
    for index in indices:
        if index in failed:
            results.append(failed[index])
        else:
            results.append(summarize(index, [timer.elapsed_ms(t) for t in tokens[index]]))
    return _report(results, on_result), None


def _report(results: list[Any], on_result: Callable[[Any], None] | None) -> list[Any]:
    if on_result is not None:
        for result in results:
            on_result(result)
    return results
