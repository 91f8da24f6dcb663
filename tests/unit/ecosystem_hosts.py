"""Host functions written the way other Triton projects write them, made ``tune.autotune`` targets
(tests/unit/test_ecosystem_hosts.py; a second process imports this module to find them).

Each is re-created in this project's words, after the pattern named in its docstring; none is
copied. Real ``@triton.jit`` kernels, run by Triton's interpreter on the CPU.
"""

from __future__ import annotations

import functools
import json
import sys
from typing import Any

import torch
import triton
import triton.language as tl
import yaml

from triton_dist.tune import autotune

# -- vLLM / SGLang fused_moe: a host function picks a config dict by shape and dtype ---------------


@triton.jit
def expert_matmul(x_ptr, w_ptr, ids_ptr, wts_ptr, out_ptr, N, K, TOPK,
                  BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr, MUL_ROUTED: tl.constexpr):
    """One program per (token, k) pair and block of N: out[pair] = weight * (x[token] @ w[expert].T)."""
    pair = tl.program_id(0)
    token = pair // TOPK
    expert = tl.load(ids_ptr + pair)
    offs_n = tl.program_id(1) * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    acc = tl.zeros((BLOCK_SIZE_N,), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_SIZE_K):
        offs_k = k0 + tl.arange(0, BLOCK_SIZE_K)
        x = tl.load(x_ptr + token * K + offs_k, mask=offs_k < K, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + expert * N * K + offs_n[:, None] * K + offs_k[None, :],
                    mask=(offs_n[:, None] < N) & (offs_k[None, :] < K), other=0.0).to(tl.float32)
        acc += tl.sum(w * x[None, :], axis=1)
    if MUL_ROUTED:
        acc = acc * tl.load(wts_ptr + pair).to(tl.float32)
    tl.store(out_ptr + pair * N + offs_n, acc.to(out_ptr.dtype.element_ty), mask=offs_n < N)


@functools.lru_cache
def get_moe_configs(E: int, N: int, dtype: str | None) -> dict[int, dict[str, int]]:
    """Tuned configs by batch size, as vLLM reads them from its JSON files (here in code)."""
    return {1: {"BLOCK_SIZE_N": 16, "BLOCK_SIZE_K": 16, "num_warps": 4},
            64: {"BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "num_warps": 8}}


def try_get_optimal_moe_config(w1_shape: tuple[int, ...], top_k: int, dtype: str | None, M: int,
                               override_config: dict[str, int] | None = None) -> dict[str, int]:
    if override_config:
        return override_config
    E, N, _ = w1_shape
    configs = get_moe_configs(E, N, dtype)
    return configs[min(configs.keys(), key=lambda m: abs(m - M))]


def moe_key(hidden_states, w1, topk_weights, topk_ids, dtype=None, block_shape=None, *args, **kwargs):
    """Keyed as vLLM's lookup is: shapes (torch.Size), top_k, a dtype string or None, the batch size,
    the activations' torch dtype, block_shape (a list there: a tuple here) or None."""
    return (w1.shape, topk_ids.shape[1], dtype, hidden_states.shape[0], hidden_states.dtype,
            tuple(block_shape) if block_shape is not None else None)


MOE_SPACE = [{"override_config": {"BLOCK_SIZE_N": n, "BLOCK_SIZE_K": k, "num_warps": 4}}
             for n in (16, 32) for k in (16, 32)]


def fused_experts(hidden_states, w1, topk_weights, topk_ids, dtype=None, block_shape=None, override_config=None):
    M, K = hidden_states.shape
    E, N, _ = w1.shape
    top_k = topk_ids.shape[1]
    config = try_get_optimal_moe_config(w1.shape, top_k, dtype, M, override_config)
    out = torch.empty(M, top_k, N, dtype=hidden_states.dtype)
    grid = lambda META: (M * top_k, triton.cdiv(N, META["BLOCK_SIZE_N"]))  # noqa: E731 - as vLLM writes it
    expert_matmul[grid](hidden_states, w1, topk_ids, topk_weights, out, N, K, top_k, MUL_ROUTED=True, **config)
    return out.sum(dim=1)


tuned_fused_experts = autotune(config_space=MOE_SPACE, key_fn=moe_key)(fused_experts)


@autotune(config_space=[{"BLOCK_SIZE_N": n, "BLOCK_SIZE_K": 16, "num_warps": 4} for n in (16, 32)],
          key_fn=lambda hidden_states, w1, topk_weights, topk_ids, **kw: (hidden_states.shape, w1.shape,
                                                                           str(hidden_states.dtype)))
def sglang_experts(hidden_states, w1, topk_weights, topk_ids, **config):
    """SGLang's launch: the config's fields (num_warps among them) go to the kernel as ``**config``."""
    return fused_experts(hidden_states, w1, topk_weights, topk_ids, override_config=config)


def moe_inputs(M: int = 5, K: int = 24, N: int = 40, E: int = 4, top_k: int = 2,
               dtype: torch.dtype = torch.float32) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(M, K, generator=g).to(dtype)
    w1 = torch.randn(E, N, K, generator=g).to(dtype)
    weights, ids = torch.topk(torch.softmax(torch.randn(M, E, generator=g), -1), top_k)
    return x, w1, weights.to(dtype), ids.to(torch.int32)


def moe_reference(hidden_states, w1, topk_weights, topk_ids) -> torch.Tensor:
    w = w1[topk_ids.long()].float()  # M, top_k, N, K
    out = torch.einsum("mk,mtnk->mtn", hidden_states.float(), w) * topk_weights.float()[..., None]
    return out.sum(1).to(hidden_states.dtype)


# -- Liger-Kernel: settings from a host helper, the gradient written over the input in place -----


def calculate_settings(n: int) -> tuple[int, int]:
    block = triton.next_power_of_2(n)
    return block, 4 if block < 2048 else 8


@triton.jit
def cross_entropy_kernel(X_ptr, Y_ptr, loss_ptr, n_cols, ignore_index, BLOCK_SIZE: tl.constexpr):
    row = tl.program_id(0)
    X_ptr += row * n_cols
    y = tl.load(Y_ptr + row)
    if y == ignore_index:
        for off in range(0, n_cols, BLOCK_SIZE):
            cols = off + tl.arange(0, BLOCK_SIZE)
            tl.store(X_ptr + cols, 0.0, mask=cols < n_cols)
        return
    m = float("-inf")
    d = 0.0
    for off in range(0, n_cols, BLOCK_SIZE):  # online softmax over the row
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X_ptr + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, tl.max(x))
        d = d * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new))
        m = m_new
    tl.store(loss_ptr + row, tl.log(d) + m - tl.load(X_ptr + y).to(tl.float32))
    for off in range(0, n_cols, BLOCK_SIZE):  # the gradient, over the logits
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X_ptr + cols, mask=cols < n_cols, other=float("-inf")).to(tl.float32)
        grad = tl.exp(x - m) / d - tl.where(cols == y, 1.0, 0.0)
        tl.store(X_ptr + cols, grad.to(X_ptr.dtype.element_ty), mask=cols < n_cols)


def cross_entropy_forward(_input, target, ignore_index=-100, BLOCK_SIZE=None, num_warps=None):
    BT, V = _input.shape
    if BLOCK_SIZE is None:
        BLOCK_SIZE, num_warps = calculate_settings(V)
    loss = torch.zeros(BT, dtype=torch.float32)
    cross_entropy_kernel[(BT,)](_input, target, loss, V, ignore_index, BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps)
    return loss.sum() / (target != ignore_index).sum(), _input


tuned_cross_entropy = autotune(
    config_space=[{"BLOCK_SIZE": b, "num_warps": 4} for b in (64, 16)],
    key_fn=lambda _input, target, ignore_index=-100, *a, **k: (_input.shape, _input.dtype, ignore_index),
)(cross_entropy_forward)


def cross_entropy_reference(logits, target, ignore_index=-100) -> tuple[torch.Tensor, torch.Tensor]:
    leaf = logits.detach().float().clone().requires_grad_(True)
    loss = torch.nn.functional.cross_entropy(leaf, target.long(), ignore_index=ignore_index, reduction="sum")
    loss.backward()
    assert leaf.grad is not None
    return loss.detach() / (target != ignore_index).sum(), leaf.grad


# -- FlagGems: configs read from YAML; flash-attention: configs whose pre_hook zeroes a buffer -------

CONFIG_YAML = """
scale:
  - {META: {BLOCK: 16}, num_warps: 4, block_shape: [16, 16], EVEN: null}
  - {META: {BLOCK: 32}, num_warps: 2, block_shape: [32, 32], EVEN: true}
"""


@triton.jit
def add_into(x_ptr, acc_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.atomic_add(acc_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


@autotune(config_space=[{"meta": c} for c in yaml.safe_load(CONFIG_YAML)["scale"]],
          key_fn=lambda x, acc, *a, **k: (x.shape, x.dtype))
def yaml_accumulate(x, acc, meta):
    """A config space read from YAML: nested dicts, lists, None and booleans in each config."""
    assert isinstance(meta["block_shape"], list)
    acc.zero_()
    block = meta["META"]["BLOCK"]
    add_into[(triton.cdiv(x.numel(), block),)](x, acc, x.numel(), BLOCK=block, num_warps=meta["num_warps"])
    return acc


def init_to_zero(name: str) -> Any:
    return lambda nargs: nargs[name].zero_()


def _zero_named(name: str, nargs: dict) -> None:
    nargs[name].zero_()


class ZeroHook:
    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, nargs: dict) -> None:
        nargs[self.name].zero_()


@autotune(config_space=[{"cfg": triton.Config({"BLOCK": 16}, pre_hook=init_to_zero("acc"))},
                        {"cfg": triton.Config({"BLOCK": 32}, pre_hook=functools.partial(_zero_named, "acc"))},
                        {"cfg": triton.Config({"BLOCK": 64}, pre_hook=ZeroHook("acc"))}],
          key_fn=lambda x, acc, *a, **k: (x.numel(), x.dtype))
def hooked_accumulate(x, acc, cfg):
    """flash-attention's ``pre_hook=init_to_zero('DQ')``, and the same as a partial and an object."""
    cfg.pre_hook({"x": x, "acc": acc})
    add_into[(triton.cdiv(x.numel(), cfg.kwargs["BLOCK"]),)](x, acc, x.numel(), **cfg.all_kwargs())
    return acc


# -- a second process: calls each host as the first did and says where its config came from ---------


def calls() -> dict[str, tuple[Any, tuple, dict]]:
    """Every tuned host above, with arguments: (tuner, args, kwargs)."""
    x, w1, wts, ids = moe_inputs()
    xh, w1h, wtsh, idsh = moe_inputs(dtype=torch.float16)
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(1))
    target = torch.tensor([3, 7, -100, 49, 0, 11])
    small = torch.randn(100, generator=torch.Generator().manual_seed(2))
    return {
        "moe": (tuned_fused_experts, (x, w1, wts, ids), {}),
        "moe_fp8_blocks": (tuned_fused_experts, (x, w1, wts, ids), {"dtype": "fp8_w8a8", "block_shape": [128, 128]}),
        "moe_fp16": (tuned_fused_experts, (xh, w1h, wtsh, idsh), {}),
        "sglang": (sglang_experts, (x, w1, wts, ids), {}),
        "liger": (tuned_cross_entropy, (logits, target), {}),
        "yaml": (yaml_accumulate, (small, torch.empty_like(small)), {}),
        "hooks": (hooked_accumulate, (small, torch.full_like(small, 7.0)), {}),
    }


def main() -> None:
    seen = {}
    for name, (tuner, args, kwargs) in calls().items():
        tuner(*args, **kwargs)
        seen[name] = list(tuner.tuner._origins.values())[-1]  # each call here is a new key
    json.dump(seen, sys.stdout)


if __name__ == "__main__":
    main()
