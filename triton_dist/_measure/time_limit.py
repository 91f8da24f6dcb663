"""One candidate's measurement bounded in time (``TRITON_DIST_AUTOTUNE_CANDIDATE_TIMEOUT_S``):
:func:`run_limited`, on the CPU in a measuring thread that carries the caller's torch state
(grad, inference mode, autocast, torch-function and dispatch modes) and warnings back, and that
an interrupted caller stops before the arguments are restored.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from triton_dist._kinds import KINDS
from triton_dist._warn import collected, say_collected, warn_user
from triton_dist.errors import CandidateTimeoutError

__all__ = ["STOP_WAIT_S", "run_limited"]

#: the run guard's logger, as before the time limit had a module of its own
log = logging.getLogger("triton_dist._measure.guard")

#: a thread waiting for a candidate's measurement thread looks at its pending signals this often
JOIN_POLL_S = 0.1
#: how long an interrupted caller waits for the run its measurement thread is in to end, before
#: it restores the arguments (and warns that the run goes on)
STOP_WAIT_S = 5.0


def run_limited(bench: Callable[[Callable[[], Any]], Sequence[float]], call: Callable[[], Any],
                timeout_s: float, *, threaded: bool) -> Sequence[float]:
    """``bench(call)`` bounded by ``timeout_s`` seconds; :class:`CandidateTimeoutError` past it.

    ``threaded`` (host-timed devices: the CPU) runs the measurement in a daemon thread and stops
    waiting at the limit. Python cannot kill a thread: the abandoned one finishes the run it is in
    and stops before the next. A caller interrupted while it waits (Ctrl-C) stops the thread the
    same way, and waits up to ``STOP_WAIT_S`` for the run in flight to end before the interrupt
    goes on (to the restore of the arguments): once it is out, no run touches them again (a
    tester, 2026-12: the thread did a whole further run after the restore). Otherwise (GPU/NPU:
    device context and streams belong to the calling thread) the limit is checked between runs;
    a hanging device kernel cannot be interrupted by either.
    """
    deadline = time.monotonic() + timeout_s
    stop = threading.Event()
    running = threading.Lock()  # held by the measurement thread for each run (stop checked inside)
    reason = f"timed out after {timeout_s:g}s"

    def limited() -> Any:
        with running:
            if stop.is_set() or time.monotonic() > deadline:
                stop.set()
                raise CandidateTimeoutError(reason)
            return call()

    if not threaded:
        return bench(limited)

    import torch

    box: dict[str, Any] = {}
    context = contextvars.copy_context()
    inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()
    enter_callers_state = _callers_torch_state(torch)

    def target() -> None:
        try:  # grad and inference mode are per thread: carry the caller's over
            with torch.inference_mode(inference), torch.set_grad_enabled(grad), enter_callers_state(), \
                    collected() as box["said"]:  # the warnings said there, for the caller to say
                box["times"] = context.run(bench, limited)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="triton_dist-candidate", daemon=True)
    # joined in slices: a Ctrl-C the kernel handed to another thread reaches this one (forked.results)
    try:
        # started inside the try: a Ctrl-C sent as the run began landed while start() returned,
        # outside it, and the thread ran on (a flaky test, 2026-12-05)
        thread.start()
        while thread.is_alive() and time.monotonic() < deadline:
            thread.join(min(JOIN_POLL_S, max(0.0, deadline - time.monotonic())))
    except BaseException:  # KeyboardInterrupt (or a handler's SystemExit): no further run
        stop.set()
        _await_run(running)
        raise
    if thread.is_alive():
        stop.set()
        log.warning("a candidate ran past %gs; its thread is abandoned and stops after the run "
                    "in progress", timeout_s)
        raise CandidateTimeoutError(reason)
    say_collected(box.get("said", ()))  # said in the caller's thread, at the user's line
    # taken out of the box: box -> error -> traceback -> the frames -> box was a cycle that kept a
    # failed config's arguments (its tensors) until the collector's next full pass
    error = box.pop("error", None)
    if error is not None:
        try:
            raise error
        finally:
            del error  # this frame is in its traceback too
    return box["times"]


def _await_run(running: threading.Lock) -> None:
    """Wait, at most ``STOP_WAIT_S`` and in slices (a second Ctrl-C still interrupts), for the
    measurement thread's run in flight to end; it starts none after it (its ``stop`` is set, and
    checked under ``running``). Past the bound, warn: the run goes on and may change the arguments
    after their restore. The lock is only looked at, never taken: a second Ctrl-C between taking
    and releasing it left it held and the thread blocked for ever (a reviewer, 2026-12-05)."""
    end = time.monotonic() + STOP_WAIT_S
    while running.locked():
        left = end - time.monotonic()
        if left <= 0:
            warn_user("an interrupted candidate's run is still going on in its measurement thread "
                      f"(TRITON_DIST_AUTOTUNE_CANDIDATE_TIMEOUT_S; waited {STOP_WAIT_S:g}s for it): the "
                      "arguments are restored, but that run may still change the ones it writes in place "
                      "again; it starts no further run.", log=log)
            return
        time.sleep(min(JOIN_POLL_S, left))


def _callers_torch_state(torch: Any) -> Callable[[], contextlib.ExitStack]:
    """What the caller's thread had in force, to enter again in the measuring thread: autocast
    (per device type) and the torch-function and dispatch modes, which are per thread too. Without
    them the candidates of a call under ``torch.autocast(bfloat16)`` and a user's
    ``TorchFunctionMode`` were timed as float32 without the mode (a tester, 2026-12-04)."""
    casts = []
    for device_type in KINDS:  # the device kinds this project knows (torch's autocast device types)
        try:
            if torch.is_autocast_enabled(device_type):
                casts.append((device_type, torch.get_autocast_dtype(device_type)))
        except (RuntimeError, TypeError, ValueError):  # a device type this torch does not know
            continue
    try:
        from torch.overrides import _get_current_function_mode_stack
        from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

        # torch.set_default_device's DeviceContext is left out: entering the caller's instance
        # again overwrote its saved device, and the global default device leaked (a reviewer,
        # 2026-12-04); the measuring thread runs on the CPU, the default device there
        modes = [m for m in (*_get_current_function_mode_stack(), *_get_current_dispatch_mode_stack())
                 if type(m).__name__ != "DeviceContext"]
    except (ImportError, AttributeError):  # private helpers of torch: another version
        modes = []

    def enter() -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        for device_type, dtype in casts:
            stack.enter_context(torch.autocast(device_type, dtype=dtype))
        for mode in modes:
            stack.enter_context(mode)
        return stack

    return enter
