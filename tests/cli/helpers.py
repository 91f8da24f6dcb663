"""Real cache directories for the cache command-line tests: module files written to a tmp dir,
tuned in this process or in fresh Python processes, and the command line run both ways."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

#: a real Triton kernel (run by Triton's interpreter here) behind an autotuned host function;
#: BLOCK=100 fails (the host refuses it: tl.arange needs a power of two): a failed candidate
KERNEL_MODULE = '''
from collections import Counter

import torch
import triton
import triton.language as tl

from triton_dist.tune import autotune

launches = Counter()


@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


@autotune(config_space=[{"BLOCK": 32}, {"BLOCK": 100}, {"BLOCK": 64}],
          key_fn=lambda x: (tuple(x.shape), str(x.dtype)), n_warmup=0, n_repeat=1)
def scale(x, BLOCK):
    launches[BLOCK] += 1
    if triton.next_power_of_2(BLOCK) != BLOCK:  # a host-side check: a config that fails
        raise ValueError(f"BLOCK={BLOCK}: tl.arange needs a power of 2")
    out = torch.empty_like(x)
    _scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, out, x.numel(), BLOCK=BLOCK)
    return out
'''

#: a pure host function: cheap to tune, calls counted per config value
HOST_MODULE = '''
from collections import Counter

from triton_dist.tune import autotune

calls = Counter()


@autotune(config_space=SPACE, key_fn=lambda n: ("n", n), n_warmup=0, n_repeat=2)
def work(n, c):
    calls[c] += 1
    total = sum(range(n * (c + 1)))
    return c, total
'''


def write_module(directory: Path, name: str, source: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    importlib.invalidate_caches()
    return path


def host_module(space: Sequence[dict[str, Any]], body_extra: str = "") -> str:
    source = HOST_MODULE.replace("SPACE", repr(list(space)))
    if body_extra:
        source = source.replace("    calls[c] += 1\n", f"    calls[c] += 1\n    {body_extra}\n")
    return source


def env_for(root: Path, modules: Path | None = None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_DIST_")}
    env.update(TRITON_DIST_AUTOTUNE_DIR=str(root), TRITON_INTERPRET="1", TRITON_DIST_DEVICE="cpu")
    paths = [str(modules)] if modules else []
    env["PYTHONPATH"] = os.pathsep.join(paths + [str(REPO)])
    env.update(extra)
    return env


def run_python(code: str, root: Path, modules: Path, timeout: float = 180, **extra: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh Python process (its own imports, its own in-memory state)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env_for(root, modules, **extra),
                          cwd=modules, capture_output=True, text=True, timeout=timeout)


def run_cli(*args: str, root: Path, modules: Path | None = None, timeout: float = 180,
            **extra: str) -> subprocess.CompletedProcess:
    """``python -m triton_dist.cache ARGS`` in a fresh process."""
    return subprocess.run([sys.executable, "-m", "triton_dist.cache", *args],
                          env=env_for(root, modules, **extra), cwd=modules or root.parent,
                          capture_output=True, text=True, timeout=timeout)


def entries(root: Path, function: str) -> list[Path]:
    return sorted((root / function).glob("*.json"))


def load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())
