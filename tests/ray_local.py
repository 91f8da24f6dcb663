"""One local Ray for a test module (shared by tests/ray and tests/reliability)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


@contextlib.contextmanager
def local_ray(num_cpus: int, namespace: str, resources: dict[str, float] | None = None,
              **env: str) -> Iterator[str]:
    """Start Ray in this process (``num_cpus`` CPUs, custom ``resources``, ``env`` set meanwhile)
    and yield its address.

    The actors import the targets from the driver's working directory: this runs from the repo
    root, and goes back afterwards."""
    import ray

    cwd = os.getcwd()
    with pytest.MonkeyPatch.context() as mp:
        for name, value in {**RAY_ENV, **env}.items():
            mp.setenv(name, value)
        os.chdir(REPO)
        try:
            # "local": a Ray of its own, even when another process on this machine runs one
            ray.init(address="local", num_cpus=num_cpus, resources=resources, include_dashboard=False,
                     namespace=namespace, log_to_driver=False)
            yield ray.get_runtime_context().gcs_address
        finally:
            ray.shutdown()
            os.chdir(cwd)
