"""Multi-rank tuning on real GPUs with NCCL (issue 3's device run; also the 8-GPU run of issue 10).

Run: python scripts/device/multirank_nccl.py --nprocs 2 --out $OUT
Each scenario spawns one process per GPU, initialises NCCL through triton_dist.dist and tunes a
real Triton kernel. Writes a JSON summary and prints one line per scenario.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import triton

from examples.scale import scale_kernel as _scale_kernel
from triton_dist.tune import autotune

# launches per (rank, config): alone rank 0 picks 0, rank 1 picks 2; MAX over the group picks 1.
# A run also has a fixed cost (allocation, first launch) of a few launches' worth, the same for
# every config: the MAX picks 1 only if 16 + c > 8 + c on both sides, whatever c is.
REPS = {0: [1, 8, 16], 1: [16, 8, 1]}


def _key(x, alpha, reps=None):
    return (tuple(x.shape), str(x.dtype))


SPACE = [{"cfg": triton.Config({"BLOCK": 1024}, num_warps=4)},
         {"cfg": triton.Config({"BLOCK": 1024}, num_warps=4), "variant": 1},
         {"cfg": triton.Config({"BLOCK": 1024}, num_warps=4), "variant": 2}]
SPACE[0]["variant"] = 0


@autotune(config_space=SPACE, key_fn=_key)
def scale(x, alpha, reps, cfg, variant):
    y = torch.empty_like(x)
    meta = cfg.all_kwargs()
    grid = (triton.cdiv(x.numel(), meta["BLOCK"]),)
    for _ in range(reps[variant]):
        _scale_kernel[grid](x, y, alpha, x.numel(), **meta)
    return y


def _rank_key(x, alpha, reps=None):
    return (tuple(x.shape), int(os.environ["RANK"]))


@autotune(config_space=SPACE, key_fn=_rank_key)
def scale_bad_key(x, alpha, reps, cfg, variant):
    return scale.fn(x, alpha, reps, cfg, variant)


def _child(rank, nprocs, scenario, port, out_dir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(nprocs), LOCAL_RANK=str(rank),
                      TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S="20",
                      TRITON_DIST_AUTOTUNE_DIR=str(Path(os.environ["TRITON_DIST_AUTOTUNE_DIR"]) / scenario))
    result = {}
    try:
        import torch.distributed as dist

        from triton_dist.dist import init_distributed

        init_distributed(timeout_s=60)
        from triton_dist._backends import get_backend

        x = torch.randn(int(os.environ.get("MULTIRANK_N", 1 << 22)), device=get_backend().device())
        reps = REPS.get(rank % 2, [1, 1, 1])
        if scenario == "max":
            y = scale(x, 2.0, reps)
            best = scale.best_config(x, 2.0, reps)
            result = {"variant": best["variant"], "correct": bool(torch.allclose(y, 2.0 * x))}
        elif scenario == "subgroups":
            half = nprocs // 2
            groups = [dist.new_group(list(range(half))), dist.new_group(list(range(half, nprocs)))]
            mine = groups[0] if rank < half else groups[1]
            # group 2 ranks get reversed costs so the groups pick differently
            r = reps if rank < half else list(reversed(reps))
            scale.clear()
            scale(x, 2.0, r, autotune_pg=mine)
            result = {"variant": scale.best_config(x, 2.0, r)["variant"]}
        elif scenario == "bad_key":
            scale_bad_key(x, 2.0, reps)
            result = {"variant": None}
        get_backend().synchronize()
    except BaseException as exc:  # noqa: BLE001
        result = {"error": type(exc).__name__, "message": str(exc)[:500], "tb": traceback.format_exc()[-800:]}
    Path(out_dir, f"{scenario}.rank{rank}.json").write_text(json.dumps(result))
    os._exit(0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nprocs", type=int, default=2)
    ap.add_argument("--out", default=os.environ.get("OUT", "out"))
    args = ap.parse_args()
    out = Path(args.out) / "multirank"
    out.mkdir(parents=True, exist_ok=True)
    os.environ["TRITON_DIST_AUTOTUNE_DIR"] = tempfile.mkdtemp(prefix="td-cache-")
    from triton_dist._backends import get_backend

    summary = {"nprocs": args.nprocs, "device": get_backend().hardware(), "scenarios": {}}
    for i, scenario in enumerate(["max", "subgroups", "bad_key"]):
        t0 = time.time()
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=_child, args=(r, args.nprocs, scenario, 29600 + i, str(out)))
                 for r in range(args.nprocs)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(240)
        hung = [r for r, p in enumerate(procs) if p.is_alive()]
        for p in procs:
            if p.is_alive():
                p.kill()
        ranks = []
        for r in range(args.nprocs):
            f = out / f"{scenario}.rank{r}.json"
            ranks.append(json.loads(f.read_text()) if f.exists() else {"missing": True})
        summary["scenarios"][scenario] = {"wall_s": round(time.time() - t0, 2), "hung": hung, "ranks": ranks}
        shown = [{k: v for k, v in r.items() if k != "tb"} for r in ranks]
        print(f"{scenario}: wall {time.time() - t0:.1f}s hung={hung} ranks={shown}")
    cache_files = sorted(str(p.relative_to(os.environ["TRITON_DIST_AUTOTUNE_DIR"]))
                         for p in Path(os.environ["TRITON_DIST_AUTOTUNE_DIR"]).rglob("*") if p.is_file())
    summary["cache_files"] = cache_files
    for log_file in Path(os.environ["TRITON_DIST_AUTOTUNE_DIR"]).rglob("*.log"):  # the tuning logs
        rel = log_file.relative_to(os.environ["TRITON_DIST_AUTOTUNE_DIR"])
        (out / ("log-" + "-".join(rel.parts))).write_text(log_file.read_text())
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    print("cache files:", cache_files)
    return 0


if __name__ == "__main__":
    sys.exit(main())
