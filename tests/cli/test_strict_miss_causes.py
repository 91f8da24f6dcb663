"""A production job in strict cache-only mode on a seeded root: after ONE change since the seeding,
the ``CacheMissError`` and ``cache why`` name the actual cause and a fix that helps.

Each test seeds a root in one process (a host function over a real Triton kernel, run by Triton's
interpreter, with a ``triton.Config`` pre_hook and a ``prune_fn``), changes one thing, runs the
job with ``TRITON_DIST_AUTOTUNE_CACHE_ONLY=strict`` in another process and asks ``why`` in a
third. What was wrong before (a tester, 2026-12-07):

- an edited ``pre_hook`` was "the entry's best config ... is no longer in config_space", its
  text cut before the hook: the operator, whose space was unchanged, was not told what changed;
- ``key_fn`` returning ``True`` where it returned ``1`` was "the entry is for key (1, ...)" with
  no word that the two are one key of two types, nor of the fix (one type from key_fn);
- an entry seeded under ``TRITON_DIST_HARDWARE_OVERRIDE`` and read without it named no field;
- a typo in the cache root was "no cache entries for function 'fn' under ROOT", as for a root
  seeded with other functions, not that ROOT does not exist (next to the seeded one);
- an edited ``prune_fn`` rejecting the cached best: the error said to check with ``why``, whose
  verdict was a plain HIT (``why`` cannot ask prune_fn);
- a grown space, which a cache-only job serves from the entry, was a MISS in ``why`` without a
  word that the job itself hits.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

from .helpers import run_cli, run_python, write_module

MODULE = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl

    from triton_dist.tune import autotune


    @triton.jit
    def kern(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2, mask=m)


    def hook(nargs):
        nargs["x"].add_(0)


    def key_fn(x, *args, **kwargs):
        return (int(x.numel() > 100), str(x.dtype))


    def prune_fn(config, x, *args, **kwargs):
        return config["cfg"].kwargs["BLOCK"] <= 128


    SPACE = [{"cfg": triton.Config({"BLOCK": b}, pre_hook=hook)} for b in (32, 64)]


    @autotune(config_space=SPACE, key_fn=key_fn, prune_fn=prune_fn, n_warmup=0, n_repeat=1)
    def smiss(x, cfg):
        cfg.pre_hook({"x": x})
        y = torch.empty_like(x)
        kern[(triton.cdiv(x.numel(), cfg.kwargs["BLOCK"]),)](x, y, x.numel(), BLOCK=cfg.kwargs["BLOCK"])
        return y
''')

JOB = '''
    import torch
    import smissmod
    from triton_dist.errors import CacheMissError

    try:
        smissmod.smiss(torch.ones(256))
        print("RESULT hit")
    except CacheMissError as exc:
        print("RESULT " + str(exc))
'''

KEY = "(1, 'torch.float32')"


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A root seeded by one tuning process (the module as MODULE writes it)."""
    base = tmp_path_factory.mktemp("seeded")
    modules = write_module(base / "mods", "smissmod", MODULE).parent
    done = run_python(JOB, base / "cache", modules)
    assert "RESULT hit" in done.stdout, done.stderr[-3000:]
    return base / "cache"


def _setup(tmp_path: Path, seeded: Path, source: str = MODULE) -> tuple[Path, Path]:
    root = tmp_path / "cache"
    shutil.copytree(seeded, root)
    return root, write_module(tmp_path / "mods", "smissmod", source).parent


def _job(root: Path, modules: Path, **env: str) -> str:
    done = run_python(JOB, root, modules, TRITON_DIST_AUTOTUNE_CACHE_ONLY="strict", **env)
    assert "RESULT " in done.stdout, done.stderr[-3000:]
    return done.stdout.split("RESULT ", 1)[1]


def _why(root: Path, modules: Path, key: str = KEY, **env: str) -> subprocess.CompletedProcess:
    return run_cli("why", "smissmod:smiss", key, "--json", root=root, modules=modules, **env)


def test_an_edited_pre_hook_is_named_not_a_changed_space(tmp_path, seeded):
    root, modules = _setup(tmp_path, seeded, MODULE.replace('nargs["x"].add_(0)', 'nargs["x"].add_(0).mul_(1)'))
    error = _job(root, modules)
    why = _why(root, modules)
    assert why.returncode == 1
    for said in (error, json.loads(why.stdout)["reason"]):
        assert "cfg.pre_hook: " in said and "hook source sha256:" in said, said
        assert "the same function, its source or what it uses edited since" in said


def test_key_fn_returning_another_type_of_an_equal_key_is_named(tmp_path, seeded):
    root, modules = _setup(tmp_path, seeded, MODULE.replace("(int(x.numel() > 100)", "(bool(x.numel() > 100)"))
    error = _job(root, modules)
    why = _why(root, modules, "(True, 'torch.float32')")
    assert why.returncode == 1
    for said in (error, json.loads(why.stdout)["reason"]):
        assert "the entry is for key (1, 'torch.float32')" in said
        assert "key_fn returns another type than when the entry was tuned" in said, said


def test_an_entry_seeded_under_a_hardware_override_names_it_when_read_without(tmp_path):
    modules = write_module(tmp_path / "mods", "smissmod", MODULE).parent
    root = tmp_path / "cache"
    seeding = run_python(JOB, root, modules, TRITON_DIST_HARDWARE_OVERRIDE="node-kind-a")
    assert "RESULT hit" in seeding.stdout, seeding.stderr[-3000:]
    error = _job(root, modules)
    why = _why(root, modules)
    assert why.returncode == 1
    for said in (error, json.loads(why.stdout)["reason"]):
        assert "differs in hardware" in said and "override: 'node-kind-a' -> None" in said, said


def test_a_typo_in_the_cache_root_says_it_does_not_exist_and_names_the_root_beside_it(tmp_path, seeded):
    root, modules = _setup(tmp_path, seeded)
    typo = tmp_path / "cahce"
    error = _job(typo, modules)
    why = _why(typo, modules)
    assert why.returncode == 1 and not typo.exists()
    for said in (error, json.loads(why.stdout)["reason"]):
        assert f"{typo} does not exist" in said and f"similar names beside it: {root}" in said, said


def test_a_prune_fn_rejecting_the_cached_best_is_not_sent_to_a_why_that_says_hit(tmp_path, seeded):
    root, modules = _setup(tmp_path, seeded, MODULE.replace("<= 128", "<= 16 or config['cfg'].kwargs['BLOCK'] == 32"))
    best = json.loads(next(root.glob("smiss/*.json")).read_text())["best"]["config"]["cfg"]["triton.Config"]
    if best["kwargs"]["dict"] == [["BLOCK", 32]]:  # the prune must reject the cached best
        write_module(modules, "smissmod", MODULE.replace("<= 128", "<= 16 or config['cfg'].kwargs['BLOCK'] == 64"))
    error = _job(root, modules)
    assert "prune_fn prunes the cached best config" in error
    assert "does not ask prune_fn" in error and "ray_runner preflight" in error, error
    why = _why(root, modules)
    said = json.loads(why.stdout)
    assert said["verdict"] == "hit"  # it cannot ask prune_fn: a hit, and says on what condition
    assert "cannot ask prune_fn" in said["reason"], said["reason"]


def test_a_grown_space_is_a_miss_for_a_tuning_job_and_why_says_a_cache_only_job_hits(tmp_path, seeded):
    root, modules = _setup(tmp_path, seeded, MODULE.replace("(32, 64)]", "(32, 64, 16)]"))  # a module-level space
    assert _job(root, modules) == "hit\n"
    why = _why(root, modules)
    assert why.returncode == 1
    assert "a cache-only job (TRITON_DIST_AUTOTUNE_CACHE_ONLY=1 or strict) uses the entry's best instead, " \
           "a hit there" in json.loads(why.stdout)["reason"]
    assert _why(root, modules, TRITON_DIST_AUTOTUNE_CACHE_ONLY="strict").returncode == 0
