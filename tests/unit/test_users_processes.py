"""Tuned functions crossing processes as frameworks send them (U15, 2026-12-04): pickled by
reference with the objects that hold them, called in ``multiprocessing`` children of the spawn
start method, which find the parent's cache entries and write their own. Judged correct as is;
these tests keep it so."""

from __future__ import annotations

import multiprocessing
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from unit import spawn_tuned


@pytest.fixture(autouse=True)
def _on_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_DIST_DEVICE", "cpu")  # inherited by the spawned children
    spawn_tuned.scaled.clear()  # each test's cache root starts empty: so do the decisions here


def test_an_object_holding_a_tuned_function_pickles_it_by_reference(cache_dir: Path) -> None:
    holder = spawn_tuned.Holder()
    holder(4)
    again = pickle.loads(pickle.dumps(holder))
    assert again.op is spawn_tuned.scaled and again(4)[1:] == holder(4)[1:]
    assert "tuned in this process" in again(4)[2]  # the module's tuner, its decisions with it


def test_spawned_children_find_the_parents_entry_and_write_their_own(cache_dir: Path) -> None:
    assert torch.equal(spawn_tuned.scaled(torch.ones(4)), torch.full((4,), 2.0))  # tuned here
    context = multiprocessing.get_context("spawn")
    with context.Pool(2) as pool:
        seen = pool.map(spawn_tuned.Holder(), [4, 4, 6, 6])  # the holder pickled to each child
    assert all(sum == 2.0 * n for (_, sum, _), n in zip(seen, [4, 4, 6, 6], strict=True))
    assert all(origin.startswith("loaded from the cache entry") for _, _, origin in seen[:2]), "\n".join(
        origin for _, _, origin in seen)
    child = context.Process(target=spawn_tuned.scaled, args=(torch.ones(8),))  # the face as a target
    child.start()
    child.join(120)
    assert child.exitcode == 0
    files = sorted(p.name for p in (cache_dir / "scaled").iterdir())
    assert len([f for f in files if f.endswith(".json")]) == 3, files  # shapes 4, 6 and 8
    assert not [f for f in files if f.endswith((".tmp", ".lock"))], files


SCRIPT = '''
import multiprocessing, sys
import torch
from triton_dist.tune import autotune

@autotune([{"c": 2}, {"c": 3}], key_fn=lambda x, *a, **k: (tuple(x.shape),),
          do_bench=lambda fn, w, r: (fn(), [1.0] * r)[1])
def scaled(x, c):
    return x * c

def child(n):
    return float(scaled(torch.ones(n)).sum()), scaled.tuner._origins.get(((n,),), "")

if __name__ == "__main__":
    scaled(torch.ones(4))
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        for result in pool.map(child, [4, 5]):
            print(*result, sep="|")
'''


def test_a_function_tuned_in_the_script_run_as_main_reaches_spawned_children(cache_dir: Path, tmp_path: Path) -> None:
    """The child imports the script as ``__mp_main__``, not ``__main__``: the face still pickles by
    reference (pickle finds ``__main__.scaled`` there), and the entry of the parent's tuning is the
    child's (the module's name is not part of what names an entry)."""
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    four, five = done.stdout.strip().splitlines()
    assert four.startswith("8.0|loaded from the cache entry"), done.stdout
    assert five.startswith("10.0|tuned in this process"), done.stdout
