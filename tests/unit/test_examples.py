"""The examples run as scripts, as a new user would, and their campaign argument builders work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from examples import scale

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(180)


def _script(cache_dir, *argv):
    env = {**os.environ, "TRITON_DIST_AUTOTUNE_DIR": str(cache_dir)}
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=150)


def test_scale_script_runs_as_is_and_tunes_then_hits(cache_dir):
    done = _script(cache_dir, "examples/scale.py")
    assert done.returncode == 0, done.stderr
    assert "result matches 2.5 * x" in done.stdout
    assert "tuning" in done.stdout  # autotune_verbose=True shows the tuning
    assert len(list((cache_dir / "scale").glob("*.json"))) == 1
    again = _script(cache_dir, "examples/scale.py")
    assert again.returncode == 0, again.stderr
    assert "tuning" not in again.stdout  # a second process hits the cache
    assert "cache hit for key" in again.stdout  # and, verbose, says so (issue 18 item 11)


def test_gemm_script_runs_and_matches_torch_matmul(cache_dir):
    done = _script(cache_dir, "examples/gemm.py", "--m", "64", "--n", "48", "--k", "32")
    assert done.returncode == 0, done.stderr
    assert "result matches torch.matmul" in done.stdout
    assert len(list((cache_dir / "matmul").glob("*.json"))) == 1


def test_make_scale_args_builds_the_call_on_the_context_device(cache_dir):
    from triton_dist._backends import get_backend

    device = get_backend().device()
    ctx = SimpleNamespace(rank=0, world_size=1, device=device)
    args, kwargs = scale.make_scale_args({"n": 1024, "dtype": "float32"}, ctx)
    x, alpha = args
    assert kwargs == {} and x.shape == (1024,) and x.dtype == torch.float32 and x.device == device
    again, _ = scale.make_scale_args({"n": 1024, "dtype": "float32"}, SimpleNamespace(device=str(device)))
    torch.testing.assert_close(again[0], x)  # deterministic: every rank of a gang builds the same input
    torch.testing.assert_close(scale.scale(*args, **kwargs), alpha * x)
    assert scale.key_fn(*args) == ((1024,), "torch.float32")


def test_scale_prune_fn_is_the_seeds():
    def kept(n):
        return [scale.prune_fn(config, torch.randn(n), 1.0) for config in scale.configs()]

    assert kept(200) == [False] * 4  # so the seed's example needs n >= 256 (else: prune error)
    assert kept(300) == [True, True, False, False]
    assert kept(512) == [True] * 4
