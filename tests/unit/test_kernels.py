"""Real Triton kernels under the interpreter (or on the device): the tuned function returns what
the untuned function returns, for the seed's scale example and for a GEMM."""

from __future__ import annotations

import os

import pytest
import torch

from examples import gemm, scale

from .helpers import entries

pytestmark = pytest.mark.timeout(180)


def _device():
    from triton_dist._backends import get_backend

    return get_backend().device()


@pytest.mark.parametrize("n", [1000, 4096])
def test_scale_equals_the_untuned_function_for_every_config(n, cache_dir):
    x = torch.randn(n, generator=torch.Generator().manual_seed(n)).to(_device())
    y = scale.scale(x, 2.5)
    torch.testing.assert_close(y, 2.5 * x)
    for config in scale.scale.config_space:
        torch.testing.assert_close(y, scale.scale.fn(x, 2.5, **config))
    torch.testing.assert_close(scale.scale(x, 2.5, autotune=False), y)
    assert len(entries(cache_dir, "scale")) == 1
    assert scale.scale.best_config(x, 2.5) in scale.scale.config_space


def test_scale_prune_fn_drops_blocks_larger_than_the_input(cache_dir):
    import json

    x = torch.randn(300).to(_device())
    torch.testing.assert_close(scale.scale(x, -1.0), -x)
    (path,) = entries(cache_dir, "scale")
    entry = json.loads(path.read_text())
    pruned = [c["index"] for c in entry["candidates"] if c["pruned"]]
    blocks = [scale.scale.config_space[i]["cfg"].kwargs["BLOCK"] for i in range(4)]
    assert pruned == [i for i, b in enumerate(blocks) if b > 300]


def _assert_matmul_close(c, a, b):
    """``c`` is ``a @ b`` up to the precision of ``tl.dot`` where the kernel ran.

    The interpreter multiplies in fp32 (numpy): nearly exact. On a GPU, fp32 ``tl.dot`` uses TF32
    (the default of examples/gemm.py, as of most real fp32 GEMMs): each operand keeps 10 mantissa
    bits, so each product is off by less than 2**-9 of its size and an element of ``c`` by less
    than 2**-9 * (|a| @ |b|) (~0.09 here). A wrong tile or a missing K step is off by whole units.
    """
    ref = a.double() @ b.double()
    if os.environ.get("TRITON_INTERPRET") == "1":
        torch.testing.assert_close(c.double(), ref, atol=1e-4, rtol=1e-4)
        return
    bound = 2.0**-9 * (a.double().abs() @ b.double().abs()) + 1e-4
    excess = ((c.double() - ref).abs() - bound).max().item()
    assert excess <= 0, f"tl.dot result off by more than the TF32 bound (by {excess:.3g} at worst)"


def test_gemm_equals_torch_matmul_and_the_untuned_kernel(cache_dir):
    case = {"M": 48, "N": 40, "K": 72, "dtype": "float32"}
    ctx = type("Ctx", (), {"rank": 0, "world_size": 1, "device": _device()})()
    (a, b), kwargs = gemm.make_matmul_args(case, ctx)
    assert kwargs == {} and a.shape == (48, 72) and b.shape == (72, 40) and a.dtype == torch.float32
    c = gemm.matmul(a, b)
    _assert_matmul_close(c, a, b)
    best = gemm.matmul.best_config(a, b)
    assert gemm.prune_fn(best, a, b)
    torch.testing.assert_close(c, gemm.matmul.fn(a, b, **gemm.matmul.config_space[0]))
    torch.testing.assert_close(gemm.matmul(a, b, autotune=False), c)
    assert len(entries(cache_dir, "matmul")) == 1


def test_gemm_prune_fn_keeps_what_fits_shared_memory_and_the_shape():
    ctx = type("Ctx", (), {"device": "cpu"})()
    (a, b), _ = gemm.make_matmul_args({"M": 64, "N": 64, "K": 64, "dtype": "float16"}, ctx)
    budget = gemm.shared_memory_budget()
    kept = []
    for config in gemm.matmul.config_space:
        cfg = config["cfg"]
        meta = cfg.kwargs
        smem = (meta["BLOCK_M"] * meta["BLOCK_K"] + meta["BLOCK_K"] * meta["BLOCK_N"]) * 2 * cfg.num_stages
        fits = smem <= budget and max(meta["BLOCK_M"], meta["BLOCK_N"], meta["BLOCK_K"]) <= 64
        assert gemm.prune_fn(config, a, b) is fits
        kept.append(fits)
    assert kept[0]  # the default fits
    assert not gemm.prune_fn(gemm.matmul.config_space[-1], a, b)  # the 512 KiB config never does


def test_gemm_rejects_mismatched_operands():
    a, b = torch.randn(8, 16), torch.randn(8, 16)
    with pytest.raises(ValueError, match="matmul needs"):
        gemm.matmul(a, b, autotune=False)


def test_errors_and_logs_show_triton_configs_by_their_fields(cache_dir, capsys):
    import triton

    from triton_dist.errors import NoValidConfigError
    from triton_dist.tune import autotune

    def launch(x, cfg):
        raise RuntimeError(f"out of resources for BLOCK={cfg.kwargs['BLOCK']}")

    space = [{"cfg": triton.Config({"BLOCK": b}, num_warps=4)} for b in (64, 128)]
    tuned = autotune(config_space=space, key_fn=lambda x: x)(launch)
    with pytest.raises(NoValidConfigError) as info:
        tuned(1, autotune_verbose=True)
    for text in (str(info.value), capsys.readouterr().out):
        assert "BLOCK: 64" in text and "BLOCK: 128" in text
        assert " at 0x" not in text
