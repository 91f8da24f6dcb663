"""Which ranks reached a collective of the tuner: what a rank whose wait timed out says of the others.

Just before it enters one of the tuner's collectives on a group (the key agreement, a MAX
reduction), each rank writes one key of the group's own c10d store (the store
``init_process_group``/``new_group`` gave the group, so NCCL, HCCL and gloo groups alike):
``triton_dist/arrival/<global rank>`` = how many of the tuner's collectives it has entered on this
group, which one this is (the function and key) and its host. A rank whose wait failed reads the
others' keys (``check`` first, and ``get`` only of a key that exists: a missing key is never
waited for) and names the ranks whose count is behind its own: they did not arrive. Each rank
has one key per group, overwritten at every collective, so the store does not grow with the job.

Cost: nothing on a call decided in memory (it reaches no collective); one store write per
collective of a tuning (a ``set`` is not answered: it is sent and not waited for), and the reads
only after a wait failed. A group without such a store (a ProcessGroup made by hand, a mock) is
told "could not tell", as is a store that does not answer within ``READ_BOUND_S`` (a read of a
store whose host is frozen blocks in C++ however short the store's timeout: it runs in a thread).
"""

from __future__ import annotations

import dataclasses
import json
import socket
import threading
import weakref
from typing import Any

__all__ = ["Arrival", "announce", "tell"]

#: the store keys' prefix (inside the group's own store, which torch prefixes per group)
PREFIX = "triton_dist/arrival/"
#: how long a timed-out rank waits for the store's answers before saying it could not tell
READ_BOUND_S = 10.0
#: how many ranks' whereabouts a message spells out (a 64-rank job: the others are counted)
SHOWN = 8


@dataclasses.dataclass
class _Book:
    """This process's count of the tuner's collectives on one group, and the group's store."""

    store: Any
    count: int = 0


@dataclasses.dataclass(frozen=True)
class Arrival:
    """This rank's announcement of one collective (``store`` None: the group has none to read)."""

    store: Any
    count: int
    at: str
    of: str


#: per group: its store and this process's count (a group destroyed is forgotten with it)
_books: weakref.WeakKeyDictionary[Any, _Book] = weakref.WeakKeyDictionary()
_host: list[str] = []


def _store_of(group: Any) -> Any:
    """The group's own c10d store, or None (a group torch.distributed did not make)."""
    try:
        from torch.distributed import distributed_c10d as c10d

        return c10d._world.pg_map[group][1]
    except Exception:  # noqa: BLE001 - not a registered group, or another torch: none to use
        return None


def _book(group: Any) -> _Book | None:
    try:
        book = _books.get(group)
    except TypeError:  # not weak-referenceable: a mock
        return None
    if book is None:
        store = _store_of(group)
        if store is None:
            return None
        book = _books[group] = _Book(store)
    return book


def announce(view: Any, at: str, of: str) -> Arrival:
    """Say in the group's store that this rank enters collective ``at`` (of ``of``: the function
    and key); call it just before issuing the collective, on every rank of ``view``."""
    book = _book(view.group)
    if book is None:
        return Arrival(None, 0, at, of)
    book.count += 1
    if not _host:
        _host.append(socket.gethostname())
    value = json.dumps({"n": book.count, "at": at, "of": of[:200], "host": _host[0]})
    try:
        book.store.set(f"{PREFIX}{view.ranks[view.rank]}", value)
    except Exception:  # noqa: BLE001 - a store that cannot be written: the collective says the rest
        pass
    return Arrival(book.store, book.count, at, of)


def _read(store: Any, ranks: list[int]) -> dict[int, dict[str, Any] | None]:
    """Each rank's last announcement (None: none), without ever waiting for a missing key."""
    seen: dict[int, dict[str, Any] | None] = {}
    for rank in ranks:
        key = f"{PREFIX}{rank}"
        seen[rank] = json.loads(store.get(key)) if store.check([key]) else None
    return seen


def _read_bounded(store: Any, ranks: list[int]) -> tuple[dict[int, dict[str, Any] | None] | None, str]:
    box: list[Any] = []

    def run() -> None:
        try:
            box.append(_read(store, ranks))
        except Exception as exc:  # noqa: BLE001 - said in the message
            box.append(exc)

    reader = threading.Thread(target=run, name="triton_dist-arrivals", daemon=True)
    reader.start()
    reader.join(READ_BOUND_S)
    if not box:
        return None, f"did not answer within {READ_BOUND_S:.0f}s"
    if isinstance(box[0], BaseException):
        first = str(box[0]).splitlines()[0] if str(box[0]) else ""
        return None, f"could not be read ({type(box[0]).__name__}: {first[:200]})"
    return box[0], ""


def _where(info: dict[str, Any]) -> str:
    return f"the tuner's {info.get('at', '?')}" + (f" of {info['of']}" if info.get("of") else "")


def _names(ranks: list[int], seen: dict[int, dict[str, Any] | None]) -> str:
    def one(r: int) -> str:
        info = seen.get(r)
        return f"{r} (host {info['host']})" if info and info.get("host") else str(r)

    shown = ", ".join(one(r) for r in ranks[:SHOWN])
    more = f" and {len(ranks) - SHOWN} more" if len(ranks) > SHOWN else ""
    return f"Global rank {shown}" if len(ranks) == 1 else f"Global ranks {shown}{more}"


def _grouped(ranks: list[int], seen: dict[int, dict[str, Any] | None], verb: str, none: str) -> str:
    """Where the ranks were, the ranks of one place together: "ranks [3, 9] were last at ..."."""
    places: dict[str, list[int]] = {}
    for r in ranks:
        info = seen[r]
        places.setdefault(verb + _where(info) if info else none, []).append(r)
    said = []
    for place, rs in list(places.items())[:SHOWN]:
        more = f" and {len(rs) - SHOWN} more" if len(rs) > SHOWN else ""
        who = f"rank {rs[0]}" if len(rs) == 1 else f"ranks {rs[:SHOWN]}{more}"
        said.append(f"{who} {place.replace('was last', 'were last') if len(rs) > 1 else place}")
    return "; ".join(said) + (f"; {len(places) - SHOWN} other places" if len(places) > SHOWN else "")


def tell(view: Any, arrival: Arrival | None) -> str:
    """The sentence naming the ranks of ``view`` that did not reach ``arrival``'s collective
    (never raises: it is said inside the error of a failed wait)."""
    try:
        return _tell(view, arrival)
    except Exception as exc:  # noqa: BLE001 - a value in the store this module did not write
        return (f"Another rank of the group did not reach it; which one could not be told: the group's store "
                f"held a value this tuner cannot read ({type(exc).__name__}: {exc}).")


def _tell(view: Any, arrival: Arrival | None) -> str:
    unknown = "Another rank of the group did not reach it; which one could not be told: "
    if arrival is None or arrival.store is None:
        return unknown + ("the group has no torch.distributed store to read (a process group not made by "
                          "init_process_group or new_group).")
    me = view.ranks[view.rank]
    others = [r for r in view.ranks if r != me]
    seen, why = _read_bounded(arrival.store, others)
    if seen is None:
        return unknown + (f"the job's torch.distributed store {why} (the process hosting it, MASTER_ADDR's "
                          "rank, usually global rank 0, may be the one that died).")
    mine = {"n": arrival.count, "at": arrival.at, "of": arrival.of[:200]}
    behind = [r for r in others if (seen[r] or {}).get("n", 0) < arrival.count]
    elsewhere = [r for r in others if r not in behind and any((seen[r] or {}).get(k) != v for k, v in mine.items())]
    parts = []
    if behind:
        last = _grouped(behind, seen, "was last at ", "never reached one of the tuner's collectives on this group")
        parts.append(f"{_names(behind, seen)} did not reach it ({last}).")
    if elsewhere:
        at = _grouped(elsewhere, seen, "at ", "")
        parts.append(f"{_names(elsewhere, seen)} reached another of the tuner's collectives "
                     f"on this group instead ({at}): the ranks' tuned calls on it differ.")
    if not parts:
        parts.append("Every rank of the group reached it (each said so in the group's store): some after this "
                     "rank's bound, or the collective itself failed (a rank that died in it, the network).")
    return " ".join(parts)
