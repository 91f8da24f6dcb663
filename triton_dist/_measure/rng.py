"""torch's random-number state, taken before a tuning's runs and put back after them.

A tuning runs the host function (``tune.autotune``) or the outer function
(``contextual_autotune``) many times and keeps one result. A function that draws from torch's
generators — a dropout kernel's seed (``torch.randint(...).item()``), ``nn.Dropout``,
``torch.randn`` — drew once per run, so after a tuning the caller's generator stood elsewhere than
after one untuned call: the same seeded job gave other numbers on a miss than on a hit, and with
``check_correctness=True`` every config but the first drew another seed and was rejected as a
wrong result. :class:`RngState` takes the state of the CPU generator and, where the device's
module is initialised, of the current device's generator, and puts them back: every run draws what the
first drew, and what follows the tuning draws what it would have drawn without it.

A device generator is read and put back only where its module can say that no graph capture is
under way (``is_current_stream_capturing``): CUDA refuses both during a capture ("Cannot call
CUDAGeneratorImpl::current_seed during CUDA graph capture"), so a contextual call captured into a
graph, whose state is taken when it starts, failed its capture. A state taken during a capture
keeps the CPU generator's alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["RngState", "tensor_devices"]


def _device_module(device_type: str | None) -> Any:
    """``torch.cuda`` / ``torch.npu`` when it has been initialised and keeps generator states."""
    if device_type in (None, "cpu"):
        return None
    import torch

    module = getattr(torch, device_type, None)
    if module is None or not all(hasattr(module, n) for n in ("get_rng_state", "set_rng_state", "current_device")):
        return None
    initialised = getattr(module, "is_initialized", None)
    if initialised is None or not initialised():  # reading the state would initialise the device
        return None
    return module


class RngState:
    """The generators' state when it was made; :meth:`restore` puts it back."""

    def __init__(self, device_type: str | None = None, devices: Iterable[int] = ()) -> None:
        """``devices``: the indices of the device's generators the call's tensors are on, besides
        the current device's: a rank that puts its tensors on ``cuda:{local_rank}`` without
        ``set_device`` has current device 0 and draws from generator ``local_rank`` (a reviewer)."""
        # the CPU generator's state (torch.get_rng_state() without its wrapper): a contextual
        # function takes it on every call, cached or not, so the CPU's case does nothing more
        self._cpu = _default_generator().get_state()
        self._devices: dict[int, Any] = {}
        self._module: Any = None
        if device_type in (None, "cpu"):
            return
        module = _device_module(device_type)
        self._module = None if module is None or _capturing(module) else module
        # the current device's generator and those of the call's tensors, not every visible
        # device's: a contextual function takes the state on every call (8 reads on a node)
        if self._module is not None:
            for index in sorted({int(self._module.current_device()), *devices}):
                self._devices[index] = self._module.get_rng_state(index)

    def moved(self) -> bool:
        """True when a generator no longer stands where it stood when this was made."""
        import torch

        if not torch.equal(torch.get_rng_state(), self._cpu):
            return True
        if self._module is None or _capturing(self._module):
            return False
        return any(not torch.equal(self._module.get_rng_state(i), state) for i, state in self._devices.items())

    def restore(self) -> None:
        import torch

        torch.set_rng_state(self._cpu)
        if self._module is not None and not _capturing(self._module):
            for index, state in self._devices.items():
                self._module.set_rng_state(state, index)


def tensor_devices(values: Iterable[Any], device_type: str | None) -> set[int]:
    """The indices of the ``device_type`` devices that tensors among ``values`` (and in the lists,
    tuples and dicts among them, one level down) are on."""
    if device_type in (None, "cpu"):
        return set()
    import torch

    found: set[int] = set()
    for value in values:
        items = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else (value,)
        for item in items:
            if isinstance(item, torch.Tensor) and item.device.type == device_type and item.device.index is not None:
                found.add(item.device.index)
    return found


_generator: Any = None


def _default_generator() -> Any:
    """``torch.default_generator`` (torch imported at the first state taken, not with this module)."""
    global _generator
    if _generator is None:
        import torch

        _generator = torch.default_generator
    return _generator


def _capturing(module: Any) -> bool:
    """Whether a graph capture is under way on the device's current stream (True when its module
    cannot tell: its generator is then left alone)."""
    capturing = getattr(module, "is_current_stream_capturing", None)
    if capturing is None:
        return True
    try:
        return bool(capturing())
    except Exception:  # noqa: BLE001 - a device that cannot answer: leave it alone
        return True
