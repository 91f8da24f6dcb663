"""Comparing a candidate's results with the reference config's (``autotune(...,
check_correctness=True)``; used by ``guard.RunGuard``): tensors within a dtype's tolerance,
nested lists/tuples/dicts of them, plain values; and copying a result so that later runs cannot
change it."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MAX_DEPTH", "capture", "compare", "tolerance"]

#: how deep into lists/tuples/dicts of results (and of arguments, for the guard) tensors are looked for
MAX_DEPTH = 4


def tolerance(dtype: Any) -> tuple[float, float]:
    """(rtol, atol) for outputs of ``dtype``; ``atol`` is later scaled by the output's magnitude.

    Configs legitimately reorder reductions (block sizes, split-K), so floats get a few ulps of
    accumulated rounding per element; integers and booleans must match exactly.
    """
    import torch

    if dtype in (torch.float64, torch.complex128):
        return 1e-7, 1e-9
    if dtype in (torch.float32, torch.complex64):
        return 1e-4, 1e-5
    if dtype == torch.float16:
        return 1e-2, 1e-2
    if dtype == torch.bfloat16:
        return 3e-2, 3e-2
    if dtype.is_floating_point:  # float8 variants
        return 0.125, 0.125
    return 0.0, 0.0


def _compare_tensors(ref: Any, out: Any, path: str) -> str | None:
    import torch

    if tuple(out.shape) != tuple(ref.shape):
        return f"max abs diff inf: {path} has shape {tuple(out.shape)}, expected {tuple(ref.shape)}"
    if out.dtype != ref.dtype:
        return f"max abs diff inf: {path} has dtype {out.dtype}, expected {ref.dtype}"
    if ref.numel() == 0:
        return None
    out = out.detach().to(ref.device)
    rtol, atol = tolerance(ref.dtype)
    if rtol == 0.0 and atol == 0.0:
        if torch.equal(out, ref):
            return None
        diff = (out.to(torch.float64) - ref.to(torch.float64)).abs().max().item()
        return f"max abs diff {diff:.6g}: {path} must match exactly ({ref.dtype})"
    wide = torch.complex128 if ref.dtype.is_complex else torch.float64
    a, b = out.to(wide), ref.to(wide)
    diff = (a - b).abs()
    same = (a == b) | (a.isnan() & b.isnan())  # equal infinities and NaN where the default has NaN
    diff = torch.where(same, torch.zeros_like(diff), torch.nan_to_num(diff, nan=math.inf))
    finite = b.abs()[torch.isfinite(b.abs())]
    scale = max(1.0, finite.max().item()) if finite.numel() else 1.0
    bad = diff > atol * scale + rtol * b.abs().nan_to_num(posinf=0.0)
    if not bool(bad.any()):
        return None
    return (f"max abs diff {diff.max().item():.6g}: {path}, {int(bad.sum().item())} of {ref.numel()} "
            f"elements outside rtol {rtol:g} / atol {atol * scale:.3g}")


def compare(ref: Any, out: Any, path: str = "result") -> str | None:
    """None when ``out`` matches ``ref`` (tensors, nested lists/tuples/dicts of them, plain
    values), else a description of the first mismatch."""
    import torch

    if isinstance(ref, torch.Tensor):
        if not isinstance(out, torch.Tensor):
            return f"max abs diff inf: {path} is a {type(out).__name__}, expected a tensor"
        return _compare_tensors(ref, out, path)
    if isinstance(ref, (list, tuple)):
        if type(out) is not type(ref) or len(out) != len(ref):
            return f"max abs diff inf: {path} is {type(out).__name__} of {_len(out)}, expected " \
                   f"{type(ref).__name__} of {len(ref)}"
        for i, (r, o) in enumerate(zip(ref, out, strict=True)):
            why = compare(r, o, f"{path}[{i}]")
            if why:
                return why
        return None
    if isinstance(ref, dict):
        if not isinstance(out, dict) or set(out) != set(ref):
            keys = sorted(map(str, out)) if isinstance(out, dict) else type(out).__name__
            return f"max abs diff inf: {path} has keys {keys}, expected {sorted(map(str, ref))}"
        for k in ref:
            why = compare(ref[k], out[k], f"{path}[{k!r}]")
            if why:
                return why
        return None
    if isinstance(ref, float) and isinstance(out, (int, float)) and not isinstance(out, bool):
        if math.isclose(ref, out, rel_tol=1e-4, abs_tol=1e-9) or (math.isnan(ref) and math.isnan(out)):
            return None
        return f"max abs diff {abs(ref - out):.6g}: {path} is {out!r}, expected {ref!r}"
    try:
        equal = ref == out
        if not isinstance(equal, bool):  # arrays and the like: compare their contents as tensors
            return compare(torch.as_tensor(ref), torch.as_tensor(out), path)
    except Exception:  # noqa: BLE001 - values we cannot compare are not evidence of a wrong result
        return None
    return None if equal else f"max abs diff inf: {path} is {out!r:.80}, expected {ref!r:.80}"


def _len(value: Any) -> str:
    try:
        return str(len(value))
    except TypeError:
        return "?"


def capture(value: Any, depth: int = 0) -> Any:
    """A copy of a result that later runs cannot change (tensors are cloned)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if depth < MAX_DEPTH and isinstance(value, (list, tuple)):
        items = [capture(v, depth + 1) for v in value]
        if hasattr(value, "_fields"):  # a namedtuple
            return type(value)(*items)
        return items if isinstance(value, list) else tuple(items)
    if depth < MAX_DEPTH and isinstance(value, dict):
        return {k: capture(v, depth + 1) for k, v in value.items()}
    return value
