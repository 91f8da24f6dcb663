"""Rank functions for the multi-rank tests (module level: spawned children import them)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch.distributed as dist

from triton_dist.tune import autotune

# per-rank cost (ms) of each config: alone, rank 0 would pick 0 and rank 1 would pick 2;
# only the MAX over both (0: 6, 1: 4, 2: 7) picks config 1.
COST_MS = {0: [1.0, 4.0, 7.0], 1: [6.0, 3.0, 1.0], 2: [2.0, 2.0, 2.0], 3: [2.0, 2.0, 2.0]}
CALLS: dict[int, int] = {}


def _key(n, rank_cost=None, **_):
    return (n,)


def _rank_cost_bench(fn, n_warmup, n_repeat):
    """Deterministic timings (a loaded 2-core CI machine makes sleep-based ones noisy): the run's
    result names its config, and this rank's cost table gives its time. Runs fn like a real
    benchmarker so call counts stay real."""
    for _ in range(n_warmup):
        fn()
    times = []
    for _ in range(n_repeat):
        out = fn()
        times.append(_COST_NOW[out % 10])
    return times


_COST_NOW: list[float] = []


@autotune(config_space=[{"cfg": 0}, {"cfg": 1}, {"cfg": 2}], key_fn=_key, n_warmup=1, n_repeat=4,
          do_bench=_rank_cost_bench)
def host(n, rank_cost, cfg):
    CALLS[cfg] = CALLS.get(cfg, 0) + 1
    _COST_NOW[:] = rank_cost
    return n * 10 + cfg


@autotune(config_space=[{"cfg": 0}, {"cfg": 1}, {"cfg": 2}], key_fn=_key, n_warmup=1, n_repeat=4)
def host_sleeps(n, rank_cost, cfg):
    time.sleep(rank_cost[cfg] / 1000.0)
    return n * 10 + cfg


def max_semantics_real_timer(rank, world_size):
    # wide margins: alone rank 0 picks 0, rank 1 picks 2; MAX [30, 12, 40] picks 1
    cost = {0: [2.0, 12.0, 40.0], 1: [30.0, 10.0, 2.0]}[rank]
    value = host_sleeps(7, cost, autotune_pg=dist.group.WORLD)
    entry = host_sleeps.tune(7, cost, autotune_pg=dist.group.WORLD, write_cache=False)
    # the group's entry keeps what each candidate ran (1 warm-up + 4 timed runs)
    assert [c["runs"] for c in entry["candidates"]] == [5, 5, 5], entry["candidates"]
    return value


def max_semantics(rank, world_size, use_default_group=False):
    cost = COST_MS[rank]
    if use_default_group:
        from triton_dist.dist import set_world_group

        set_world_group(dist.group.WORLD)
        value = host(7, cost)
    else:
        value = host(7, cost, autotune_pg=dist.group.WORLD)
    root = Path(os.environ["TRITON_DIST_AUTOTUNE_DIR"]) / "host"
    files = sorted(p.name for p in root.iterdir()) if root.exists() else []
    return {"value": value, "calls": CALLS, "files": files}


def subgroups(rank, world_size):
    # groups {0,1} and {2,3}: every rank must call new_group for both
    g01 = dist.new_group([0, 1])
    g23 = dist.new_group([2, 3])
    mine = g01 if rank < 2 else g23
    cost = {0: [1.0, 5.0, 9.0], 1: [1.0, 5.0, 9.0], 2: [9.0, 5.0, 1.0], 3: [9.0, 5.0, 1.0]}[rank]
    if rank == 1:
        cost = [8.0, 5.0, 9.0]  # MAX in {0,1}: 8, 5, 9 -> config 1
    value = host(3, cost, autotune_pg=mine)
    # no rank leaves before all are done: rank 0 holds the rendezvous store, and the other
    # group's ranks may still be connecting their group through it (a loaded CI machine, stop
    # 41: "Connection reset by peer" in ProcessGroupGloo's construction on ranks 2 and 3)
    dist.barrier()
    return {"value": value}


def _key_rank(n, rank_cost=None, **_):
    return (n, int(os.environ["RANK"]))  # a bug: the key depends on the rank


@autotune(config_space=[{"cfg": 0}, {"cfg": 1}], key_fn=_key_rank, n_warmup=1, n_repeat=2)
def host_rank_key(n, rank_cost, cfg):
    return n + cfg


def disagree_key(rank, world_size):
    return host_rank_key(1, None, autotune_pg=dist.group.WORLD)


def _prune_by_rank(config, n, rank_cost=None):
    return config["cfg"] != int(os.environ["RANK"])  # each rank drops a different config


@autotune(config_space=[{"cfg": 0}, {"cfg": 1}, {"cfg": 2}], key_fn=_key, prune_fn=_prune_by_rank,
          n_warmup=1, n_repeat=2)
def host_rank_prune(n, rank_cost, cfg):
    return n + cfg


def disagree_prune(rank, world_size):
    return host_rank_prune(1, None, autotune_pg=dist.group.WORLD)


def tune_then_call(rank, world_size):
    """Tune once (both ranks), used to seed a cache; returns the chosen value."""
    return host(5, [1.0, 2.0, 3.0], autotune_pg=dist.group.WORLD)


def one_rank_absent(rank, world_size):
    if rank == 1:
        time.sleep(1.0)
        return "skipped"  # never calls the tuned function
    return host(9, [1.0, 2.0, 3.0], autotune_pg=dist.group.WORLD)


@autotune(config_space=[{"cfg": 0}, {"cfg": 1}, {"cfg": 2}], key_fn=_key, n_warmup=1, n_repeat=3)
def host_fails_on_rank1(n, rank_cost, cfg):
    if cfg == 0 and int(os.environ["RANK"]) == 1:
        raise RuntimeError("out of resources on rank 1")
    time.sleep([1.0, 4.0, 25.0][cfg] / 1000.0)
    return n + cfg


def fails_on_one_rank(rank, world_size):
    value = host_fails_on_rank1(2, None, autotune_pg=dist.group.WORLD)
    root = Path(os.environ["TRITON_DIST_AUTOTUNE_DIR"]) / "host_fails_on_rank1"
    import json

    entries = [json.loads(p.read_text()) for p in root.glob("*.json")]
    return {"value": value, "entries": entries}


@autotune(config_space=[{"cfg": 0}, {"cfg": 1}, {"cfg": 2}], key_fn=_key, n_warmup=1, n_repeat=2)
def host_fails_on_some_ranks(n, rank_cost, cfg):
    if (cfg, int(os.environ["RANK"])) in ((1, 1), (1, 2), (2, 2)):
        raise RuntimeError(f"out of workspace on rank {os.environ['RANK']} for cfg={cfg}")
    return n + cfg


def fails_on_some_ranks(rank, world_size):
    """Config 1 fails on ranks 1 and 2, config 2 on rank 2: what the group's entry says of them."""
    host_fails_on_some_ranks(2, None, autotune_pg=dist.group.WORLD)
    dist.barrier()  # the writer's entry is on disk
    root = Path(os.environ["TRITON_DIST_AUTOTUNE_DIR"]) / "host_fails_on_some_ranks"
    import json

    (path,) = root.glob("*.json")
    logs = {p.name: p.read_text() for p in root.glob("*.log")}
    return {"entry": json.loads(path.read_text()), "logs": logs}


@autotune(config_space=[{"cfg": 0}, {"cfg": 1}], key_fn=_key, n_warmup=1, n_repeat=2)
def host_bug_on_rank0(n, rank_cost, cfg):
    if cfg == 1 and int(os.environ["RANK"]) == 0:
        raise TypeError("a real bug")
    return n + cfg


def bug_on_one_rank(rank, world_size):
    return host_bug_on_rank0(2, None, autotune_pg=dist.group.WORLD)


# ---------------------------------------------------------------- no autotune_pg (issue 18 item 2)

@autotune(config_space=[{"cfg": 0}, {"cfg": 1}, {"cfg": 2}], key_fn=_key, n_warmup=1, n_repeat=4,
          do_bench=_rank_cost_bench)
def host_twin(n, rank_cost, cfg):
    _COST_NOW[:] = rank_cost
    return n * 10 + cfg


def _tuning_warnings(calls):
    import warnings

    from triton_dist.errors import TritonDistWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        values = [call() for call in calls]
    return values, [str(w.message) for w in caught if issubclass(w.category, TritonDistWarning)]


def alone_without_a_group(rank, world_size):
    """Plain init_process_group, no autotune_pg, nothing registered: each rank tunes alone."""
    cost = COST_MS[rank]
    values, messages = _tuning_warnings([
        lambda: host(7, cost), lambda: host(8, cost), lambda: host(7, cost), lambda: host_twin(7, cost)])
    return {"values": values, "messages": messages}


def registered_then_alone_by_choice(rank, world_size):
    """init_distributed() after a plain init_process_group registers WORLD (the group tunes);
    set_world_group(None) then tunes alone on purpose, without a warning."""
    from triton_dist.dist import init_distributed, set_world_group

    cost = COST_MS[rank]
    init_distributed()  # torch.distributed is already up: registers WORLD only
    grouped, messages = _tuning_warnings([lambda: host(7, cost)])
    set_world_group(None)
    alone, more = _tuning_warnings([lambda: host_twin(7, cost)])
    return {"grouped": grouped, "alone": alone, "messages": messages + more}


def late_entry(rank, world_size):
    """Seed the key, forget it in memory; then rank 0's first lookup reports a miss, as if the
    entry had landed between the two ranks' lookups."""
    from triton_dist._store import decide

    value = host(5, [1.0, 2.0, 3.0], autotune_pg=dist.group.WORLD)
    dist.barrier()  # the writer's entry is on disk (the other rank returns before it is written)
    host.clear()
    real, lookups = decide.lookup, []

    def lookup(call, root, settings, stacklevel=5):
        lookups.append(call.key)
        if rank == 0 and len(lookups) == 1:
            return None, "no cache entry", None, None
        return real(call, root, settings, stacklevel)

    decide.lookup = lookup
    calls = CALLS.copy()
    try:
        again = host(5, [1.0, 2.0, 3.0], autotune_pg=dist.group.WORLD)
    finally:
        decide.lookup = real
    return {"value": value, "again": again, "lookups": len(lookups),
            "tuned_calls": sum(CALLS.values()) - sum(calls.values())}


# ---------------------------------------------------------------- driven with outside code (2026-12-03)

def alone_then_group(rank, world_size):
    """Rank 0 evaluates alone first (it decides the key by itself), then every rank calls with
    the group: rank 0 must join the group's agreement, not reuse its own decision (the other
    rank waited for it until the time-out)."""
    cost = COST_MS[rank]
    if rank == 0:
        host(4, cost)  # alone: no autotune_pg, no registered group
    dist.barrier()
    started = time.monotonic()
    value = host(4, cost, autotune_pg=dist.group.WORLD)
    return {"value": value, "seconds": time.monotonic() - started,
            "group_best": host.best_config(4, cost, autotune_pg=dist.group.WORLD)}


def registered_after_alone(rank, world_size):
    """The same through the default group: registering it forgets the decisions made alone."""
    from triton_dist.dist import set_world_group

    cost = COST_MS[rank]
    if rank == 0:
        host_twin(4, cost)
    dist.barrier()
    set_world_group(dist.group.WORLD)
    return host_twin(4, cost)


def make_rank_host(rank):
    """A host function made per rank, closing over the rank (what a factory may do)."""
    @autotune(config_space=[{"cfg": 0}, {"cfg": 1}], key_fn=_key, n_warmup=1, n_repeat=2)
    def host_per_rank(n, rank_cost, cfg):
        return n + cfg + 0 * rank
    return host_per_rank


def closure_over_rank(rank, world_size):
    return make_rank_host(rank)(1, None, autotune_pg=dist.group.WORLD)


def bad_group(rank, world_size, what):
    group = {"ranks": [0, 1], "flag": True}[what]
    return host(7, COST_MS[rank], autotune_pg=group)


def _space_by_rank() -> list[dict[str, int]]:
    space = [{"cfg": 0}, {"cfg": 1}, {"cfg": 2}]
    return space if int(os.environ["RANK"]) == 0 else [space[0], space[2], space[1]]  # same configs, other order


def disagree_space(rank, world_size):
    """Spaces of one length whose configs differ by rank: before, the ranks agreed on the indices
    and each ran its own config at the index the group picked (no error)."""

    @autotune(config_space=_space_by_rank(), key_fn=_key, n_warmup=1, n_repeat=2)
    def host_rank_space(n, rank_cost, cfg):
        time.sleep([20.0, 1.0, 2.0][cfg] / 1000.0)
        return cfg

    return host_rank_space(1, None, autotune_pg=dist.group.WORLD)


def outside_subgroup(rank, world_size):
    """Rank 2 is left out of new_group([0, 1]) (torch hands it a placeholder) and passes it."""
    group = dist.new_group([0, 1])
    return host(4, [1.0, 2.0, 3.0], autotune_pg=group)


def group_entry_then_ungrouped(rank, world_size):
    """The group's entry (as a campaign seeds it for this job), then calls of a rank alone in the
    same 2-rank job (plain init_process_group, nothing registered): they take the group's entry
    instead of each tuning alone over it (session 28)."""
    import json

    cost = COST_MS[rank]
    grouped = host(9, cost, autotune_pg=dist.group.WORLD)
    dist.barrier()
    host.clear()  # a new process of the job: nothing decided in memory
    before = dict(CALLS)
    values, messages = _tuning_warnings([lambda: host(9, cost)])
    runs = {cfg: CALLS.get(cfg, 0) - before.get(cfg, 0) for cfg in (0, 1, 2)}
    dist.barrier()
    root = Path(os.environ["TRITON_DIST_AUTOTUNE_DIR"]) / "host"
    (entry,) = [json.loads(p.read_text()) for p in root.glob("*.json")]
    return {"grouped": grouped, "alone": values, "runs": runs, "world": entry["world_size"],
            "history": sorted(p.name for p in (root / "history").glob("*.json")) if (root / "history").exists() else [],
            "messages": messages}


def different_functions(rank, world_size):
    """Ranks calling different tuned functions of one key and space (layers run in another order)."""
    fn = host if rank == 0 else host_twin
    return fn(5, [1.0, 2.0, 3.0], autotune_pg=dist.group.WORLD)
