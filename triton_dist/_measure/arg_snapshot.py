"""The tensor arguments' copies that a tuning takes before its runs, and what puts them back.

``guard.RunGuard`` finds which arguments a candidate's run mutates and restores them before each
later run; this module is the tensor side of that: which tensors an argument holds
(:func:`tensors_in`), what of each a restore writes (:func:`restorable`), the version counter and
geometry that show a torch in-place op (:func:`version`, :func:`geometry`), the content comparison
that shows a Triton kernel's writes (:func:`unchanged`), the copies themselves (:func:`snapshot`)
and the restore (:func:`put_back`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from triton_dist._measure.compare import MAX_DEPTH
from triton_dist._measure.interrupts import interrupts_held

__all__ = ["geometry", "put_back", "restorable", "snapshot", "tensors_in", "unchanged", "version", "writable"]


def tensors_in(value: Any, depth: int = 0) -> Iterator[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif depth < MAX_DEPTH and isinstance(value, (list, tuple)):
        for v in value:
            yield from tensors_in(v, depth + 1)
    elif depth < MAX_DEPTH and isinstance(value, dict):
        for v in value.values():
            yield from tensors_in(v, depth + 1)


def restorable(t: Any) -> Any:
    """What of ``t`` a restore writes: ``t`` itself, or for a broadcast view (``x.expand(...)``,
    stride 0) the one element of each broadcast dimension that its memory holds (a copy into
    the whole view is refused: its elements share memory)."""
    for dim, (size, stride) in enumerate(zip(t.shape, t.stride(), strict=True)):
        if stride == 0 and size > 1:
            t = t.narrow(dim, 0, 1)
    return t


def version(t: Any) -> int:
    """``t._version``; an inference tensor (made under ``torch.inference_mode``) keeps none: -1,
    which never moves, and its changes are found by content, as Triton's writes are."""
    return -1 if t.is_inference() else t._version


def writable(t: Any) -> Any:
    """Where a restore may write ``t``: an inference tensor only under inference mode (a tensor
    made there and tuned on after it, which a Triton kernel may write but torch would refuse)."""
    import torch

    return torch.inference_mode() if t.is_inference() else contextlib.nullcontext()


def geometry(t: Any) -> tuple[Any, ...]:
    return tuple(t.shape), t.stride(), t.storage_offset()


def unchanged(t: Any, saved: Any) -> bool:
    import torch

    if t.shape != saved.shape:  # resize_ (an ``out=`` argument sized by the function)
        return False
    if torch.equal(t, saved):
        return True
    # NaN != NaN: a float tensor holding NaN is unchanged when it matches NaN for NaN
    return (t.is_floating_point() or t.is_complex()) and bool(
        ((t == saved) | (t.isnan() & saved.isnan())).all())


def snapshot(args: tuple, kwargs: dict) -> tuple[list[Any], list[Any], list[int], list[tuple[Any, ...]]]:
    """The restorable tensors of the arguments (each once; sparse and meta tensors left out), a
    copy of each, their versions and their geometries. Raises what a copy raises (out of memory)."""
    tensors: list[Any] = []
    copies: list[Any] = []
    versions: list[int] = []
    geometries: list[tuple[Any, ...]] = []
    seen: set[int] = set()
    for t in tensors_in((args, kwargs)):
        if id(t) in seen or t.is_sparse or t.device.type == "meta":
            continue
        seen.add(id(t))
        t = restorable(t)
        copies.append(t.detach().clone())
        tensors.append(t)
        versions.append(version(t))
        geometries.append(geometry(t))
    return tensors, copies, versions, geometries


def put_back(todo: Iterable[int], tensors: list[Any], copies: list[Any], versions: list[int],
            geometries: list[tuple[Any, ...]], mutated: set[int]) -> list[tuple[int, Exception]]:
    """Put the tensors at positions ``todo`` back from their copies (their geometry first, where
    resized or restrided in place), each added to ``mutated`` and its version taken again; all of
    them or none: a Ctrl-C waits until every one is back. Returns the positions that failed, with
    the error."""
    import torch

    failed: list[tuple[int, Exception]] = []
    with interrupts_held():
        for pos in todo:
            t = tensors[pos]
            mutated.add(pos)
            try:
                with torch.no_grad(), writable(t):
                    if geometry(t) != geometries[pos]:  # resized or restrided in place
                        t.as_strided_(*geometries[pos])
                    t.copy_(copies[pos])
            except Exception as exc:  # noqa: BLE001 - the tuner's own step, never a candidate's failure
                failed.append((pos, exc))
            versions[pos] = version(t)
    return failed
