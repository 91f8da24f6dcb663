"""Call sites of upstream Triton-distributed's ``triton_dist.tune``, re-created in our own words
(ByteDance-Seed/Triton-distributed, python/triton_dist/kernels/{amd,nvidia}/*.py and
python/triton_dist/tools/tune/tune_gemm.py), run against this project with real kernels under
Triton's interpreter. tests/unit/test_upstream_compat.py covers ``to_hashable``, the NVIDIA GEMM's
lambda ``key_fn`` and the split-K config mutation; this file covers the other shapes of call:

- AMD ``gemm_allreduce_op(ctx, A, B, gemm_config=DEFAULT_CONFIG)``: the context first, ``key_fn(ctx,
  A, B, *args, **kwargs)``, a default value on the config parameter, identical configs listed twice,
  ``ctx.phase``-style state on the context and a buffer the context owns returned;
- NVIDIA ``gemm_rs``: candidates of several fields (``{"gemm_config", "fuse_scatter", "persistent"}``)
  that the host also has defaults for, a ``prune_fn`` reading them and a helper with keyword-only
  defaults, ``ctx=`` passed by keyword;
- AMD ``ag_gemm_intra_node_op``: an out-parameter host that returns None, called with
  ``autotune=autotune`` from a wrapper;
- ``tools/tune/tune_gemm.py``: ``func.func_dir()``, ``load_autotune_data`` and
  ``pretty_triton_config_repr`` over the tuned entries.
"""

from __future__ import annotations

import dataclasses
import glob
import json
from pathlib import Path
from typing import Any

import pytest
import torch
import triton
import triton.language as tl

import triton_dist.tune
from triton_dist.errors import TritonDistWarning
from triton_dist.tune import to_hashable

from .helpers import entries, kernel_device


@triton.jit
def _twice(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, 2.0 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


def _launch(x: torch.Tensor, y: torch.Tensor, config: triton.Config) -> None:
    _twice[(triton.cdiv(x.numel(), config.kwargs["BLOCK"]),)](x, y, x.numel(), **config.all_kwargs())


DEFAULT = triton.Config({"BLOCK": 64}, num_warps=4, num_stages=2)


def _space() -> list[triton.Config]:
    # upstream's AMD list holds the same config twice; a stage count that prune_fn reads
    return [DEFAULT, triton.Config({"BLOCK": 64}, num_warps=4, num_stages=2),
            triton.Config({"BLOCK": 128}, num_warps=4, num_stages=3)]


@dataclasses.dataclass
class ARContext:
    """Upstream's context objects: world facts, lazily made buffers, a phase counter."""

    num_ranks: int
    phase: int = 0
    out: torch.Tensor | None = None
    seen: list[int] = dataclasses.field(default_factory=list)

    def get_gemm_out_buf(self, a: torch.Tensor) -> torch.Tensor:
        if self.out is None or self.out.shape != a.shape:
            self.out = torch.empty_like(a)
        return self.out


def _ctx_first_key(ctx, A, B, *args, **kwargs):
    return to_hashable(A), to_hashable(B), ctx.num_ranks


def _prune_by_shared_memory(config, ctx, A, *args, **kwargs):
    gemm_config: triton.Config = config["gemm_config"]
    stages = max(0, gemm_config.num_stages - 1)
    return stages * gemm_config.kwargs["BLOCK"] * A.itemsize < 1024


@triton_dist.tune.autotune(config_space=[{"gemm_config": c} for c in _space()], key_fn=_ctx_first_key,
                           prune_fn=_prune_by_shared_memory)
def gemm_allreduce_op(ctx: ARContext, A: torch.Tensor, B: torch.Tensor, gemm_config: triton.Config = DEFAULT):
    out = ctx.get_gemm_out_buf(A)
    ctx.phase += 2
    ctx.seen.append(gemm_config.kwargs["BLOCK"])
    _launch(A, out, gemm_config)
    return out


def test_a_context_first_key_fn_a_default_config_and_a_config_listed_twice(cache_dir):
    dev = kernel_device()
    ctx = ARContext(num_ranks=2)
    a, b = torch.randn(256, device=dev), torch.randn(256, device=dev)
    out = gemm_allreduce_op(ctx, a, b)
    assert out is ctx.out  # the context's buffer comes back, as the host returns it
    torch.testing.assert_close(out, 2 * a)
    # the 128-block config has 2 stages past the first: 2 * 128 * 4 bytes > 1024, pruned; the
    # 64-block config listed twice is measured twice (5 + 10 runs each), then the real call
    assert ctx.seen == [64] * 31 and ctx.phase == 62
    (path,) = entries(cache_dir, "gemm_allreduce_op")
    assert json.loads(path.read_text())["key"].endswith(", 2)")  # ctx.num_ranks is in the key

    ctx.seen.clear()
    torch.testing.assert_close(gemm_allreduce_op(ctx, a, b), 2 * a)
    assert ctx.seen == [64] and ctx.phase == 64  # a hit: one call

    other = ARContext(num_ranks=4)  # another world: another key, tuned again
    gemm_allreduce_op(other, a, b)
    assert len(entries(cache_dir, "gemm_allreduce_op")) == 2
    ctx.seen.clear()
    gemm_allreduce_op(ctx, a, b, autotune=False)
    assert ctx.seen == [64]


# ------------------------------------------------------------------ candidates of several fields


def _quantization_ok(config, A, B, *args, MAX_BLOCK=128, **kwargs):
    # upstream's prune_fn_by_quatization: keyword-only limits with defaults after *args
    return config["gemm_config"].kwargs["BLOCK"] <= MAX_BLOCK


def _gemm_rs_key(A, B, ctx, *args, **kwargs):
    return to_hashable(A), to_hashable(B), ctx.num_ranks


def _gemm_rs_prune(config, A, B, *args, **kwargs):
    gemm_config = config["gemm_config"].all_kwargs()
    if config["persistent"] and config["fuse_scatter"]:
        return False
    return gemm_config["num_stages"] >= 2 and _quantization_ok(config, A, B, *args, **kwargs, MAX_BLOCK=128)


GEMM_RS_CALLS: list[tuple[int, bool, bool, bool]] = []


@triton_dist.tune.autotune(
    config_space=[{"gemm_config": c, "fuse_scatter": f, "persistent": p}
                  for c in _space()[1:] for f in (True, False) for p in (True, False)],
    key_fn=_gemm_rs_key, prune_fn=_gemm_rs_prune)
def gemm_rs(A, B, ctx, gemm_config: triton.Config, persistent=True, fuse_scatter=False, reduce_st=False):
    GEMM_RS_CALLS.append((gemm_config.kwargs["BLOCK"], persistent, fuse_scatter, reduce_st))
    y = torch.empty_like(A)
    _launch(A, y, gemm_config)
    return y


def test_candidates_of_several_fields_that_the_host_has_defaults_for_and_ctx_by_keyword(cache_dir):
    GEMM_RS_CALLS.clear()
    dev = kernel_device()
    a, b = torch.randn(300, device=dev), torch.randn(300, device=dev)
    torch.testing.assert_close(gemm_rs(a, b, ctx=ARContext(2), reduce_st=True), 2 * a)
    # 8 candidates; persistent and fuse_scatter together are pruned: 6 measured, then the call
    tried = {(blk, p, f) for blk, p, f, _ in GEMM_RS_CALLS}
    assert tried == {(blk, p, f) for blk in (64, 128) for p in (True, False) for f in (True, False)
                     if not (p and f)}
    assert len(GEMM_RS_CALLS) == 6 * 15 + 1
    assert all(reduce_st for *_, reduce_st in GEMM_RS_CALLS)  # the business keyword reached every run
    best = GEMM_RS_CALLS[-1]
    GEMM_RS_CALLS.clear()
    gemm_rs(a, b, ctx=ARContext(2), reduce_st=True)
    assert GEMM_RS_CALLS == [best]  # a hit, with every field of the chosen candidate
    GEMM_RS_CALLS.clear()
    gemm_rs(a, b, ctx=ARContext(2), autotune=False)
    assert GEMM_RS_CALLS == [(64, True, True, False)]  # config_space[0], as listed (prune_fn not asked)


# ------------------------------------------------------------------ an out-parameter host returning None


@triton_dist.tune.autotune(config_space=[{"gemm_config": c} for c in _space()],
                           key_fn=lambda A, B, C, ctx, *args, **kwargs: (to_hashable(A), to_hashable(C)))
def ag_gemm_intra_node_op(A, B, C, ctx, gemm_config: triton.Config = DEFAULT, use_persistent_gemm=True,
                          use_fused_kernel=False, serial: bool = False):
    ctx.seen.append(gemm_config.kwargs["BLOCK"])
    _launch(A, C, gemm_config)


def ag_gemm_intra_node(A, B, ctx, use_fused_kernel=False, autotune: bool = True) -> torch.Tensor:
    C = torch.full_like(A, float("nan"))
    result = ag_gemm_intra_node_op(A, B, C, ctx, use_persistent_gemm=True, use_fused_kernel=use_fused_kernel,
                                   autotune=autotune)
    assert result is None
    return C


@pytest.mark.parametrize("autotune", [True, False])
def test_an_out_parameter_host_that_returns_none_called_with_autotune_from_a_wrapper(autotune, cache_dir):
    dev = kernel_device()
    ctx = ARContext(2)
    a = torch.randn(200, device=dev)
    torch.testing.assert_close(ag_gemm_intra_node(a, a, ctx, autotune=autotune), 2 * a)
    assert len(ctx.seen) == (3 * 15 + 1 if autotune else 1)
    assert len(entries(cache_dir, "ag_gemm_intra_node_op")) == (1 if autotune else 0)


# ------------------------------------------------------------------ tools/tune/tune_gemm.py over the entries

MATMUL_RUNS: list[Any] = []


@triton_dist.tune.autotune(
    config_space=[{"config": c} for c in _space()],
    key_fn=lambda *args, **kwargs: (to_hashable(args[0]), to_hashable(args[1])))
def matmul(a, b, config: triton.Config):
    MATMUL_RUNS.append(config)
    y = torch.empty_like(a)
    _launch(a, y, config)
    return y


def test_the_tune_gemm_tool_reads_the_tuned_entries():
    """tools/tune/tune_gemm.py: ``from triton_dist.tune import load_autotune_data,
    pretty_triton_config_repr``, then ``glob(f"{func.func_dir()}/*.json")`` and each file's key
    destructured into layouts and ``config`` read as ``(time, {"config": triton.Config})`` pairs.
    The import was an ImportError and ``func_dir`` an AttributeError."""
    from triton_dist.tune import load_autotune_data, pretty_triton_config_repr

    dev = kernel_device()
    for rows in (64, 96):
        matmul(torch.randn(rows, 4, device=dev), torch.randn(rows, 4, device=dev).half())
    files = sorted(glob.glob(f"{matmul.func_dir()}/*.json"))
    assert len(files) == 2
    seen = set()
    for file in files:
        data = load_autotune_data(file)
        (a_shape, a_stride, a_dtype), (b_shape, b_stride, b_dtype) = data["key"]
        assert a_dtype == torch.float32 and b_dtype == torch.float16 and a_dtype != b_dtype
        assert a_stride == (4, 1) and b_shape[1] == 4
        seen.add(a_shape[0])
        assert data["func"] == "matmul"
        timings = data["config"]
        assert len(timings) == 3 and [t for t, _ in timings] == sorted(t for t, _ in timings)
        best_time, best = timings[0]
        assert isinstance(best["config"], triton.Config) and best_time > 0
        assert {c["config"].kwargs["BLOCK"] for _, c in timings} == {64, 128}
        assert {(c["config"].num_warps, c["config"].num_stages) for _, c in timings} == {(4, 2), (4, 3)}
        with pretty_triton_config_repr():
            assert repr(best["config"]) == str(best["config"])
    assert seen == {64, 96}
    with pytest.warns(TritonDistWarning, match="no-such-entry.json is missing"):
        assert load_autotune_data(f"{matmul.func_dir()}/no-such-entry.json") is None
    foreign = Path(matmul.func_dir()) / "notes.json"
    foreign.write_text('{"config": []}')
    with pytest.warns(TritonDistWarning, match="notes.json is not a cache entry"):
        assert load_autotune_data(foreign) is None


def test_pretty_config_repr_blocks_overlapping_in_two_threads_leave_tritons_repr_as_it_was():
    """Each block saved ``triton.Config.__repr__`` as it found it and put that back: a block opened in
    a second thread while the first's was open saved the first's patch as the original, so Triton's
    class kept the pretty ``repr`` for good, and the first block's exit took it from the second,
    still open (a reviewer). Blocks are counted under a lock; the last to exit restores."""
    import threading

    from triton_dist.tune import pretty_triton_config_repr

    config = triton.Config({"BLOCK": 64}, num_warps=4)
    had, plain = "__repr__" in vars(triton.Config), repr(config)
    assert plain != str(config)
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, str] = {}
    errors: list[BaseException] = []

    def first() -> None:
        try:
            with pretty_triton_config_repr():
                first_in.set()
                assert second_in.wait(30)
        except BaseException as exc:  # noqa: BLE001 - told by the assertion below
            errors.append(exc)
        finally:
            first_out.set()

    def second() -> None:
        try:
            assert first_in.wait(30)
            with pretty_triton_config_repr():
                second_in.set()
                assert first_out.wait(30)
                seen["second, after the first exited"] = repr(config)
        except BaseException as exc:  # noqa: BLE001 - told by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors and not any(thread.is_alive() for thread in threads)
    assert seen == {"second, after the first exited": str(config)}
    assert repr(config) == plain and ("__repr__" in vars(triton.Config)) == had
    with pretty_triton_config_repr():  # nested in one thread: the outer block still pretty
        with pretty_triton_config_repr():
            pass
        assert repr(config) == str(config)
    assert repr(config) == plain and ("__repr__" in vars(triton.Config)) == had
