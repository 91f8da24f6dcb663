"""Keep deploy/ honest without a cluster.

The manifests must parse, carry the fields KubeRay requires, run commands that exist in this
project on campaign files that exist in this repository, use only the TRITON_DIST_* variables the
package reads, keep the dashboard off public networks and keep secrets out of git.

Path mapping used throughout (documented in deploy/README.md): the ConfigMap
``triton-dist-campaigns`` is built from ``deploy/campaigns/`` and mounted at
``/etc/triton-dist/campaigns``, so ``/etc/triton-dist/campaigns/X.yaml`` in a manifest is
``deploy/campaigns/X.yaml`` in the repository.

Optional: set ``KUBERAY_CRD_DIR`` to KubeRay's ``ray-operator/config/crd/bases`` directory to
also validate the RayCluster/RayJob manifests against the CRD schemas (unknown fields rejected,
as ``kubectl apply`` does with strict field validation).
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
CAMPAIGNS = DEPLOY / "campaigns"
IMAGES = DEPLOY / "images"
README = DEPLOY / "README.md"
SETTINGS = REPO / "triton_dist" / "settings.py"

CAMPAIGN_CONFIGMAP = "triton-dist-campaigns"
CAMPAIGN_MOUNT = "/etc/triton-dist/campaigns"

# The fixed command line (SPEC §G): subcommand -> the options it accepts.
RAY_RUNNER_OPTIONS = {
    "run": {"--address", "--cache-dir", "--seed", "--force"},
    "validate": set(),
    "preflight": {"--address", "--cache-dir"},
}
CACHE_SUBCOMMANDS = {"ls", "show", "why", "verify", "export", "import", "prune"}
SEED_MODES = {"none", "nodes", "shared"}
# Campaign file format (ray_runner/spec.py validates it; the last two are its optional extras).
CAMPAIGN_TOP_KEYS = {
    "name", "device", "retries", "case_timeout_s", "placement_timeout_s", "report_dir", "env",
    "targets", "ray_resource", "placement_strategy",
}
CAMPAIGN_TARGET_KEYS = {"function", "args", "world_size", "cases", "grid"}
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
    assert SETTINGS.is_file(), f"{rel(SETTINGS)} is missing: it defines the TRITON_DIST_* names"
    return set(re.findall(r"[\"'](TRITON_DIST_[A-Z0-9_]+)[\"']", SETTINGS.read_text()))


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


# ---------------------------------------------------------------- YAML and KubeRay structure


def test_deploy_tree_is_there():
    assert manifest_files(), "no manifests under deploy/k8s"
    assert campaign_files(), "no campaigns under deploy/campaigns"
    assert {"RayCluster", "RayJob", "Job"} <= {d.get("kind") for _, d in docs()}
    assert (IMAGES / "Dockerfile.ascend").is_file() and (IMAGES / "Dockerfile.cuda").is_file()
    assert README.is_file()


@pytest.mark.parametrize("path", yaml_files(), ids=rel)
def test_every_yaml_parses(path: Path):
    loaded = load_all(path)
    assert loaded, f"{rel(path)} is empty"
    for doc in loaded:
        assert isinstance(doc, dict), f"{rel(path)}: a document is not a mapping"


@pytest.mark.parametrize("path", manifest_files(), ids=rel)
def test_manifest_identity(path: Path):
    for doc in load_all(path):
        assert doc.get("apiVersion") and doc.get("kind"), f"{rel(path)}: apiVersion/kind missing"
        name = (doc.get("metadata") or {}).get("name")
        assert name, f"{rel(path)}: metadata.name missing"
        if doc["kind"] in ("RayCluster", "RayJob"):
            assert doc["apiVersion"] == "ray.io/v1", f"{rel(path)}: KubeRay's API is ray.io/v1"
            # KubeRay's own checks: DNS-1035 label, RayCluster <= 53 chars, RayJob <= 47.
            assert DNS1035.match(name), f"{rel(path)}: {name!r} is not a DNS-1035 label"
            assert len(name) <= (53 if doc["kind"] == "RayCluster" else 47), f"{rel(path)}: {name!r} too long"


def _check_group(where: str, group: dict) -> None:
    params = group.get("rayStartParams")
    assert isinstance(params, dict), f"{where}: rayStartParams is required (may be empty)"
    for k, v in params.items():
        assert isinstance(v, str), f"{where}: rayStartParams.{k} must be a string, got {v!r}"
    if any(params.get(k) for k in ("num-cpus", "num-gpus", "memory", "resources")):
        assert not group.get("resources"), f"{where}: resources in both rayStartParams and the group"
    if "resources" in params:
        parsed = json.loads(params["resources"].strip("'\"` ").replace('\\"', '"'))
        assert isinstance(parsed, dict), f"{where}: rayStartParams.resources must be a JSON object"
    ctrs = group.get("template", {}).get("spec", {}).get("containers")
    assert ctrs, f"{where}: template.spec.containers is required"
    for c in ctrs:
        image = c.get("image", "")
        assert image, f"{where}: container {c.get('name')} has no image"
        assert ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest"), (
            f"{where}: image {image!r} must carry a pinned tag"
        )


@pytest.mark.parametrize("path,spec", cluster_specs(), ids=lambda x: rel(x) if isinstance(x, Path) else "")
def test_ray_cluster_spec_has_kuberay_fields(path: Path, spec: dict):
    where = rel(path)
    assert "headGroupSpec" in spec, f"{where}: headGroupSpec missing"
    _check_group(f"{where}: headGroupSpec", spec["headGroupSpec"])
    groups = spec.get("workerGroupSpecs")
    assert groups, f"{where}: workerGroupSpecs missing"
    for g in groups:
        w = f"{where}: workerGroupSpecs[{g.get('groupName')}]"
        assert g.get("groupName"), f"{where}: a worker group has no groupName"
        for f in ("replicas", "minReplicas", "maxReplicas"):
            assert isinstance(g.get(f), int), f"{w}: {f} must be an integer"
        assert g["minReplicas"] <= g["replicas"] <= g["maxReplicas"], f"{w}: min <= replicas <= max"
        _check_group(w, g)
    version = spec.get("rayVersion", "")
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{where}: rayVersion must be pinned"
    auth = spec.get("authOptions")
    if auth and auth.get("mode", "token") == "token":
        assert tuple(map(int, version.split("."))) >= (2, 52, 0), f"{where}: token auth needs Ray >= 2.52"


@pytest.mark.parametrize("path,doc", docs("RayJob"), ids=lambda x: rel(x) if isinstance(x, Path) else "")
def test_rayjob_has_kuberay_fields(path: Path, doc: dict):
    spec = doc["spec"]
    assert isinstance(spec.get("entrypoint"), str) and spec["entrypoint"].strip(), f"{rel(path)}: entrypoint"
    assert ("rayClusterSpec" in spec) != ("clusterSelector" in spec), (
        f"{rel(path)}: exactly one of rayClusterSpec or clusterSelector"
    )
    if spec.get("ttlSecondsAfterFinished") is not None:
        assert spec.get("shutdownAfterJobFinishes"), f"{rel(path)}: TTL only applies with shutdownAfterJobFinishes"


def test_manifests_match_kuberay_crd_schema():
    crd_dir = os.environ.get("KUBERAY_CRD_DIR")
    if not crd_dir:
        pytest.skip("set KUBERAY_CRD_DIR to KubeRay's ray-operator/config/crd/bases to run")
    jsonschema = pytest.importorskip("jsonschema")

    def strict(s):  # kubectl's strict field validation: unknown fields are errors
        if isinstance(s, dict):
            if "properties" in s and "additionalProperties" not in s and not s.get("x-kubernetes-preserve-unknown-fields"):
                s["additionalProperties"] = False
            for v in s.values():
                strict(v)
        elif isinstance(s, list):
            for v in s:
                strict(v)
        return s

    schemas = {}
    for name in ("ray.io_rayclusters.yaml", "ray.io_rayjobs.yaml"):
        crd = yaml.safe_load((Path(crd_dir) / name).read_text())
        version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
        schemas[crd["spec"]["names"]["kind"]] = strict(version["schema"]["openAPIV3Schema"])
    errors = [
        f"{rel(p)}: {list(e.absolute_path)}: {e.message[:200]}"
        for p, d in docs()
        if d["kind"] in schemas
        for e in jsonschema.Draft7Validator(schemas[d["kind"]]).iter_errors(d)
    ]
    assert not errors, "\n".join(errors)


# ---------------------------------------------------------------- network exposure and secrets


def test_dashboard_stays_on_the_cluster_network():
    for path, spec in cluster_specs():
        head = spec["headGroupSpec"]
        assert head.get("serviceType", "ClusterIP") == "ClusterIP", f"{rel(path)}: head service must be ClusterIP"
        assert not head.get("enableIngress"), f"{rel(path)}: no Ingress for the dashboard"
    for path, doc in docs():
        assert doc["kind"] not in ("Ingress", "Route", "Gateway", "HTTPRoute"), f"{rel(path)}: exposes the cluster"
        if doc["kind"] == "Service":
            t = doc.get("spec", {}).get("type", "ClusterIP")
            assert t not in ("LoadBalancer", "NodePort"), f"{rel(path)}: Service of type {t}"
        for _, pod in pod_specs(doc):
            assert not pod.get("hostNetwork"), f"{rel(path)}: hostNetwork exposes Ray's ports on the node"
            for c in containers(pod):
                for port in c.get("ports", []):
                    assert "hostPort" not in port, f"{rel(path)}: hostPort on {c['name']}"


def test_no_secret_values_in_manifests():
    for path, doc in docs():
        if doc["kind"] == "Secret":
            assert not doc.get("data") and not doc.get("stringData"), f"{rel(path)}: a Secret with values in git"
        for _, pod in pod_specs(doc):
            for c in containers(pod):
                for name, e in env_of(c).items():
                    if SECRET_NAME.search(name):
                        assert "value" not in e and "valueFrom" in e, (
                            f"{rel(path)}: env {name} must come from a Secret (valueFrom), not a literal"
                        )
    for path in manifest_files() + [IMAGES / "Dockerfile.ascend", IMAGES / "Dockerfile.cuda"]:
        text = path.read_text()
        assert not re.search(r"(RAY_AUTH_TOKEN|auth_token)\s*[:=]\s*['\"]?[A-Za-z0-9_\-]{8,}", text), (
            f"{rel(path)}: looks like an inlined token"
        )


def test_token_auth_is_wired_to_a_documented_secret():
    readme = README.read_text()
    for path, spec in cluster_specs():
        auth = spec.get("authOptions")
        assert auth and auth.get("mode") == "token", f"{rel(path)}: enable Ray token auth (authOptions.mode: token)"
        secret = auth.get("secretName")
        if secret:
            assert f"kubectl create secret generic {secret}" in readme, (
                f"{rel(path)}: README must say how to create the Secret {secret}"
            )


# ---------------------------------------------------------------- commands and files


def _all_ray_runner_calls():
    for path, doc in docs():
        for where, pod, text in commands(path, doc):
            for argv in ray_runner_calls(text):
                yield where, pod, argv


def test_every_rayjob_runs_a_campaign():
    for path, doc in docs("RayJob"):
        calls = ray_runner_calls(doc["spec"]["entrypoint"])
        assert any(c and c[0] == "run" for c in calls), f"{rel(path)}: entrypoint must run python -m ray_runner run"
        assert any(c and c[0] == "preflight" for c in calls), f"{rel(path)}: entrypoint should end with preflight"


def test_ray_runner_commands_use_the_real_cli_and_existing_campaigns():
    seen = 0
    for where, pod, argv in _all_ray_runner_calls():
        seen += 1
        assert argv and argv[0] in RAY_RUNNER_OPTIONS, f"{where}: unknown subcommand in {argv}"
        positional, opts = parse_opts(argv[1:])
        assert len(positional) == 1, f"{where}: expected one campaign file, got {positional}"
        unknown = set(opts) - RAY_RUNNER_OPTIONS[argv[0]]
        assert not unknown, f"{where}: {argv[0]} has no option(s) {sorted(unknown)}"
        if "--seed" in opts:
            assert opts["--seed"] in SEED_MODES, f"{where}: --seed {opts['--seed']}"
            if opts["--seed"] == "shared":
                assert "--cache-dir" in opts, f"{where}: --seed shared needs --cache-dir"
        campaign = campaign_repo_path(positional[0])
        assert campaign.is_file(), f"{where}: {positional[0]} -> {rel(campaign)} does not exist"
        # The pod that runs the command must mount the campaigns ConfigMap where it reads it.
        assert pod is not None, f"{where}: no pod runs this command"
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        mounted = [
            m for c in containers(pod) for m in c.get("volumeMounts", [])
            if m["mountPath"].rstrip("/") == CAMPAIGN_MOUNT
            and volumes.get(m["name"], {}).get("configMap", {}).get("name") == CAMPAIGN_CONFIGMAP
        ]
        assert mounted, f"{where}: ConfigMap {CAMPAIGN_CONFIGMAP} is not mounted at {CAMPAIGN_MOUNT}"
    assert seen, "no manifest runs python -m ray_runner"


def test_readme_commands_exist():
    readme = README.read_text()
    for sub in re.findall(r"python -m ray_runner (\w+)", readme):
        assert sub in RAY_RUNNER_OPTIONS, f"README uses unknown `python -m ray_runner {sub}`"
    for sub in re.findall(r"python -m triton_dist\.cache (\w+)", readme):
        assert sub in CACHE_SUBCOMMANDS, f"README uses unknown `python -m triton_dist.cache {sub}`"
    for ref in set(re.findall(r"deploy/[\w./-]+\.(?:yaml|yml|md|ascend|cuda)\b", readme)):
        assert (REPO / ref).exists(), f"README refers to missing {ref}"
    # Every manifest is part of the runbook, and the ConfigMap mapping is the documented one.
    for path in manifest_files():
        assert rel(path) in readme, f"README never mentions {rel(path)}"
    assert f"kubectl create configmap {CAMPAIGN_CONFIGMAP} --from-file=deploy/campaigns/" in readme


def test_referenced_claims_exist():
    claims = {d["metadata"]["name"] for _, d in docs("PersistentVolumeClaim")}
    for path, doc in docs():
        for _, pod in pod_specs(doc):
            for v in pod.get("volumes", []):
                if "persistentVolumeClaim" in v:
                    name = v["persistentVolumeClaim"]["claimName"]
                    assert name in claims, f"{rel(path)}: PVC {name} is not defined under deploy/k8s"
                if "configMap" in v:
                    assert v["configMap"]["name"] == CAMPAIGN_CONFIGMAP, f"{rel(path)}: unknown ConfigMap"


# ---------------------------------------------------------------- environment variables


def _manifest_env() -> Iterator[tuple[str, str, dict]]:
    for path, doc in docs():
        for _, pod in pod_specs(doc):
            for c in containers(pod):
                for name, e in env_of(c).items():
                    yield f"{rel(path)}: {c['name']}", name, e


def test_triton_dist_env_names_are_read_by_the_package():
    known = known_env_names()
    assert {"TRITON_DIST_AUTOTUNE_DIR", "TRITON_DIST_AUTOTUNE_CACHE_ONLY", "TRITON_DIST_DEVICE"} <= known
    used: list[tuple[str, str]] = [(w, n) for w, n, _ in _manifest_env()]
    for path in [IMAGES / "Dockerfile.ascend", IMAGES / "Dockerfile.cuda", README]:
        used += [(rel(path), n) for n in re.findall(r"\bTRITON_DIST_[A-Z0-9_]+", path.read_text())]
    for path in campaign_files():
        used += [(rel(path), n) for n in (yaml.safe_load(path.read_text()).get("env") or {})]
    for where, name in used:
        if name.startswith("TRITON_DIST_"):
            assert name in known, f"{where}: {name} is not read by triton_dist (settings.py)"


def test_triton_dist_env_values_are_valid():
    allowed = {
        "TRITON_DIST_DEVICE": {"cpu", "cuda", "npu"},
        "TRITON_DIST_AUTOTUNE_CACHE_ONLY": {"0", "1", "strict"},
        "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE": {"0", "1"},
        "TRITON_DIST_AUTOTUNE_VERSION_CHECK": {"0", "1"},
    }
    for where, name, e in _manifest_env():
        if name in allowed:
            assert str(e.get("value")) in allowed[name], f"{where}: {name}={e.get('value')!r}"
        if name == "TRITON_DIST_AUTOTUNE_DIR":
            assert str(e.get("value", "")).startswith("/"), f"{where}: {name} must be an absolute path"


def test_training_pods_are_cache_only():
    jobs = docs("Job")
    assert jobs, "no training Job example"
    for path, doc in jobs:
        for _, pod in pod_specs(doc):
            for c in pod["containers"]:
                env = env_of(c)
                assert env.get("TRITON_DIST_AUTOTUNE_CACHE_ONLY", {}).get("value") == "strict", (
                    f"{rel(path)}: {c['name']} must set TRITON_DIST_AUTOTUNE_CACHE_ONLY=strict"
                )
                cache = env["TRITON_DIST_AUTOTUNE_DIR"]["value"]
                mounts = [m for m in c.get("volumeMounts", []) if cache.startswith(m["mountPath"].rstrip("/") + "/")]
                assert mounts and all(m.get("readOnly") for m in mounts), (
                    f"{rel(path)}: {c['name']} should mount the seeded cache read-only"
                )


def _run_as_user(pod: dict, container: dict) -> object:
    return (container.get("securityContext") or {}).get(
        "runAsUser", (pod.get("securityContext") or {}).get("runAsUser", "image default")
    )


def test_training_pods_run_as_the_cache_writer():
    """The cache creates its directories 0700: readers must be the uid the Ray workers ran as."""
    by_dir: dict[Path, dict[str, set]] = {}
    for path, doc in docs():
        for role, pod in pod_specs(doc):
            if role in ("worker", "job"):
                uids = {_run_as_user(pod, c) for c in pod["containers"]}
                by_dir.setdefault(path.parent, {}).setdefault(role, set()).update(uids)
    for folder, roles in by_dir.items():
        if "job" in roles:
            assert roles["job"] == roles.get("worker"), (
                f"{rel(folder)}: training runs as {roles['job']}, Ray workers as {roles.get('worker')}"
            )


# ---------------------------------------------------------------- devices, volumes, seeding


def test_device_resources_agree_with_ray_resources():
    for path, spec in cluster_specs():
        for g in spec["workerGroupSpecs"]:
            pod = g["template"]["spec"]
            device = device_of_pod(pod)
            assert device, f"{rel(path)}: worker group {g['groupName']} requests no NPU/GPU"
            limit = int(pod["containers"][0]["resources"]["limits"][DEVICE_RESOURCES[device]])
            params = g["rayStartParams"]
            if device == "npu":
                res = json.loads(params.get("resources", "{}").strip("'\"` ").replace('\\"', '"'))
                assert res.get("NPU") == limit, f"{rel(path)}: Ray NPU resource {res.get('NPU')} != {limit} devices"
            else:
                assert int(params.get("num-gpus", -1)) == limit, f"{rel(path)}: num-gpus != {limit} GPUs"
            for c in pod["containers"]:
                assert env_of(c).get("TRITON_DIST_DEVICE", {}).get("value") == device, (
                    f"{rel(path)}: worker {c['name']} must set TRITON_DIST_DEVICE={device}"
                )


def test_campaigns_fit_the_cluster_that_runs_them():
    """Device kind matches, and a gang of world size W fits on one worker pod (W devices)."""
    for path, doc in docs():
        devices = {device_of_pod(p) for role, p in pod_specs(doc) if role in ("worker", "job")} - {None}
        per_pod = [
            int(c["resources"]["limits"][DEVICE_RESOURCES[d]])
            for role, p in pod_specs(doc) if role in ("worker", "job") and (d := device_of_pod(p))
            for c in p["containers"][:1]
        ]
        for where, _, text in commands(path, doc):
            for argv in ray_runner_calls(text):
                positional, _ = parse_opts(argv[1:])
                source = campaign_repo_path(positional[0])
                if not source.is_file():
                    continue  # reported by test_ray_runner_commands_use_the_real_cli_...
                campaign = yaml.safe_load(source.read_text())
                assert devices == {campaign["device"]}, f"{where}: campaign device {campaign['device']} on {devices}"
                widest = max(t["world_size"] for t in campaign["targets"])
                assert widest <= max(per_pod), f"{where}: world size {widest} > {max(per_pod)} devices per pod"


def _cache_locations(doc: dict) -> dict[str, set]:
    out: dict[str, set] = {}
    for role, pod in pod_specs(doc):
        for c in pod["containers"]:
            d = env_of(c).get("TRITON_DIST_AUTOTUNE_DIR", {}).get("value")
            if d:
                loc = volume_location(pod, c, d)
                assert loc is not None, f"{doc['metadata']['name']}: {d} is not on a volume in {c['name']}"
                out.setdefault(role, set()).add(loc)
    return out


def test_cache_root_is_on_a_volume_training_pods_share():
    by_dir: dict[Path, dict[str, set]] = {}
    for path, doc in docs():
        locs = _cache_locations(doc)
        for role, found in locs.items():
            if role in ("worker", "job"):
                for loc in found:
                    assert loc[0] in ("hostPath", "pvc"), f"{rel(path)}: {role} cache on {loc[0]}, lost with the pod"
            by_dir.setdefault(path.parent, {}).setdefault(role, set()).update(locs[role])
    for folder, roles in by_dir.items():
        if "job" in roles:
            assert roles["job"] <= roles.get("worker", set()), (
                f"{rel(folder)}: training pods read {roles['job']}, Ray workers write {roles.get('worker')}"
            )


def test_seed_mode_matches_the_cache_volumes():
    for path, doc in docs("RayJob"):
        runs = [c for c in ray_runner_calls(doc["spec"]["entrypoint"]) if c and c[0] == "run"]
        locs = _cache_locations(doc)
        for argv in runs:
            _, opts = parse_opts(argv[1:])
            seed = opts.get("--seed", "none")
            workers = locs.get("worker", set())
            if seed == "nodes":
                assert workers and all(loc[0] == "hostPath" for loc in workers), (
                    f"{rel(path)}: --seed nodes needs the workers' cache on a hostPath"
                )
            if seed == "shared":
                head = doc["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
                where = volume_location(head, head["containers"][0], opts["--cache-dir"])
                assert where and where[0] == "pvc", f"{rel(path)}: --cache-dir is not on a PVC in the head"
                assert workers == {where}, f"{rel(path)}: workers' cache {workers} != shared dir {where}"


# ---------------------------------------------------------------- campaign files


def _split_import(value: str) -> tuple[str, str]:
    assert isinstance(value, str) and re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", value), (
        f"{value!r} is not module:attr"
    )
    module, attr = value.split(":")
    return module, attr


@pytest.mark.parametrize("path", campaign_files(), ids=rel)
def test_campaign_format(path: Path):
    c = yaml.safe_load(path.read_text())
    assert set(c) <= CAMPAIGN_TOP_KEYS, f"unknown fields {sorted(set(c) - CAMPAIGN_TOP_KEYS)}"
    assert c.get("device") in {"auto", "npu", "cuda", "cpu"}
    assert isinstance(c.get("retries"), int) and c["retries"] >= 0
    assert isinstance(c.get("case_timeout_s"), (int, float)) and c["case_timeout_s"] > 0
    assert c.get("targets"), "targets is required"
    for i, t in enumerate(c["targets"]):
        assert set(t) <= CAMPAIGN_TARGET_KEYS, f"targets[{i}]: unknown {sorted(set(t) - CAMPAIGN_TARGET_KEYS)}"
        _split_import(t["function"])
        _split_import(t["args"])
        assert isinstance(t.get("world_size"), int) and t["world_size"] >= 1, f"targets[{i}].world_size"
        assert t.get("cases") or t.get("grid"), f"targets[{i}]: needs cases or grid"


@pytest.mark.parametrize("path", campaign_files(), ids=rel)
def test_campaign_targets_exist_in_the_repo(path: Path):
    """function/args point at top-level names of modules in this repository (no import needed)."""
    for t in yaml.safe_load(path.read_text())["targets"]:
        for value in (t["function"], t["args"]):
            module, attr = _split_import(value)
            base = REPO.joinpath(*module.split("."))
            source = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
            assert source.is_file(), f"{value}: no module {module} in the repository ({rel(base)}.py)"
            tree = ast.parse(source.read_text())
            names = set()
            for node in tree.body:
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                    for tgt in node.targets if isinstance(node, ast.Assign) else [node.target]:
                        names |= {n.id for n in ast.walk(tgt) if isinstance(n, ast.Name)}
                elif isinstance(node, (ast.Import, ast.ImportFrom)):
                    names |= {(a.asname or a.name).split(".")[0] for a in node.names}
            assert attr in names, f"{value}: {rel(source)} defines no top-level {attr}"


@pytest.mark.parametrize("path", campaign_files(), ids=rel)
def test_campaign_validates_with_the_cli(path: Path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [sys.executable, "-m", "ray_runner", "validate", str(path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"ray_runner validate {rel(path)} -> {proc.returncode}\n{proc.stdout}\n{proc.stderr}"


# ---------------------------------------------------------------- images


def _dockerfile_args(path: Path) -> dict[str, str]:
    return dict(re.findall(r"^ARG\s+(\w+)=(\S*)", path.read_text(), re.M))


@pytest.mark.parametrize("name", ["Dockerfile.ascend", "Dockerfile.cuda"])
def test_dockerfile_pins_versions_and_installs_the_project(name: str):
    path = IMAGES / name
    text, args = path.read_text(), _dockerfile_args(path)
    for arg, value in args.items():
        if arg.endswith(("_VERSION", "_TAG")):
            assert value and value != "latest", f"{name}: ARG {arg} must have a pinned default"
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    copied = re.search(r"^COPY \. (\S+)", code, re.M)
    assert copied, f"{name}: copy the repository into the build"
    assert re.search(rf"pip install \"?{re.escape(copied.group(1))}/?\[ray\]", code), (
        f"{name}: install the copied project with its [ray] extra"
    )
    assert "ray[default]==${RAY_VERSION}" in text
    for line in re.findall(r"^(?:ARG|ENV)\s+(.*)$", text, re.M):
        assert not SECRET_NAME.search(line.split("=")[0]), f"{name}: secret-like ARG/ENV {line!r}"
    if name == "Dockerfile.ascend":
        for arg in ("CANN_TAG", "TORCH_NPU_VERSION", "TRITON_ASCEND_VERSION"):
            assert arg in args, f"{name}: ARG {arg} missing"
        assert "torch-npu==${TORCH_NPU_VERSION}" in text and "triton-ascend==${TRITON_ASCEND_VERSION}" in text
    else:
        assert "triton==${TRITON_VERSION}" in text


def test_ray_versions_agree():
    """Manifests' rayVersion == the Ray pinned in both images (KubeRay picks commands by it)."""
    versions = {_dockerfile_args(IMAGES / n)["RAY_VERSION"] for n in ("Dockerfile.ascend", "Dockerfile.cuda")}
    assert len(versions) == 1, f"images pin different Ray versions: {versions}"
    for path, spec in cluster_specs():
        assert spec["rayVersion"] in versions, f"{rel(path)}: rayVersion {spec['rayVersion']} != image {versions}"


def test_images_match_device_of_manifest():
    for path, doc in docs():
        for _, pod in pod_specs(doc):
            device = device_of_pod(pod)
            if device is None:
                device = next((device_of_pod(p) for _, p in pod_specs(doc) if device_of_pod(p)), None)
            suffix = {"npu": "-ascend", "cuda": "-cuda"}.get(device)
            for c in containers(pod):
                if suffix:
                    assert c["image"].endswith(suffix), f"{rel(path)}: {c['name']} runs {c['image']} on {device}"
