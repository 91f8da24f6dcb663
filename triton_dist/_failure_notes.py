"""What a tuning says of configs that failed: the config whose bug stopped it
(:func:`note_bug`), a config that failed on other ranks only (:func:`failed_elsewhere`), and what
to do when every config failed (:func:`all_failed_advice`), for ``_tuning``'s steps 3 to 5.
"""

from __future__ import annotations

from typing import Any

from triton_dist._distributed import GroupView
from triton_dist._measure.result import CandidateResult
from triton_dist._target import TuneTarget, show_config

__all__ = ["all_failed_advice", "failed_elsewhere", "note_bug"]


def note_bug(exc: Exception, target: TuneTarget, index: int, key_text: str) -> None:
    """Which config raised the error that stopped tuning, and why it stopped: the seed records a
    config that raises as ``inf``, but a classic bug (``KeyError``, ``TypeError``, ...) propagates,
    and it came back bare, naming neither the config nor the key (a tester, 2026-12-04)."""
    if not hasattr(exc, "add_note") or any(n.startswith("stopped tuning") for n in getattr(exc, "__notes__", ())):
        return
    exc.add_note(
        f"stopped tuning {target.qualname}: config_space[{index}] = {show_config(target.config_space[index]):.200} "
        f"raised it for key {key_text:.200}; a {type(exc).__name__} is taken for a bug, not for the config's "
        "failure (to reject a config raise ValueError/RuntimeError, or prune it with prune_fn)")


def failed_elsewhere(view: GroupView, low: int, high: int, logs: list[str]) -> str:
    """A config that failed on other ranks only: which (the lowest and highest group ranks that
    failed it), and where their reasons are, their logs on their nodes (none: nothing written, a
    campaign's gang, whose driver merges the ranks' reasons: ``ray_runner.merge``)."""
    if not 0 <= low <= high < view.size:  # (a reduction that did not carry them: cannot happen)
        return "failed on another rank of the group"
    where = f"the {view.describe()}"
    if low == high:
        see = f" (see its log {logs[low]} on its node)" if logs else ""
        return f"failed on rank {view.ranks[low]} of {where}{see}"
    notes = ["maybe on ranks between them too"] if high - low > 1 else []
    if logs:
        notes.append(f"see their logs {logs[low]} and {logs[high]} on their nodes")
    tail = f" ({'; '.join(notes)})" if notes else ""
    return f"failed on ranks {view.ranks[low]} and {view.ranks[high]} of {where}{tail}"


def all_failed_advice(results: list[CandidateResult], do_bench: Any = None) -> str:
    """What to do when no candidate ran: configs that failed alike point at the host function or
    its environment, not at the configs (a tester's host launching a stock ``@triton.autotune``
    kernel was told to fix or prune configs that had nothing to do with it, session 28), or at
    the decorator's ``do_bench``, which runs every config (``triton.testing.do_bench`` on the CPU
    was blamed on the host function, 2026-12-04)."""
    errors = {str(r.error) for r in results}
    # Triton's own "this config cannot run here" (a static_assert on BLOCK, out of resources, a
    # compile error): failing alike, the configs are the cause (a tester was told otherwise)
    triton_own = ("InterpreterError", "CompilationError", "CompileTimeAssertionFailure", "OutOfResources",
                  "MLIRCompilationError", "PTXASError")
    if len(results) < 2 or len(errors) > 1 or next(iter(errors)).startswith(triton_own):
        return "Fix the failing configs or prune them with prune_fn."
    advice = ("Every config failed with the same error, so the configs are likely not the cause: check "
              "the host function and its environment by calling it with config_space[0] directly")
    if do_bench is not None:
        timer = getattr(do_bench, "timer", do_bench)
        advice += f", and the decorator's do_bench={timer!r:.80}, which times every config"
    if "active drivers" in next(iter(errors)):  # no device driver: Triton's timers, or a stock kernel inside
        if do_bench is not None:
            advice += ("; a timer of Triton's (triton.testing.do_bench) needs a device driver: off a "
                       "GPU/NPU leave do_bench out (the project's own timer runs on the CPU)")
        advice += ("; a kernel that needs a device driver is launched, e.g. an inner @triton.autotune "
                   "kernel that benchmarks itself: tune that kernel with "
                   "triton_dist.autotuner.contextual_autotune around the caller, or give it one config")
    return advice + "."
