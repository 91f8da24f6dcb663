"""``python -m ray_runner validate``: can every target and argument builder be imported?

The campaign file's structure is checked by :mod:`ray_runner.spec`. This module imports each
target (it must be an ``autotune``-decorated function) and each argument builder (a callable) the
way a campaign's actors do (:func:`ray_runner.worker.load_target`, ``load_attr``), in a
subprocess with the campaign's ``env`` and a time limit: importing user code may hang, start
threads or change the process, and validation must not. No Ray and no device are needed.

Run as ``python -m ray_runner.validate`` it reads a JSON list of ``[function, builder]`` pairs on
stdin and writes a JSON list of problems on stdout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from .spec import Campaign

__all__ = ["check_imports"]

#: the default bound on importing every target (user modules may import torch and Triton)
IMPORT_TIMEOUT_S = 120.0

#: rank 0 of a one-rank world, as an actor's case runs in (``torchrun --nproc_per_node=1``)
ONE_RANK = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}


def _check(pairs: list[list[str]]) -> list[str]:
    from .worker import load_attr, load_target

    problems: list[str] = []
    for function in dict.fromkeys(p[0] for p in pairs):
        try:
            load_target(function, what=f"function {function}")
        except Exception as exc:  # noqa: BLE001 - every problem is reported, not only the first
            problems.append(str(exc))
    for builder in dict.fromkeys(p[1] for p in pairs):
        try:
            if not callable(load_attr(builder, f"args {builder}")):
                problems.append(f"args {builder}: not a callable")
        except Exception as exc:  # noqa: BLE001
            problems.append(str(exc))
    return problems


def check_imports(campaign: Campaign, timeout_s: float = IMPORT_TIMEOUT_S) -> list[str]:
    """One line per target or builder that cannot be imported or is of the wrong kind; [] if
    all are fine. Runs in a subprocess of this interpreter, in the working directory (campaign
    paths are relative to it, as for Ray's workers), bounded by ``timeout_s``."""
    pairs = [[t.function, t.args] for t in campaign.targets]
    # the world an actor imports them in (ray_runner.world sets these over the campaign's env): a
    # module reading os.environ["LOCAL_RANK"] at import was "not importable" here, fine on the actors
    env = {**os.environ, **campaign.env_dict(), **ONE_RANK}
    try:
        proc = subprocess.run([sys.executable, "-m", "ray_runner.validate"], input=json.dumps(pairs),
                              capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
    except subprocess.TimeoutExpired:
        return [f"importing the targets did not finish within {timeout_s:g}s (--import-timeout): "
                "a module hangs at import time? " + ", ".join(t.function for t in campaign.targets)]
    try:
        problems: Any = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return [f"the import check exited with status {proc.returncode}: " + " | ".join(tail)]
    return [str(p) for p in problems]


def _main() -> int:
    pairs = json.load(sys.stdin)
    problems = _check(pairs)
    sys.stdout.write("\n" + json.dumps(problems) + "\n")  # last line: user imports may print
    return 0


if __name__ == "__main__":
    sys.exit(_main())
