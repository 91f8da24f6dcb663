"""Every ``TRITON_DIST_*`` environment variable, parsed strictly and read lazily.

Settings are read when a tuning decision is made (a miss), never at import and never on the
cached-call hot path. Tests override them with :func:`override` instead of touching ``HOME``.
A boolean variable reads 1/true/on/yes and 0/false/off/no in any case (:func:`parse_bool`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from triton_dist._kinds import KINDS
from triton_dist.errors import SettingsError

__all__ = ["DEVICE_KINDS", "ENV_VARS", "OTHER_NAMES", "Settings", "get_settings", "override", "parse_bool",
           "unknown_names"]

AUTOTUNE_DIR = "TRITON_DIST_AUTOTUNE_DIR"
DEVICE = "TRITON_DIST_DEVICE"
ALWAYS_TUNE = "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE"
VERSION_CHECK = "TRITON_DIST_AUTOTUNE_VERSION_CHECK"
CACHE_ONLY = "TRITON_DIST_AUTOTUNE_CACHE_ONLY"
AGREE_TIMEOUT = "TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S"
CANDIDATE_TIMEOUT = "TRITON_DIST_AUTOTUNE_CANDIDATE_TIMEOUT_S"
COMPILE_WORKERS = "TRITON_DIST_COMPILE_WORKERS"
PREWARM = "TRITON_DIST_PREWARM"
GRAPH_PLACEMENTS = "TRITON_DIST_GRAPH_PLACEMENTS"

#: the most compile workers (child processes, or threads) the default (the CPU count) asks for
MAX_DEFAULT_COMPILE_WORKERS = 32

#: the device kinds ``TRITON_DIST_DEVICE`` (and a campaign's ``device``) may name, in detection
#: order; one backend each (``triton_dist._kinds``, the one table of them)
DEVICE_KINDS = tuple(KINDS)

#: name -> one-line documentation (the CLI and docs print this table)
ENV_VARS: Mapping[str, str] = {
    AUTOTUNE_DIR: "cache root (default ~/.triton_dist/autotune); entries under <root>/<function_name>/",
    DEVICE: "cpu, cuda or npu (default: detected, NPU > CUDA > CPU)",
    ALWAYS_TUNE: "1 (true/on/yes): re-tune even when a cache entry exists (0/false/off/no or unset: use the cache)",
    VERSION_CHECK: "1 (true/on/yes): a software-version mismatch is a cache miss (0/false/off/no or unset: a warning)",
    CACHE_ONLY: "1 (true/on/yes): a miss runs config_space[0] without tuning; strict: a miss is an error",
    AGREE_TIMEOUT: "seconds the ranks of a group wait for each other before failing (default 300)",
    CANDIDATE_TIMEOUT: "seconds one candidate's warm-up and timed runs may take before it is recorded as "
                       "timed out, inf (default: off; on the CPU the tuner stops waiting at the limit, on "
                       "GPUs/NPUs the limit is checked between runs)",
    COMPILE_WORKERS: "child processes (threads where Triton lacks AsyncCompileMode) that compile a miss's "
                     "configs concurrently before measuring (default: the CPU count, divided among the node's "
                     "ranks when LOCAL_WORLD_SIZE says how many, at most 32; 1: each config compiles at its "
                     "first launch)",
    PREWARM: "0 (false/off/no): do not compute Triton's start-up work (its installation hash) in a background "
             "thread when a function is decorated (default: on, except under TRITON_INTERPRET=1)",
    GRAPH_PLACEMENTS: "graph mode (CUDA, NPU; a rank alone): the memory placements each config is timed in, 1 or 2 "
                      "(default 2: each config captured again into a second graph pool halfway through its timed "
                      "rounds, its figure the mean over both, at the same device time)",
}


#: TRITON_DIST_* variables read elsewhere (the hardware digest's override: _store/fingerprint.py)
OTHER_NAMES = ("TRITON_DIST_HARDWARE_OVERRIDE",)


def unknown_names(env: Mapping[str, str]) -> list[str]:
    """One line for each name of ``env`` that looks like a setting but is none, and is therefore
    ignored: any ``TRITON_DIST_AUTOTUNE_*`` name, or a ``TRITON_DIST_*`` name close to a setting's
    (others are left alone: upstream Triton-distributed reads ``TRITON_DIST_LOG_LEVEL``). A
    misspelt cache root (``TRITON_DIST_AUTOTUNE_CACHE_DIR``) left every job of a cluster on its own
    ``~/.triton_dist`` without a word, a misspelt cache-only switch let production jobs tune (an
    operator, 2026-12-05)."""
    known = (*ENV_VARS, *OTHER_NAMES)
    lines = []
    for name in sorted(env):
        if not name.startswith("TRITON_DIST_") or name in known:
            continue
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
        if close or name.startswith("TRITON_DIST_AUTOTUNE_"):
            lines.append(f"{name} is not a setting of this triton_dist and is ignored"
                         + (f": did you mean {close[0]}?" if close else "")
                         + f" (the settings: {', '.join(ENV_VARS)})")
    return lines


#: the names :func:`get_settings` has warned about in this process (once each)
_told: set[str] = set()


def _warn_unknown(environ: Mapping[str, str]) -> None:
    """Warn once per process about each name :func:`unknown_names` finds (at a parse, not per call)."""
    lines = [line for line in unknown_names(environ) if line.split(" ", 1)[0] not in _told]
    if lines:
        from triton_dist._warn import warn_user  # lazily: importing the settings imports no more

        _told.update(line.split(" ", 1)[0] for line in lines)
        for line in lines:
            warn_user(line)


@dataclasses.dataclass(frozen=True)
class Settings:
    """The parsed environment. Every field documents the variable it comes from."""

    autotune_dir: Path
    """``TRITON_DIST_AUTOTUNE_DIR``: the cache root."""
    device: str | None
    """``TRITON_DIST_DEVICE``: forced device kind, or None to detect."""
    always_tune: bool
    """``TRITON_DIST_AUTOTUNE_ALWAYS_TUNE=1``: ignore cache hits and re-tune."""
    version_check: bool
    """``TRITON_DIST_AUTOTUNE_VERSION_CHECK=1``: version mismatch -> miss."""
    cache_only: str
    """``TRITON_DIST_AUTOTUNE_CACHE_ONLY``: "off", "default" (=1) or "strict"."""
    agree_timeout_s: float
    """``TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S``: bound on every cross-rank wait."""
    candidate_timeout_s: float | None
    """``TRITON_DIST_AUTOTUNE_CANDIDATE_TIMEOUT_S``: opt-in per-candidate time limit."""
    compile_workers: int = 1
    """``TRITON_DIST_COMPILE_WORKERS``: bound on the child processes (threads where Triton lacks
    ``AsyncCompileMode``) that compile a miss's configs."""
    prewarm: bool = True
    """``TRITON_DIST_PREWARM``: Triton's start-up work in the background at decoration."""
    graph_placements: int = 2
    """``TRITON_DIST_GRAPH_PLACEMENTS``: the memory placements graph mode times each config in.
    Two by default since issue 16: on an H200 a config's time moved by 1-23 % with where its
    outputs lay, so one placement per process mis-ranked configs closer than that (docs/performance.md,
    runs P-S: mis-picks > 0.5 % on tutorial kernels >= 30 us 8 in 84 with one, 3 with two)."""


#: the spellings of a boolean value, case-insensitive: upstream Triton-distributed accepts
#: on/off and true/false as well as 1/0 (issue 18 item 4), and yes/no is common in manifests
TRUE_WORDS = ("1", "true", "on", "yes")
FALSE_WORDS = ("0", "false", "off", "no")
_BOOL_HELP = "1/true/on/yes to enable, 0/false/off/no (any case) or unset to disable"


def parse_bool(raw: str) -> bool | None:
    """True, False, or None when ``raw`` is not a boolean spelling (empty is False)."""
    word = raw.strip().lower()
    if word == "" or word in FALSE_WORDS:
        return False
    if word in TRUE_WORDS:
        return True
    return None


def _flag(env: Mapping[str, str], name: str, spellings: str = _BOOL_HELP) -> bool:
    """A boolean variable; ``spellings``: its spellings and what unset means (off, unless it says)."""
    raw = env.get(name, "").strip()
    value = parse_bool(raw)
    if value is None:
        raise SettingsError(f"{name}={raw!r} is not valid: set it to {spellings}.")
    return value


#: TRITON_DIST_PREWARM is on when unset (README): "unset to disable" sent users the wrong way
_PREWARM_HELP = ("0/false/off/no (any case) to turn the background prewarm off, or to 1/true/on/yes, or unset "
                 "it, for the default: on, except under TRITON_INTERPRET=1")


def _positive_float(env: Mapping[str, str], name: str, default: float | None, unset: str) -> float | None:
    """A number of seconds > 0; ``unset``: what leaving it unset gives, as the README says."""
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise SettingsError(f"{name}={raw!r} is not valid: give a positive number of seconds, or unset it "
                            f"for {unset}.")
    return value


def _affinity() -> int:
    """How many CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def default_compile_workers(local_world_size: str | None = None) -> int:
    """The CPUs this process may run on (its affinity), at most ``MAX_DEFAULT_COMPILE_WORKERS``.
    When this process is not pinned to a subset of the node's CPUs and its launcher says how many
    ranks share the node (torchrun's ``LOCAL_WORLD_SIZE``), its share of them: every rank's miss
    compiles in its own children, so 8 ranks x 32 would oversubscribe the node's cores and memory."""
    count = _affinity()
    ranks = (os.environ.get("LOCAL_WORLD_SIZE", "") if local_world_size is None else local_world_size).strip()
    if ranks.isdigit() and int(ranks) > 1 and count == os.cpu_count():
        count //= int(ranks)
    return max(1, min(count, MAX_DEFAULT_COMPILE_WORKERS))


def _workers(env: Mapping[str, str], name: str) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default_compile_workers()
    if not raw.isdigit() or int(raw) < 1:
        # child processes, not threads (README): threads only where Triton lacks AsyncCompileMode
        raise SettingsError(f"{name}={raw!r} is not valid: give a whole number >= 1 of compile workers, child "
                            "processes (threads where Triton lacks AsyncCompileMode) that compile a miss's "
                            "configs before measuring (1: each config compiles at its first launch), or unset "
                            "it for the default: the CPU count, divided among the node's ranks when "
                            f"LOCAL_WORLD_SIZE says how many, at most {MAX_DEFAULT_COMPILE_WORKERS}.")
    return int(raw)


def _placements(env: Mapping[str, str]) -> int:
    raw = env.get(GRAPH_PLACEMENTS, "").strip()
    if not raw:
        return 2
    if raw not in ("1", "2"):
        raise SettingsError(f"{GRAPH_PLACEMENTS}={raw!r} is not valid: give 1 (each config timed where its first "
                            "graph's memory lies) or 2 (and in a second graph pool), or unset it for 2.")
    return int(raw)


def _parse(env: Mapping[str, str]) -> Settings:
    root = env.get(AUTOTUNE_DIR, "").strip()
    device = env.get(DEVICE, "").strip().lower() or None
    if device is not None and device not in DEVICE_KINDS:
        raise SettingsError(f"{DEVICE}={env[DEVICE]!r} is not valid: use cpu, cuda or npu, or unset it to detect.")
    cache_only_raw = env.get(CACHE_ONLY, "").strip()
    as_bool = parse_bool(cache_only_raw)
    cache_only = "strict" if cache_only_raw.lower() == "strict" else \
        None if as_bool is None else "default" if as_bool else "off"
    if cache_only is None:
        raise SettingsError(
            f"{CACHE_ONLY}={cache_only_raw!r} is not valid: use 1/true/on/yes (a miss runs "
            "config_space[0]), strict (a miss is an error), or 0/false/off/no (any case) / unset "
            "it to tune on a miss."
        )
    always_tune = _flag(env, ALWAYS_TUNE)
    if always_tune and cache_only != "off":  # one says tune on every call, the other never: a hit was
        # ignored, then config_space[0] ran untuned or strict raised (a tester, session 28)
        raise SettingsError(
            f"{ALWAYS_TUNE}={env[ALWAYS_TUNE].strip()} and {CACHE_ONLY}={cache_only_raw} contradict each other: "
            "the first re-tunes every key, the second never tunes. Unset one of them (a warm-started job: unset "
            f"{ALWAYS_TUNE}).")
    return Settings(
        autotune_dir=Path(root).expanduser() if root else Path.home() / ".triton_dist" / "autotune",
        device=device,
        always_tune=always_tune,
        version_check=_flag(env, VERSION_CHECK),
        cache_only=cache_only,
        agree_timeout_s=_positive_float(env, AGREE_TIMEOUT, 300.0, "the default, 300"),  # type: ignore[arg-type]
        candidate_timeout_s=_positive_float(env, CANDIDATE_TIMEOUT, None, "no limit (the default)"),
        compile_workers=_workers(env, COMPILE_WORKERS),
        prewarm=_flag(env, PREWARM, _PREWARM_HELP) if env.get(PREWARM, "").strip() else True,
        graph_placements=_placements(env),
    )


_overrides: dict[str, str | None] = {}


#: (what the last parse read, its result): a miss asks for the settings several times, and
#: copying a large environment each time cost ~0.2 ms of a first call (P2, issue 16)
_last: tuple[tuple[Any, ...], Settings] | None = None

#: what a parse reads of the environment besides ENV_VARS
_ALSO_READ = ("LOCAL_WORLD_SIZE", "HOME")
_READ_ENCODED = tuple(os.fsencode(name) for name in (*ENV_VARS, *_ALSO_READ)) if os.name == "posix" else ()


def _environment_stamp() -> tuple[Any, ...]:
    """The values of what a parse reads. On POSIX, read from the encoded mapping CPython keeps
    behind ``os.environ`` (and updates with it): ``name in os.environ`` raises and catches a
    KeyError per unset name, ~20 µs a call on the CPU machine, three calls a miss (issue 16)."""
    data = getattr(os.environ, "_data", None)
    if _READ_ENCODED and isinstance(data, dict):
        # map, not a generator expression: a Python frame resumed per name cost ~0.3 µs a read,
        # a contextual call's included (its backend's lookup)
        return tuple(map(data.get, _READ_ENCODED))
    environ = os.environ
    return tuple(environ.get(name) for name in (*ENV_VARS, *_ALSO_READ))


def get_settings() -> Settings:
    """Parse the environment (with any active :func:`override`) now: only the variables it
    reads, and again only when one of them (or the CPU affinity, which the default compile
    workers follow) changed since the last call."""
    global _last
    # the CPU count is read from sysfs (~6 µs): the affinity stands for it (a CPU taken offline
    # leaves it), the function for a test that replaces it
    stamp = (_environment_stamp(), tuple(_overrides.items()), _affinity(), os.cpu_count)
    last = _last
    if last is not None and last[0] == stamp:
        return last[1]
    environ = os.environ
    env = {name: environ[name] for name in ENV_VARS if name in environ}
    for name, value in _overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    settings = _parse(env)
    _warn_unknown(environ)
    _last = (stamp, settings)
    return settings


@contextlib.contextmanager
def override(**values: str | None) -> Iterator[None]:
    """Scoped override for tests: ``override(TRITON_DIST_AUTOTUNE_DIR="/tmp/x")``; None unsets."""
    unknown = set(values) - set(ENV_VARS)
    if unknown:
        raise SettingsError(f"unknown setting(s) {sorted(unknown)}; known: {sorted(ENV_VARS)}")
    saved = dict(_overrides)
    _overrides.update(values)
    try:
        yield
    finally:
        _overrides.clear()
        _overrides.update(saved)
