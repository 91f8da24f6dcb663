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

import json
import os
import re
from pathlib import Path

import pytest
import yaml
from deploy_lib import (
    CACHE_SUBCOMMANDS,
    CAMPAIGN_CONFIGMAP,
    CAMPAIGN_MOUNT,
    DEVICE_RESOURCES,
    DNS1035,
    IMAGES,
    RAY_RUNNER_OPTIONS,
    README,
    REPO,
    SECRET_NAME,
    SEED_MODES,
    cache_locations,
    campaign_files,
    campaign_repo_path,
    cluster_specs,
    commands,
    containers,
    device_of_pod,
    docs,
    env_of,
    known_env_names,
    load_all,
    manifest_env,
    manifest_files,
    parse_opts,
    pod_specs,
    ray_runner_calls,
    rel,
    volume_location,
    yaml_files,
)

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
            if ("properties" in s and "additionalProperties" not in s
                    and not s.get("x-kubernetes-preserve-unknown-fields")):
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



def test_triton_dist_env_names_are_read_by_the_package():
    known = known_env_names()
    assert {"TRITON_DIST_AUTOTUNE_DIR", "TRITON_DIST_AUTOTUNE_CACHE_ONLY", "TRITON_DIST_DEVICE"} <= known
    used: list[tuple[str, str]] = [(w, n) for w, n, _ in manifest_env()]
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
    for where, name, e in manifest_env():
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



def test_cache_root_is_on_a_volume_training_pods_share():
    by_dir: dict[Path, dict[str, set]] = {}
    for path, doc in docs():
        locs = cache_locations(doc)
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
        locs = cache_locations(doc)
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


# ---------------------------------------------------------------- mixed pools (issue 22)


def _declared_kinds(group: dict) -> list[str]:
    params = group.get("rayStartParams", {})
    resources = json.loads(params.get("resources", "{}").strip("'\"` ").replace('\\"', '"'))
    return [name.split(":", 1)[1] for name in resources if name.startswith("accelerator_type:")]


def test_mixed_pool_worker_groups_declare_one_kind_each():
    """A worker group that declares a kind declares exactly one, as a whole unit, and no two groups
    of a cluster declare the same kind with different node selectors."""
    mixed = 0
    for path, spec in cluster_specs():
        seen: dict[str, dict] = {}
        for g in spec["workerGroupSpecs"]:
            kinds = _declared_kinds(g)
            if not kinds:
                continue
            mixed += 1
            assert len(kinds) == 1, f"{rel(path)}: group {g['groupName']} declares kinds {kinds}"
            params = json.loads(g["rayStartParams"]["resources"].strip("'\"` ").replace('\\"', '"'))
            assert params[f"accelerator_type:{kinds[0]}"] == 1, f"{rel(path)}: a node has one unit of its kind"
            selector = g["template"]["spec"].get("nodeSelector")
            assert selector, f"{rel(path)}: group {g['groupName']} declares {kinds[0]} but selects no node pool"
            assert seen.setdefault(kinds[0], selector) == selector, f"{rel(path)}: {kinds[0]} on two node pools"
        if seen:
            assert len({json.dumps(s, sort_keys=True) for s in seen.values()}) == len(seen), (
                f"{rel(path)}: two kinds select the same node pool")
    assert mixed >= 2, "no mixed-pool RayCluster (deploy/k8s/npu/raycluster-mixed.yaml)"


def test_campaign_kinds_are_declared_by_a_cluster():
    """Every kind a campaign's `hardware` lists is declared by a worker group of one cluster
    (else `run` fails its cases as an absent kind)."""
    clusters = [{k for g in spec["workerGroupSpecs"] for k in _declared_kinds(g)} for _, spec in cluster_specs()]
    for path in campaign_files():
        hardware = yaml.safe_load(path.read_text()).get("hardware", "auto")
        if hardware == "auto":
            continue
        assert any(set(hardware) <= kinds for kinds in clusters), (
            f"{rel(path)}: hardware {hardware} is not declared by any RayCluster's worker groups")
