"""Tuning that is safe to run on real arguments: in-place restore, result checks, time limits.

- :class:`RunGuard` wraps every run of every candidate. It snapshots the tensor arguments before
  tuning, finds the ones the host function mutates during each candidate's first run (version
  counters, plus a content comparison because Triton kernels write through raw pointers and never
  bump ``Tensor._version``), and restores them before each later run, so tuning leaves the
  caller's tensors as they were and the final call with the best config mutates them once. With
  ``check_correctness`` it also compares each candidate's first output (return value and mutated
  tensors) with the default config's (``compare.compare``) and raises :class:`WrongResultError`
  on a mismatch. It adds no call of the host function. It also puts torch's random-number state
  back before every run once a run has moved it, and when it is left (``rng.RngState``): every
  run draws what the first drew, and the final call what an untuned call would.
  The tensor side (the copies, what a restore writes, the comparison, the restore) is
  ``arg_snapshot``'s.
- ``time_limit.run_limited`` bounds one candidate's measurement (``TRITON_DIST_AUTOTUNE_CANDIDATE_TIMEOUT_S``);
  re-exported here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from triton_dist._measure import restore_kernel as _restore_kernel
from triton_dist._measure.arg_snapshot import geometry, put_back, snapshot, unchanged, version
from triton_dist._measure.compare import capture, compare
from triton_dist._measure.flag_reads import FlagBlock as _FlagBlock
from triton_dist._measure.interrupts import interrupts_held
from triton_dist._measure.rng import RngState, tensor_devices
from triton_dist._measure.time_limit import run_limited
from triton_dist._warn import warn_user
from triton_dist.errors import WrongResultError

__all__ = ["RunGuard", "run_limited"]

log = logging.getLogger(__name__)


class RunGuard:
    """Per-tuning wrapper of candidate runs (see the module docstring). Use as a context manager:
    leaving it restores every mutated argument once more."""

    def __init__(self, args: tuple, kwargs: dict, *, restore: bool = True, check: bool = False,
                 name: str = "the tuned function", key: str | None = None, queue: str | None = None,
                 capture: Callable[[Callable[[], None]], Any] | None = None,
                 idle: Callable[[Callable[[], bool]], None] | None = None,
                 device_type: str | None = None) -> None:
        self.check = check
        # the generators as the caller left them (the current device's and its arguments' devices')
        self._rng = RngState(device_type, tensor_devices((*args, *kwargs.values()), device_type))
        self._rng_moved = False  # a run (or the compile pass) drew from them: put back before each run
        self._said_blind = False  # check_correctness with nothing to compare, said once
        self.name = name
        self.key = key  # the tuning's key text: its warnings' logged copies carry name and key
        self.queue = queue
        """a device type (the backend's): deferred first-run checks of contiguous tensors on it go
        to the device without a synchronisation (not with ``check``); :meth:`settle` reads them"""
        self._capture = capture  # queue mode: the backend's capture of one run (detection graphs)
        self._idle = idle  # queue mode: host work for while a detection is not read yet (Spare.run)
        self._flags: dict[int, Any] = {}  # position -> one-element int32 flag on its device
        self._blocks: dict[Any, _FlagBlock] = {}  # device -> the flags of every position (views above)
        self._reads: list[tuple[tuple[int, ...], dict[Any, int]]] = []  # queued reads: positions, rows
        self._passes: Any = None  # the detection passes (restore_kernel.Passes), queue mode
        self._tensors: list[Any] = []
        self._snapshots: list[Any] = []
        self._versions: list[int] = []
        self._geometries: list[tuple[Any, ...]] = []  # each tensor's shape, strides and offset
        self._given_up: set[int] = set()  # positions whose restore failed: no longer tracked
        self.mutated: set[int] = set()
        """positions (in argument order) of the tensors the host function mutated"""
        self._reference: tuple[int, Any, dict[int, Any]] | None = None
        self._pending: dict[int, tuple[Any, dict[int, Any]]] = {}
        self._unchecked: dict[int, Any] = {}  # deferred first-run checks: index -> its result
        self._undetected: set[int] = set()
        """candidates whose first run started and whose detection has not ended: an interrupt
        there (Ctrl-C) left writes no version counter shows; :meth:`restore_all` compares"""
        if restore:
            self._snapshot(args, kwargs)

    def _snapshot(self, args: tuple, kwargs: dict) -> None:
        try:
            self._tensors, self._snapshots, self._versions, self._geometries = snapshot(args, kwargs)
        except Exception as exc:  # noqa: BLE001 - out of memory for the copies: tune without them
            self._tensors, self._snapshots, self._versions, self._geometries = [], [], [], []
            message = (f"{self.name}: could not snapshot the tensor arguments before tuning "
                       f"({type(exc).__name__}: {str(exc)[:200]}); arguments the function mutates "
                       "will not be restored between runs. Pass restore_inplace=False to autotune "
                       "to silence this.")
            warn_user(message, log=log, function=self.name, key=self.key)

    def wrap(self, index: int, call: Callable[[], Any], *, defer: bool = False) -> Callable[[], Any]:
        """``call`` with restore-before and (first run only) detect/check-after.

        ``defer``: the first run's checks (a content comparison, which synchronises the device)
        wait for :meth:`check_first`, so that a measurement can close the first run's event
        pair before them; any later run of any wrapped call performs checks still pending
        first, so that no run ever starts from an argument another run mutated unnoticed."""
        if not (self._tensors or self.check):  # torch's random-number state is watched all the same
            return self._rng_only(call)
        first = True

        def run() -> Any:
            nonlocal first
            if self._unchecked:
                self._check_pending()
            if self._reads and not first:  # a later run must know what to restore before it
                self.settle()
            self._restore()
            if not first:
                if self._rng_moved:
                    self._rng.restore()
                return call()
            self._undetected.add(index)
            self._rng_drawn()
            result = call()
            first = False
            self._rng_drawn()
            if defer:
                self._unchecked[index] = result
            else:
                self._after_first(index, result)
            self._undetected.discard(index)
            return result

        return run

    def _rng_only(self, call: Callable[[], Any]) -> Callable[[], Any]:
        first = True

        def run() -> Any:
            nonlocal first
            if not first:
                if self._rng_moved:
                    self._rng.restore()
                return call()
            self._rng_drawn()
            result = call()
            first = False
            self._rng_drawn()
            return result

        return run

    def _rng_drawn(self) -> None:
        """Around each candidate's first run: once torch's generators have moved (a run drew from
        them), every run starts from the state the caller left them in."""
        if not self._rng_moved and self._rng.moved():
            self._rng_moved = True
        if self._rng_moved:
            self._rng.restore()

    def check_first(self, index: int) -> None:
        """The deferred checks of candidate ``index``'s first run, if still pending
        (:class:`WrongResultError` with ``check``). With ``queue``, the comparison of each
        argument not known to be mutated is queued on the device instead, undoing what the run
        changed (``restore_kernel``): the next candidate's first run starts from the caller's
        values without a synchronisation; :meth:`settle` must run before any other run."""
        if index in self._unchecked:
            self._undetected.add(index)
            result = self._unchecked.pop(index)
            if not self._queued_detection(index):
                self._after_first(index, result)
            self._undetected.discard(index)

    def _queued_detection(self, index: int) -> bool:
        if not self.queue or self.check:
            return False
        if len(self._reads) >= _FlagBlock.ROWS:  # every host row holds a read not yet taken
            self.settle()
        todo = []
        for pos, t in enumerate(self._tensors):
            if pos in self.mutated or pos in self._given_up:
                continue
            if version(t) != self._versions[pos] or geometry(t) != self._geometries[pos]:
                self.mutated.add(pos)  # a torch in-place op: restored before the next run
                continue
            todo.append(pos)
        if not all(_restore_kernel.runs_on(self._tensors[p], self.queue) for p in todo):
            return False
        try:
            for pos in todo:
                if pos not in self._flags:
                    device = self._tensors[pos].device
                    block = self._blocks.get(device)
                    if block is None:
                        block = self._blocks[device] = _FlagBlock(len(self._tensors), device)
                    self._flags[pos] = block.flags[pos:pos + 1]
            if self._passes is None:
                self._passes = _restore_kernel.Passes(self._capture)
            self._passes.run(tuple(todo), [(self._tensors[p], self._snapshots[p], self._flags[p]) for p in todo])
            devices = {self._tensors[p].device for p in todo}
            self._reads.append((tuple(todo), {d: self._blocks[d].queue_read() for d in devices}))
        except Exception as exc:  # noqa: BLE001 - e.g. the kernel does not compile here
            self.queue = None
            log.warning("%s: comparing the arguments on the device failed (%s: %s); comparing "
                        "them after a synchronisation instead", self.name, type(exc).__name__, str(exc)[:200])
            return False
        return True

    def settle(self) -> bool:
        """Read the detections :meth:`check_first` queued: the arguments they found changed are
        restored before every later run. Each detection's flags were copied to host memory
        behind it (:class:`_FlagBlock`): this waits for the detections only, not for the work
        queued after them (graph mode queues the previous candidate's replays there, issue 16).
        True when an argument not known to be mutated was found changed. A flag is never
        cleared: a position it marks is mutated from then on, and no later detection reads it."""
        found = False
        reads, self._reads = self._reads, []
        for todo, rows in reads:
            values = {device: self._blocks[device].values(row, self._idle) for device, row in rows.items()}
            for pos in todo:
                if pos not in self.mutated and pos not in self._given_up and values[self._tensors[pos].device][pos]:
                    found = True
                    self.mutated.add(pos)
                    log.debug("%s: a candidate mutates tensor argument %d; it is restored before every "
                              "later run", self.name, pos)
        return found

    def _check_pending(self) -> None:
        for index in list(self._unchecked):
            self.check_first(index)

    def _restore(self) -> None:
        if not self._tensors:
            return
        # a moved version counter is a torch in-place op; known positions cover Triton writes
        todo = [pos for pos, t in enumerate(self._tensors) if pos not in self._given_up
                and (pos in self.mutated or version(t) != self._versions[pos])]
        if not todo:
            return
        failed = put_back(todo, self._tensors, self._snapshots, self._versions, self._geometries, self.mutated)
        for pos, error in failed:  # restoring it is given up; the candidates still run
            self._given_up.add(pos)
            self.mutated.discard(pos)
            message = (f"{self.name}: could not restore mutated tensor argument {pos} between runs "
                       f"({type(error).__name__}: {str(error)[:200]}); later runs start from what earlier "
                       "ones left in it, and so does the call with the best config. Pass "
                       "restore_inplace=False to autotune to silence this, or pass the function a "
                       "tensor it may write as it likes.")
            warn_user(message, log=log, function=self.name, key=self.key)

    def _after_first(self, index: int, result: Any) -> None:
        self._detect(index)
        self._check(index, result)

    def _detect(self, index: int) -> None:
        for pos, t in enumerate(self._tensors):
            if pos not in self.mutated and pos not in self._given_up and (version(t) != self._versions[pos]
                                            or not unchanged(t, self._snapshots[pos])):
                self.mutated.add(pos)
                log.debug("%s: candidate %d mutates tensor argument %d; it is restored before "
                          "every later run", self.name, index, pos)

    def _check(self, index: int, result: Any) -> None:
        if not self.check:
            return
        if result is None and not self._tensors and not self._said_blind:
            # nothing to compare: no result, and no copies of the arguments to see what it wrote
            # (restore_inplace=False); the check passed every config in silence (a tester, session 28)
            self._said_blind = True
            message = (f"{self.name}: check_correctness=True has nothing to compare: the function returns "
                       "None and no copy of a tensor argument is kept to compare what it writes "
                       "(restore_inplace=False, or no tensor arguments). Return the output, or keep "
                       "restore_inplace=True.")
            warn_user(message, log=log, function=self.name, key=self.key)
        states = {pos: self._tensors[pos].detach().clone() for pos in self.mutated}
        if self._reference is None:
            self._pending[index] = (capture(result), states)
            return
        ref_index, ref_result, ref_states = self._reference
        why = compare(ref_result, result)
        for pos in sorted(self.mutated):
            if why:
                break
            why = compare(ref_states.get(pos, self._snapshots[pos]), states[pos],
                          f"mutated tensor argument {pos}")
        if why:
            raise WrongResultError(f"wrong result ({why}; compared with config_space[{ref_index}])")

    def done(self, index: int, ok: bool) -> None:
        """Candidate ``index`` finished measuring; the first that succeeded is the reference."""
        if ok:
            self.check_first(index)
        elif index in self._unchecked or index in self._undetected:
            # its first run ran (or raised part way): what it mutated is restored later
            self._unchecked.pop(index, None)
            self._undetected.discard(index)
            try:
                self._detect(index)
            except Exception:  # noqa: BLE001 - a device it broke: restore_all reports that
                log.debug("%s: could not compare the arguments after failed candidate %d", self.name, index)
        pending = self._pending.pop(index, None)
        if pending is not None and ok and self._reference is None:
            self._reference = (index, *pending)

    def restore_all(self) -> None:
        """Put every mutated argument back as the caller passed it. A Ctrl-C meanwhile waits
        until it is done (:func:`~triton_dist._measure.interrupts.interrupts_held`)."""
        with interrupts_held():
            self._restore_all()

    def _restore_all(self) -> None:
        self._pending.clear()
        try:
            self.settle()
            # measuring stopped before these were checked (or in their first run, a Ctrl-C):
            # find what they mutated, to restore it below
            for index in sorted(set(self._unchecked) | self._undetected):
                self._unchecked.pop(index, None)
                self._detect(index)
            self._undetected.clear()
            self._restore()
        except Exception as exc:  # noqa: BLE001 - e.g. a device left unusable by a candidate:
            # the error that explains it (DeviceStateError) must reach the caller, not this one
            message = (f"{self.name}: could not restore the mutated tensor arguments after tuning "
                       f"({type(exc).__name__}: {str(exc)[:200]})")
            warn_user(message, log=log, function=self.name, key=self.key)

    def __enter__(self) -> RunGuard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.restore_all()
        self._rng.restore()  # what follows the tuning draws what it would have drawn without it
        self._snapshots, self._tensors, self._reference = [], [], None
        self._flags, self._blocks, self._reads = {}, {}, []
