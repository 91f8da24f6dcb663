"""Per-config timings reused when the config space grows (issue 6, item 4).

An entry tuned on configs A, B, C and a space now A, B, C, D: only D is measured, plus the old
best once more; the other timings come from the old entry (rules: docs/cache.md).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

import triton_dist

from .helpers import entries, host_module, load

S3 = [{"c": 0}, {"c": 1}, {"c": 2}]
S4 = S3 + [{"c": 3}]
RUNS = 2  # n_warmup=0 + n_repeat=2 in HOST_MODULE


def _measured_calls(calls, measured, best):
    """What the host function is called with: RUNS per measured config, the best once more."""
    return {c: RUNS * (c in measured) + (c == best) for c in range(4) if c in measured or c == best}


def test_growing_the_space_in_the_decorator_measures_only_the_new_config_and_the_old_best(
        cache_dir, import_module):
    v1 = import_module("grow_v1", host_module(S3))
    v1.work(30)
    assert v1.calls == _measured_calls(v1.calls, {0, 1, 2}, v1.work.best_config(30)["c"])
    (old_path,) = entries(cache_dir, "work")
    old = load(old_path)
    old_best = old["best"]["index"]

    v2 = import_module("grow_v2", host_module(S4))  # only the decorator differs
    v2.work(30)
    new_best = v2.work.best_config(30)["c"]
    assert dict(v2.calls) == _measured_calls(v2.calls, {3, old_best}, new_best)

    (new_path,) = [p for p in entries(cache_dir, "work") if p != old_path]
    new = load(new_path)
    assert new["source_hash"] != old["source_hash"] and new["body_hash"] == old["body_hash"]
    others = sorted({0, 1, 2} - {old_best})
    assert new["reused"]["from"] == old["id"]
    assert new["reused"]["indices"] == others and new["reused"]["best_remeasured"] == old_best
    assert [c["index"] for c in new["candidates"]] == [0, 1, 2, 3]
    assert all(c["time_ms"] is not None for c in new["candidates"])
    assert new["best"]["index"] == new_best
    # reused times keep the old ranking: scaled by one factor
    scale = new["reused"]["scale"]
    for i in others:
        assert new["candidates"][i]["time_ms"] == pytest.approx(old["candidates"][i]["time_ms"] * scale)

    # the new entry is a plain hit from now on
    v2_again = import_module("grow_v2_again", host_module(S4))
    v2_again.work(30)
    assert dict(v2_again.calls) == {new_best: 1}


LIST_MODULE = '''
from collections import Counter

from triton_dist.tune import autotune

calls = Counter()
SPACE = {space!r}


@autotune(config_space=SPACE, key_fn=lambda n: ("n", n), n_warmup=0, n_repeat=2)
def work(n, c):
    calls[c] += 1
    return c, sum(range(n * (c + 1)))
'''


def test_growing_a_module_level_space_reuses_the_same_entry_and_keeps_the_old_as_history(
        cache_dir, import_module):
    v1 = import_module("list_mod", LIST_MODULE.format(space=S3))
    v1.work(20)
    (path,) = entries(cache_dir, "work")
    old = load(path)

    sys.modules.pop("list_mod")  # the module edited (another module's function of one name is said)
    v2 = import_module("list_mod", LIST_MODULE.format(space=S4))  # same source hash: same entry id
    v2.work(20)
    new_best = v2.work.best_config(20)["c"]
    assert dict(v2.calls) == _measured_calls(v2.calls, {3, old["best"]["index"]}, new_best)
    assert entries(cache_dir, "work") == [path]
    new = load(path)
    assert new["id"] == old["id"] and new["reused"]["from"] == old["id"]
    history = sorted((cache_dir / "work" / "history").glob("*.json"))
    assert len(history) == 1 and load(history[0])["created"] == old["created"]


def test_a_changed_body_measures_every_config(cache_dir, import_module):
    import_module("body_v1", host_module(S3)).work(25)
    v2 = import_module("body_v2", host_module(S4, body_extra="n = n + 0"))
    v2.work(25)
    best = v2.work.best_config(25)["c"]
    assert dict(v2.calls) == _measured_calls(v2.calls, {0, 1, 2, 3}, best)
    assert all("reused" not in load(p) for p in entries(cache_dir, "work"))


def test_timings_measured_otherwise_are_not_reused(cache_dir, import_module):
    import_module("runs_v1", host_module(S3)).work(25)
    source = host_module(S4).replace("n_repeat=2", "n_repeat=3")
    v2 = import_module("runs_v2", source)
    v2.work(25)
    best = v2.work.best_config(25)["c"]
    assert dict(v2.calls) == {c: 3 + (c == best) for c in range(4)}


def test_timings_of_another_measuring_code_are_not_reused(cache_dir, import_module, modules, tmp_path):
    """Every triton_dist records version 0.1.0: an entry measured by a commit whose measuring code
    differs (here the CPU timer of a copy of the package, in another process, returning
    microseconds) had its timings reused by this one; the measurement's method tells them apart."""
    from .helpers import run_python, write_module

    old_code = tmp_path / "old_code"
    shutil.copytree(Path(triton_dist.__file__).parent, old_code / "triton_dist",
                    ignore=shutil.ignore_patterns("__pycache__"))
    timer = old_code / "triton_dist" / "_backends" / "cpu.py"
    text = timer.read_text()
    assert "times.append((clock() - start) / 1e6)" in text
    timer.write_text(text.replace("times.append((clock() - start) / 1e6)", "times.append((clock() - start) / 1e3)"))
    write_module(modules, "method_v1", host_module(S3))
    old = run_python("import triton_dist, method_v1; method_v1.work(25); print(triton_dist.__file__)",
                     cache_dir, modules, PYTHONPATH=os.pathsep.join([str(modules), str(old_code)]))
    assert old.returncode == 0 and old.stdout.strip() == str(old_code / "triton_dist" / "__init__.py"), old.stderr
    (old_path,) = entries(cache_dir, "work")

    v2 = import_module("method_v2", host_module(S4))  # only the decorator differs: reusable but for the code
    v2.work(25)
    best = v2.work.best_config(25)["c"]
    assert dict(v2.calls) == {c: RUNS + (c == best) for c in range(4)}  # every config measured
    (new_path,) = [p for p in entries(cache_dir, "work") if p != old_path]
    new, before = load(new_path), load(old_path)
    assert "reused" not in new and new["measurement"]["method"] != before["measurement"]["method"]
    assert {k: v for k, v in new["measurement"].items() if k != "method"} == \
        {k: v for k, v in before["measurement"].items() if k != "method"}


@pytest.mark.timeout(180)
def test_in_a_group_the_ranks_reuse_one_plan_or_measure_everything(tmp_path):
    from .group import run_two_ranks

    shared, private = tmp_path / "shared", tmp_path / "private"
    results = run_two_ranks(tmp_path, str(shared), str(private))
    assert all("ok" in r for r in results), results
    outs = [r["ok"] for r in results]
    old_best = outs[0]["seed_best"]
    for out in outs:
        best = out["same"]["best"]
        assert best == outs[0]["same"]["best"]  # every rank picks the same config
        expected = {c: RUNS * (c in (3, old_best)) + (c == best) for c in range(4)}
        assert out["same"]["calls"] == {str(c): n for c, n in expected.items() if n}  # JSON keys
        best = out["differ"]["best"]
        assert best == outs[0]["differ"]["best"]
        assert out["differ"]["calls"] == {str(c): RUNS + (c == best) for c in range(4)}
    (entry,) = [load(p) for p in entries(shared, "host") if load(p)["key"] == "('n', 10)"]
    assert entry["reused"]["best_remeasured"] == old_best and entry["world_size"] == 2


def test_a_kernel_edit_measures_every_config_a_decorator_edit_does_not(cache_dir, import_module):
    import torch

    from .helpers import KERNEL_MODULE

    x = torch.arange(128.0)
    import_module("kern_v1", KERNEL_MODULE).scale(x)
    (old_path,) = entries(cache_dir, "scale")
    old_best = load(old_path)["best"]["config"]["BLOCK"]
    grown = KERNEL_MODULE.replace('{"BLOCK": 64}]', '{"BLOCK": 64}, {"BLOCK": 16}]')
    v2 = import_module("kern_v2", grown)  # one more config in the decorator
    v2.scale(x)
    best = v2.scale.best_config(x)["BLOCK"]
    assert dict(v2.launches) == {b: (b in (16, old_best)) + (b == best) for b in (16, old_best, best)}
    v3 = import_module("kern_v3", grown.replace("* 2, mask=mask)", "* 3, mask=mask)"))  # the kernel
    v3.scale(x)
    best = v3.scale.best_config(x)["BLOCK"]
    assert dict(v3.launches) == {b: 1 + (b == best) for b in (32, 100, 64, 16)}
    assert len(entries(cache_dir, "scale")) == 3
