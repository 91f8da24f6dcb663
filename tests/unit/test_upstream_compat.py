"""Code written against upstream Triton-distributed's ``triton_dist.tune`` runs unchanged (issue 18 A).

The call sites below re-create upstream's own: its NVIDIA GEMM decorates ``matmul(a, b, config)``
with ``key_fn=lambda *args, **kwargs: (to_hashable(args[0]), to_hashable(args[1]))`` after
``from triton_dist.tune import to_hashable``; its AMD kernels write
``return triton_dist.tune.to_hashable(A), triton_dist.tune.to_hashable(B)`` in a ``key_fn(A, B,
*args, **kwargs)`` and read ``config["config"].kwargs`` / ``.num_stages`` in their ``prune_fn``.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

import triton_dist.tune
from triton_dist._store.files import key_repr
from triton_dist.errors import KeyFunctionError
from triton_dist.tune import autotune, to_hashable

from .helpers import INTERPRETED, entries, kernel_device

REPO = Path(__file__).resolve().parents[2]

# ------------------------------------------------------------------ to_hashable


def test_a_tensor_becomes_shape_stride_dtype_never_its_data():
    a = torch.randn(8, 4)
    b = torch.randn(8, 4)  # other data, other storage, same layout
    assert to_hashable(a) == ((8, 4), (4, 1), torch.float32)
    assert to_hashable(a) == to_hashable(b)
    assert hash(to_hashable(a)) == hash(to_hashable(b))
    text = repr(to_hashable(a))
    assert str(a.data_ptr()) not in text and str(b.data_ptr()) not in text
    assert key_repr(to_hashable(a)) == text  # a stable repr: it can name a cache file


def test_layout_and_dtype_are_part_of_the_key():
    a = torch.randn(8, 4)
    assert to_hashable(a.t()) == ((4, 8), (1, 4), torch.float32)  # a transposed view: new strides
    assert to_hashable(a.t()) != to_hashable(a.t().contiguous())
    assert to_hashable(a.half()) != to_hashable(a)
    assert to_hashable(a[:, :2]) == ((8, 2), (4, 1), torch.float32)  # a slice keeps the parent's strides


def test_containers_convert_recursively_and_plain_values_stay():
    a, b = torch.zeros(2, 3), torch.ones(3)
    key = to_hashable([a, (b, 4), {"split_k": 2, "algo": [1, 2]}, "bf16", None, 2.5, torch.float16])
    assert key == (
        ((2, 3), (3, 1), torch.float32),
        (((3,), (1,), torch.float32), 4),
        (("algo", (1, 2)), ("split_k", 2)),
        "bf16", None, 2.5, torch.float16,
    )
    hash(key)
    # equal dicts and sets give equal keys whatever their insertion order
    assert to_hashable({"x": 1, "y": a}) == to_hashable({"y": torch.empty(2, 3), "x": 1})
    assert to_hashable({"b", "a", "c"}) == ("a", "b", "c") == to_hashable(frozenset("cab"))
    for plain in (7, "s", None, 1.5, torch.bfloat16, torch.device("cpu")):
        assert to_hashable(plain) is plain
    assert pickle.loads(pickle.dumps(key)) == key  # crosses Ray and process boundaries


def test_upstream_import_paths():
    assert triton_dist.tune.to_hashable is to_hashable
    assert "to_hashable" in triton_dist.tune.__all__


# ------------------------------------------------------------------ an upstream GEMM, as written there

@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                   stride_cm, stride_cn, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr,
                   BLOCK_SIZE_K: tl.constexpr):
    # Triton's tutorial matmul, without the grouped ordering
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    pid_m = pid // num_pid_n
    pid_n = pid % num_pid_n
    offs_am = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_bn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=(offs_am[:, None] < M) & (offs_k[None, :] < K - k * BLOCK_SIZE_K), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_SIZE_K) & (offs_bn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c_ptrs = c_ptr + offs_am[:, None] * stride_cm + offs_bn[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=(offs_am[:, None] < M) & (offs_bn[None, :] < N))


def _configs():
    return [triton.Config({"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 16}, num_stages=s, num_warps=4)
            for m in (16, 32) for s in (2, 3)]


def prune_fn(config, A, B, *args, **kwargs):  # upstream's shape: reads the triton.Config it is given
    gemm_config: triton.Config = config["config"]
    return gemm_config.kwargs["BLOCK_SIZE_M"] <= A.shape[0] and gemm_config.num_stages >= 2


LAUNCHES: list[int] = []


@triton_dist.tune.autotune(
    config_space=[{"config": c} for c in _configs()],
    key_fn=lambda *args, **kwargs: (to_hashable(args[0]), to_hashable(args[1])),
    prune_fn=prune_fn,
    n_warmup=1, n_repeat=2,  # the interpreter is slow; upstream uses the defaults
    # the seed's eager schedule, whose launches the test counts, on every backend (a GPU's default
    # replays captured graphs after a compile pass: other counts)
    graphs=False, compile_workers=1,
)
def matmul(a, b, config: triton.Config):
    M, K = a.shape
    K, N = b.shape
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    grid = lambda META: (triton.cdiv(M, META["BLOCK_SIZE_M"]) * triton.cdiv(N, META["BLOCK_SIZE_N"]),)  # noqa: E731
    _matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                         c.stride(0), c.stride(1), **config.all_kwargs())
    LAUNCHES.append(config.kwargs["BLOCK_SIZE_M"])
    return c


def test_an_upstream_gemm_tunes_caches_and_keys_by_layout(cache_dir):
    LAUNCHES.clear()
    dev = kernel_device()
    # tl.dot rounds fp32 operands to TF32 on a GPU (the interpreter computes in fp32)
    tol = {"rtol": 1e-4, "atol": 1e-4} if INTERPRETED else {"rtol": 1e-2, "atol": 1e-2}
    a, b = torch.randn(32, 16, device=dev), torch.randn(16, 32, device=dev)
    torch.testing.assert_close(matmul(a, b), a @ b, **tol)
    tuned_launches = len(LAUNCHES)
    assert tuned_launches == 4 * 3 + 1  # 4 configs kept, 1 warm-up + 2 timed runs each, then the call

    # new tensors, same layout: the same key, nothing measured
    c, d = torch.randn(32, 16, device=dev), torch.randn(16, 32, device=dev)
    torch.testing.assert_close(matmul(c, d), c @ d, **tol)
    assert len(LAUNCHES) == tuned_launches + 1
    (path,) = entries(cache_dir, "matmul")
    entry = json.loads(path.read_text())
    assert entry["key"] == repr((((32, 16), (16, 1), torch.float32), ((16, 32), (32, 1), torch.float32)))
    assert str(a.data_ptr()) not in entry["key"]

    # a transposed operand is another layout: another key, tuned again, and still correct
    bt = torch.randn(32, 16, device=dev).t()
    torch.testing.assert_close(matmul(a, bt), a @ bt, **tol)
    assert len(entries(cache_dir, "matmul")) == 2
    # a 16-row A prunes the 32-row tiles: two configs measured
    before = len(LAUNCHES)
    matmul(torch.randn(16, 16, device=dev), b)
    assert len(LAUNCHES) - before == 2 * 3 + 1 and set(LAUNCHES[before:]) == {16}


# ------------------------------------------------------------------ key_fn that cannot take the call

def test_a_key_fn_without_the_calls_arguments_names_key_fn_function_and_arguments():
    calls = []

    def host(A, B, alpha, c):
        calls.append(c)
        return c

    narrow = autotune([{"c": 0}, {"c": 1}], key_fn=lambda A, B: (A, B))(host)
    with pytest.raises(KeyFunctionError) as info:
        narrow(1, 2, 3.0)
    text = str(info.value)
    assert "key_fn" in text and "host" in text
    assert "A, B, alpha" in text  # the call's arguments, by the function's names
    assert "*args, **kwargs" in text  # the fix
    assert isinstance(info.value, TypeError)  # callers catching TypeError still do
    assert isinstance(info.value.__cause__, TypeError)
    assert calls == []  # nothing ran


@pytest.mark.parametrize("controls", [{}, {"autotune_verbose": True}])
def test_a_keyword_the_key_fn_cannot_take_is_named(controls):
    def splitk(A, B, split_k=4, config=None):
        return config

    def key_fn(A, B, *args):  # upstream writes **kwargs too; this one forgot it
        return (A, B)

    tuned = autotune([{"config": 0}, {"config": 1}], key_fn=key_fn)(splitk)
    with pytest.raises(KeyFunctionError, match="split_k") as info:
        tuned(1, 2, split_k=8, **controls)
    assert "splitk" in str(info.value) and "A, B, split_k" in str(info.value)
    with pytest.raises(KeyFunctionError, match="key_fn"):
        tuned.tune(1, 2, split_k=8)
    with pytest.raises(KeyFunctionError, match="key_fn"):
        tuned.best_config(1, 2, split_k=8)


def test_a_type_error_inside_key_fn_stays_the_users():
    def key_fn(x, *args, **kwargs):
        return len(x)  # TypeError for an int: the key_fn's own bug, shown as it is

    def host(x, c):
        return c

    tuned = autotune([{"c": 0}], key_fn=key_fn)(host)
    with pytest.raises(TypeError, match="has no len") as info:
        tuned(3)
    assert not isinstance(info.value, KeyFunctionError)


# ------------------------------------------------------------------ a host function that mutates its config

SPLITK_MODULE = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl

    import triton_dist.tune
    from triton_dist.tune import to_hashable

    LAUNCHED = []


    @triton.jit
    def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(y_ptr + offsets, 2.0 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


    def key_fn_splitk(A, *args, **kwargs):
        return to_hashable(A), kwargs.get("split_k"), kwargs.get("split_k_algo")


    @triton_dist.tune.autotune(
        config_space=[{"config": triton.Config({"BLOCK": b}, num_stages=3, num_warps=4)} for b in (32, 64, 128)],
        key_fn=key_fn_splitk, n_warmup=1, n_repeat=2)
    def splitk(A, split_k=4, split_k_algo=2, config=None):
        config.num_stages = 1  # what upstream's split-K GEMM does to the config it is given
        y = torch.empty_like(A)
        _scale[(triton.cdiv(A.numel(), config.kwargs["BLOCK"]),)](A, y, A.numel(), **config.all_kwargs())
        LAUNCHED.append(config.kwargs["BLOCK"])
        return y
''')

SPLITK_RUNNER = textwrap.dedent('''
    import json
    import warnings

    import torch

    import splitk_module

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x = torch.arange(256, dtype=torch.float32)
        ok = bool(torch.equal(splitk_module.splitk(x, split_k=4, split_k_algo=2), 2 * x))
    print(json.dumps({"ok": ok, "launched": splitk_module.LAUNCHED,
                      "warnings": [str(w.message) for w in caught]}))
''')


def _run_module(tmp_path, cache_dir):
    pythonpath = os.pathsep.join(filter(None, [str(tmp_path), str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "TRITON_DIST_AUTOTUNE_DIR": str(cache_dir), "PYTHONPATH": pythonpath,
           "PYTHONDONTWRITEBYTECODE": "1", "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, str(tmp_path / "runner.py")], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(300)
def test_a_host_function_that_mutates_its_config_hits_in_the_next_process(tmp_path, cache_dir):
    (tmp_path / "splitk_module.py").write_text(SPLITK_MODULE)
    (tmp_path / "runner.py").write_text(SPLITK_RUNNER)
    first = _run_module(tmp_path, cache_dir)
    assert first["ok"] and len(first["launched"]) == 3 * 3 + 1  # tuned: 3 configs x (1 + 2 runs), the call
    (path,) = entries(cache_dir, "splitk")
    entry = json.loads(path.read_text())
    # the entry records the configs as decorated (num_stages=3), not as the function left them
    assert {c["config"]["config"]["triton.Config"]["num_stages"] for c in entry["candidates"]} == {3}

    second = _run_module(tmp_path, cache_dir)
    assert second["ok"]
    assert second["launched"] == [first["launched"][-1]]  # a hit: only the real call, with the cached best
    assert not [w for w in second["warnings"] if "ignoring cache file" in w or "config_space" in w], second
    assert entries(cache_dir, "splitk") == [path]
