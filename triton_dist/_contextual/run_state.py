"""The runs of one contextual call's outer function: which one is kept, what each starts from, what
the ones thrown away changed, and which keys a group decided.

:class:`RunState` is the base of ``session.Session`` (a base class, not an object it holds: the
path of a call whose kernels are all cached, ``take_rng``, ``begin_run``, ``_decided_by_group``,
is one method lookup as before, with no call or attribute more). Its attributes are set in
``Session.__init__``:

- a run with kernels still measuring is thrown away, the run after the last one is kept
  (:meth:`~RunState.begin_run`); a re-run that no longer launches a kernel still measuring stalls;
- every run draws what the first drew (dropout, a seed): torch's generators are taken before the
  first run and put back before each later one (``_measure.rng``);
- a run thrown away that changed training state (``side_effects.StateWatch``) is said once;
- a run that began as the kept one and meets a kernel to tune is thrown away from there; runs
  that keep meeting new keys raise;
- a config in an autotuner's ``cache`` lets an ``is_dist`` call skip a kernel only where the
  group decided it (``_GROUP_DECIDED``).
"""

from __future__ import annotations

import logging
import warnings
import weakref
from typing import TYPE_CHECKING, Any

from triton_dist._measure.rng import RngState, tensor_devices
from triton_dist._warn import warn_user
from triton_dist.dist import world_generation
from triton_dist.errors import ContextualTuningError, TritonDistWarning

if TYPE_CHECKING:
    from triton_dist._backends import Backend
    from triton_dist._contextual.schedule import KernelTuning
    from triton_dist._contextual.side_effects import StateWatch
    from triton_dist._distributed import GroupView

__all__ = ["MAX_LATE_KEYS", "RunState"]

#: the session's logger (docs/architecture.md)
log = logging.getLogger("triton_dist._contextual.session")

#: runs after the first that were to be kept and met a new key: more, and the keys never settle
MAX_LATE_KEYS = 4
#: the (key, WORLD ranks, torch.distributed init) of each autotuner that a group decided
#: (``is_dist=True``): a config in its ``cache`` that this rank decided alone (an ``is_dist=False``
#: call, a stock tuning, a warm-up), or with the WORLD of an earlier init (whose ranks may have
#: restarted since), does not let it skip the group's tuning, which the other ranks would wait for
#: (U7's rule for ``autotune``: decisions per group)
_GROUP_DECIDED: weakref.WeakKeyDictionary[Any, set[tuple[Any, tuple[int, ...], int]]] = weakref.WeakKeyDictionary()


class RunState:
    """The run bookkeeping of a ``Session`` (see the module docstring)."""

    qualname: str
    backend: Backend
    view: GroupView | None
    states: dict[tuple[int, tuple], KernelTuning]
    real_updates: list[str]  # kernels that updated declared arguments in a run kept so far
    # where each starts (set on the instance once it changes: no store on a call that tunes nothing)
    run_index: int = 0
    run_tunes: bool = False
    late_keys: int = 0  # runs after the first that were to be kept and met a new key
    # every run draws what the first drew (dropout, a seed): the kept run draws what one untuned
    # call draws, and what follows the call what it would have drawn (_measure.rng)
    rng: RngState | None = None  # taken by take_rng, before the first run
    watch: StateWatch | None = None  # training state runs thrown away change, once one tunes

    def info(self, message: str, *args: object) -> None:  # the call's log (Session.info)
        raise NotImplementedError

    def take_rng(self, args: tuple, kwargs: dict) -> None:
        """torch's generators as the caller left them: the current device's and those of the
        outer call's tensors (by the backend's kind: device() of a stand-in NPU is no torch device)."""
        kind = self.backend.kind
        self.rng = RngState(kind, tensor_devices((*args, *kwargs.values()), kind) if kind != "cpu" else ())

    def begin_run(self) -> None:
        if self.run_index and self.rng is not None:  # the run before was thrown away
            self.rng.restore()
        self.run_index += 1
        # a run with kernels still measuring is thrown away; the run after the last one is kept
        # (no generator over an empty table: a call whose kernels are all cached has none)
        self.run_tunes = bool(self.states) and any(not s.done for s in self.states.values())
        self.real_updates.clear()

    def is_final_run(self) -> bool:
        return not self.run_tunes

    def stalled(self) -> list[KernelTuning]:
        """Kernels still measuring that this run (not the one that found them) never launched."""
        return [s for s in self.states.values() if not s.done
                and s.registered_run < self.run_index and s.progress_run != self.run_index]

    def stall_error(self, stalled: list[KernelTuning]) -> ContextualTuningError:
        """Kernels a re-run did not bring to their autotuner: a key or a branch that changed, or a
        dispatch cache in front of the autotuner (FlagGems' ``libentry``), which launches the kernel
        itself after the autotuner's first launch of a key and so keeps the config being measured."""
        names = "; ".join(f"{s.name} with key {s.key_text} ({s.slot}/{s.total} launches done)"
                          for s in stalled)
        through = "its autotuner" if len(stalled) == 1 else "their autotuners"
        return ContextualTuningError(
            f"contextual tuning of {self.qualname}: a re-run of the outer function did not launch "
            f"{names} through {through}. contextual_autotune re-runs the outer function until every "
            "inner kernel has run each candidate, so every run must launch the same kernels with the "
            "same keys through their triton.autotune: a key that changes between runs or a branch not "
            "taken again stops it, and so does a dispatch cache in front of the autotuner (FlagGems' "
            "libentry), which launches the kernel itself after the autotuner's first launch of a key; "
            "such a cache now holds the config this tuning was measuring, which nothing chose (clear it, "
            "as FlagGems' clear_libentry_dispatch_cache does, or start a new process). Tune such a kernel "
            "with triton_dist.tune.autotune (around the function that launches it), or warm it first: "
            "one call outside contextual_autotune (the undecorated function, .fn) lets its own autotuner "
            "choose, and later calls launch that choice.",
            kernels=[s.name for s in stalled],
        )

    def _say_side_effects(self, watch: StateWatch, *, kept: bool = False) -> None:
        """A run thrown away that stepped an optimizer or updated a module's parameters, buffers or
        ``.grad`` in place: the next run (and the kept one) builds on it. Said once per call; at the
        end of the kept run (``kept``) for a ``.grad`` the last run thrown away made from None or
        zeros and the kept run accumulated onto (``StateWatch.kept_run_changes``)."""
        changes = watch.kept_run_changes() if kept else watch.changes()
        if not changes:
            return
        watch.stop()
        message = (f"contextual tuning of {self.qualname}: run {self.run_index - kept} of the outer function was "
                   "thrown away (inner kernels were still measuring), but it changed training state that "
                   f"the next run builds on: {'; '.join(changes)}. contextual_autotune runs the outer "
                   "function several times in a call that tunes and keeps the last run, so these updates "
                   "happen once per run: the parameters, optimizer state and statistics come out as after "
                   "several steps. Decorate the forward only and call loss.backward() and optimizer.step() "
                   "outside it, or tune first with a call on a copy of the model and optimizer "
                   "(copy.deepcopy): later calls whose kernels are cached run once. An update that writes "
                   "the same values in every run is harmless: filter this TritonDistWarning.")
        self.info("%s", message)
        warn_user(message, log=log, function=self.qualname)

    def _became_tuning(self, name: str, key_text: str) -> None:
        """A run that began as the kept one meets a kernel to tune: it is thrown away from here."""
        if self.real_updates:  # launched as the kept run's: their updates stay, and come again
            updated = ", ".join(sorted(set(self.real_updates)))
            message = (f"contextual tuning of {self.qualname}: {updated} updated its restore_value/"
                       f"reset_to_zero arguments in this run before {name} (key {key_text}) started "
                       "tuning, so the update is kept and the run that is kept applies it again. "
                       "contextual_autotune re-runs the outer function; launch the kernels that tune "
                       "before the ones that update persistent buffers, or warm new keys with a call "
                       "on scratch buffers first.")
            self.info("%s", message)
            warnings.warn(message, TritonDistWarning, stacklevel=6)
            self.real_updates.clear()
        if self.run_index > 1:
            self.late_keys += 1
            if self.late_keys > MAX_LATE_KEYS:
                raise ContextualTuningError(
                    f"contextual tuning of {self.qualname}: {self.late_keys} runs that were to be the "
                    f"kept one met a new key (the last: {name} with key {key_text}): the kernels' keys "
                    "change from run to run, so the tuning would never end. contextual_autotune "
                    "re-runs the outer function: keys must not depend on state its runs change (a "
                    "counter updated in place, a data-dependent size); tune such a kernel with "
                    "triton_dist.tune.autotune, or give its key_fn the sizes of the first run.",
                    kernels=[name],
                )

    def _decided_by_group(self, at: Any, key: tuple) -> bool:
        """Without ``is_dist``, any cached config is this call's; with it, only the group's."""
        return self.view is None or (key, self.view.ranks, world_generation()) in _GROUP_DECIDED.get(at, ())

    def group_decided(self, at: Any, key: tuple) -> None:
        if self.view is not None:
            _GROUP_DECIDED.setdefault(at, set()).add((key, self.view.ranks, world_generation()))
