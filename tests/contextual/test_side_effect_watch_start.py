"""What the side-effect warning can see in a call's first run (README, "Where it can see them it
says so"): the watch starts at the call's first launch of a kernel that tunes, so a module called
before that launch in the first run is watched from the next run on. Where the first run is the
only one thrown away (one run fills every launch slot), a training-mode BatchNorm called before
the kernel updates its statistics twice and nothing names it; called after the kernel, it is
named. The README said the warning names a training-mode BatchNorm's running statistics without
this limit. Real Triton kernels under the interpreter.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from triton_dist.autotuner import contextual_autotune

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


@pytest.fixture(autouse=True)
def in_tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # the log goes to ./.autotune_logs
    return tmp_path


@triton.jit
def _double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, 2.0 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


def _call(bn_first: bool) -> tuple[int, int, list[str]]:
    """One call that tunes; the BatchNorm before or after the kernel. Returns the runs, the
    statistics' update count and the side-effect warnings."""
    kernel = triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 64})], key=["n"])(_double)
    bn = torch.nn.BatchNorm1d(4).train()
    runs = []

    def double(x):
        y = torch.empty_like(x)
        kernel[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, y, x.numel())
        return y

    @contextual_autotune(n_warmup=1, n_repeat=1)
    def step(x):
        runs.append(1)
        out = bn(x) if bn_first else None
        for _ in range(4):  # 2 configs x (1 + 1) slots: the first run fills them all
            x = double(x)
        return bn(x) if out is None else out + x.sum()

    x = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        step(x)
    said = [str(w.message) for w in caught if "thrown away" in str(w.message)]
    return len(runs), int(bn.num_batches_tracked), said


def test_a_module_called_after_the_first_tuning_launch_is_named_in_the_first_run():
    runs, updates, said = _call(bn_first=False)
    assert (runs, updates) == (2, 2)  # one run thrown away, the statistics updated twice
    assert len(said) == 1 and "BatchNorm1d.running_mean" in said[0] and "run 1 " in said[0]


def test_a_module_called_before_the_first_tuning_launch_is_not_seen_in_the_first_run_as_the_readme_says():
    runs, updates, said = _call(bn_first=True)
    assert (runs, updates) == (2, 2)  # updated twice all the same
    assert said == []  # the watch began after its call in run 1, and run 2 was kept
    readme = " ".join(README.split())
    assert re.search(r"a module called before it is watched from the next run on", readme), \
        "README's side-effect paragraph should say what the first run does not show"
