"""Editing a Triton kernel that the host function calls invalidates the host function's entries;
editing unrelated code in the same module does not."""

from __future__ import annotations

import importlib.util
import sys
import textwrap

MODULE = textwrap.dedent('''
    import triton
    import triton.language as tl

    from triton_dist.tune import autotune


    @triton.jit
    def kernel(x_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


    def unrelated():
        return 1


    @autotune(config_space=[{"BLOCK": 16}, {"BLOCK": 32}], key_fn=lambda x: (x.numel(),))
    def double(x, BLOCK):
        kernel[(triton.cdiv(x.numel(), BLOCK),)](x, x.numel(), BLOCK=BLOCK)
        return x
''')


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def test_kernel_edit_changes_the_source_hash(tmp_path):
    from triton_dist._store.fingerprint import source_hash

    path = tmp_path / "kmod.py"
    path.write_text(MODULE)
    base = source_hash(_load(path, "kmod_a").double.fn)
    path.write_text(MODULE.replace("def unrelated():\n    return 1", "def unrelated():\n    return 2"))
    assert source_hash(_load(path, "kmod_b").double.fn) == base
    path.write_text(MODULE.replace("* 2, mask", "* 3, mask"))
    assert source_hash(_load(path, "kmod_c").double.fn) != base
