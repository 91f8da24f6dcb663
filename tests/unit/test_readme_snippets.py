"""The README's Python snippets run as written. Each leaves a few names to the reader (the tensor
``x``, a process group ``tp_group``, the user's ``launch_kernels`` and ``model``, an autotuned
``scale`` that returns a tensor): the test supplies those, and only those, before the snippet's
own text, runs it in a fresh process on the CPU (Triton's interpreter, a one-rank gloo group) and
checks what its comments promise. A snippet added to the README without a set-up here fails the
count, so every snippet stays covered."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BLOCKS = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), re.S)

GROUP = """
import torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + STORE, rank=0, world_size=1)
"""

# what each snippet leaves to the reader (before it), and what the test then checks (after it)
SETUP = [
    (GROUP + "x = torch.randn(1024)\ntp_group = dist.new_group([0])\n",
     "assert y is None  # the snippet's host function is `...`\n"
     "assert scale.best_config(x, 2.5) in scale.config_space\n"
     "print('snippet done')\n"),
    (GROUP + """
import triton, triton.language as tl

@triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (128, 256)], key=["n"])
@triton.jit
def double(x_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)

def launch_kernels(x):
    y = x.clone()
    double[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](y, x.numel())
    return y
""",
     "x = torch.ones(1000)\n"
     "assert torch.equal(step(x), 2 * x)\n"
     "assert len(double.cache) == 1  # tuned inside the real run\n"
     "print('snippet done')\n"),
    ("""
import torch
from examples.scale import scale  # a tuned function that returns a tensor

class Model(torch.nn.Module):
    def forward(self, x):
        return scale_op(x, 2.5)

model = Model()
""",
     "for n in (4096, 1000):  # a new shape: a new key tuned at run time, no error\n"
     "    x = torch.randn(n)\n"
     "    torch.testing.assert_close(model(x), 2.5 * x)\n"
     "print('snippet done')\n"),
]


def test_every_python_snippet_of_the_readme_has_a_setup_here():
    assert len(BLOCKS) == len(SETUP), "a README snippet was added or removed: give it a set-up in SETUP"


@pytest.mark.parametrize("index", range(len(SETUP)))
def test_the_readme_python_snippet_runs(index, tmp_path, cache_dir):
    before, after = SETUP[index]
    source = f"STORE = {str(tmp_path / 'store')!r}\n" + before + BLOCKS[index] + after
    env = {**os.environ, "PYTHONPATH": str(REPO), "TRITON_DIST_AUTOTUNE_DIR": str(cache_dir),
           "TRITON_INTERPRET": "1", "TRITON_DIST_DEVICE": "cpu"}
    done = subprocess.run([sys.executable, "-c", source], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.rstrip().endswith("snippet done"), done.stdout[-2000:]
    if index == 0:  # "says how it tuned, or (once per key) that it hit and where"
        said = [line for line in done.stdout.splitlines() if line.startswith("[triton_dist]")]
        assert len(said) == 1 and "hit for key ((1024,), 'torch.float32')" in said[0], done.stdout
    if index == 1:  # "The log goes to ./.autotune_logs/rank-<rank>.log in the working directory"
        assert (tmp_path / ".autotune_logs" / "rank-0.log").stat().st_size > 0
