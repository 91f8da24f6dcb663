"""Training state that a run of the outer function changed and a later run builds on, found and named.

``contextual_autotune`` re-runs the outer function and keeps the last run: its side effects outside
the inner kernels happen once per run (README, "The outer function runs several times"). Decorate
a whole training step and the optimizer steps once per run, ``loss.backward()`` accumulates
``.grad`` once per run, a ``BatchNorm`` in training mode updates its running statistics once per
run: the parameters, the optimizer's moments and step count and the statistics come out as after
N steps, and the loss returned is the Nth step's, without a word (a tester, 2026-12-06).

:class:`StateWatch` looks while a call's runs are thrown away, and only then (a call whose kernels
are all cached runs without it): a global ``torch.optim`` step hook names every optimizer that
steps, and a global module forward pre-hook notes, at each module's first call in a run, the
version counters of its own parameters and buffers and of their ``.grad``; at the end of the run
those that moved are named, in one warning per call. What no module holds (a bare tensor the
outer function updates in place) is not seen. An update that writes the same values in every run
is harmless and is named all the same: version counters cannot tell. BatchNorm's native kernel
updates ``running_mean`` and ``running_var`` without moving their version counters (only
``num_batches_tracked`` moved, and was named alone): a module called in training mode that
tracks running statistics names them. A ``.grad`` is named only where the run's backward
accumulated onto a gradient the run found: one the step itself cleared before its forward
(``zero_grad()`` at its start: ``None``, or a tensor written since the previous run ended) is
rebuilt whole by every run, so re-running the step is harmless there (a tester, 2026-12-06). A
gradient found at the first look (``None`` or a tensor: the step, or its caller before the call,
may have cleared it) is judged in the next run, which tells whether the step cleared it, from
version counters alone (a reduction of each gradient, ``grad.any()``, was on a device a sync per
parameter between the launches measured: a reviewer, 2026-12-05): a run thrown away as above, or
the kept run (after the last run thrown away) where it found that run's gradient in place and
accumulated onto it, twice one step's (the caller's ``zero_grad()`` before a step that does not
clear: :meth:`StateWatch.kept_run_changes`). The hooks are global: only calls from the thread
that started the watch (the tuning thread) count; another thread's model trained meanwhile was
named as the call's own, and its module calls filled the table being read.

The hooks are two module-level functions, the same objects in every call, that hand the call to the
watch started last, and that ``torch.compile`` leaves alone: TorchDynamo never compiles their frames
(they run eagerly where a compiled module's ``_call_impl`` calls them), and where it traces a
module call with them registered they do nothing (``torch.compiler.is_compiling()``). Traced, the
hook broke the compiled module's graph at every submodule (``threading.get_ident``), was compiled
again for every module type, and failed the user's call with Dynamo's "already tracked for
mutation" AssertionError (a compiled ``nn.Sequential`` model called in a run that tuned). Modules
called inside compiled code are therefore not watched (the optimizer step hook still is). While
they are registered, torch's own warning at every call of a ``torch.compile(module)`` ("Using
`torch.compile(module)` when there are global hooks on modules"), which named hooks of ours the
user cannot remove (an error under ``-W error``), is filtered out.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Any

from triton_dist import _torch_compile

__all__ = ["StateWatch"]

#: at most this many changed tensors are named (then "and N more")
NAMED = 6
#: torch's warning at each call of a torch.compile(module) while a global module hook is registered
_COMPILED_MODULE_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks on modules"


def _mark(t: Any) -> tuple[int, int | None, int | None]:
    grad = getattr(t, "grad", None) if t.requires_grad else None
    return t._version, (id(grad) if grad is not None else None), (grad._version if grad is not None else None)


def _running_stats(module: Any) -> list[str]:
    """The running statistics a call of ``module`` updates without a version counter moving: a
    BatchNorm (or InstanceNorm) in training mode that tracks them, with a momentum that moves them."""
    if not (getattr(module, "training", False) and getattr(module, "track_running_stats", False)) \
            or getattr(module, "momentum", None) == 0:
        return []
    return [f"{type(module).__name__}.{name}" for name in ("running_mean", "running_var")
            if getattr(module, name, None) is not None]


class StateWatch:
    """Hooks installed by :meth:`start`, removed by :meth:`stop`; :meth:`changes` ends a run."""

    def __init__(self) -> None:
        self._handles: list[Any] = []
        # per module: the module, its own tensors (tensor, mark, whether the run builds on its .grad),
        # the running statistics its call updates
        self._modules: dict[int, tuple[Any, dict[str, tuple[Any, tuple[int, int | None, int | None], bool | None]],
                                       list[str]]] = {}
        self._grads_ended: dict[int, tuple[int | None, int | None]] = {}  # a tensor's .grad as the last run ended
        # the .grad (by tensor id: its name) that the last run made or changed from what it found at
        # its first look: named where the next run, the kept one included, accumulates onto it
        self._pending: dict[int, str] = {}
        self._stepped: list[str] = []
        self._thread: int | None = None  # the thread whose runs are watched
        self._filter: Any = None  # the warnings filter start() added

    @property
    def watching(self) -> bool:
        return bool(self._handles)

    def start(self) -> None:
        global _watch
        if self._handles:
            return
        self._thread = threading.get_ident()
        _watch = self
        self._handles = _install()
        warnings.filterwarnings("ignore", message=_COMPILED_MODULE_WARNING, category=UserWarning)
        self._filter = warnings.filters[0]

    def stop(self) -> None:
        global _watch
        for handle in self._handles:
            handle.remove()
        self._handles = []
        if _watch is self:
            _watch = None
        if self._filter is not None:
            with contextlib.suppress(ValueError):  # (the outer function reset the filters)
                warnings.filters.remove(self._filter)  # type: ignore[attr-defined]
            self._filter = None
        self._modules.clear()
        self._stepped.clear()
        self._grads_ended.clear()
        self._pending.clear()

    def _called(self, module: Any, args: Any) -> None:
        if threading.get_ident() != self._thread or id(module) in self._modules:
            return
        try:
            own = {f"{type(module).__name__}.{name}": (t, _mark(t), self._builds_on_grad(t))
                   for name, t in (*module.named_parameters(recurse=False), *module.named_buffers(recurse=False))
                   if t is not None and not t.is_inference()}
            stats = _running_stats(module)
        except Exception:  # noqa: BLE001 - a module that cannot list its tensors is not watched
            return
        self._modules[id(module)] = (module, own, stats)

    def _builds_on_grad(self, t: Any) -> bool | None:
        """Whether this run's backward accumulates onto the ``.grad`` that ``t`` has at its module's
        first call: not where the step cleared it before its forward (written since the last run
        ended; None after one). None where this cannot tell yet: at the first look, a gradient
        may have been cleared by the step or by its caller before the call; the next run tells
        (:attr:`_pending`), from version counters (no read of its values)."""
        grad = getattr(t, "grad", None) if t.requires_grad else None
        ended = self._grads_ended.get(id(t))
        if grad is None:
            return False if ended is not None or not t.requires_grad else None
        if ended is not None:
            return ended == (id(grad), grad._version)
        return None  # found before this run (no reduction of it: on a device, a sync between the launches measured)

    def _step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if threading.get_ident() != self._thread:
            return
        name = type(optimizer).__name__
        if name not in self._stepped:
            self._stepped.append(name)

    def changes(self) -> list[str]:
        """What moved since each module's first call in this run (and the optimizers that stepped);
        the watch then starts over for the next run."""
        found = [f"{name}.step() ran" for name in self._stepped]
        tensors: list[str] = []
        pending: dict[int, str] = {}
        for _module, own, stats in self._modules.values():
            for name, (t, before, builds_on_grad) in own.items():
                now = _mark(t)
                if now[1:] != before[1:] and builds_on_grad:
                    tensors.append(f"{name}.grad")
                elif now[0] != before[0]:
                    tensors.append(name)
                elif now[1:] != before[1:] and builds_on_grad is None:
                    pending[id(t)] = f"{name}.grad"
                if now[1] is not None:
                    self._grads_ended[id(t)] = now[1:]
            tensors.extend(name for name in stats if name not in tensors)
        self._pending = pending
        self._modules.clear()
        self._stepped.clear()
        return found + _updated(tensors)

    def kept_run_changes(self) -> list[str]:
        """At the end of the kept run: the ``.grad`` that the last run thrown away made or changed from
        what it found at its first look (:attr:`_pending`) and that this run found in place and
        accumulated onto, so that it comes out twice one step's (the step does not clear it; its caller
        did, before the call)."""
        tensors = []
        if self._pending:
            for _module, own, _stats in self._modules.values():
                for name, (t, before, builds_on_grad) in own.items():
                    if builds_on_grad and id(t) in self._pending and _mark(t)[1:] != before[1:]:
                        tensors.append(f"{name}.grad")
        self._modules.clear()
        self._stepped.clear()
        return _updated(tensors)


def _updated(tensors: list[str]) -> list[str]:
    if not tensors:
        return []
    more = f" and {len(tensors) - NAMED} more" if len(tensors) > NAMED else ""
    return ["updated in place: " + ", ".join(tensors[:NAMED]) + more]


#: the watch the hooks hand their calls to (one contextual call tunes at a time)
_watch: StateWatch | None = None
#: the hooks' handles, made by the first watch: later watches put the hooks back under the same
#: ids, the keys of torch's global hook dicts, which Dynamo's guards compare (a new id each call
#: recompiled a compiled module in every call that tuned, up to Dynamo's recompile limit)
_handles: list[Any] = []


def _install() -> list[Any]:
    """The two hooks registered (their frames never compiled by Dynamo); their handles."""
    if not _handles:
        from torch.nn.modules.module import register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_post_hook

        for hook in (_module_called, _optimizer_stepped):
            _torch_compile.skip_everything_in(hook.__code__)
        _handles.extend((register_module_forward_pre_hook(_module_called),
                         register_optimizer_step_post_hook(_optimizer_stepped)))
        return list(_handles)
    for handle, again in zip(_handles, (_module_called, _optimizer_stepped), strict=True):
        hooks = handle.hooks_dict_ref()
        if hooks is not None:
            hooks[handle.id] = again
    return list(_handles)


def _compiling() -> bool:
    import torch

    return bool(torch.compiler.is_compiling())


def _module_called(module: Any, args: Any) -> None:
    if _compiling():  # traced by Dynamo: nothing, and nothing read that a guard would hold
        return
    watch = _watch
    if watch is not None:
        watch._called(module, args)


def _optimizer_stepped(optimizer: Any, args: Any, kwargs: Any) -> None:
    if _compiling():
        return
    watch = _watch
    if watch is not None:
        watch._step(optimizer, args, kwargs)
