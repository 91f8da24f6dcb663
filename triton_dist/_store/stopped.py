"""A cache command stopped by Ctrl-C or SIGTERM, with what it had done by then (the command line
prints it as one line and exits 130 or 143: no traceback, a tester; ``_cli.stopping``)."""

from __future__ import annotations

__all__ = ["Interrupted"]


class Interrupted(KeyboardInterrupt):
    """A ``KeyboardInterrupt`` that says what was done before it (``done``: a sentence's end,
    e.g. ``"imported 6858 of 20004 file(s); ..."``)."""

    def __init__(self, done: str) -> None:
        super().__init__(done)
        self.done = done
