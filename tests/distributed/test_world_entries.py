"""An entry records the world it was measured in, and no caller of another world is served it.

A real 2-rank gloo job tunes a function whose key_fn forgot the world size; a single-process
caller with the same key then misses (strict cache-only: an error naming the world), `cache why
--world-size 1` says the world differs, and a tuning caller re-tunes and records world 1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import world_workers
from harness import run_ranks

from triton_dist._store import decide as _decide
from triton_dist.errors import CacheMissError, TritonDistWarning
from triton_dist.settings import override

pytestmark = pytest.mark.timeout(180)
REPO = Path(__file__).resolve().parents[2]


def test_an_entry_of_another_world_is_a_miss(cache_dir: Path, tmp_path: Path) -> None:
    results = run_ranks(world_workers.tune_in_world, 2, env={"TRITON_DIST_AUTOTUNE_DIR": str(cache_dir)},
                        tmp=tmp_path)
    assert all("ok" in r for r in results), results
    (path,) = cache_dir.glob("*/*.json")
    assert json.loads(path.read_text())["world_size"] == 2

    tuner, (x, y) = world_workers.add_blind, world_workers.args()
    key = world_workers.blind_key(x, y)
    two = _decide.decide(_decide.identify(tuner.target, key, 2), cache_dir, version_check=False, cache_only="off")
    one = _decide.decide(_decide.identify(tuner.target, key, 1), cache_dir, version_check=False, cache_only="off")
    assert two.hit and two.path == path
    assert not one.hit and "measured over 2 rank(s), this call tunes over 1" in one.why

    with override(TRITON_DIST_AUTOTUNE_CACHE_ONLY="strict"), warnings.catch_warnings():
        warnings.simplefilter("ignore", TritonDistWarning)  # "ignoring cache file ...": asserted below
        with pytest.raises(CacheMissError, match=r"measured over 2 rank\(s\)"):
            tuner(x, y)

    env = {**os.environ, "TRITON_DIST_AUTOTUNE_DIR": str(cache_dir), "PYTHONPATH": str(REPO)}
    why = [sys.executable, "-m", "triton_dist.cache", "why", "tests.distributed.world_workers:add_blind", repr(key)]
    miss = subprocess.run([*why, "--world-size", "1"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert miss.returncode == 1 and "world" in miss.stdout and "MISS" in miss.stdout, miss.stdout + miss.stderr
    hit = subprocess.run([*why, "--world-size", "2"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert hit.returncode == 0 and "HIT" in hit.stdout, hit.stdout + hit.stderr

    # a tuning caller of world 1 says why it ignores the file, re-tunes, and records its world
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tuner(x, y)
    assert any("measured over 2 rank(s)" in str(w.message) for w in caught if w.category is TritonDistWarning)
    assert json.loads(path.read_text())["world_size"] == 1
