"""Where the rank log names a caller's keyword that an inner kernel's configs set (README: "the
log names them"): once per key it tunes; a kernel with one config takes the config's value all
the same and is not named (nothing is tuned for it). The README said "the log names them" of
every case it listed, the one-config kernel among them. Real Triton kernels under the
interpreter.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from triton_dist.autotuner import contextual_autotune

README = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())


@pytest.fixture(autouse=True)
def in_tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # the log goes to ./.autotune_logs
    return tmp_path


@triton.jit
def _tuned(x_ptr, y_ptr, meta_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, 2.0 * tl.load(x_ptr + offsets, mask=mask), mask=mask)
    if tl.program_id(0) == 0:
        tl.store(meta_ptr, BLOCK)


@triton.jit
def _single(x_ptr, y_ptr, meta_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, 3.0 * tl.load(x_ptr + offsets, mask=mask), mask=mask)
    if tl.program_id(0) == 0:
        tl.store(meta_ptr, BLOCK)


def test_the_log_names_a_tuned_kernels_replaced_keyword_once_per_key_and_not_a_one_config_kernels(in_tmp_cwd):
    tuned = triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})], key=["n"])(_tuned)
    single = triton.autotune(configs=[triton.Config({"BLOCK": 16})], key=["n"])(_single)
    meta = torch.zeros(2, dtype=torch.int32)

    def launch(kernel, x, slot):
        y = torch.empty_like(x)
        kernel[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, y, meta[slot:], x.numel(), BLOCK=32)
        return y

    @contextual_autotune(n_warmup=1, n_repeat=1)
    def outer(x):
        return launch(single, launch(tuned, x, 0), 1)

    x = torch.randn(300, generator=torch.Generator().manual_seed(0))
    for _ in range(2):  # the second call: the key already tuned
        torch.testing.assert_close(outer(x), 6 * x)
        assert meta[1].item() == 16 and meta[0].item() in (64, 128)  # the configs' values, never 32
    log = (in_tmp_cwd / ".autotune_logs" / "rank-0.log").read_text()
    named = [line for line in log.splitlines() if "the caller's BLOCK: replaced" in line]
    assert len(named) == 1 and "func: _tuned" in named[0]
    assert "func: _single" not in log
    assert "the log names them once per key it tunes (not for a kernel with one config)" in README
