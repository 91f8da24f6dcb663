"""Heterogeneous fleets: the accelerator kinds a campaign tunes on, and gangs that stay on one kind.

Cache entries are keyed by the hardware digest, so an entry tuned on one kind of accelerator
never serves another: a campaign tunes every case once per kind (``hardware`` in the campaign
file) and seeds every node with its own kind's entries.

A node's kind is Ray's own: Ray gives a node with NVIDIA GPUs or Ascend NPUs the resource
``accelerator_type:<KIND>`` (value 1; ``accelerator_type:H100``, ``accelerator_type:Ascend910B``,
from the device's name), the one its ``accelerator_type=`` task option asks for. A kind Ray does
not detect, or a finer split (H100 SXM next to H100 PCIe, which Ray names alike), is declared
by the node itself: ``ray start --resources='{"accelerator_type:H100-SXM": 1}'`` (deploy/README.md).

Placement: every bundle of a gang of kind K asks for ``{<device resource>: 1,
accelerator_type:K: 0.001}`` (what ``accelerator_type=`` asks for), so each rank lands on a node
of kind K, whatever the placement strategy: kinds never mix in one gang.

Pure (no Ray): the driver hands :func:`plan_fleet` the records of ``ray.nodes()``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["KIND_PREFIX", "FleetPlan", "kind_resource", "node_kinds", "parse_hardware", "plan_fleet"]

KIND_PREFIX = "accelerator_type:"
#: how much of a node's ``accelerator_type:<KIND>`` (1 per node) one bundle asks for, as Ray's own
#: ``accelerator_type=`` option does: enough to pin the bundle to the kind, never a limit
KIND_SHARE = 0.001
_KIND = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def kind_resource(kind: str) -> str:
    """The Ray resource that marks nodes of ``kind``."""
    return f"{KIND_PREFIX}{kind}"


def parse_hardware(error: Callable[[str, str], None], value: Any) -> tuple[str, ...] | None:
    """The campaign's ``hardware`` field: ``auto`` (None) or a list of kind names (a name may be
    written as the resource, ``accelerator_type:H100``). Problems go to ``error(path, message)``."""
    if value is None or value == "auto":
        return None
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        error("hardware", f"must be 'auto' or a non-empty list of accelerator kinds (e.g. [H100, H200], "
                          f"[Ascend910B, Ascend910C]), got {type(value).__name__} {value!r:.80}")
        return None
    kinds: list[str] = []
    for i, item in enumerate(value):
        name = item[len(KIND_PREFIX):] if isinstance(item, str) and item.startswith(KIND_PREFIX) else item
        if not isinstance(name, str) or not _KIND.match(name):
            error(f"hardware[{i}]", f"must be an accelerator kind as Ray names it (the <KIND> of a node's "
                                    f"'{KIND_PREFIX}<KIND>' resource, e.g. H100), got {item!r:.80}")
        elif name in kinds:
            error(f"hardware[{i}]", f"{name!r} is listed twice")
        else:
            kinds.append(name)
    return tuple(kinds)


def node_kinds(node: Mapping[str, Any]) -> list[str]:
    """The accelerator kinds a ``ray.nodes()`` record declares (normally one, or none)."""
    resources = node.get("Resources") or {}
    return sorted(name[len(KIND_PREFIX):] for name, amount in resources.items()
                  if name.startswith(KIND_PREFIX) and amount > 0)


@dataclasses.dataclass(frozen=True)
class FleetPlan:
    """Which kinds a campaign tunes on, from the campaign's ``hardware`` and the cluster."""

    kinds: tuple[str | None, ...]
    """Kinds to tune on, present in the cluster; ``(None,)``: no kinds (one lane, no constraint:
    a homogeneous cluster, or one whose nodes declare no kind)."""
    absent: tuple[str, ...] = ()
    """Kinds the campaign asks for that no alive node with the device resource has."""
    nodes: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """kind -> the addresses of its alive nodes with the device resource."""
    devices: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """kind -> how many units of the device resource its nodes have."""
    untuned: tuple[str, ...] = ()
    """Kinds present but not asked for: jobs landing there start cold."""
    kindless: tuple[str, ...] = ()
    """Addresses of nodes with the device resource but no kind, next to nodes with one: not tuned
    separately (their gangs cannot be told apart from a kind's)."""
    several: tuple[str, ...] = ()
    """Addresses of nodes that declare more than one kind (``auto`` tunes each: the same devices
    twice)."""

    @property
    def heterogeneous(self) -> bool:
        return self.kinds != (None,)

    def absent_message(self, kind: str, resource: str) -> str:
        present = ", ".join(f"{k} ({self.devices.get(k, 0)} {resource} on {len(v)} node(s))"
                            for k, v in sorted(self.nodes.items())) or "none"
        return (f"hardware: no alive node of kind {kind!r} has the {resource!r} resource (no node declares "
                f"'{kind_resource(kind)}'); kinds present: {present}. Add nodes of that kind (or declare "
                f"the resource on them, deploy/README.md), or remove {kind!r} from the campaign's hardware.")

    def notes(self, resource: str) -> list[str]:
        """Warnings for the operator: kinds that will start cold, nodes that are not tuned."""
        out = []
        for kind in self.untuned:
            out.append(f"kind {kind!r} ({', '.join(self.nodes[kind])}) has {resource} but is not in the "
                       "campaign's hardware: jobs there start cold")
        if self.kindless and self.heterogeneous:
            out.append(f"node(s) {', '.join(self.kindless)} have {resource} but declare no "
                       f"'{KIND_PREFIX}<KIND>' resource: not tuned (declare their kind)")
        if self.several:
            out.append(f"node(s) {', '.join(self.several)} declare several kinds: each is tuned, on the same "
                       "devices; list the kinds to tune in the campaign's hardware")
        return out


def plan_fleet(requested: Sequence[str] | None, nodes: Sequence[Mapping[str, Any]], resource: str) -> FleetPlan:
    """Plan the campaign's kinds from ``ray.nodes()`` records and the device ``resource``.

    ``auto`` (``requested`` None) tunes on every kind of the alive nodes that have the resource;
    a CPU campaign (resource ``CPU``) has no kinds in ``auto``: its hardware is the CPU, which
    an accelerator kind does not describe.
    """
    by_kind: dict[str, list[str]] = {}
    devices: dict[str, int] = {}
    kinds_of: dict[str, list[str]] = {}  # node id -> its kinds (nodes may share an address)
    address_of: dict[str, str] = {}
    for i, node in enumerate(nodes):
        amount = int((node.get("Resources") or {}).get(resource, 0))
        if not node.get("Alive") or amount < 1:
            continue
        node_id = str(node.get("NodeID") or i)
        address = address_of[node_id] = str(node.get("NodeManagerAddress") or node_id)
        kinds_of[node_id] = node_kinds(node)
        for kind in kinds_of[node_id]:
            by_kind.setdefault(kind, []).append(address)
            devices[kind] = devices.get(kind, 0) + amount
    nodes_by_kind = {k: tuple(v) for k, v in by_kind.items()}
    kindless = tuple(address_of[n] for n, kinds in kinds_of.items() if not kinds)
    if requested is None:
        if resource == "CPU" or not by_kind:
            return FleetPlan(kinds=(None,), nodes=nodes_by_kind, devices=devices)
        return FleetPlan(kinds=tuple(sorted(by_kind)), nodes=nodes_by_kind, devices=devices, kindless=kindless,
                         several=tuple(address_of[n] for n, kinds in kinds_of.items() if len(kinds) > 1))
    # a kind not asked for is a cold kind only on nodes that have no kind that is asked for (a
    # node may carry Ray's detected kind next to one declared for it)
    cold = {k for kinds in kinds_of.values() if not set(kinds) & set(requested) for k in kinds}
    return FleetPlan(kinds=tuple(k for k in requested if k in by_kind),
                     absent=tuple(k for k in requested if k not in by_kind), nodes=nodes_by_kind,
                     devices=devices, untuned=tuple(sorted(cold)), kindless=kindless)
