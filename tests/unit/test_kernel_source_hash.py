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



def test_a_kernel_edit_changes_the_hash_through_a_wraps_decorator(tmp_path):
    """A ``functools.wraps`` decorator under ``@autotune`` (U15): the hash read the wrapper's code,
    which names no kernel, so an edited kernel kept its entries (source and body hash alike)."""
    from triton_dist._store.fingerprint import body_hash, source_hash

    wrapped = MODULE.replace("import triton\n", "import functools\n\nimport triton\n", 1).replace(
        "def unrelated():", "def logged(fn):\n    @functools.wraps(fn)\n    def wrapper(*args, **kwargs):\n"
        "        return fn(*args, **kwargs)\n    return wrapper\n\n\ndef unrelated():").replace(
        "def double(x, BLOCK):", "@logged\ndef double(x, BLOCK):")
    path = tmp_path / "kwrap.py"
    path.write_text(wrapped)
    base = _load(path, "kwrap_a").double.fn
    path.write_text(wrapped.replace("* 2, mask", "* 3, mask"))
    edited = _load(path, "kwrap_b").double.fn
    assert source_hash(edited) != source_hash(base)
    assert body_hash(edited) != body_hash(base) and body_hash(base) is not None


def test_the_source_hash_is_computed_once_per_function_object(tmp_path, monkeypatch):
    """Every new tuner of one function (a framework re-decorating it, each benchmark trial) reads
    its source once: the hash is kept per function object, as the body hash is; a function loaded
    again from an edited file is a new object and is hashed anew."""
    import inspect

    from triton_dist._store import fingerprint

    path = tmp_path / "kmod_once.py"
    path.write_text(MODULE)
    fn = _load(path, "kmod_once").double.fn
    reads = []
    real = inspect.getsource
    monkeypatch.setattr(inspect, "getsource", lambda obj: reads.append(obj) or real(obj))
    first = fingerprint.source_hash(fn)
    n = len(reads)
    assert n >= 1 and fingerprint.source_hash(fn) == first and len(reads) == n
    path.write_text(MODULE.replace("* 2", "* 3"))
    assert fingerprint.source_hash(_load(path, "kmod_once_b").double.fn) != first and len(reads) > n


def test_both_hashes_read_each_source_once_and_agree_in_either_order(tmp_path, monkeypatch):
    """The source hash, the body hash and the walk for kernels reached as attributes each read and
    tokenised the function's source (four reads of the host function's block, two of each kernel's:
    ~1.2 ms more of a first call since kernels count with what they use, 2026-12-05): one read per
    function object now, the parsed tree shared and never changed in place (the body hash leaves the
    decorators out of a copy: the walk reads them), so the order of the two hashes changes nothing."""
    import inspect

    from triton_dist._store import fingerprint

    path = tmp_path / "kmod_reads.py"
    path.write_text(MODULE)
    fn = _load(path, "kmod_reads_a").double.fn
    reads = []
    real = inspect.getsource
    monkeypatch.setattr(inspect, "getsource", lambda obj: reads.append(obj) or real(obj))
    body_first = (fingerprint.body_hash(fn), fingerprint.source_hash(fn))
    assert reads and len(reads) == len({id(obj) for obj in reads})  # each object read once
    other = _load(path, "kmod_reads_b").double.fn
    assert (fingerprint.body_hash(other), fingerprint.source_hash(other)) == body_first
    third = _load(path, "kmod_reads_c").double.fn
    assert fingerprint.source_hash(third) == body_first[1] and fingerprint.body_hash(third) == body_first[0]
