"""A Triton kernel held in a config (a tester, 2026-12-05).

A config may choose the kernel itself (``{"kernel": matmul_tma}``). Such a value was written by
its type alone under Triton's interpreter (configs that differ only in their kernel were "the
same on disk": tuned again in every process) and by its name on a device, so that an edit of the
cached best's kernel was a hit in the next process. A kernel is now written by its name and a
digest of its source (with what it uses): the next process hits, and after an edit of the kernel
it measures again.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli.helpers import env_for

MODULE = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl

    from triton_dist.tune import autotune


    @triton.jit
    def plain(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


    @triton.jit
    def slow(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        acc = tl.load(x_ptr + offs, mask=offs < n)
        for _ in tl.static_range(48):
            acc += tl.load(x_ptr + offs, mask=offs < n) * 0
        tl.store(y_ptr + offs, acc + 1, mask=offs < n)


    @autotune(config_space=SPACE, key_fn=lambda x, *a, **k: (x.numel(),), n_warmup=1, n_repeat=3)
    def host(x, kernel, BLOCK=64):
        y = torch.empty_like(x)
        kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK=BLOCK)
        return y


    if __name__ == "__main__":
        x = torch.zeros(128)
        print("SUM", float(host(x, autotune_verbose=True).sum()))
''')


def _run(folder: Path, cache: Path) -> str:
    env = env_for(cache, folder)  # the suite's environment for a fresh process
    done = subprocess.run([sys.executable, "kconfigs.py"], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


# configs told apart by their kernels alone (they were tuned in every process), and by another
# field too (an edit of the best's kernel was a hit)
SPACES = ['[{"kernel": slow}, {"kernel": plain}]', '[{"kernel": slow, "BLOCK": 64}, {"kernel": plain, "BLOCK": 32}]']


@pytest.mark.timeout(600)
@pytest.mark.parametrize("space", SPACES, ids=["kernels-only", "kernels-and-blocks"])
def test_a_config_that_holds_a_kernel_hits_until_the_kernel_is_edited(tmp_path, cache_dir, space):
    module = tmp_path / "kconfigs.py"
    source = MODULE.replace("@autotune(config_space=SPACE", f"@autotune(config_space={space}")
    module.write_text(source)
    first = _run(tmp_path, cache_dir)
    assert "tuning" in first and "best config for key (128,): 1" in first, first[-2000:]
    assert "SUM 128.0" in first
    again = _run(tmp_path, cache_dir)
    assert "cache hit for key (128,): config 1" in again, f"tuned again in a new process:\n{again[-2000:]}"
    module.write_text(source.replace("mask=offs < n) + 1, mask", "mask=offs < n) + 2, mask"))  # edit `plain`
    edited = _run(tmp_path, cache_dir)
    assert "SUM 256.0" in edited
    assert "cache hit" not in edited and "tuning" in edited, f"the edited kernel hit:\n{edited[-2000:]}"
