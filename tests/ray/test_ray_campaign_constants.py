"""A campaign seeds, and a strict 2-rank job hits, host functions that read module constants as
users write them; an edit of one constant or of a ``pre_hook`` is re-tuned by the next campaign,
exactly where it changed, and preflight, ``cache why`` and the job's error say so.

The target module (written to a folder of its own, as a user's code) reads ``BLOCK = 128``,
``LOCAL_RANK = int(os.environ.get("LOCAL_RANK", 0))``, a value set in ``try/except``, a literal
and a computed constant imported from a config module, and runs a ``triton.Config`` whose
``pre_hook`` it calls; its ``key_fn`` reads ``torch.distributed.get_world_size()`` when
initialised and its ``prune_fn`` reads ``BLOCK``. The campaign's actors (no RANK/LOCAL_RANK, other
cwd and sys.path) tune 2-rank cases; a job of 2 gloo ranks (RANK/LOCAL_RANK/WORLD_SIZE set) runs
under ``TRITON_DIST_AUTOTUNE_CACHE_ONLY=strict``. Kernels run under Triton's interpreter.

What was wrong (2026-12-05): a module reading ``os.environ["LOCAL_RANK"]`` at import (torchrun
sets it) failed every case and every preflight pair with ``KeyError: 'LOCAL_RANK'`` (the case's
world set RANK and WORLD_SIZE only). With the targets importable on the actors only (the campaign's
``env`` PYTHONPATH, a worker image), a campaign run again after an edit resumed every case as
finished (its results stream's digest holds no file of a module the driver cannot find), so
nothing was re-tuned and the strict job missed every key of the edited function. With the
targets importable by the driver too, an edit of a settings module the ``key_fn`` reads (another
top-level module than the target's) left the digest as it was and the source hash too (key_fn is
not hashed): the cases resumed as finished, and the job asked for keys never seeded.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.launcher import agent_store
from tests.ray_local import local_ray

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]

CONFIG = textwrap.dedent('''
    """The job's settings module."""
    SCALE = 3
    SHIFT = 1 + 1
    GRAIN = 1
''')

TARGETS = textwrap.dedent('''
    import os

    import torch
    import torch.distributed as dist
    import triton
    import triton.language as tl

    from triton_dist.tune import autotune
    from usercfg import GRAIN, SCALE, SHIFT

    BLOCK = 128
    LOCAL_RANK = int(os.environ.get("LOCAL_RANK", 0))
    DEVICE_INDEX = int(os.environ["LOCAL_RANK"])  # as torchrun sets it: torch.cuda.set_device(DEVICE_INDEX)
    try:
        RANK_SEEN = int(os.environ["RANK"])
    except KeyError:
        RANK_SEEN = 0

    CALLS = {}


    @triton.jit
    def affine_kernel(x_ptr, y_ptr, n, scale, shift, BLOCK_SIZE: tl.constexpr):
        offs = tl.program_id(0) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        m = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=m) * scale + shift, mask=m)


    def hook(nargs):
        nargs["x"].add_(0)


    def key_fn(x, *args, **kwargs):
        world = dist.get_world_size() if dist.is_initialized() else 1
        return (x.numel() // GRAIN, str(x.dtype), world)


    def prune_fn(config, x, *args, **kwargs):
        return config["cfg"].kwargs["BLOCK_SIZE"] <= BLOCK


    SPACE = [{"cfg": triton.Config({"BLOCK_SIZE": b}, pre_hook=hook)} for b in (32, 64, 256)]


    @autotune(config_space=SPACE, key_fn=key_fn, prune_fn=prune_fn, n_warmup=0, n_repeat=1)
    def affine(x, cfg):
        cfg.pre_hook({"x": x})
        block = cfg.kwargs["BLOCK_SIZE"]
        CALLS[block] = CALLS.get(block, 0) + 1
        assert LOCAL_RANK >= 0 and RANK_SEEN >= 0 and DEVICE_INDEX >= 0  # where a rank would pick its device
        y = torch.empty_like(x)
        affine_kernel[(triton.cdiv(x.numel(), block),)](x, y, x.numel(), SCALE, SHIFT, BLOCK_SIZE=block)
        return y


    @autotune(config_space=[{"BLOCK_SIZE": 32}, {"BLOCK_SIZE": 64}], key_fn=key_fn, n_warmup=0, n_repeat=1)
    def plain(x, *, BLOCK_SIZE):
        assert BLOCK_SIZE <= BLOCK
        CALLS[BLOCK_SIZE] = CALLS.get(BLOCK_SIZE, 0) + 1
        y = torch.empty_like(x)
        affine_kernel[(triton.cdiv(x.numel(), BLOCK_SIZE),)](x, y, x.numel(), 2, 0, BLOCK_SIZE=BLOCK_SIZE)
        return y


    def make_args(case, ctx):
        return (torch.ones(int(case["n"])),), {}
''')

#: the job: every call of CALLS, in a 2-rank gloo world, strict cache-only; one JSON line
JOB = textwrap.dedent('''
    import json, os, sys
    from triton_dist import _tuning
    from triton_dist.dist import init_distributed

    def refuse(*args, **kwargs):
        raise AssertionError("a cache-only job measured candidates")

    _tuning.measure_candidates = refuse
    init_distributed(timeout_s=60)
    import torch
    import usertargets
    said = []
    for name, n in json.loads(sys.argv[1]):
        try:
            getattr(usertargets, name)(torch.ones(n))
            said.append({"call": [name, n], "calls": sum(usertargets.CALLS.values())})
        except Exception as exc:
            said.append({"call": [name, n], "error": f"{type(exc).__name__}: {exc}"})
        usertargets.CALLS.clear()
    print("JOB " + json.dumps(said), flush=True)
    os._exit(0)
''')

CALLS = [["affine", 64], ["affine", 200], ["plain", 64]]


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    with local_ray(2, "ray-runner-constants", resources={"slot": 2}, TRITON_INTERPRET="1") as address:
        yield address


def _write(tmp_path: Path) -> tuple[Path, Path]:
    """The user's modules (their own folder, on the actors' PYTHONPATH only) and the campaign file."""
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "usercfg.py").write_text(CONFIG)
    (mods / "usertargets.py").write_text(TARGETS)
    (tmp_path / "job.py").write_text(JOB)
    targets = [{"function": f"usertargets:{name}", "args": "usertargets:make_args", "world_size": 2,
                "cases": [{"n": n} for fn, n in CALLS if fn == name]} for name in ("affine", "plain")]
    campaign = {"name": "consts", "device": "cpu", "ray_resource": "slot", "retries": 0, "case_timeout_s": 120,
                "placement_timeout_s": 120, "report_dir": str(tmp_path / "reports"),
                "env": {"TRITON_INTERPRET": "1", "PYTHONPATH": f"{REPO}{os.pathsep}{mods}"}, "targets": targets}
    path = tmp_path / "consts.json"  # YAML is a superset of JSON
    path.write_text(json.dumps(campaign))
    return mods, path


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def _cli(tmp_path: Path, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """A command in a process of its own, from ``tmp_path`` (the driver cannot import the targets)."""
    done = subprocess.run([sys.executable, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
    return done


def _campaign(tmp_path: Path, address: str, campaign: Path, driver_path: str = str(REPO)) -> str:
    done = _cli(tmp_path, "-m", "ray_runner", "run", str(campaign), "--address", address, "--cache-dir",
                str(tmp_path / "cache"), "--no-progress", env={"PYTHONPATH": driver_path})
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return done.stdout.splitlines()[0]


def _preflight(tmp_path: Path, address: str, campaign: Path) -> tuple[int, str]:
    done = _cli(tmp_path, "-m", "ray_runner", "preflight", str(campaign), "--address", address, "--cache-dir",
                str(tmp_path / "cache"))
    return done.returncode, done.stdout


def _rank0(mods: Path) -> dict[str, str]:
    """The environment of the job's rank 0 (its modules read it at import), for ``cache why``."""
    return {"PYTHONPATH": f"{REPO}{os.pathsep}{mods}", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"}


def _why(tmp_path: Path, mods: Path, function: str, n: int) -> tuple[int, str]:
    done = _cli(tmp_path, "-m", "triton_dist.cache", "why", f"usertargets:{function}", repr((n, "torch.float32", 2)),
                "--dir", str(tmp_path / "cache"), "--world-size", "2", "--json", env=_rank0(mods))
    assert done.returncode in (0, 1), done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout)["reason"]


def _job(tmp_path: Path, mods: Path) -> list[dict[str, Any]]:
    """Both ranks' answers, call by call (they must agree); a rank that fails fails the test."""
    store, launch = agent_store()
    procs = [subprocess.Popen(
        [sys.executable, "job.py", json.dumps(CALLS)], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{mods}", "RANK": str(rank),
                        "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "TRITON_INTERPRET": "1",
                        "TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / "cache"),
                        "TRITON_DIST_AUTOTUNE_CACHE_ONLY": "strict", **launch}) for rank in range(2)]
    answers = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        lines = [line for line in out.splitlines() if line.startswith("JOB ")]
        assert proc.returncode == 0 and lines, err[-3000:]
        answers.append(json.loads(lines[0][4:]))
    assert answers[0] == answers[1], answers
    return answers[0]


def _hits(answers: list[dict[str, Any]]) -> dict[str, bool]:
    return {f"{a['call'][0]}/{a['call'][1]}": a.get("calls") == 1 for a in answers}


def test_a_campaign_seeds_what_a_strict_job_of_two_ranks_asks_and_retunes_what_an_edit_changed(
        ray_address: str, tmp_path: Path) -> None:
    mods, campaign = _write(tmp_path)
    assert _campaign(tmp_path, ray_address, campaign).startswith("campaign consts: 3 tuned")
    assert _hits(_job(tmp_path, mods)) == {"affine/64": True, "affine/200": True, "plain/64": True}
    code, said = _preflight(tmp_path, ray_address, campaign)
    assert code == 0 and "6/6 (case, rank) pairs hit" in said, said
    for function, n in CALLS:
        assert _why(tmp_path, mods, function, n)[0] == 0
    # outside the job's environment the module cannot be imported: said so (before: "Give the
    # import path of the autotuned function as module:attr", which it was)
    outside = _cli(tmp_path, "-m", "triton_dist.cache", "why", "usertargets:affine", "(64, 'torch.float32', 2)",
                   "--dir", str(tmp_path / "cache"), env={"PYTHONPATH": f"{REPO}{os.pathsep}{mods}"})
    assert "importing module 'usertargets' raised KeyError: 'LOCAL_RANK'" in outside.stderr, outside.stderr
    assert "in the environment of one of the job's ranks" in outside.stderr and "Give the" not in outside.stderr

    # a computed constant of the config module that affine reads (plain reads none of it)
    _edit(mods / "usercfg.py", "SHIFT = 1 + 1", "SHIFT = 1 + 2")
    code, said = _preflight(tmp_path, ray_address, campaign)
    misses = [line for line in said.splitlines() if line.strip().startswith("MISS ")]
    assert code == 1 and len(misses) == 4 and all("usertargets:affine" in m for m in misses), said
    # its "no cache entry" names no cause; the `why` it names does, on the key it computed there
    hint = said.split("python -m triton_dist.cache why ", 1)[1].split(" (on ", 1)[0]
    assert hint.startswith("usertargets:affine '(") and "--world-size 2" in hint, said
    asked = _cli(tmp_path, "-m", "triton_dist.cache", "why", *shlex.split(hint), env=_rank0(mods))
    assert asked.returncode == 1 and "SHIFT: usercfg.SHIFT = 1 + 1 then, usercfg.SHIFT = 1 + 2 now" in asked.stdout
    answers = _job(tmp_path, mods)
    assert _hits(answers) == {"affine/64": False, "affine/200": False, "plain/64": True}
    # the job and why name the constant, not "the function's source changed" (it did not)
    whys = [_why(tmp_path, mods, f, n) for f, n in CALLS]
    assert [code for code, _ in whys] == [1, 1, 0]
    for said in [a["error"] for a in answers[:2]] + [reason for _, reason in whys[:2]]:
        assert "a module constant the function reads changed since the entry was tuned (SHIFT: " \
               "usercfg.SHIFT = 1 + 1 then, usercfg.SHIFT = 1 + 2 now)" in said, said
    # the campaign run again tunes what changed, and only that (before: "3 tuned (3 of them
    # finished by an earlier run)", nothing tuned, and the job missed again)
    assert _campaign(tmp_path, ray_address, campaign).startswith("campaign consts: 1 cached, 2 tuned")
    assert _hits(_job(tmp_path, mods)) == {"affine/64": True, "affine/200": True, "plain/64": True}
    code, said = _preflight(tmp_path, ray_address, campaign)
    assert code == 0 and "6/6 (case, rank) pairs hit" in said, said

    # the pre_hook of affine's configs
    _edit(mods / "usertargets.py", 'nargs["x"].add_(0)', 'nargs["x"].add_(0).mul_(1)')
    answers = _job(tmp_path, mods)
    assert _hits(answers) == {"affine/64": False, "affine/200": False, "plain/64": True}
    for said in [a["error"] for a in answers[:2]] + [_why(tmp_path, mods, "affine", 64)[1]]:
        assert "cfg.pre_hook: " in said and "hook source sha256:" in said, said
    code, said = _preflight(tmp_path, ray_address, campaign)  # before: "no longer in config_space" alone
    misses = [line for line in said.splitlines() if line.strip().startswith("MISS ")]
    assert code == 1 and len(misses) == 4, said
    assert all("but for a function or Triton kernel it holds (a pre_hook), edited since" in m for m in misses), said
    assert _campaign(tmp_path, ray_address, campaign).startswith("campaign consts: 1 cached, 2 tuned")
    assert _hits(_job(tmp_path, mods)) == {"affine/64": True, "affine/200": True, "plain/64": True}


def test_an_edited_settings_module_that_key_fn_reads_is_tuned_again_by_a_driver_that_imports_the_targets(
        ray_address: str, tmp_path: Path) -> None:
    mods, campaign = _write(tmp_path)
    driver_path = f"{REPO}{os.pathsep}{mods}"  # the driver imports the targets (entry_serves checks them)
    assert _campaign(tmp_path, ray_address, campaign, driver_path).startswith("campaign consts: 3 tuned in")
    _edit(mods / "usercfg.py", "GRAIN = 1", "GRAIN = 2")  # every key changes; no byte of usertargets.py
    assert [_why(tmp_path, mods, f, n // 2)[0] for f, n in CALLS] == [1, 1, 1]
    # before: "3 tuned (3 of them finished by an earlier run)", and the job missed every call
    assert _campaign(tmp_path, ray_address, campaign, driver_path).startswith("campaign consts: 3 tuned in")
    assert _hits(_job(tmp_path, mods)) == {"affine/64": True, "affine/200": True, "plain/64": True}
    assert [_why(tmp_path, mods, f, n // 2)[0] for f, n in CALLS] == [0, 0, 0]
