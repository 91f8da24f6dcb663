"""A strict cache-only job over another world than the seeding's names a fix that helps.

Seeded by 2 real gloo ranks tuning together (``init_distributed``: the group registered), then run
by 4 gloo ranks that call ``init_process_group`` and register no tuning group: each process tunes
alone, where an entry measured over 1 rank or over the job's 4 serves it. The entry was measured
over 2. The ``CacheMissError`` and the lookup's warning said to register the group as THE fix
(a tester, 2026-12-07): done, the job tunes over 4 ranks and misses the 2-rank entry again. They
now say what serves the process (an entry over 1 or 4 ranks: seed over 4) and keep the group as
advice for the ranks' agreement.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.cli.helpers import env_for, write_module

MODULE = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl

    from triton_dist.tune import autotune


    @triton.jit
    def kern(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


    @autotune(config_space=[{"BLOCK": 32}, {"BLOCK": 64}], key_fn=lambda x: (x.numel(),), n_warmup=0, n_repeat=1)
    def wscale(x, BLOCK):
        y = torch.empty_like(x)
        kern[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK=BLOCK)
        return y
''')

RANK = textwrap.dedent('''
    import json, sys, warnings
    import torch
    import torch.distributed as dist
    from triton_dist.errors import CacheMissError

    grouped, rank, world, init = sys.argv[1] == "group", int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    if grouped:
        from triton_dist.dist import init_distributed
        init_distributed(rank, world, init_method=init, timeout_s=120)
    else:
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    import worldmod
    out = {"rank": rank}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            worldmod.wscale(torch.ones(100))
            out["error"] = None
        except CacheMissError as exc:
            out["error"] = str(exc)
    out["warnings"] = [str(w.message) for w in caught]
    print("OUT " + json.dumps(out), flush=True)
    dist.destroy_process_group()
''')


def _ranks(tmp: Path, modules: Path, grouped: bool, world: int, **env: str) -> list[dict]:
    init = f"file://{tmp / f'init-{grouped}-{world}'}"
    procs = [subprocess.Popen([sys.executable, "-c", RANK, "group" if grouped else "alone", str(rank), str(world),
                               init], env=env_for(tmp / "cache", modules, **env), cwd=modules,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for rank in range(world)]
    outs = []
    for proc in procs:
        stdout, stderr = proc.communicate(timeout=300)
        assert "OUT " in stdout, stderr[-3000:]
        outs.append(json.loads(stdout.split("OUT ", 1)[1]))
    return outs


def test_an_ungrouped_job_of_4_ranks_on_a_2_rank_entry_is_told_to_seed_over_4_not_only_to_register(tmp_path):
    modules = write_module(tmp_path / "mods", "worldmod", MODULE).parent
    seeded = _ranks(tmp_path, modules, grouped=True, world=2)
    assert [o["error"] for o in seeded] == [None, None]
    (entry,) = (tmp_path / "cache" / "wscale").glob("*.json")
    assert json.loads(entry.read_text())["world_size"] == 2

    outs = _ranks(tmp_path, modules, grouped=False, world=4, TRITON_DIST_AUTOTUNE_CACHE_ONLY="strict")
    for out in outs:
        error = out["error"]
        assert error is not None and "measured over 2 rank(s)" in error, out
        # what serves this process, and the fix that does: registering the group alone does not
        assert "an entry measured over 1 or 4 rank(s) serves this process, so seed the cache over 4 ranks" in error
        assert "register one with" not in error
        warned = [w for w in out["warnings"] if "ignoring cache file" in w]
        assert warned and "seed the cache over 4 ranks" in warned[0], out["warnings"]
    assert json.loads(entry.read_text())["world_size"] == 2  # nothing written
