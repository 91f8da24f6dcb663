"""Campaign cases run in the world they name, and seed exactly what jobs of that world look up.

One local Ray with 4 device slots (custom resource, no CPUs per actor): a gang of 4 gloo ranks
tunes the W=4 case, then re-forms into blocks of 2 and of 1. The tuned function is Triton's
vector-add tutorial kernel (interpreter) with a ``key_fn`` that reads
``torch.distributed.get_world_size()``, as users write it; its argument builder raises if any view
of the world (torch.distributed, the registered group, RANK/WORLD_SIZE) differs from the case's.
Fresh inline jobs at 1, 2 and 4 gloo ranks then hit every entry in strict cache-only mode without
measuring; preflight agrees; a grown config space is re-tuned by the next campaign.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ray_runner.campaign import RunOptions, run_campaign
from ray_runner.preflight import preflight, summarize
from ray_runner.spec import parse_campaign
from tests.launcher import agent_store
from tests.ray_local import local_ray

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
ADD = ("tests.ray.world_targets:add", "tests.ray.world_targets:make_add_args")


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    with local_ray(2, "ray-runner-worlds", resources={"slot": 4}, TRITON_INTERPRET="1") as address:
        yield address


def campaign(targets: list[dict[str, Any]], tmp_path: Path, **env: str):
    return parse_campaign({
        "name": "worlds", "device": "cpu", "ray_resource": "slot", "retries": 0, "case_timeout_s": 120,
        "placement_timeout_s": 120, "report_dir": str(tmp_path / "reports"),
        "env": {"TRITON_INTERPRET": "1", **env}, "targets": targets})


def target(world_size: int, cases: list[dict[str, Any]]) -> dict[str, Any]:
    return {"function": ADD[0], "args": ADD[1], "world_size": world_size, "cases": cases}


def inline_job(cache: Path, world_size: int, ns: list[Any], **env: str) -> list[dict[str, Any]]:
    """A fresh job of ``world_size`` gloo ranks (initialised also for 1, the registered group
    used as users do) in strict cache-only mode, measuring refused; its JSON lines."""
    store, launch = agent_store()
    spec = json.dumps({"world_size": world_size, "init": True, "registered": True,
                       "calls": [[*ADD, {"n": n}] for n in ns]})
    procs = []
    for rank in range(world_size):
        proc_env = {**os.environ, "TRITON_DIST_AUTOTUNE_DIR": str(cache), "TRITON_DIST_AUTOTUNE_CACHE_ONLY": "strict",
                    "TRITON_INTERPRET": "1", "RANK": str(rank), "WORLD_SIZE": str(world_size),
                    "LOCAL_RANK": "0", **launch, **env}
        procs.append(subprocess.Popen([sys.executable, "-m", "tests.ray.verify_hits", spec], cwd=REPO,
                                      env=proc_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    lines = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, f"W={world_size}: a rank exited {proc.returncode}:\n{err[-3000:]}"
        lines += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(lines) == world_size * len(ns)
    return lines


def test_cases_run_in_their_world_and_jobs_of_every_world_hit(ray_address: str, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    c = campaign([target(4, [{"n": 64}]), target(2, [{"n": 64}, {"n": 128}]),
                  target(1, [{"n": 64}, {"n": 128}, {"n": 128.0}])], tmp_path)
    result = run_campaign(c, RunOptions(cache_dir=str(cache), progress=False))
    assert result.ok, [r.errors for r in result.runs]
    # {n: 128.0} has the key of {n: 128} in the same world: merged, never tuned twice (the two
    # gangs identify cases concurrently: whichever of the two is identified first is tuned)
    statuses = [r.status for r in result.runs]
    assert statuses[:4] == ["tuned"] * 4 and sorted(statuses[4:]) == ["merged", "tuned"], statuses
    owner, merged = (4, 5) if statuses[4] == "tuned" else (5, 4)
    assert result.runs[merged].merged_into == owner
    for run in [r for r in result.runs if r.status == "tuned"]:
        n, w = int(run.spec.case["n"]), run.world_size
        assert run.load_entry()["key"] == repr((n, "torch.float32", w)) and run.load_entry()["world_size"] == w
    assert len(list(cache.glob("*/*.json"))) == 5  # one entry per (n, world): nothing collided
    markdown = Path(result.report_paths["markdown"]).read_text()
    assert "## Merged cases" in markdown and f"→ case {owner}" in markdown

    # fresh jobs of each world hit their entries: one call each, nothing measured (strict)
    for world, ns in ((1, [64, 128, 128.0]), (2, [64, 128]), (4, [64])):
        for line in inline_job(cache, world, ns):
            assert sum(line["calls"].values()) == 1, line

    # preflight computes the keys in each case's world: every (case, rank) hits ...
    ok, lines = summarize(preflight(c, cache_dir=str(cache)))
    assert ok and "11/11 (case, rank) pairs hit" in lines[0], lines
    # ... and exactly the ranks of a removed entry miss
    removed = next(r for r in result.runs if r.world_size == 2 and r.spec.case == {"n": 128})
    Path(removed.path).unlink()
    ok, lines = summarize(preflight(c, cache_dir=str(cache)))
    misses = [line for line in lines if "MISS" in line]
    assert not ok and len(misses) == 2 and all('"n": 128' in m and "/2:" in m for m in misses), lines

    # the config space grew (a module-level list, same source hash): preflight says miss, the
    # campaign re-tunes instead of skipping, and a strict inline job then hits
    grown = campaign([target(1, [{"n": 64}])], tmp_path, WORLD_TARGETS_GROW="1")
    ok, lines = summarize(preflight(grown, cache_dir=str(cache)))
    assert not ok and "never measured" in "\n".join(lines), lines
    again = run_campaign(grown, RunOptions(cache_dir=str(cache), progress=False))
    assert [r.status for r in again.runs] == ["tuned"]
    assert len(again.runs[0].load_entry()["candidates"]) == 3
    (line,) = inline_job(cache, 1, [64], WORLD_TARGETS_GROW="1")
    assert sum(line["calls"].values()) == 1
    ok, lines = summarize(preflight(grown, cache_dir=str(cache)))
    assert ok, lines
