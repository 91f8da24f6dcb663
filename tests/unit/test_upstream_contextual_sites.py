"""``contextual_autotune`` as upstream Triton-distributed's MoE code uses it, re-created in our own
words (ByteDance-Seed/Triton-distributed: python/triton_dist/test/nvidia/test_moe_reduce_ar.py,
test_ag_moe.py and python/triton_dist/layers/nvidia/tp_moe.py with ``autotune=True``):

    moe_reduce_ar.moe_grouped_gemm_kernel = triton.autotune(configs=configs, key=["M", "N", "K"])(
        moe_reduce_ar.moe_grouped_gemm_kernel)
    run_moe_reduce_ar = contextual_autotune(is_dist=True)(run_moe_reduce_ar)

The kernel module's host function launches the kernel, looked up by its global name at the call,
with the fixed config it was written for, ``**config.all_kwargs()``: the tuned symbols among them.
Upstream's contextual tuner launches every config with ``dict(kwargs, **config.all_kwargs())``, so
the tuned config's values replace the caller's. Here that call raised stock ``_bench``'s
``ValueError: Conflicting meta-parameters``. Also ``contextual_autotune(is_dist=True)(lambda:
_func())`` (tests/metax/test_ag_gemm_intra_node.py): a lambda of no arguments. Real kernels under
Triton's interpreter.
"""

from __future__ import annotations

import importlib
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import triton

from triton_dist.autotuner import contextual_autotune

from .helpers import kernel_device

MOE_MODULE = textwrap.dedent('''
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def grouped_gemm_kernel(x_ptr, y_ptr, meta_ptr, n, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
        mask = offsets < n
        tl.store(y_ptr + offsets, 2.0 * tl.load(x_ptr + offsets, mask=mask), mask=mask)
        if tl.program_id(0) == 0:  # what the launch was given
            tl.store(meta_ptr, BLOCK_SIZE_M)
            tl.store(meta_ptr + 1, BLOCK_SIZE_N)


    def get_auto_triton_config():
        return triton.Config({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32}, num_warps=8, num_stages=3)


    def run_moe(x, meta, config=None):
        config = config or get_auto_triton_config()
        y = torch.empty_like(x)
        grid = lambda META: (triton.cdiv(x.numel(), META["BLOCK_SIZE_N"]),)
        grouped_gemm_kernel[grid](x, y, meta, x.numel(), **config.all_kwargs())
        return y
''')


@pytest.fixture
def moe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "upstream_moe_kernels.py").write_text(MOE_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)  # the contextual log: ./.autotune_logs
    module = importlib.import_module("upstream_moe_kernels")
    yield module
    # (not monkeypatch.delitem: its undo put the module back, so the next test got the kernel this
    # one wrapped, an autotuner inside its own)
    sys.modules.pop("upstream_moe_kernels", None)


def test_a_kernel_wrapped_after_import_and_launched_with_its_fixed_config_takes_the_tuned_one(moe, tmp_path):
    dev = kernel_device()
    meta = torch.zeros(2, dtype=torch.int32, device=dev)
    x = torch.randn(300, device=dev)
    torch.testing.assert_close(moe.run_moe(x, meta), 2 * x)  # untuned: the fixed config
    assert meta.tolist() == [16, 32]

    configs = [triton.Config({"BLOCK_SIZE_N": bn}, num_stages=s, num_warps=4) for bn in (64, 128) for s in (2, 3)]
    moe.grouped_gemm_kernel = triton.autotune(configs=configs, key=["n"])(moe.grouped_gemm_kernel)
    run_moe = contextual_autotune(is_dist=False, n_repeat=2, n_warmup=1)(moe.run_moe)

    torch.testing.assert_close(run_moe(x, meta), 2 * x)
    kernel = moe.grouped_gemm_kernel
    ((key, best),) = kernel.cache.items()
    assert key[0] == 300 and best in configs
    # the kept run launched the tuned config's BLOCK_SIZE_N; the caller's BLOCK_SIZE_M, which no
    # config sets, stays
    assert meta.tolist() == [16, best.kwargs["BLOCK_SIZE_N"]]
    log = (tmp_path / ".autotune_logs" / "rank-0.log").read_text()
    assert "best-config" in log and "BLOCK_SIZE_N" in log  # the replaced parameter is named

    meta.zero_()
    torch.testing.assert_close(run_moe(x, meta), 2 * x)  # a call whose kernel's key is cached
    assert meta.tolist() == [16, best.kwargs["BLOCK_SIZE_N"]] and len(kernel.cache) == 1

    # contextual_autotune(is_dist=...)(lambda: _func()): a new size tunes a new key
    x2 = torch.randn(700, device=dev)
    func = contextual_autotune(is_dist=False, n_repeat=2, n_warmup=1)(lambda: moe.run_moe(x2, meta))
    torch.testing.assert_close(func(), 2 * x2)
    assert sorted(k[0] for k in kernel.cache) == [300, 700]
    assert meta.tolist() == [16, kernel.cache[next(k for k in kernel.cache if k[0] == 700)].kwargs["BLOCK_SIZE_N"]]


def test_a_caller_keyword_a_config_sets_reaches_a_perf_model_once_with_the_configs_value(moe, tmp_path):
    """Stock prune_configs calls ``perf_model(**nargs, **kwargs, **config.all_kwargs())``: the
    caller's BLOCK_SIZE_N and num_warps beside the config's were a TypeError ('got multiple values
    for keyword argument') before anything ran, where each launch was to take the config's value."""
    dev = kernel_device()
    meta = torch.zeros(2, dtype=torch.int32, device=dev)
    x = torch.randn(300, device=dev)
    seen: list[tuple[int, int]] = []

    def perf_model(**kw):  # the smaller BLOCK_SIZE_N, the faster (so the top 2 are the 64s)
        seen.append((kw["BLOCK_SIZE_N"], kw["num_warps"]))
        return kw["BLOCK_SIZE_N"]

    configs = [triton.Config({"BLOCK_SIZE_N": bn}, num_stages=s, num_warps=4) for bn in (64, 128) for s in (2, 3)]
    moe.grouped_gemm_kernel = triton.autotune(configs=configs, key=["n"], prune_configs_by={
        "perf_model": perf_model, "top_k": 2})(moe.grouped_gemm_kernel)
    run_moe = contextual_autotune(is_dist=False, n_repeat=2, n_warmup=1)(moe.run_moe)

    torch.testing.assert_close(run_moe(x, meta), 2 * x)
    ((key, best),) = moe.grouped_gemm_kernel.cache.items()
    assert best.kwargs["BLOCK_SIZE_N"] == 64 and meta.tolist() == [16, 64]
    assert sorted(seen) == [(64, 4), (64, 4), (128, 4), (128, 4)]  # the configs' values, not the caller's 32 / 8


def test_a_kernel_with_one_config_or_a_key_already_tuned_takes_the_configs_value_where_undecorated_code_raises(
        moe, tmp_path):
    """The README's sentence (c08aba6): under ``contextual_autotune`` a meta-parameter the caller
    passes and a config sets takes the config's value at every launch, also where stock ``run``
    launches (a kernel with one config, a key already tuned); the same undecorated call raises
    stock Triton's ``ValueError`` when it tunes a key and its ``TypeError`` in those two cases."""
    dev = kernel_device()
    meta = torch.zeros(2, dtype=torch.int32, device=dev)
    x = torch.randn(300, device=dev)
    jit_kernel = moe.grouped_gemm_kernel

    moe.grouped_gemm_kernel = triton.autotune(configs=[triton.Config({"BLOCK_SIZE_N": 64}, num_warps=4)],
                                              key=["n"])(jit_kernel)
    with pytest.raises(TypeError, match="multiple values for keyword argument"):
        moe.run_moe(x, meta)  # undecorated: stock run launches **kwargs, **config.all_kwargs()
    run_moe = contextual_autotune(is_dist=False, n_repeat=2, n_warmup=1)(moe.run_moe)
    torch.testing.assert_close(run_moe(x, meta), 2 * x)
    assert meta.tolist() == [16, 64]  # the one config's BLOCK_SIZE_N, the caller's BLOCK_SIZE_M

    configs = [triton.Config({"BLOCK_SIZE_N": bn}, num_warps=4) for bn in (64, 128)]
    moe.grouped_gemm_kernel = kernel = triton.autotune(configs=configs, key=["n"])(jit_kernel)
    with pytest.raises(ValueError, match="Conflicting meta-parameters: BLOCK_SIZE_N"):
        moe.run_moe(x, meta)  # undecorated, tuning the key: stock _bench
    assert not kernel.cache
    meta.zero_()
    torch.testing.assert_close(run_moe(x, meta), 2 * x)  # tunes the key
    ((key, best),) = kernel.cache.items()
    with pytest.raises(TypeError, match="multiple values for keyword argument"):
        moe.run_moe(x, meta)  # undecorated, the key already tuned
    meta.zero_()
    torch.testing.assert_close(run_moe(x, meta), 2 * x)  # the key already tuned
    assert meta.tolist() == [16, best.kwargs["BLOCK_SIZE_N"]] and kernel.cache == {key: best}
