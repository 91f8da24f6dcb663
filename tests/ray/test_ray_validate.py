"""``validate`` imports what a campaign names; cases with one cache entry are one case (no Ray)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ray_runner import scheduler as sch
from ray_runner.claims import Claims
from ray_runner.spec import parse_campaign

REPO = Path(__file__).resolve().parents[2]
ADD = {"function": "tests.ray.world_targets:add", "args": "tests.ray.world_targets:make_add_args"}


def validate(tmp_path: Path, targets: list[dict], *flags: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"device": "cpu", "targets": targets}))
    return subprocess.run([sys.executable, "-m", "ray_runner", "validate", str(path), *flags], cwd=REPO,
                          capture_output=True, text=True, timeout=240)


def test_validate_names_every_target_that_cannot_be_used(tmp_path: Path) -> None:
    broken = [
        {**ADD, "cases": [{"n": 8}]},  # fine
        {"function": "tests.ray.no_such_module:add", "args": ADD["args"], "cases": [{"n": 8}]},
        {"function": "tests.ray.world_targets:add_kernel", "args": ADD["args"], "cases": [{"n": 8}]},
        {"function": "tests.ray.world_targets:nothing", "args": "tests.ray.world_targets:SPACE", "cases": [{"n": 8}]},
    ]
    proc = validate(tmp_path, broken)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    err = proc.stderr
    assert "cannot import module 'tests.ray.no_such_module'" in err
    assert "tests.ray.world_targets:add_kernel is a " in err and "not an autotune-decorated function" in err
    assert "has no attribute 'nothing'" in err
    assert "args tests.ray.world_targets:SPACE: not a callable" in err
    assert "tests.ray.world_targets:add " not in err and "valid campaign" not in proc.stdout

    offline = validate(tmp_path, broken, "--no-import")
    assert offline.returncode == 0 and "file only (--no-import)" in offline.stdout, offline.stderr
    good = validate(tmp_path, broken[:1])
    assert good.returncode == 0 and "targets and builders imported" in good.stdout, good.stderr


def test_validate_bounds_an_import_that_hangs(tmp_path: Path) -> None:
    (tmp_path / "hangs_at_import.py").write_text("import time\ntime.sleep(600)\n")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"device": "cpu", "targets": [
        {"function": "hangs_at_import:f", "args": "hangs_at_import:g", "cases": [{"n": 1}]}]}))
    proc = subprocess.run([sys.executable, "-m", "ray_runner", "validate", str(path), "--import-timeout", "3"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 2 and "did not finish within 3s" in proc.stderr, proc.stderr



def test_validate_imports_a_module_that_reads_its_rank_at_import_as_an_actor_does(tmp_path: Path) -> None:
    """torch.cuda.set_device(int(os.environ["LOCAL_RANK"])) at import, as training code does: the
    actors set RANK, WORLD_SIZE and LOCAL_RANK before importing it, validate did not (a tester)."""
    (tmp_path / "rank_at_import.py").write_text(
        "import os\nDEVICE = int(os.environ['LOCAL_RANK']) + int(os.environ['RANK'])\n"
        "WORLD = int(os.environ['WORLD_SIZE'])\n"
        "from triton_dist.tune import autotune\n\n\n"
        "@autotune([{'b': 1}, {'b': 2}], key_fn=lambda n: (n,))\n"
        "def f(n, b=None):\n    return n * b\n\n\n"
        "def make(case, device):\n    return (case['n'],), {}\n")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"device": "cpu", "targets": [
        {"function": "rank_at_import:f", "args": "rank_at_import:make", "cases": [{"n": 1}]}]}))
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    proc = subprocess.run([sys.executable, "-m", "ray_runner", "validate", str(path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=240, env={**env, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0 and "targets and builders imported" in proc.stdout, proc.stdout + proc.stderr


def test_one_case_per_cache_entry() -> None:
    campaign = parse_campaign({"device": "cpu", "targets": [
        {**ADD, "world_size": 1, "cases": [{"n": 8}, {"n": 8.0}]}, {**ADD, "world_size": 2, "cases": [{"n": 8}]}]})
    first, dup, other_world = (sch.CaseRun(spec) for spec in campaign.cases())
    ident = {"function": "add", "id": "abc", "key": "(8,)"}
    claims = Claims()
    assert claims.claim(first, ident) is None and claims.claim(first, ident) is None  # a retry keeps it
    merged = claims.claim(dup, ident)
    assert merged is not None and merged.kind == "merged" and merged.owner is first
    conflict = claims.claim(other_world, ident)
    assert conflict is not None and conflict.kind == "conflict" and "ignores the world size" in conflict.message
    first.status = sch.FAILED  # a failed owner's entry goes to the next case that has it
    assert claims.claim(dup, ident) is None


def test_validate_names_a_module_that_raises_while_it_is_imported(tmp_path: Path) -> None:
    (tmp_path / "raises_at_import.py").write_text("raise RuntimeError('module import side effect failure')\n")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"device": "cpu", "targets": [
        {"function": "raises_at_import:f", "args": "raises_at_import:g", "cases": [{"n": 1}]}]}))
    proc = subprocess.run([sys.executable, "-m", "ray_runner", "validate", str(path)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "PYTHONPATH": str(REPO)})
    # before: "error: module import side effect failure", naming neither the module nor the field
    assert proc.returncode == 2, proc.stderr
    assert ("function raises_at_import:f: importing module 'raises_at_import' raised RuntimeError: module import "
            "side effect failure") in proc.stderr, proc.stderr


@pytest.mark.parametrize(("flag", "value"), [("--import-timeout", "nan"), ("--import-timeout", "inf"),
                                             ("--import-timeout", "0"), ("--import-timeout", "-1"),
                                             ("--keep-gangs", "nan"), ("--keep-gangs", "1e308")])
def test_duration_flags_take_finite_seconds_only(tmp_path: Path, flag: str, value: str) -> None:
    command = "validate" if flag == "--import-timeout" else "run"
    proc = subprocess.run([sys.executable, "-m", "ray_runner", command, str(tmp_path / "c.yaml"), flag, value],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    # before: a traceback (nan, inf: exit 1), a timeout "within -1s", or nan accepted silently
    assert proc.returncode == 2 and f"argument {flag}: must be a finite number of seconds" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr

