"""One exception hierarchy for the project.

Every error says what is wrong and how to fix it. All of them are picklable (they cross process
and Ray boundaries), so subclasses take a single message plus keyword details that are restored
by ``__reduce__``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CacheAdminError",
    "CacheMissError",
    "CampaignError",
    "CandidateTimeoutError",
    "ConfigSpaceError",
    "ContextualTuningError",
    "DeviceStateError",
    "DeviceUnavailableError",
    "DuplicateArgumentError",
    "KeyFunctionError",
    "NoValidConfigError",
    "PruneError",
    "RankDisagreementError",
    "RankFailureError",
    "RayNotInstalledError",
    "SettingsError",
    "TritonDistError",
    "TritonDistWarning",
    "TunerActiveError",
    "WrongResultError",
]


class TritonDistError(Exception):
    """Base class of every error raised by triton_dist and ray_runner."""

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.details = details

    def __reduce__(self):  # keep subclasses, their details and notes (add_note) across pickling
        state: dict[str, Any] = {"details": self.details}
        if getattr(self, "__notes__", None):
            state["__notes__"] = list(self.__notes__)
        return (self.__class__, (str(self),), state)


class TritonDistWarning(UserWarning):
    """Warnings emitted by triton_dist (corrupt cache files, unwritable cache, cache-only misses)."""


class SettingsError(TritonDistError, ValueError):
    """A ``TRITON_DIST_*`` environment variable has a value that is not documented."""


class ConfigSpaceError(TritonDistError, ValueError):
    """``config_space`` is not a non-empty list of dicts the function accepts."""


class DuplicateArgumentError(TritonDistError, ValueError):
    """A business keyword argument has the same name as a config field."""


class KeyFunctionError(TritonDistError, TypeError):
    """``key_fn`` returned a value that is unhashable or has no stable ``repr``."""


class PruneError(TritonDistError, ValueError):
    """``prune_fn`` raised, returned a non-bool, or kept no config for a key."""


class NoValidConfigError(TritonDistError, RuntimeError):
    """Every candidate failed; the message lists each one and why."""


class RankDisagreementError(TritonDistError, RuntimeError):
    """The ranks of a tuning group disagree on the key, the cache decision or the kept configs."""


class RankFailureError(TritonDistError, RuntimeError):
    """Another rank of the tuning group failed or did not answer in time."""


class CacheAdminError(TritonDistError, ValueError):
    """A cache command cannot do what was asked: no such entry, an archive that is refused."""


class CacheMissError(TritonDistError, LookupError):
    """Strict cache-only mode (``TRITON_DIST_AUTOTUNE_CACHE_ONLY=strict``) found no entry."""


class DeviceUnavailableError(TritonDistError, RuntimeError):
    """The requested device kind is not usable in this process."""


class TunerActiveError(TritonDistError, RuntimeError):
    """A ContextualAutoTuner is already active (nested or concurrent use)."""


class ContextualTuningError(TritonDistError, RuntimeError):
    """contextual_autotune cannot go on: re-runs of the outer function stopped launching a kernel
    that is being tuned, or ``is_dist=True`` without an initialised torch.distributed."""


class CampaignError(TritonDistError, ValueError):
    """A campaign file is invalid; the message names the field path."""


class RayNotInstalledError(TritonDistError, ImportError):
    """Ray is needed for this command but is not installed."""


class CandidateTimeoutError(TritonDistError, RuntimeError):
    """A candidate ran past ``TRITON_DIST_AUTOTUNE_CANDIDATE_TIMEOUT_S`` (a config failure: ``inf``)."""


class WrongResultError(TritonDistError, RuntimeError):
    """A candidate's output differs from the default config's (``check_correctness``; ``inf``)."""


class DeviceStateError(TritonDistError, RuntimeError):
    """A candidate left the device in a sticky error state (CUDA: an illegal memory access).

    Tuning stops: nothing else can run on the device in this process. ``details["index"]`` is the
    candidate; a Ray campaign retries the case on a fresh actor with it marked failed.
    """
