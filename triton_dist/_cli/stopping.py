"""A cache command stopped by Ctrl-C or SIGTERM: one line (stderr) saying which stopped it and
what it had done by then, exit 130 (Ctrl-C) or 143 (SIGTERM: 128 + 15, as a shell reports it),
no traceback and no summary (a tester).

SIGTERM is what ``kill``, ``timeout``, Kubernetes and job schedulers send; Python's default
ends the process where it is, without that line. While a command runs (and only then: importing
the package installs no handler), SIGTERM raises :class:`Terminated`, a ``KeyboardInterrupt``,
where it lands, so that it unwinds as Ctrl-C does: the files being written are written
atomically (a temporary file that is removed, then a rename), locks are released, and the store
says what was done (``_store.stopped.Interrupted``). The handler that was in place is put back
when the command ends.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from triton_dist._cli.output import emit
from triton_dist._store.stopped import Interrupted

__all__ = ["EXIT_INTERRUPTED", "EXIT_TERMINATED", "Terminated", "stoppable"]

Command = Callable[[argparse.Namespace, Path, bool], int]

#: exit status of a command stopped by Ctrl-C (128 + SIGINT, as a shell reports it)
EXIT_INTERRUPTED = 130
#: exit status of a command stopped by SIGTERM (128 + SIGTERM)
EXIT_TERMINATED = 128 + signal.SIGTERM

#: what a stopped command had done, where the store did not say more (``Interrupted``)
_NOTHING_DONE = {
    "export": "no archive was written (one already there is unchanged); the cache was only read",
    "import": "nothing was imported yet (the archive was still being read and checked)",
    "prune": "nothing was removed yet (it was still finding what to remove)",
}


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived while a cache command ran (raised where it landed)."""


class _OnSigterm:
    """The SIGTERM handler of one command: the first signal raises :class:`Terminated`; one
    that comes while the command is already stopping (a second SIGTERM, or one after Ctrl-C)
    is ignored, so that it cannot cut the clean-up or the report short."""

    def __init__(self) -> None:
        self.received = False
        self.stopping = False

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if self.stopping:
            return
        self.received = self.stopping = True
        raise Terminated(f"signal {signum}")


def stoppable(name: str, command: Command) -> Command:
    """``command``, which on Ctrl-C or SIGTERM says in one line that it was stopped and what it
    had done, and returns :data:`EXIT_INTERRUPTED` or :data:`EXIT_TERMINATED`."""

    def run(args: argparse.Namespace, root: Path, as_json: bool) -> int:
        on_sigterm = _OnSigterm()
        # signals reach the main thread only (and only it may set a handler); a handler that
        # Python did not install (getsignal is None) cannot be put back, and SIGTERM ignored
        # (SIG_IGN, by whoever started this) stays ignored: both left alone
        previous: Any = signal.getsignal(signal.SIGTERM) \
            if threading.current_thread() is threading.main_thread() else None
        ours = previous is not None and previous != signal.SIG_IGN
        try:
            if ours:
                signal.signal(signal.SIGTERM, on_sigterm)
            return command(args, root, as_json)
        except KeyboardInterrupt as exc:
            on_sigterm.stopping = True
            return _stopped(name, exc, as_json, on_sigterm.received)
        finally:
            if ours:
                signal.signal(signal.SIGTERM, previous)

    run.__doc__ = command.__doc__
    return run


def _stopped(name: str, exc: KeyboardInterrupt, as_json: bool, terminated: bool) -> int:
    done = exc.done if isinstance(exc, Interrupted) else \
        _NOTHING_DONE.get(name, "it only reads the cache: nothing changed")
    message = f"interrupted: {name} stopped by {'SIGTERM' if terminated else 'Ctrl-C'}; {done}"
    if as_json:
        emit({"error": "Terminated" if terminated else "KeyboardInterrupt", "message": message})
    print(message, file=sys.stderr)
    return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
