"""A cached best that ``prune_fn`` no longer keeps (a tester, 2026-12-05).

The hit rule never asked ``prune_fn``: a process whose ``prune_fn`` rejects the cached best (a
tighter shared-memory budget, a config found to fail) took it from the disk and ran it, and a
process whose ``prune_fn`` keeps a config the entry had pruned never measured it, though it might
be the best. Now the first is a miss with a warning naming ``prune_fn``, the second measures the
configs the entry had pruned (reusing the others' timings), and a campaign's "already cached" and
``preflight`` ask the same question with the case's arguments.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from tests.cli.helpers import env_for

MODULE = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl

    from triton_dist.tune import autotune

    SPACE = [{"REP": 8}, {"REP": 1}, {"REP": 3}]  # REP launches: REP 1 is the fastest, then 3, then 8


    @triton.jit
    def add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


    def key_fn(x, *args, **kwargs):
        return (tuple(x.shape),)


    def prune(config, x, *args, **kwargs):
        return PRUNE


    @autotune(config_space=SPACE, key_fn=key_fn, prune_fn=prune, n_warmup=1, n_repeat=3)
    def host(x, REP):
        y = torch.empty_like(x)
        for _ in range(REP):
            add_one[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
        return y


    def make_args(case, ctx):
        return (torch.zeros(case["n"]),), {}


    if __name__ == "__main__":
        x = torch.zeros(128)
        host(x)
        print("BEST", host.best_config(x)["REP"])
''')


def _write(folder: Path, prune: str) -> None:
    (folder / "prunemod.py").write_text(MODULE.replace("return PRUNE", f"return {prune}"))


def _best(folder: Path, cache: Path) -> tuple[int, str]:
    env = env_for(cache, folder)  # the suite's environment for a fresh process
    done = subprocess.run([sys.executable, "prunemod.py"], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return int(done.stdout.split("BEST")[1]), done.stderr


@pytest.mark.timeout(600)
def test_a_cached_best_that_prune_fn_rejects_now_is_tuned_again(tmp_path, cache_dir):
    _write(tmp_path, "True")
    assert _best(tmp_path, cache_dir)[0] == 1
    _write(tmp_path, 'config["REP"] != 1')  # REP 1 no longer fits (a budget, a config found to fail)
    best, stderr = _best(tmp_path, cache_dir)
    assert best == 3, "the entry's best config ran although prune_fn rejects it"
    assert "prune_fn prunes the cached best config (config_space[1])" in stderr


@pytest.mark.timeout(600)
def test_a_config_the_entry_had_pruned_is_measured_when_prune_fn_keeps_it_now(tmp_path, cache_dir):
    _write(tmp_path, 'config["REP"] != 1')
    assert _best(tmp_path, cache_dir)[0] == 3
    _write(tmp_path, "True")
    assert _best(tmp_path, cache_dir)[0] == 1, "the config prune_fn keeps now was never measured"
    assert len(list((cache_dir / "host").glob("*.json"))) == 1  # the same entry, re-measured


def test_a_campaign_and_preflight_ask_prune_fn_as_inline_tuning_does(tmp_path, cache_dir, monkeypatch):
    import torch

    from ray_runner.preflight_node import check_node
    from ray_runner.worker import identify_case
    from triton_dist._store import decide as _decide
    from triton_dist.errors import TritonDistWarning

    _write(tmp_path, 'config["REP"] not in EXCLUDED')
    (tmp_path / "prunemod.py").write_text((tmp_path / "prunemod.py").read_text().replace(
        "SPACE = [", "EXCLUDED = ()\nSPACE = ["))
    monkeypatch.syspath_prepend(str(tmp_path))
    import prunemod

    x = torch.zeros(128)
    prunemod.host(x)
    assert prunemod.host.best_config(x) == {"REP": 1}
    case = ("prunemod:host", "prunemod:make_args", 1, {"n": 128})

    def campaign_hits() -> bool:
        ident = identify_case(prunemod.host, (x,), {}, 1)
        return _decide.decide(_decide.CallId.from_dict(ident), cache_dir, version_check=False, cache_only="off").hit

    def preflight_row() -> dict:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", TritonDistWarning)
            return check_node([case], str(cache_dir))["rows"][0]

    assert campaign_hits() and preflight_row()["hit"]
    monkeypatch.setattr(prunemod, "EXCLUDED", (1,))  # prune_fn rejects the cached best now
    assert not campaign_hits()  # a campaign tunes the case again rather than skip it as cached
    row = preflight_row()
    assert not row["hit"] and "prune_fn prunes the cached best config" in row["why"]
