"""Module globals whose values only some ranks make, read by a tuned host on 2 real gloo ranks
(``triton_dist/_store/constants.py``).

A tester (2026-12-05): ``BUF = torch.zeros(4) if RANK == 0 else None`` (a leader-only buffer) read
by a host called with ``autotune_pg=WORLD`` raised ``RankDisagreementError`` saying the module
constants differ between ranks, while the source is identical: whether a computed global counted
was decided from the value this process holds (rank 0's tensor was "not a constant", rank 1's
``None`` counted). It worked before module constants counted in the hashes. Now the source alone
decides, so every rank hashes alike whatever its values, and the ranks tune together.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from harness import run_ranks

pytestmark = pytest.mark.timeout(300)

MODULE = textwrap.dedent('''
    import os

    import torch

    from triton_dist.tune import autotune

    RANK = int(os.environ["RANK"])
    LEADER_BUFFER = torch.zeros(4) if RANK == 0 else None  # a leader-only buffer
    RANK_TENSOR = torch.full((2,), float(RANK))  # a tensor of each rank's own
    RANK_OBJECT = object() if RANK == 0 else "rank 1"  # an object on one rank, a string on the other
    NONE_OR_NUMBER = None if RANK == 0 else 3
    HOOK = (lambda x: x + 1) if RANK == 1 else None  # a function on one rank, None on the other
    if RANK == 0:
        LEADER_NAME = "leader"  # a name only the leader binds


    @autotune(config_space=[{"c": 1}, {"c": 2}], key_fn=lambda n: (n,), n_warmup=0, n_repeat=1)
    def leader_buffer(n, c):
        return n + (0 if LEADER_BUFFER is None else int(LEADER_BUFFER.sum())) + 0 * c


    @autotune(config_space=[{"c": 1}, {"c": 2}], key_fn=lambda n: (n,), n_warmup=0, n_repeat=1)
    def rank_tensor(n, c):
        return n + 0 * int(RANK_TENSOR.sum()) + 0 * c


    @autotune(config_space=[{"c": 1}, {"c": 2}], key_fn=lambda n: (n,), n_warmup=0, n_repeat=1)
    def rank_object(n, c):
        return n + 0 * len(str(RANK_OBJECT)) + 0 * c


    @autotune(config_space=[{"c": 1}, {"c": 2}], key_fn=lambda n: (n,), n_warmup=0, n_repeat=1)
    def none_or_number(n, c):
        return n + 0 * (NONE_OR_NUMBER or 0) + 0 * c


    @autotune(config_space=[{"c": 1}, {"c": 2}], key_fn=lambda n: (n,), n_warmup=0, n_repeat=1)
    def function_or_none(n, c):
        return n + (0 if HOOK is None else HOOK(-1)) + 0 * c


    @autotune(config_space=[{"c": 1}, {"c": 2}], key_fn=lambda n: (n,), n_warmup=0, n_repeat=1)
    def leader_only_name(n, c):
        return n + (0 * len(LEADER_NAME) if RANK == 0 else 0) + 0 * c


    @autotune(config_space=[{"c": 1}, {"c": 2}], key_fn=lambda n: (n,), n_warmup=0, n_repeat=1)
    def in_the_default_group(n, c):
        return n + (0 if LEADER_BUFFER is None else int(LEADER_BUFFER.sum())) + 0 * c
''')

HOSTS = ["leader_buffer", "rank_tensor", "rank_object", "none_or_number", "function_or_none", "leader_only_name"]


def _tune_every_host(rank: int, world_size: int, modules: str) -> dict[str, object]:
    import torch.distributed as dist

    from triton_dist.dist import init_distributed

    sys.path.insert(0, modules)
    import pr_values

    outcome: dict[str, object] = {}
    for name in HOSTS:
        try:
            outcome[name] = getattr(pr_values, name)(1, autotune_pg=dist.group.WORLD)
        except Exception as exc:  # noqa: BLE001 - reported: which host, what error
            outcome[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
    init_distributed()  # the job's default group (WORLD), then a call without autotune_pg
    try:
        outcome["in_the_default_group"] = pr_values.in_the_default_group(1)
    except Exception as exc:  # noqa: BLE001
        outcome["in_the_default_group"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    return outcome


def test_values_only_some_ranks_make_hash_alike_and_the_ranks_tune_together(tmp_path: Path) -> None:
    (tmp_path / "pr_values.py").write_text(MODULE)
    cache = tmp_path / "cache"
    env = {"TRITON_DIST_AUTOTUNE_DIR": str(cache), "TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S": "20"}
    results = run_ranks(_tune_every_host, 2, env=env, args=(str(tmp_path),), tmp=tmp_path, timeout_s=240)
    names = [*HOSTS, "in_the_default_group"]
    assert all("ok" in r for r in results), results
    for rank, result in enumerate(results):
        failed = {name: value for name, value in result["ok"].items() if value != 1}
        assert failed == {}, f"rank {rank}: {failed}"
    # one decision each, written once: the ranks named one entry
    assert sorted(p.name for p in cache.iterdir()) == sorted(names)
    assert {name: len(list((cache / name).glob("*.json"))) for name in names} == dict.fromkeys(names, 1)
