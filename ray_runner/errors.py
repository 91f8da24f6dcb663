"""Errors of the campaign runner (in the project's one hierarchy; picklable across Ray)."""

from __future__ import annotations

import re

from triton_dist.errors import CampaignError, RayNotInstalledError, TritonDistError

__all__ = ["CampaignError", "CaseTimeoutError", "GangStartError", "InfrastructureError",
           "RayNotInstalledError", "describe_failure", "root_cause"]


class InfrastructureError(TritonDistError, RuntimeError):
    """The cluster cannot run the campaign: no connection, missing resources, unwritable cache."""


class GangStartError(TritonDistError, RuntimeError):
    """A gang could not be placed or could not form its process group in time."""


class CaseTimeoutError(TritonDistError, TimeoutError):
    """One attempt of a case ran past ``case_timeout_s``; its gang was killed."""


_FINAL = ("CampaignError", "DeviceUnavailableError", "SettingsError")
_ERROR_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Interrupt|Exit)):\s?(.*)$")


def describe_failure(exc: BaseException) -> tuple[str, bool]:
    """(one-paragraph reason, whether a retry could help) for an exception out of a gang.

    Unwraps Ray's wrappers: a task error becomes its cause; an actor that died in its
    constructor becomes the error it raised there. Configuration errors (bad import path, device
    not usable, bad environment variable) are final: a fresh gang would fail the same way.
    """
    if isinstance(exc, GangStartError):
        return str(exc), bool(exc.details.get("retry", True))
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        exc = cause
    name = type(exc).__name__
    text = str(exc).strip()
    notes = [n for n in getattr(exc, "__notes__", None) or () if isinstance(n, str)]
    if notes:  # where it happened: the rank, the step, the user's line (worker.attribute)
        text = f"{text} [{'; '.join(notes)}]"
    if name in _FINAL or isinstance(exc, CampaignError):
        return f"{name}: {text}"[:2000], False
    if name in ("ActorDiedError", "RayActorError", "ActorUnavailableError"):
        raised = [m for m in (_ERROR_LINE.match(line) for line in text.splitlines()) if m]
        if raised:
            inner, message = raised[-1].group(1), raised[-1].group(2)
            final = inner.rsplit(".", 1)[-1] in _FINAL
            return f"actor died: {inner.rsplit('.', 1)[-1]}: {message}"[:2000], not final
        first = text.splitlines()[0] if text else name
        return f"actor died ({name}: {first})"[:2000], True
    return f"{name}: {text}"[:2000], True


def root_cause(errors: list[BaseException], known_failures: dict[int, str]) -> BaseException:
    """Which of the ranks' ``errors`` explains a failed attempt (the first one seen comes first).

    A candidate that left its device unusable (``DeviceStateError``: its index and reason go
    into ``known_failures``, so that the retry records it as failed without running it, issue 7
    R4), then a dead actor or a rank's own error, over the peers' "another rank failed"
    (``RankFailureError``)."""
    causes = [(getattr(e, "cause", None) or e, e) for e in errors]
    for cause, error in causes:
        details = getattr(cause, "details", None) or {}
        if type(cause).__name__ == "DeviceStateError" and isinstance(details.get("index"), int):
            known_failures[details["index"]] = str(details.get("reason") or cause)
            return error
    for cause, error in causes:
        if type(cause).__name__ != "RankFailureError":
            return error
    return errors[0]
