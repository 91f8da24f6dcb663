"""Which case runs next, on which ranks of which gang, and which gangs to start (pure).

No Ray here: :class:`CaseQueue` keeps the state of every case (pending, running, tuned, cached,
failed; attempts and errors); :func:`assign` and :func:`plan_gangs` are the policy.
:mod:`ray_runner.campaign` drives them with real gangs.

Policy:

- Gangs are as large as the largest pending world size that fits a node, and serve every size up
  to theirs: a gang of G ranks runs G/w cases of size w side by side (blocks of w consecutive
  ranks). Devices never wait for new processes when the campaign moves from one size to another.
- Larger cases first: a gang's free block takes a case of the largest pending size that fits the
  gang, and smaller cases only take ranks once no case of a larger size waits for them. Big
  cases first and small ones last also evens out the end of the campaign.
- New gangs start while pending work (Σ world sizes of pending cases) exceeds the ranks of the
  gangs that can serve it, and devices are free. A gang with nothing left that fits it is torn
  down.
- A failed attempt (raised, timed out, actor died) puts the case back at the front of its queue
  until it has had ``retries + 1`` attempts; then it is recorded as failed. The gang it failed
  on takes no more cases and is torn down once its other cases finish, so every retry runs on
  other (fresh) processes. Configuration errors (an import path that does not resolve) are not
  retried.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .spec import CaseSpec

__all__ = ["CaseQueue", "CaseRun", "fits", "plan_gangs"]

PENDING, RUNNING, TUNED, CACHED, FAILED = "pending", "running", "tuned", "cached", "failed"
MERGED = "merged"
"""Same cache entry (key computed in the case's world) as an earlier case: not tuned again."""
WAITING = "waiting"
"""Merged into a case still running: merged when that case's entry is there, tuned itself when
that case fails (its entry would be missing: a training job's miss)."""
INTERRUPTED = "interrupted"
"""Running when the campaign was stopped (SIGTERM, Ctrl-C, ``ray job stop``): not finished, not a
failure of the case (it was counted as failed, a tester); a re-run runs it again."""
DONE_STATES = (TUNED, CACHED, MERGED, FAILED, INTERRUPTED)


@dataclasses.dataclass
class CaseRun:
    """The state of one case across its attempts."""

    spec: CaseSpec
    status: str = PENDING
    attempts: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)
    identity: dict[str, Any] | None = None
    entry: dict[str, Any] | None = None
    """The merged cache entry (tuned) or the one found in the cache (cached)."""
    path: str | None = None
    seconds: float | None = None
    """Duration of the successful attempt on its gang (argument building + tuning)."""
    busy_seconds: float = 0.0
    """Time gangs spent on this case over all attempts (failed ones included)."""
    overhead_s: float | None = None
    """Of ``seconds``, what the ranks did not spend on the case (dispatch, transfers, merging)."""
    known_failures: dict[int, str] = dataclasses.field(default_factory=dict)
    """Candidates that left the device unusable in an earlier attempt (failed without running)."""
    hardware: str | None = None
    """The accelerator kind it is tuned on (:mod:`ray_runner.hardware`); None: no kinds."""
    gang: int | None = None
    host: str | None = None
    nodes: list[str] = dataclasses.field(default_factory=list)
    """Ray node ids of the ranks of the gang of the last attempt."""
    ranks: tuple[int, ...] = ()
    """Ranks of the gang (its block) the last attempt ran on."""
    started: float | None = None
    merged_into: int | None = None
    """The number of the case it was merged into (status ``merged``)."""
    waited: bool = False
    """It waited for the case it was merged into (status ``waiting`` then): reported when merged."""
    unplaceable: bool = False
    """It failed because the cluster cannot hold its gang at all (no node has the resource, or
    not ``world_size`` of it; a kind it lacks): ``run`` exits 3 when every failure is such."""

    @property
    def number(self) -> int:
        return self.spec.number

    @property
    def world_size(self) -> int:
        return self.spec.world_size

    @property
    def done(self) -> bool:
        return self.status in DONE_STATES

    def load_entry(self) -> dict[str, Any] | None:
        """The case's entry: in memory while the case runs, afterwards read from :attr:`path`
        (a finished case keeps no entry in the driver: its row is in the results stream)."""
        if self.entry is not None or not self.path:
            return self.entry
        import json

        with open(self.path, encoding="utf-8") as f:
            return json.load(f)


class CaseQueue:
    """Pending cases per world size, attempts and outcomes."""

    def __init__(self, specs: Iterable[CaseSpec], retries: int,
                 on_done: Callable[[CaseRun], Any] | None = None, hardware: str | None = None) -> None:
        self.runs: list[CaseRun] = []
        self.hardware = hardware
        """The accelerator kind of every case of the queue (a lane of :mod:`ray_runner.fleet`)."""
        self.retries = retries
        self.on_done = on_done
        """Called once per case when it reaches a final state (the results stream's writer)."""
        self._pending: dict[int, collections.deque[CaseRun]] = collections.defaultdict(collections.deque)
        self._followers: dict[int, list[CaseRun]] = {}  # id(owner) -> the cases merged into it, waiting
        self._left = 0
        self.add(specs)

    def add(self, specs: Iterable[CaseSpec]) -> None:
        """Queue more cases (a resumed campaign puts back the cases it cannot trust)."""
        for spec in specs:
            run = CaseRun(spec, hardware=self.hardware)
            self.runs.append(run)
            self._pending[run.world_size].append(run)
            self._left += 1

    def _finished(self, run: CaseRun) -> None:
        self._left -= 1
        if self.on_done is not None:
            self.on_done(run)
        for follower in self._followers.pop(id(run), ()):
            if run.status in (FAILED, INTERRUPTED):  # its entry is missing: the follower owns it now
                follower.status, follower.merged_into = PENDING, None
                follower.attempts = max(0, follower.attempts - 1)  # being merged was not a failed attempt
                self._pending[follower.world_size].appendleft(follower)
            else:
                follower.status = MERGED
                self._finished(follower)

    def merge(self, run: CaseRun, owner: CaseRun) -> bool:
        """``run`` has ``owner``'s entry: merged now (True) when ``owner`` has it, else waits
        for ``owner`` (False): merged if it succeeds, queued again if it fails."""
        run.merged_into = owner.number
        if owner.status in (TUNED, CACHED, MERGED):
            self.succeed(run, MERGED, entry=None)
            return True
        run.status, run.waited = WAITING, True
        self._followers.setdefault(id(owner), []).append(run)
        return False

    # ------------------------------------------------------------------ queries

    def world_sizes(self) -> list[int]:
        return sorted({run.world_size for run in self.runs})

    def pending(self, world_size: int) -> int:
        return len(self._pending.get(world_size, ()))

    def pending_by_size(self) -> dict[int, int]:
        return {w: len(q) for w, q in self._pending.items() if q}

    def finished(self) -> bool:
        return self._left == 0

    def counts(self) -> dict[str, int]:
        return dict(collections.Counter(run.status for run in self.runs))

    # ------------------------------------------------------------------ transitions

    def take(self, world_size: int) -> CaseRun | None:
        queue = self._pending.get(world_size)
        if not queue:
            return None
        run = queue.popleft()
        run.status = RUNNING
        run.attempts += 1
        run.started = time.monotonic()
        return run

    def succeed(self, run: CaseRun, status: str, *, entry: dict[str, Any] | None,
                seconds: float | None = None, path: str | None = None) -> None:
        run.status = status
        run.entry = entry
        run.path = path
        run.seconds = seconds
        if seconds is not None:
            run.busy_seconds += seconds
        self._finished(run)

    def fail(self, run: CaseRun, error: str, *, retry: bool = True, seconds: float = 0.0) -> bool:
        """Record a failed attempt; True when the case was queued again."""
        run.errors.append(f"attempt {run.attempts}: {error}")
        run.busy_seconds += seconds
        if retry and run.attempts <= self.retries:
            run.status = PENDING
            self._pending[run.world_size].appendleft(run)  # retried next, on a fresh gang
            return True
        run.status = FAILED
        self._finished(run)
        return False

    def interrupt(self, run: CaseRun, reason: str) -> None:
        """The campaign stopped while ``run`` ran: recorded as interrupted (its row says so), not
        failed; a re-run of the campaign runs it again."""
        run.errors.append(f"attempt {run.attempts}: {reason}")
        run.status = INTERRUPTED
        self._finished(run)

    def fail_size(self, world_size: int, error: str, *, unplaceable: bool = True) -> list[CaseRun]:
        """Fail every pending case of ``world_size`` at once (``unplaceable``: the cluster cannot
        run it; else its gangs could not start, e.g. the devices stayed busy)."""
        failed = list(self._pending.pop(world_size, ()))
        for run in failed:
            run.errors.append(error)
            run.status = FAILED
            run.unplaceable = unplaceable
            self._finished(run)
        return failed


# ---------------------------------------------------------------------- assignment

def blocks(world_size: int, size: int) -> list[tuple[int, ...]]:
    """The blocks of ``size`` consecutive ranks of a gang of ``world_size``."""
    return [tuple(range(start, start + size)) for start in range(0, world_size - size + 1, size)]


def assign(world_size: int, busy: set[int], pending: Mapping[int, int]) -> list[tuple[int, tuple[int, ...]]]:
    """(size, ranks) for each case a gang of ``world_size`` should start now.

    Largest pending size first; a smaller size gets ranks only when no case of a larger size is
    left waiting (a larger case waits for its block to come free rather than lose it to small
    ones).
    """
    busy = set(busy)
    left = dict(pending)
    out: list[tuple[int, tuple[int, ...]]] = []
    for size in sorted((s for s, n in left.items() if n > 0 and s <= world_size), reverse=True):
        for block in blocks(world_size, size):
            if left[size] == 0:
                break
            if busy.isdisjoint(block):
                out.append((size, block))
                busy.update(block)
                left[size] -= 1
        if left[size] > 0:
            break  # the rest of the gang's free ranks wait for a block of this size
    return out


# ---------------------------------------------------------------------- placement planning

def fits(free: Mapping[str, int], world_size: int, strict_pack: bool = True) -> str | None:
    """A node that can take a gang of ``world_size`` (most free devices first), or None.

    Without STRICT_PACK a gang may span nodes: the answer is then any node when the total fits.
    """
    if not free:
        return None
    best = max(sorted(free), key=lambda n: free[n])
    if free[best] >= world_size:
        return best
    if not strict_pack and sum(free.values()) >= world_size:
        return best
    return None


def place(free: dict[str, int], world_size: int, node: str | None, strict_pack: bool = True) -> None:
    """Take ``world_size`` devices out of ``free`` (on ``node`` first, then wherever free)."""
    if strict_pack:
        if node in free:
            free[node] -= min(free[node], world_size)
        return
    need = world_size
    for n in ([node] if node in free else []) + sorted(n for n in free if n != node):
        take = min(free[n], need)
        free[n] -= take
        need -= take


def free_devices(capacity: Mapping[str, int], held: Sequence[tuple[str | None, int]],
                 strict_pack: bool = True) -> dict[str, int]:
    """Devices left per node after the gangs in ``held`` ((node or None if not placed yet, G))."""
    free = dict(capacity)
    placed = [(n, w) for n, w in held if n is not None]
    unplaced = sorted((w for n, w in held if n is None), reverse=True)
    for node, w in placed:
        place(free, w, node, strict_pack)
    for w in unplaced:  # not placed yet: assume first fit, the way Ray will place it
        place(free, w, fits(free, w, strict_pack), strict_pack)
    return free


def largest_fitting(free: Mapping[str, int], sizes: Iterable[int], strict_pack: bool = True) -> int | None:
    fitting = [s for s in sizes if fits(free, s, strict_pack) is not None]
    return max(fitting) if fitting else None


def plan_gangs(capacity: Mapping[str, int], held: Sequence[tuple[str | None, int]],
               pending: Mapping[int, int], strict_pack: bool = True,
               occupied: Sequence[tuple[str | None, int]] = ()) -> list[int]:
    """Sizes of the gangs to start now (one entry per gang).

    ``held``: the live and starting gangs that take cases, as (node or None, size);
    ``occupied``: gangs that hold devices but take no more cases (draining). A gang is started
    while the pending work (Σ size over pending cases) exceeds the ranks of the gangs that can
    serve some pending size, as large as the largest pending size that fits a node.
    """
    free = free_devices(capacity, [*held, *occupied], strict_pack)
    sizes = [s for s, n in pending.items() if n > 0]
    if not sizes:
        return []
    smallest = min(sizes)
    supply = sum(w for _, w in held if w >= smallest)
    demand = sum(s * n for s, n in pending.items() if n > 0)
    plan: list[int] = []
    while demand > supply:
        size = largest_fitting(free, sizes, strict_pack)
        if size is None:
            break
        place(free, size, fits(free, size, strict_pack), strict_pack)
        plan.append(size)
        supply += size
    return plan


def largest_gang(capacity: Mapping[str, int], strict_pack: bool = True) -> int:
    """The largest world size the cluster can place at all."""
    if not capacity:
        return 0
    return max(capacity.values()) if strict_pack else sum(capacity.values())


def unplaceable_message(world_size: int, capacity: Mapping[str, int], strategy: str, devices: str) -> str:
    """Why a gang of ``world_size`` cannot be placed on a cluster of ``capacity`` (devices per
    node) at all: the case's own world size (not the campaign's widest), what the cluster has,
    and the fix."""
    strict = strategy == "STRICT_PACK"
    biggest = largest_gang(capacity, strict)
    where = "one node" if strict else "the cluster"
    if not capacity:
        return (f"world_size {world_size} needs that many {devices} on {where} ({strategy}), but no alive node "
                f"has {devices} at all (the most the cluster has is 0). Check ray_resource's name against the "
                f"nodes' resources, or start nodes with it (`ray start --resources`).")
    return (f"world_size {world_size} needs that many {devices} on {where} ({strategy}), but the most the cluster "
            f"has is {biggest} (per node: {sorted(capacity.values(), reverse=True)}). Add such nodes, or lower "
            f"world_size.")
