"""Agreement and MAX reduction over an explicit process group; no-ops without one.

Every cross-rank wait is bounded (``TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S``): collectives are
issued asynchronously and waited for with a timeout, so a rank that never arrives, or died,
turns into a :class:`RankFailureError` on the others instead of a hang. On NCCL/HCCL the
process group's own timeout is the final bound (their waits block the stream, not the CPU).
The wait is a poll of the collective with short sleeps, not one ``work.wait(timeout)``: that
blocks in C++, where a Ctrl-C is not handled until the other ranks arrive or the bound passes
(300 s by default; a tester, 2026-12). Just before each collective a rank says so in the group's
c10d store (:mod:`triton_dist._arrivals`), so that a rank whose wait failed names the global
ranks that did not arrive, and their hosts.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import logging
import socket
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from triton_dist import _arrivals
from triton_dist._backends import Backend
from triton_dist._warn import warn_user
from triton_dist.errors import RankDisagreementError, RankFailureError

__all__ = ["GroupView", "agree", "max_reduce", "resolve_group", "warn_if_ungrouped"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class GroupView:
    """This rank's view of a tuning group."""

    group: Any
    rank: int
    size: int
    ranks: tuple[int, ...]  # global ranks, in group order

    def describe(self) -> str:
        return f"group of {self.size} ranks {list(self.ranks)}"


def resolve_group(pg: Any) -> GroupView | None:
    """``pg`` as a view, or the project's world group when ``pg`` is None; None: one process."""
    registered = pg is None
    if registered:
        from triton_dist.dist import get_world_group

        pg = get_world_group()
        if pg is None:
            return None
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RankFailureError(
            "autotune_pg was given but torch.distributed is not initialised in this process; "
            "call torch.distributed.init_process_group (or triton_dist.dist.init_distributed) first."
        )
    non_member = getattr(getattr(dist, "GroupMember", None), "NON_GROUP_MEMBER", object())
    if pg is non_member or (type(pg) is int and pg == non_member):  # new_group's answer to a non-member
        raise RankFailureError(
            f"this process (global rank {dist.get_rank()}) is not a member of the autotune_pg it passed "
            "(torch.distributed.new_group returns a placeholder to the ranks it leaves out); pass the group "
            "this rank belongs to, or call the tuned function without it on the other ranks.")
    if not isinstance(pg, dist.ProcessGroup):
        raise RankFailureError(
            f"autotune_pg must be a torch.distributed process group, got {type(pg).__name__} {pg!r:.100}; "
            "pass the group object (dist.group.WORLD, or dist.new_group(ranks) for a subset), not its "
            "ranks or a flag.")
    try:
        rank = dist.get_rank(pg)
    except (ValueError, RuntimeError) as exc:  # destroyed, or made by another init
        if registered:  # no autotune_pg was passed (it said "autotune_pg ...": a tester, 2026-12-05)
            raise RankFailureError(
                f"the default tuning group registered with triton_dist.dist (init_distributed or "
                f"set_world_group) is not a group of this process's torch.distributed ({exc}): it was "
                "destroyed (destroy_process_group) and torch.distributed initialised again. Call "
                "triton_dist.dist.init_distributed() (or set_world_group(group)) again after each "
                "init_process_group: that also forgets the decisions made with the old group, which "
                "a rank that restarted does not hold.") from exc
        raise RankFailureError(
            f"autotune_pg is not a group of this process's torch.distributed ({exc}); it was destroyed "
            "(destroy_process_group) or belongs to an earlier init: pass a live group.") from exc
    if rank < 0:
        raise RankFailureError(
            f"this process (global rank {dist.get_rank()}) is not a member of the autotune_pg it "
            "passed; pass the group this rank belongs to."
        )
    size = dist.get_world_size(pg)
    ranks = tuple(dist.get_process_group_ranks(pg)) if hasattr(dist, "get_process_group_ranks") else tuple(range(size))
    return GroupView(pg, rank, size, ranks)


#: the decorated functions already warned about tuning alone in a multi-rank job
_warned_alone: weakref.WeakSet[Any] = weakref.WeakSet()


def warn_if_ungrouped(fn: Callable[..., Any], qualname: str) -> None:
    """Warn once per function when it tunes alone although torch.distributed has several ranks.

    The rule (the seed's, SPEC §A; issue 18 item 2): ``autotune_pg`` if passed, else the group
    registered by :mod:`triton_dist.dist`, else this process alone. A group is never adopted
    implicitly: a function that only some ranks call (a pipeline stage, rank-0 evaluation) would
    wait for the others. So the one risky case, several ranks and no group, is said out loud:
    such ranks may each pick a different config and diverge numerically.
    """
    try:
        if fn in _warned_alone:
            return
    except TypeError:  # not weak-referenceable: warn every miss rather than never
        pass
    from triton_dist.dist import default_group_chosen

    if default_group_chosen():  # a registered group, or set_world_group(None): alone on purpose
        return
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    size = dist.get_world_size()
    if size <= 1:
        return
    try:
        _warned_alone.add(fn)
    except TypeError:
        pass
    message = (
        f"{qualname} tunes in this process alone, although torch.distributed has {size} ranks: "
        "no autotune_pg= was passed and no default tuning group is registered, so each rank may "
        "pick a different config, and ranks running different configs can diverge numerically. "
        "Pass autotune_pg=<group> on the call, or register a default group once after "
        "init_process_group: triton_dist.dist.set_world_group(torch.distributed.group.WORLD) "
        "(triton_dist.dist.init_distributed() does it for you). Said once per function."
    )
    warn_user(message, log=log, function=qualname)


def _h63(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


#: what a rank is told after a collective of the tuner's failed or timed out: the collective is
#: still queued on the group, so the group's next collective is matched against it (gloo then
#: aborted the process, "collective mismatch"; a tester, 2026-12-04)
_GROUP_OUT_OF_STEP = (" The tuner's collective is left pending on this process group, so the group's next "
                      "collective would be matched against it (a mismatch abort, or a hang): do not use the "
                      "group again; end the job (a launcher such as torchrun restarts it).")


#: why a rank may not have reached the agreement (before anything is measured)
_AGREEMENT_CAUSES = ("it died, is stuck before it (in its key_fn, or in its own code), raised before reaching "
                     "it (its own error says why), or called the function with another key, with "
                     "autotune=False or without autotune_pg, or not at all")
#: why a rank may not have reached a reduction of timings (the ranks had agreed on the key)
_MEASURING_CAUSES = ("it is still measuring (its configs' runs took longer than the bound: raise "
                     "TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S for long tunings), or it died")


#: the first and the longest sleep between two looks at a pending collective: a collective that
#: completes at once costs a few microseconds more; one that waits is seen within POLL_MAX_S of
#: its completion, and a Ctrl-C meanwhile is handled at once (``time.sleep`` is interrupted)
POLL_FIRST_S = 50e-6
POLL_MAX_S = 0.01


def _finish(work: Any, timeout_s: float) -> Any:
    """``work.wait(timeout)``, reached through a poll of ``work.is_completed()`` (see the module
    docstring). Past ``timeout_s`` the wait is given a millisecond, so that its own timeout error
    (or False) says so, as a wait of the whole bound did; a backend whose work cannot be polled
    is waited for as before."""
    deadline = time.monotonic() + timeout_s
    pause = POLL_FIRST_S
    try:
        while not work.is_completed():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(pause, left))
            pause = min(2 * pause, POLL_MAX_S)
    except Exception:  # noqa: BLE001 - no poll here (or it failed): the wait says what it is
        pass
    left = max(deadline - time.monotonic(), 0.001)
    return work.wait(timeout=datetime.timedelta(seconds=left))


def _wait(work: Any, view: GroupView, timeout_s: float, what: str, subject: str = "",
          causes: str = _AGREEMENT_CAUSES, arrival: _arrivals.Arrival | None = None) -> None:
    """Wait for a collective of the tuner's, at most ``timeout_s``. The error names this rank by
    its global rank (the group lists global ranks), ``subject`` (the function and key), the ranks
    that did not arrive (``arrival``: this rank's announcement of it, :mod:`triton_dist._arrivals`;
    a 64-rank job's operator needs that one fact) and what they may have done; a tester read
    "rank 0 of the group [1, 2]" (2026-12-04)."""
    me = f"global rank {view.ranks[view.rank]} of the tuning {view.describe()}"
    on = f" of {subject}" if subject else ""
    why = (f"Why a rank does not reach it within {timeout_s:.0f}s (TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S): "
           f"{causes}.")
    try:
        ok = _finish(work, timeout_s)
    except Exception as exc:
        raise RankFailureError(
            f"{me}: {what}{on} failed: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}. "
            f"{_arrivals.tell(view, arrival)} {why}" + _GROUP_OUT_OF_STEP,
            function=subject,
        ) from exc
    if ok is False:
        raise RankFailureError(f"{me}: {what}{on} timed out after {timeout_s:.0f}s. "
                               f"{_arrivals.tell(view, arrival)} {why}" + _GROUP_OUT_OF_STEP,
                               function=subject)


def _all_gather(view: GroupView, tensor: Any, timeout_s: float, at: str, subject: str, of: str,
                causes: str = _AGREEMENT_CAUSES) -> list[Any]:
    """Every rank's ``tensor``: an async all_gather, announced (``of``: what the store says this
    rank is at) and waited for at most ``timeout_s`` (:func:`_wait`)."""
    import torch
    import torch.distributed as dist

    gathered = [torch.empty_like(tensor) for _ in range(view.size)]
    arrival = _arrivals.announce(view, at, of)
    work = dist.all_gather(gathered, tensor, group=view.group, async_op=True)
    _wait(work, view, timeout_s, at, subject, causes, arrival)
    return gathered


#: the agreement's second exchange, and why a rank that passed its first may not reach it
_VALUES_AT = "second exchange of the agreement on key, cache state and kept configs (the values that differ)"
_VALUES_CAUSES = ("it died or was stopped after the agreement's first exchange, which every rank reached (a "
                  "crash, an out-of-memory kill, a debugger, a SIGSTOP)")


def _gather_fields(view: GroupView, backend: Backend, fields: dict[str, str], timeout_s: float,
                   subject: str, what: str) -> list[dict[str, str]]:
    """Every rank's ``fields``, bounded as the agreement's first exchange is: their JSON's length,
    then the JSON padded to the longest, in int64 words (the first exchange's type, which every
    backend gathers), through two async all_gathers. ``dist.all_gather_object`` blocked until the
    process group's own timeout (30 min by default) when a rank stopped between the exchanges."""
    import torch

    data = json.dumps(fields, sort_keys=True).encode()
    of = what[:300]  # the function alone: the ranks' keys differ (the store compares what each is at)
    device = backend.device()
    lengths = _all_gather(view, torch.tensor([len(data)], dtype=torch.int64, device=device), timeout_s,
                          _VALUES_AT, subject, of, _VALUES_CAUSES)
    sizes = [int(n.item()) for n in lengths]
    words = -(-max(sizes) // 8)
    local = torch.frombuffer(bytearray(data.ljust(8 * words, b"\0")), dtype=torch.int64).to(device)
    texts = _all_gather(view, local, timeout_s, _VALUES_AT, subject, of, _VALUES_CAUSES)
    return [json.loads(t.cpu().numpy().tobytes()[:n]) for t, n in zip(texts, sizes, strict=True)]


_UNCOMPARED = frozenset({"host", "reuse"})

#: the fix for ranks that called with different keys: per-rank shapes (a data-parallel job's
#: variable-length batches) were told to make key_fn depend on "shapes" and to seed the caches (a
#: tester, 2026-12-05); and a rank that had decided its key in memory never joins the agreement,
#: so the key shown for it may be that of its next call
_KEY_FIX = ("\nFix: every rank of the group must call with the same key at the same call (key_fn must not "
            "read the rank). Ranks whose shapes differ by design (variable-length batches in data "
            "parallelism) cannot tune together: let each rank tune alone "
            "(triton_dist.dist.set_world_group(None), no autotune_pg), or give every rank the same key "
            "(pad or bucket the shapes to the group's largest before the call). A rank that had already "
            "decided its own key in this process does not take part in the agreement, so the key shown "
            "for it may be that of its next call: the ranks' calls are then out of step.")
#: the fix for ranks whose prune_fn kept different configs for one key (they were told to seed
#: their caches, which changes nothing: a tester, 2026-12-05)
_PRUNE_FIX = ("\nFix: prune_fn kept different configs on different ranks for the same key: make it depend "
              "only on what the key holds and on values equal on every rank (not the rank, free memory or "
              "other state of one rank). A prune_fn that reads the arguments (`BLOCK <= x.numel()`) needs "
              "a key_fn that holds what it reads: with a bucketed key, ranks in one bucket prune "
              "differently.")


def _fix(differing: set[str], cache_only: bool) -> str:
    """The fix a disagreement names, by what differs."""
    always = "" if cache_only else ", or set TRITON_DIST_AUTOTUNE_ALWAYS_TUNE=1 on every rank"
    if "key" in differing:
        return _KEY_FIX
    if differing == {"configs"}:  # every rank tunes (a hit keeps no configs): prune_fn differs
        return _PRUNE_FIX
    if differing <= {"cache", "configs"}:  # only the caches differ: no key_fn/prune_fn advice
        return ("\nFix: give every node the same cache: seed it with `python -m ray_runner run ... --seed "
                "nodes`, or share TRITON_DIST_AUTOTUNE_DIR"
                + (", or unset TRITON_DIST_AUTOTUNE_CACHE_ONLY to tune." if cache_only else always + "."))
    return ("\nFix: make key_fn and prune_fn depend only on values that are equal on every rank "
            "(shapes, dtypes, world size; not the rank or data pointers), and give every node the "
            "same cache (seed it with `python -m ray_runner run ... --seed nodes`, share "
            "TRITON_DIST_AUTOTUNE_DIR" + always + ").")


def agree(view: GroupView, backend: Backend, fields: dict[str, str], timeout_s: float,
          what: str = "") -> list[dict[str, str]]:
    """All ranks of ``view`` compare ``fields``; raise the same error on every rank on mismatch,
    naming ``what`` is tuned (the function; a tester, 2026-12-04: an operator of a model with dozens
    of tuned ops read two hashes and no name) and carrying every rank's values (``values``).

    ``fields`` maps a name ("key", "cache", "configs", ...) to this rank's value. The special
    fields ``host`` (it elects one writer per node) and ``reuse`` (a timing-reuse plan that is
    dropped, not an error, when ranks differ) are gathered but never compared. Returns every
    rank's fields in group order.
    """
    import torch

    names = sorted(fields)
    local = torch.tensor([_h63(fields[n]) for n in names], dtype=torch.int64, device=backend.device())
    at, subject = "agreement on key, cache state and kept configs", (
        f"{what}, key {fields.get('key', '')}"[:300] if what else "")
    rows = [g.tolist() for g in _all_gather(view, local, timeout_s, at, subject, subject)]
    compared = [i for i, n in enumerate(names) if n not in _UNCOMPARED]
    if all(row[i] == rows[0][i] for row in rows for i in compared):
        if "host" not in fields:
            return [fields] * view.size
        return [dict(zip(names, r, strict=True)) for r in rows]  # hashes are enough to elect writers
    # Every rank saw the same mismatch, so every rank enters this second exchange (bounded too)
    everything = _gather_fields(view, backend, fields, timeout_s, subject, what)
    lines, differing = [], {}
    for name in names:
        if name in _UNCOMPARED:
            continue
        values = [row.get(name) for row in everything]
        if len(set(values)) > 1:
            differing[name] = [str(v) for v in values]
            by_value: dict[str, list[int]] = {}
            for r, v in enumerate(values):
                by_value.setdefault(str(v), []).append(view.ranks[r])
            seen = "; ".join(f"ranks {rs} saw {v[:300]}" for v, rs in by_value.items())
            lines.append(f"  {name}: {seen}")
    spaces = ("\nThe config spaces differ between ranks (other configs, or the same ones in another order): "
              "build config_space identically on every rank, so that an index names one config everywhere."
              if any(line.lstrip().startswith("space:") for line in lines) else "")
    source = ("\nThe source hashes differ: the function, the Triton kernels it calls, what its closure "
              "captures or the module constants it reads differ between ranks (a function made per rank, "
              "closing over the rank; a module edited on one node): pass such values as arguments, "
              "so that every rank tunes the same function."
              if any(line.lstrip().startswith("source:") for line in lines) else "")
    from triton_dist.settings import get_settings

    # (ranks hitting with different picks in a cache-only job were told ALWAYS_TUNE too: a tester)
    cache_only = any(v == "cache-only-miss" for v in differing.get("cache", ())) or get_settings().cache_only != "off"
    fix = _fix(set(differing), cache_only)
    raise RankDisagreementError(
        f"the ranks of the tuning {view.describe()} disagree{f' on {what}' if what else ''}, so none of "
        "them tunes:\n" + "\n".join(lines) + spaces + source + fix,
        disagreement=lines, values=differing, function=what,
    )


def max_reduce(view: GroupView, backend: Backend, values: Sequence[float], timeout_s: float,
               subject: str = "") -> list[float]:
    """Element-wise MAX of ``values`` over exactly ``view.group`` (``subject``: the function and
    key, for the error of a rank that waited too long)."""
    import torch
    import torch.distributed as dist

    tensor = torch.tensor(list(values), dtype=torch.float64, device=backend.device())
    if tensor.device.type != "cpu" and backend.dist_backend != "gloo":
        tensor = tensor.to(torch.float32)  # nccl/hccl reduce float32 everywhere
    at = "MAX reduction of the timings"
    arrival = _arrivals.announce(view, at, subject)
    work = dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=view.group, async_op=True)
    _wait(work, view, timeout_s, at, subject, _MEASURING_CAUSES, arrival)
    return [float(v) for v in tensor.cpu().tolist()]


def host_id() -> str:
    return socket.gethostname()


def writers(view: GroupView, hosts: Sequence[Any]) -> bool:
    """True on the lowest group rank of each host: the one rank per node that writes."""
    mine = hosts[view.rank]
    return all(hosts[r] != mine for r in range(view.rank))
