"""A tuned function and an object holding one, imported by spawned children
(tests/unit/test_users_processes.py): ``multiprocessing``'s spawn start method and Ray pickle
them by reference, and the child imports this module to find them."""

from __future__ import annotations

import os
from typing import Any

import torch

from triton_dist.tune import autotune


def _flat(fn: Any, n_warmup: int, n_repeat: int) -> list[float]:
    fn()
    return [1.0] * n_repeat


@autotune([{"c": 2}, {"c": 3}], key_fn=lambda x, *args, **kwargs: (tuple(x.shape),), do_bench=_flat)
def scaled(x: torch.Tensor, c: int) -> torch.Tensor:
    return x * c


class Holder:
    """A framework object that keeps a tuned function as an attribute (a layer, a Ray actor's state)."""

    def __init__(self) -> None:
        self.op = scaled

    def __call__(self, n: int) -> tuple[int, float, str]:
        out = self.op(torch.ones(n))
        return os.getpid(), float(out.sum()), self.op.tuner._origins.get(((n,),), "")
