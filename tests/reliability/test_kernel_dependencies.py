"""What a host function's kernels depend on, across processes (a tester, 2026-12-05).

The source hash counted the kernels a host function names as globals, by their own source only.
A second process, after an edit of what such a kernel depends on, hit the first one's entry: a
config tuned for code that no longer exists. The edits that did so: a ``@triton.jit`` helper the
kernel calls, a ``tl.constexpr`` global the kernel reads, and a kernel the host reaches as an
attribute — of an imported module (``helpers.add_one``), of a class (``Ops.kern``), of the
method's own ``self`` (``self.kern``). Each now names another entry; an unedited host still hits.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.cli.helpers import env_for

HELPERS = textwrap.dedent('''
    import triton
    import triton.language as tl


    @triton.jit
    def add_one(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)
''')

OPS = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl

    from kdeps import helpers
    from triton_dist.tune import autotune

    ADD: tl.constexpr = tl.constexpr(1)
    SPACE = [{"BLOCK": 64}, {"BLOCK": 128}]


    def key_fn(*args, **kwargs):
        x = args[-1]
        return (tuple(x.shape), str(x.dtype))


    @triton.jit
    def step(v):
        return v + 1


    @triton.jit
    def kern_helper(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, step(tl.load(x_ptr + offs, mask=offs < n)), mask=offs < n)


    @triton.jit
    def kern_constexpr(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + ADD, mask=offs < n)


    @triton.jit
    def kern_plain(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)


    class Ops:
        @staticmethod
        @triton.jit
        def kern(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)  # Ops


    def launch(kernel, x, BLOCK):
        y = torch.empty_like(x)
        kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK=BLOCK)
        return y


    @autotune(config_space=SPACE, key_fn=key_fn, n_warmup=0, n_repeat=1)
    def via_helper(x, BLOCK):
        return launch(kern_helper, x, BLOCK)


    @autotune(config_space=SPACE, key_fn=key_fn, n_warmup=0, n_repeat=1)
    def via_constexpr(x, BLOCK):
        return launch(kern_constexpr, x, BLOCK)


    @autotune(config_space=SPACE, key_fn=key_fn, n_warmup=0, n_repeat=1)
    def via_module(x, BLOCK):
        return launch(helpers.add_one, x, BLOCK)


    @autotune(config_space=SPACE, key_fn=key_fn, n_warmup=0, n_repeat=1)
    def via_class(x, BLOCK):
        return launch(Ops.kern, x, BLOCK)


    @autotune(config_space=SPACE, key_fn=key_fn, n_warmup=0, n_repeat=1)
    def unedited(x, BLOCK):
        return launch(kern_plain, x, BLOCK)


    class Layer:
        @triton.jit
        def kern(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
            tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 1, mask=offs < n)  # Layer

        @autotune(config_space=SPACE, key_fn=key_fn, n_warmup=0, n_repeat=1)
        def via_self(self, x, BLOCK):
            return launch(self.kern, x, BLOCK)


    if __name__ == "__main__":
        x = torch.arange(200, dtype=torch.float32)
        for name, fn in [("via_helper", via_helper), ("via_constexpr", via_constexpr), ("via_module", via_module),
                         ("via_class", via_class), ("unedited", unedited), ("via_self", Layer().via_self)]:
            print(name, float(fn(x).sum()))
''')

# each edit changes what its host function computes (+1 becomes +2); "unedited" keeps its kernel
EDITS = {
    "via_helper": ("ops.py", "    return v + 1", "    return v + 2"),
    "via_constexpr": ("ops.py", "tl.constexpr(1)", "tl.constexpr(2)"),
    "via_module": ("helpers.py", "n) + 1, mask", "n) + 2, mask"),
    "via_class": ("ops.py", "+ 1, mask=offs < n)  # Ops", "+ 2, mask=offs < n)  # Ops"),
    "via_self": ("ops.py", "+ 1, mask=offs < n)  # Layer", "+ 2, mask=offs < n)  # Layer"),
}


def _run(project: Path, cache: Path) -> dict[str, float]:
    env = env_for(cache, project)  # the suite's environment for a fresh process
    done = subprocess.run([sys.executable, "-m", "kdeps.ops"], cwd=project, env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return {name: float(value) for name, value in (line.split() for line in done.stdout.splitlines())}


@pytest.mark.timeout(600)
def test_an_edit_of_what_a_kernel_depends_on_is_a_miss_in_the_next_process(tmp_path, cache_dir):
    package = tmp_path / "kdeps"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text(HELPERS)
    (package / "ops.py").write_text(OPS)
    first = _run(tmp_path, cache_dir)
    assert set(first) == {*EDITS, "unedited"}
    for name, (file, old, new) in EDITS.items():
        text = (package / file).read_text()
        assert text.count(old) == 1, (name, old)
        (package / file).write_text(text.replace(old, new))
    second = _run(tmp_path, cache_dir)
    assert {name: second[name] - first[name] for name in EDITS} == dict.fromkeys(EDITS, 200)  # edits took effect
    # a second entry each: the edited code did not hit the entry tuned for the code before
    stale = [name for name in EDITS if len(list((cache_dir / name).glob("*.json"))) != 2]
    assert stale == []
    assert second["unedited"] == first["unedited"]
    assert len(list((cache_dir / "unedited").glob("*.json"))) == 1  # still a hit: nothing it uses changed
