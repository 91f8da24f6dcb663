"""Shared helpers for tests/deploy: load deploy/ and walk its manifests, commands and volumes.

Path mapping used throughout (documented in deploy/README.md): the ConfigMap
``triton-dist-campaigns`` is built from ``deploy/campaigns/`` and mounted at
``/etc/triton-dist/campaigns``, so ``/etc/triton-dist/campaigns/X.yaml`` in a manifest is
``deploy/campaigns/X.yaml`` in the repository.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import yaml

from ray_runner.spec import Campaign, TargetSpec

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
CAMPAIGNS = DEPLOY / "campaigns"
IMAGES = DEPLOY / "images"
README = DEPLOY / "README.md"
FINGERPRINT = REPO / "triton_dist" / "_store" / "fingerprint.py"
SETTINGS = REPO / "triton_dist" / "settings.py"

CAMPAIGN_CONFIGMAP = "triton-dist-campaigns"
CAMPAIGN_MOUNT = "/etc/triton-dist/campaigns"

# The fixed command line (SPEC §G): subcommand -> the options it accepts.
def _ray_runner_options() -> dict[str, set[str]]:
    """Subcommand -> its long options, read from the CLI's own parser (no second list to drift)."""
    import argparse

    from ray_runner.__main__ import _parser

    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    return {name: {o for a in p._actions for o in a.option_strings if o.startswith("--") and o != "--help"}
            for name, p in sub.choices.items()}


RAY_RUNNER_OPTIONS = _ray_runner_options()
CACHE_SUBCOMMANDS = {"ls", "show", "why", "verify", "export", "import", "prune"}
SEED_MODES = {"none", "nodes", "shared"}
# Campaign file format: the fields of ray_runner/spec.py's models (no second list to drift).
CAMPAIGN_TOP_KEYS = set(Campaign.model_fields)
CAMPAIGN_TARGET_KEYS = set(TargetSpec.model_fields)
DEVICE_RESOURCES = {"npu": "huawei.com/Ascend910", "cuda": "nvidia.com/gpu"}
SECRET_NAME = re.compile(r"TOKEN|PASSWORD|PASSWD|SECRET|API_?KEY|CREDENTIAL", re.I)
DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


# ---------------------------------------------------------------- collection helpers


def yaml_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yaml", ".yml"))


def manifest_files() -> list[Path]:
    return sorted(p for p in K8S.rglob("*") if p.suffix in (".yaml", ".yml"))


def campaign_files() -> list[Path]:
    return sorted(p for p in CAMPAIGNS.glob("*") if p.suffix in (".yaml", ".yml"))


def load_all(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def docs(kind: str | None = None) -> list[tuple[Path, dict]]:
    out = [(p, d) for p in manifest_files() for d in load_all(p)]
    return [(p, d) for p, d in out if kind is None or d.get("kind") == kind]


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def cluster_specs() -> list[tuple[Path, dict]]:
    """Every RayCluster spec: RayCluster.spec and RayJob.spec.rayClusterSpec."""
    out = [(p, d["spec"]) for p, d in docs("RayCluster")]
    out += [(p, d["spec"]["rayClusterSpec"]) for p, d in docs("RayJob") if "rayClusterSpec" in d["spec"]]
    return out


def pod_specs(doc: dict) -> Iterator[tuple[str, dict]]:
    """(role, pod spec) for every pod template of a manifest: head, worker, job."""
    kind, spec = doc.get("kind"), doc.get("spec") or {}
    if kind == "RayJob":
        spec = spec.get("rayClusterSpec") or {}
        kind = "RayCluster" if spec else kind
    if kind == "RayCluster":
        yield "head", spec["headGroupSpec"]["template"]["spec"]
        for group in spec.get("workerGroupSpecs", []):
            yield "worker", group["template"]["spec"]
    elif kind in ("Job", "Deployment", "StatefulSet", "DaemonSet"):
        yield "job", spec["template"]["spec"]


def containers(pod: dict) -> list[dict]:
    return list(pod.get("initContainers", [])) + list(pod.get("containers", []))


def env_of(container: dict) -> dict[str, dict]:
    return {e["name"]: e for e in container.get("env", [])}


def ray_runner_calls(text: str) -> list[list[str]]:
    """Every `python -m ray_runner ...` invocation in a shell string, as argv after the module."""
    calls = []
    for segment in re.split(r"&&|\|\||;|\n", text):
        argv = shlex.split(segment)
        for i in range(len(argv) - 2):
            if argv[i].startswith("python") and argv[i + 1] == "-m" and argv[i + 2] == "ray_runner":
                calls.append(argv[i + 3:])
    return calls


def commands(path: Path, doc: dict) -> list[tuple[str, dict | None, str]]:
    """(where, pod spec that runs it, shell text) for every command in a manifest."""
    out = []
    if doc.get("kind") == "RayJob":
        head = doc["spec"].get("rayClusterSpec", {}).get("headGroupSpec", {}).get("template", {}).get("spec")
        out.append((f"{rel(path)}: spec.entrypoint", head, doc["spec"]["entrypoint"]))
    for _, pod in pod_specs(doc):
        for c in containers(pod):
            text = " ".join(list(c.get("command", [])) + list(c.get("args", [])))
            out.append((f"{rel(path)}: container {c['name']}", pod, text))
    return out


def campaign_repo_path(mounted: str) -> Path:
    assert mounted.startswith(CAMPAIGN_MOUNT + "/"), (
        f"campaign path {mounted!r} is not under {CAMPAIGN_MOUNT}/ (the ConfigMap "
        f"{CAMPAIGN_CONFIGMAP} built from deploy/campaigns/)"
    )
    return CAMPAIGNS / mounted[len(CAMPAIGN_MOUNT) + 1:]


def parse_opts(argv: list[str]) -> tuple[list[str], dict[str, str | bool]]:
    positional, opts, i = [], {}, 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            if "=" in a:
                k, v = a.split("=", 1)
                opts[k] = v
            elif a == "--force":
                opts[a] = True
            else:
                assert i + 1 < len(argv), f"option {a} has no value"
                opts[a] = argv[i + 1]
                i += 1
        else:
            positional.append(a)
        i += 1
    return positional, opts


def known_env_names() -> set[str]:
    """The TRITON_DIST_* names the package reads: settings.py's, and the fingerprint's test/ops
    override of the hardware digest (docs/cache.md)."""
    assert SETTINGS.is_file(), f"{rel(SETTINGS)} is missing: it defines the TRITON_DIST_* names"
    names = set(re.findall(r"[\"'](TRITON_DIST_[A-Z0-9_]+)[\"']", SETTINGS.read_text()))
    return names | set(re.findall(r"[\"'](TRITON_DIST_[A-Z0-9_]+)[\"']", FINGERPRINT.read_text()))


def device_of_pod(pod: dict) -> str | None:
    for c in pod.get("containers", []):
        limits = (c.get("resources") or {}).get("limits") or {}
        for device, resource in DEVICE_RESOURCES.items():
            if int(limits.get(resource, 0)) > 0:
                return device
    return None


def volume_location(pod: dict, container: dict, path: str) -> tuple | None:
    """Where `path` in `container` really lives: ('hostPath', p) / ('pvc', claim, sub) / ..."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    best = None
    for m in container.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if (path == mp or path.startswith(mp + "/")) and (best is None or len(mp) > len(best["mountPath"])):
            best = m
    if best is None:
        return None
    sub = path[len(best["mountPath"].rstrip("/")):].lstrip("/")
    vol = volumes[best["name"]]
    if "hostPath" in vol:
        return ("hostPath", os.path.join(vol["hostPath"]["path"], sub).rstrip("/"))
    if "persistentVolumeClaim" in vol:
        return ("pvc", vol["persistentVolumeClaim"]["claimName"], sub)
    return (next(k for k in vol if k != "name"), best["name"], sub)


def cache_locations(doc: dict) -> dict[str, set]:
    out: dict[str, set] = {}
    for role, pod in pod_specs(doc):
        for c in pod["containers"]:
            d = env_of(c).get("TRITON_DIST_AUTOTUNE_DIR", {}).get("value")
            if d:
                loc = volume_location(pod, c, d)
                assert loc is not None, f"{doc['metadata']['name']}: {d} is not on a volume in {c['name']}"
                out.setdefault(role, set()).add(loc)
    return out


def manifest_env() -> Iterator[tuple[str, str, dict]]:
    for path, doc in docs():
        for _, pod in pod_specs(doc):
            for c in containers(pod):
                for name, e in env_of(c).items():
                    yield f"{rel(path)}: {c['name']}", name, e


def split_import(value: str) -> tuple[str, str]:
    assert isinstance(value, str) and re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", value), (
        f"{value!r} is not module:attr"
    )
    module, attr = value.split(":")
    return module, attr


def dockerfile_args(path: Path) -> dict[str, str]:
    return dict(re.findall(r"^ARG\s+(\w+)=(\S*)", path.read_text(), re.M))
