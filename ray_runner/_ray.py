"""Ray, imported lazily: connecting, resources, and the error that says how to install it."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any

from triton_dist.errors import RayNotInstalledError

__all__ = ["actor_resources", "bundle", "cluster_capacity", "import_ray", "ray_session", "resolve_device",
           "unknown_resource_note"]

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'triton-dist-autotune[ray]'"


def import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise RayNotInstalledError(
            f"this command needs Ray, which is not installed ({exc}); install it with: {INSTALL_HINT}"
        ) from exc
    return ray


def actor_resources(resource: str) -> dict[str, Any]:
    """Ray options for an actor/task that holds one unit of ``resource``.

    Ray refuses CPU/GPU inside ``resources=``; they have their own options. Actors that ask for
    a device ask for no CPU, so that a node's CPU count never limits how many devices it runs.
    """
    if resource == "CPU":
        return {"num_cpus": 1}
    if resource == "GPU":
        return {"num_cpus": 0, "num_gpus": 1}
    return {"num_cpus": 0, "resources": {resource: 1}}


def bundle(resource: str) -> dict[str, float]:
    return {resource: 1}


def known_resources() -> tuple[str, ...]:
    """The device resources Ray and this project know: each device kind's (``CPU``, ``GPU``, ``NPU``)."""
    from triton_dist._backends import BACKENDS

    return tuple(kind.ray_resource for kind in BACKENDS.values())


def unknown_resource_note(resource: str | None, embedded: int = 0) -> str | None:
    """Why a campaign's ``ray_resource`` may be a mistake, or None for a known device resource.

    A custom resource is legitimate (nodes started with ``--resources`` stand in for devices),
    but nothing checks its spelling: an embedded local Ray declares whatever the campaign names
    (``embedded``: how many it declared), so a typo (``GUP``) passed ``validate`` and ran here,
    then failed every case on a real cluster, whose nodes have no such resource (a tester)."""
    import difflib

    known = known_resources()
    if not resource or resource in known:
        return None
    close = difflib.get_close_matches(resource.upper(), known, n=1, cutoff=0.6)
    guess = f" Did you mean {close[0]!r}? (Ray's resource names are case-sensitive.)" if close else ""
    cluster = (f"the embedded local Ray declares {embedded} of it so that the campaign runs here, but on a cluster"
               if embedded else "on a cluster")
    return (f"ray_resource {resource!r} is not a device resource Ray or this project knows "
            f"({', '.join(known)}).{guess} A custom resource is a typo risk: {cluster} only the nodes started "
            f"with `ray start --resources='{{\"{resource}\": N}}'` have it, and every case fails if none does. "
            f"Check the name, and the campaign against the cluster with `validate --address`.")


def resolve_device(device: str, cluster_resources: dict[str, float]) -> str:
    """``auto`` → the first device kind (NPU, CUDA, CPU) whose Ray resource the cluster has.

    Decided from the cluster, not the driver: a driver on a CPU-only head still tunes on the
    workers' devices.
    """
    if device != "auto":
        return device
    from triton_dist._backends import BACKENDS

    for kind, cls in BACKENDS.items():
        if cluster_resources.get(cls.ray_resource, 0) >= 1:
            return kind
    return "cpu"


def cluster_capacity(resource: str, hardware: str | None = None) -> dict[str, int]:
    """Whole units of ``resource`` per alive node (node id → count); with ``hardware``, only on
    the nodes of that accelerator kind (:mod:`ray_runner.hardware`)."""
    from .hardware import kind_resource

    ray = import_ray()
    out = {}
    for node in ray.nodes():
        if hardware is not None and node.get("Resources", {}).get(kind_resource(hardware), 0) <= 0:
            continue
        if node.get("Alive"):
            count = int(node.get("Resources", {}).get(resource, 0))
            if count > 0:
                out[node["NodeID"]] = count
    return out


def alive_nodes() -> list[dict[str, Any]]:
    ray = import_ray()
    return [n for n in ray.nodes() if n.get("Alive")]


#: seconds a cluster's GCS port gets to accept a connection before the address is called wrong
CONNECT_PROBE_S = 10.0


def _check_reachable(address: str) -> None:
    """Fail fast on a ``host:port`` where nothing listens: ``ray.init`` retries such an address
    for ever, every ~40 s (a typo in the port, a stale exported ``RAY_ADDRESS``). ``auto``,
    ``local`` and ``ray://`` addresses are left to Ray (the client fails on its own)."""
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or address.startswith(("ray://", "local", "auto")) or not port.isdigit():
        return
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=CONNECT_PROBE_S):
            pass
    except OSError as exc:
        from .errors import InfrastructureError

        raise InfrastructureError(
            f"cannot connect to the Ray cluster at {address}: nothing accepts connections there "
            f"within {CONNECT_PROBE_S:.0f} s ({exc}). Check --address (e.g. auto, or head-host:6379), "
            "RAY_ADDRESS if it is exported, and that the head is up (`ray status` on it).") from exc


@contextlib.contextmanager
def ray_session(address: str | None, *, resources: dict[str, float] | None = None) -> Iterator[Any]:
    """Connect to ``address`` (or ``RAY_ADDRESS``), reuse an initialised Ray, or start a local one.

    A local (embedded) Ray is shut down on exit; a cluster we connected to is only disconnected.
    """
    ray = import_ray()
    if ray.is_initialized():
        yield ray
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    kwargs: dict[str, Any] = {"log_to_driver": True, "namespace": "triton-dist-autotune"}
    if address is None and not os.environ.get("RAY_ADDRESS"):
        log.info("starting an embedded local Ray (pass --address to use a running cluster)")
        # a private single-machine Ray needs no token; Ray 2.60 would otherwise write a token file
        # that a later `ray job submit` against another cluster picks up and fails with
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        # address="local": always a new private cluster, never one that `ray start` left running on
        # this machine (plain ray.init() would join it through /tmp/ray/ray_current_cluster)
        kwargs.update(address="local", include_dashboard=False, resources=resources or None)
    else:
        kwargs["address"] = address
        _check_reachable(address or os.environ.get("RAY_ADDRESS", ""))
    try:
        ray.init(**kwargs)
    except ConnectionError as exc:
        from .errors import InfrastructureError

        raise InfrastructureError(f"cannot connect to the Ray cluster at {address or os.environ.get('RAY_ADDRESS')}: "
                                  f"{exc}. Check --address (e.g. auto, or host:6379) and that the head is up.") from exc
    from ._signals import reinstall

    reinstall()  # ray.init() replaced the SIGTERM handler of `python -m ray_runner`
    try:
        yield ray
    finally:
        ray.shutdown()
