"""What the benchmark scripts share: arguments, the environment record, tables, JSON results.

Every script prints its figures and writes ``<out>/<name>.json`` (``--out``, default
``benchmarks/results``): ``{"name", "environment", "config", "results", "summary"}``, where
``summary`` holds the headline figures and ratios measured in that one run. ``--quick`` shrinks a
script to a few seconds (the CI smoke test runs every script that way; its figures mean nothing).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import timeit
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as `python benchmarks/pN_*.py`: make `examples` importable
    sys.path.insert(0, str(REPO))

DEFAULT_OUT = REPO / "benchmarks" / "results"


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="tiny run for CI smoke tests (figures mean nothing)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="folder for <name>.json (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="seed of the injected noise (CPU workloads)")
    return p


def private_cache_dir() -> Path:
    """Point TRITON_DIST_AUTOTUNE_DIR at a fresh temporary folder (unless the caller set one)."""
    root = os.environ.get("TRITON_DIST_AUTOTUNE_DIR")
    if not root:
        root = tempfile.mkdtemp(prefix="triton-dist-bench-")
        os.environ["TRITON_DIST_AUTOTUNE_DIR"] = root
    return Path(root)


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def environment(backend: Any | None = None) -> dict[str, Any]:
    """Where and when the figures were measured."""
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    env: dict[str, Any] = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton_version,
        "cpu_count": os.cpu_count(),
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "git_commit": _git_commit(),
        "triton_interpret": os.environ.get("TRITON_INTERPRET"),
    }
    if backend is not None:
        env["device"] = backend.kind
        env["hardware"] = backend.hardware()
        env["software"] = backend.software()
    return env


def write_result(name: str, args: argparse.Namespace, config: Mapping[str, Any],
                 results: Any, summary: Mapping[str, Any], backend: Any | None = None) -> Path:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = clean({"name": name, "quick": bool(args.quick), "environment": environment(backend),
                  "config": dict(config), "results": results, "summary": dict(summary)})
    path = out / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n")
    print(f"\nsummary: {json.dumps(data['summary'], sort_keys=True)}")
    print(f"results written to {path}")
    return path


def clean(value: Any) -> Any:
    """``value`` as strict JSON: non-finite floats become None, tuples lists, keys strings,
    anything else its repr."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return repr(value)


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A Markdown table; floats get 4 significant digits."""
    def cell(v: Any) -> str:
        if isinstance(v, float):
            return "inf" if math.isinf(v) else f"{v:.4g}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (q in 0..100) of the values; nan when there are none."""
    data = sorted(values)
    if not data:
        return math.nan
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def interleaved_min_ns(statements: Mapping[str, str], namespace: dict[str, Any], *, number: int,
                       rounds: int, setup: str = "pass") -> dict[str, float]:
    """ns per execution of each statement: the minimum over ``rounds`` rounds of ``number``
    executions, the statements taking turns inside every round.

    Taking turns exposes every statement to the same machine state (these machines are shared
    and noisy), and the minimum is the run least disturbed by others; ratios of such minima
    measured in one run are what the benchmarks report.
    """
    return {name: min(values) for name, values in interleaved_ns(statements, namespace, number=number,
                                                                  rounds=rounds, setup=setup).items()}


def interleaved_ns(statements: Mapping[str, str], namespace: dict[str, Any], *, number: int,
                   rounds: int, setup: str = "pass") -> dict[str, list[float]]:
    """Every round's ns per execution of each statement (the statements taking turns, in the
    given order in even rounds and in the reverse order in odd ones: a drift of the machine's
    speed within a round then biases no statement against another over a pair of rounds)."""
    timers = {name: timeit.Timer(stmt, setup=setup, globals=namespace) for name, stmt in statements.items()}
    values: dict[str, list[float]] = {name: [] for name in statements}
    order = list(timers.items())
    for r in range(rounds):
        for name, timer in (order if r % 2 == 0 else reversed(order)):
            values[name].append(timer.timeit(number) / number * 1e9)
    return values


def alternating_ns(statements: Mapping[str, str], namespace: dict[str, Any], *, number: int,
                   rounds: int, setup: str = "pass", typical: bool = False,
                   interlude: str | None = None) -> dict[str, list[float]]:
    """Every round's ns per execution of each statement, the statements taking turns call by call.

    One iteration runs every statement once, each between two reads of the clock; a round is
    ``number`` iterations (``setup`` before it), in the given order in even rounds and in the
    reverse order in odd ones. Two statements are then compared over calls microseconds apart,
    not over blocks of calls milliseconds apart: a change of the machine's speed between blocks
    cancels in their difference. A round's figure is its mean per call, or with ``typical`` the
    median of its calls: a stall of the host (another tenant, an interrupt) that lands in one
    call of a statement then moves nothing. The clock's own cost is subtracted (an empty
    statement timed the same way).

    With ``interlude`` (a statement, untimed), every timed statement runs right after it: each
    then starts from the same state, that of a call following other code. Without it a statement
    starts from the state its predecessor left, and the order favours some: on the H200 host a
    statement timed right after one that ran the same host function read ~1 µs faster than in
    the other order (P1, 2026-12-02, reverse rounds: even ``key_fn`` + host read +1.16 µs over
    the host, forward rounds −0.56 µs)."""
    import statistics
    import time

    names = [*statements, "\0empty"]
    code = {**statements, "\0empty": "pass"}

    def loop_source(order: list[int]) -> str:
        lines = ["def _loop(_n, _clock):", f"    _calls = [[] for _ in range({len(names)})]",
                 f"    _sums = [0] * {len(names)}", "    for _ in range(_n):"]
        for i in order:
            done = f"_calls[{i}].append(_clock() - _t0)" if typical else f"_sums[{i}] += _clock() - _t0"
            if interlude is not None:
                lines += [f"        {line}" for line in interlude.splitlines()]
            lines += ["        _t0 = _clock()", *(f"        {line}" for line in code[names[i]].splitlines()),
                      f"        {done}"]
        result = "[statistics.median(c) for c in _calls]" if typical else "[s / _n for s in _sums]"
        return "\n".join([*lines, f"    return {result}"])

    loops = []
    for order in (list(range(len(names))), list(reversed(range(len(names))))):
        scope = {**namespace, "statistics": statistics}
        exec(compile(loop_source(order), "<alternating_ns>", "exec"), scope)  # the statements are ours
        loops.append(scope["_loop"])
    values: dict[str, list[float]] = {name: [] for name in statements}
    for r in range(rounds):
        exec(setup, namespace)
        per_call = loops[r % 2](number, time.perf_counter_ns)
        for name, ns in zip(names, per_call, strict=True):
            if name in values:
                values[name].append(ns - per_call[-1])
    return values


def timed(fn: Callable[[], Any], clock: Callable[[], float] | None = None) -> tuple[Any, float]:
    """(result, seconds) of one call."""
    clock = clock or time.perf_counter
    start = clock()
    result = fn()
    return result, clock() - start


def host_loop_ms(steps: int = 100_000, repeats: int = 3) -> float:
    """The host's speed now: the fastest of ``repeats`` runs of a pure-Python loop (ms). On the
    H200 leases (a VM) it swung between 3.5 and 7.7 ms within one process and within seconds
    (2026-12-04, scripts/device/idle_ledger.py), and the tuner's host work with it: the first
    call's figures are printed with it."""
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        total = 0
        for i in range(steps):
            total += i & 7
        best = min(best, time.perf_counter() - start)
    return best * 1e3

