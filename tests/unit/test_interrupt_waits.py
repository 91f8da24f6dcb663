"""A Ctrl-C reaches a thread that waits for another one, whichever thread the kernel hands the
process's SIGINT to (Python runs the handler in the main thread, between bytecodes: a wait
without slices, which only a signal delivered to the waiting thread itself interrupts, let an
interrupted compile pass run on to its children's time-out, 2026-12-03)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import torch  # noqa: F401 - imported before any interrupt (run_limited imports it)

from triton_dist._measure.guard import run_limited


class Interrupted(Exception):
    pass


@pytest.fixture
def sigint_raises() -> Iterator[None]:
    def handler(signum: int, frame: Any) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def interrupt_from_another_thread(once: threading.Event) -> None:
    def send() -> None:
        once.wait(10)
        time.sleep(0.1)
        signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # to this thread, not the main one

    threading.Thread(target=send, daemon=True).start()


def test_a_ctrl_c_reaches_the_thread_waiting_for_a_candidates_measurement(sigint_raises) -> None:
    running, release = threading.Event(), threading.Event()

    def bench(call: Any) -> list[float]:  # a candidate that would run 5 s, its limit 30 s
        running.set()
        return [float(release.wait(5))]

    try:
        interrupt_from_another_thread(running)
        start = time.monotonic()
        with pytest.raises(Interrupted):
            run_limited(bench, lambda: None, 30.0, threaded=True)
        assert running.is_set() and time.monotonic() - start < 2
    finally:
        release.set()


def test_a_candidate_past_its_limit_still_times_out() -> None:
    from triton_dist.errors import CandidateTimeoutError

    release = threading.Event()
    try:
        start = time.monotonic()
        with pytest.raises(CandidateTimeoutError):
            run_limited(lambda call: [float(release.wait(10))], lambda: None, 0.35, threaded=True)
        assert 0.3 < time.monotonic() - start < 3
        assert run_limited(lambda call: [1.0, 2.0], lambda: None, 5.0, threaded=True) == [1.0, 2.0]
    finally:
        release.set()
