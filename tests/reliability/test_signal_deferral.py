"""``ray_runner._signals.deferred``: a block that must not be cut in two (a case's entry written,
then its success recorded) holds SIGTERM and SIGINT back and hands them on when it ends."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from ray_runner import _signals


def deliver(signum: int) -> None:
    """Send ``signum`` to this process and give Python the chance to run its handler."""
    os.kill(os.getpid(), signum)
    for _ in range(100):  # the handler runs between bytecodes of the main thread
        time.sleep(0.001)


@pytest.fixture
def our_handler():
    _signals.install()
    try:
        yield
    finally:
        _signals.uninstall()


def test_a_sigterm_inside_the_block_is_raised_when_it_ends(our_handler):
    reported: list[str] = []
    steps: list[str] = []
    with _signals.on_interrupt(lambda: reported.append("report")):
        with pytest.raises(KeyboardInterrupt):
            with _signals.deferred():
                steps.append("entry written")
                deliver(signal.SIGTERM)
                steps.append("row recorded")  # not cut off by the signal
            steps.append("after the block")  # never reached: the interrupt comes first
    assert steps == ["entry written", "row recorded"]
    assert reported == ["report"]  # our handler ran (its callbacks), once
    assert signal.getsignal(signal.SIGTERM) is _signals._terminate  # and is in place again


def test_without_a_signal_the_block_runs_through_and_the_handlers_are_restored(our_handler):
    with _signals.deferred():
        pass
    assert signal.getsignal(signal.SIGTERM) is _signals._terminate
    assert signal.getsignal(signal.SIGINT) is _signals._terminate
    with pytest.raises(KeyboardInterrupt):  # and still interrupt outside a block
        deliver(signal.SIGTERM)


def test_python_default_ctrl_c_handler_is_held_back_too():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    done = []
    with pytest.raises(KeyboardInterrupt):
        with _signals.deferred():
            deliver(signal.SIGINT)
            done.append(True)
    assert done == [True]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_signal_stays_ignored():
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with _signals.deferred():
            deliver(signal.SIGTERM)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_an_error_in_the_block_still_restores_and_delivers(our_handler):
    with pytest.raises(KeyboardInterrupt) as caught:
        with _signals.deferred():
            deliver(signal.SIGTERM)
            raise OSError("disk full")
    assert isinstance(caught.value.__context__, OSError)  # the block's own error is kept, chained
    assert signal.getsignal(signal.SIGTERM) is _signals._terminate


def test_outside_the_main_thread_it_is_a_plain_block(our_handler):
    ran: list[bool] = []

    def worker() -> None:
        with _signals.deferred():
            ran.append(signal.getsignal(signal.SIGTERM) is _signals._terminate)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert ran == [True]
