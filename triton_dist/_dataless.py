"""A miss with tensors that hold no data: the meta device, or fake tensors (``FakeTensorMode``,
what ``torch.export`` without strict mode and shape-inference passes trace with).

Nothing can be measured on them: the candidates' "timings" were of nothing (on the meta device
they were written as the key's cache entry, which real calls of that shape then took from the
disk in every process), or every candidate failed on the fake tensors (``NoValidConfigError``).
Such a miss runs ``config_space[0]`` untuned, decides nothing and writes nothing; a call of the
key with real tensors tunes as usual. A key already decided runs its config, as for any call.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from typing import Any

from triton_dist._warn import warn_user

__all__ = ["holds_no_data", "untuned_without_data"]

log = logging.getLogger(__name__)


def holds_no_data(args: tuple, kwargs: dict) -> bool:
    """Whether a tensor among the call's arguments (nested in lists, tuples, dicts) is on the meta
    device or fake (``torch._subclasses.fake_tensor.is_fake``: fake, or wrapping a fake)."""
    fake = sys.modules.get("torch._subclasses.fake_tensor")  # a fake tensor implies it was imported
    for t in _tensors(args, kwargs):
        try:
            if t.device.type == "meta" or (fake is not None and fake.is_fake(t)):
                return True
        except Exception:  # noqa: BLE001 - a tensor subclass is_fake cannot unpack: not known fake
            continue
    return False


def _tensors(args: tuple, kwargs: dict) -> Iterator[Any]:
    torch = sys.modules.get("torch")
    if torch is None:
        return
    todo: list[tuple[Any, int]] = [(args, 0), (kwargs, 0)]
    while todo:
        value, depth = todo.pop()
        if isinstance(value, torch.Tensor):
            yield value
        elif depth < 4 and isinstance(value, (list, tuple)):
            todo.extend((v, depth + 1) for v in value)
        elif depth < 4 and isinstance(value, dict):
            todo.extend((v, depth + 1) for v in value.values())


def untuned_without_data(qualname: str, told: set[str]) -> None:
    """Say once per tuner (``told``) that a miss with tensors without data ran untuned."""
    if "no data" in told:
        return
    told.add("no data")
    message = (f"{qualname} was called with tensors that hold no data (the meta device, or fake "
               "tensors: FakeTensorMode, torch.export without strict mode): nothing can be measured, "
               "so config_space[0] ran untuned, and nothing was cached; calls with real tensors tune "
               "as usual. To keep the tuned call in a traced or exported graph, make it a custom op "
               "(README, \"From torch.compile'd code\").")
    warn_user(message, log=log, function=qualname)
