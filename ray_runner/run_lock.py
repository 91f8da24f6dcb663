"""One driver at a time appends to a campaign's results stream (:mod:`ray_runner.results`):
:class:`RunLock`, the stream's lock, taken without waiting before the driver connects.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from .errors import InfrastructureError

__all__ = ["RunLock"]

#: the results stream's logger, as before the lock had a module of its own
log = logging.getLogger("ray_runner.results")


class RunLock:
    """The stream's run lock, taken without waiting (``flock`` on ``<stream>.lock``, which the
    kernel releases when the driver dies); the file names the driver that holds it. Taken before
    the driver connects (a second driver is refused before it starts an embedded Ray)."""

    def __init__(self, path: Path) -> None:
        import errno
        import fcntl
        import socket
        import stat

        self.path = path.with_name(path.name + ".lock")
        self._fd: int | None = None
        fix = ("pass --report-dir DIR or set report_dir: in the campaign file to a directory this user can write, "
               "on a file system with file locks")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o666)
            if not stat.S_ISREG(os.fstat(self._fd).st_mode):
                raise OSError(errno.EINVAL, "not a regular file")
        except OSError as exc:
            self.release()
            raise InfrastructureError(f"cannot lock the results file {path}: {self.path}: "
                                      f"{exc.strerror or exc}; {fix}") from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):  # no locks here (ENOLCK, ENOSYS)
                self.release()
                raise InfrastructureError(f"cannot lock the results file {path}: this file system does not take "
                                          f"file locks ({exc.strerror or exc}); {fix}") from None
            holder = os.pread(self._fd, 200, 0).decode("utf-8", "replace").strip() or "another driver"
            self.release()
            raise InfrastructureError(
                f"another run of this campaign is appending to {path} ({holder}): two runs at once would "
                "tune the same cases twice. Wait for it to end, or give this run another --report-dir") from None
        try:
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        except OSError as exc:  # the lock holds; only its note of the holder is missing
            log.debug("noting the holder in %s: %s", self.path, exc)

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # the lock goes with the file description
