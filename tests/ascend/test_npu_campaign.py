"""A campaign with ``device: npu`` on an embedded Ray that has 4 ``NPU``: gangs of 1, 2 and 4 actors,
each given one NPU through ``ASCEND_RT_VISIBLE_DEVICES`` by Ray as on a real node, the torch_npu
stand-in in every actor (Ray's ``worker_process_setup_hook``), ranks joined over ``hccl`` (the
stand-in's, carried by gloo). Strict cache-only processes then hit every entry. Last, the
resource names the campaign used must be the ones deploy/k8s/npu/ gives the Ray workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ray_runner.campaign import RunOptions, run_campaign
from ray_runner.spec import parse_campaign
from tests.launcher import agent_store
from triton_dist._backends.npu import NpuBackend

pytestmark = [pytest.mark.ray, pytest.mark.timeout(420)]

REPO = Path(__file__).resolve().parents[2]
ADD = ("tests.ascend.npu_targets:add", "tests.ascend.npu_targets:make_add_args")
NPUS = 4


@pytest.fixture(scope="module")
def npu_ray() -> Iterator[None]:
    """An embedded Ray with resources={"NPU": 4}; its workers run npu_standin.worker_setup first."""
    import ray

    cwd = os.getcwd()
    with pytest.MonkeyPatch.context() as mp:
        for name, value in {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
                            "TRITON_INTERPRET": "1"}.items():
            mp.setenv(name, value)
        mp.delenv("ASCEND_RT_VISIBLE_DEVICES", raising=False)
        os.chdir(REPO)
        try:
            # address="local": a private cluster, never one that `ray start` left on the machine
            ray.init(address="local", num_cpus=2, resources={"NPU": NPUS}, include_dashboard=False,
                     namespace="ascend-tests", log_to_driver=False,
                     runtime_env={"worker_process_setup_hook": "npu_standin.worker_setup"})
            yield
        finally:
            ray.shutdown()
            os.chdir(cwd)


def verify_hits(cache: Path, world_size: int, calls: list[tuple[str, str, dict[str, Any]]]) -> list[dict]:
    """W fresh processes in strict cache-only mode on the NPU stand-in (hccl when W > 1)."""
    spec = json.dumps({"world_size": world_size, "calls": [list(c) for c in calls]})
    store, launch = agent_store()
    procs = []
    for rank in range(world_size):
        env = {**os.environ, "TRITON_DIST_AUTOTUNE_DIR": str(cache), "TRITON_DIST_AUTOTUNE_CACHE_ONLY": "strict",
               "TRITON_DIST_DEVICE": "npu", "TRITON_INTERPRET": "1", "RANK": str(rank),
               "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank), **launch}
        env.pop("NPU_PROBE_DIR", None)
        procs.append(subprocess.Popen([sys.executable, "-m", "tests.ascend.verify_npu_hits", spec], cwd=REPO,
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    lines = []
    for proc in procs:
        out, err = proc.communicate(timeout=150)
        assert proc.returncode == 0, f"rank exited {proc.returncode}:\n{err[-3000:]}"
        lines += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return lines


def test_npu_campaign_gangs_of_1_2_4_then_strict_cache_only_hits(npu_ray: None, tmp_path: Path) -> None:
    cache, probe = tmp_path / "cache", tmp_path / "probe"
    probe.mkdir()
    targets = [{"function": ADD[0], "args": ADD[1], "world_size": w, "cases": cases}
               for w, cases in ((1, [{"n": 1000}, {"n": 3000}]), (2, [{"n": 2000}]), (4, [{"n": 4000}]))]
    campaign = parse_campaign({
        "name": "npu-standin", "device": "npu", "retries": 1, "case_timeout_s": 180, "placement_timeout_s": 120,
        "report_dir": str(tmp_path / "reports"), "env": {"TRITON_INTERPRET": "1", "NPU_PROBE_DIR": str(probe)},
        "targets": targets})
    result = run_campaign(campaign, RunOptions(cache_dir=str(cache), progress=False))
    assert result.ok, [r.errors for r in result.runs]
    assert (result.kind, result.resource) == ("npu", "NPU")
    assert sorted(r.world_size for r in result.runs) == [1, 1, 2, 4]
    for run in result.runs:
        entry = run.load_entry()  # a finished case keeps no entry in the driver (issue 21)
        assert entry["world_size"] == run.world_size
        assert entry["hardware"]["device"] == "npu" and entry["hardware"]["name"] == "Ascend910B3"
        assert entry["measurement"]["timer"] == "npu" and entry["versions"]["torch_npu"] == "2.7.1.post4"
    # every actor held one NPU, which Ray named in ASCEND_RT_VISIBLE_DEVICES; torch_npu saw it as device 0
    seen = [json.loads(p.read_text()) for p in probe.glob("*.json")]
    assert {(s["n"], s["world_size"]) for s in seen} == {(1000, 1), (3000, 1), (2000, 2), (4000, 4)}
    for s in seen:
        assert s["backend"] == "npu" and s["current"] == 0
        assert s["visible"] is not None and [s["visible"]] == s["ray_ids"], s
        assert s["group"] == "hccl"  # every case runs in a world of its size, over the NPU's backend
    four = [s for s in seen if s["world_size"] == 4]
    assert sorted(s["rank"] for s in four) == [0, 1, 2, 3]
    assert sorted(s["visible"] for s in four) == ["0", "1", "2", "3"]  # four actors, four NPUs
    two = [s for s in seen if s["world_size"] == 2]
    assert len({s["visible"] for s in two}) == 2
    # fresh processes, strict cache-only: every entry is hit, nothing is measured, on every rank;
    # the one call each makes runs the config the campaign picked
    best = {run.spec.case["n"]: (64, 128, 256)[run.load_entry()["best"]["index"]] for run in result.runs}
    for world_size, cases in ((1, [{"n": 1000}, {"n": 3000}]), (2, [{"n": 2000}]), (4, [{"n": 4000}])):
        lines = verify_hits(cache, world_size, [(*ADD, case) for case in cases])
        assert len(lines) == world_size * len(cases)
        for line in lines:
            assert line["calls"] == {str(best[line["case"]["n"]]): 1}, (line, best)
    _resource_names_agree_with_the_npu_manifests(result.resource)


def test_device_auto_finds_the_npus_and_noset_actors_select_their_npu_by_id(npu_ray: None, tmp_path: Path) -> None:
    """``device: auto`` resolves to npu from the cluster's resources; with Ray told not to narrow
    ASCEND_RT_VISIBLE_DEVICES (RAY_EXPERIMENTAL_NOSET_...), each actor sees every NPU of the node
    and selects the one Ray assigned it by its id."""
    import ray

    from ray_runner._ray import resolve_device

    assert resolve_device("auto", ray.cluster_resources()) == "npu"
    probe = tmp_path / "probe"
    probe.mkdir()
    campaign = parse_campaign({
        "name": "npu-noset", "device": "auto", "retries": 0, "case_timeout_s": 180, "placement_timeout_s": 120,
        "report_dir": str(tmp_path / "reports"),
        "env": {"TRITON_INTERPRET": "1", "NPU_PROBE_DIR": str(probe),
                f"RAY_EXPERIMENTAL_NOSET_{NpuBackend.visible_devices_env}": "1"},
        "targets": [{"function": ADD[0], "args": ADD[1], "world_size": 2, "cases": [{"n": 500}]}]})
    result = run_campaign(campaign, RunOptions(cache_dir=str(tmp_path / "cache"), progress=False))
    assert result.ok and (result.kind, result.resource) == ("npu", "NPU"), [r.errors for r in result.runs]
    seen = [json.loads(p.read_text()) for p in probe.glob("*.json")]
    assert len(seen) == 2
    for s in seen:
        assert s["visible"] is None  # Ray left the variable alone: all 8 NPUs of the stand-in node
        assert s["current"] == int(s["ray_ids"][0]), s
    assert len({s["current"] for s in seen}) == 2


def _resource_names_agree_with_the_npu_manifests(resource: str) -> None:
    """deploy/k8s/npu/: the Ray workers declare the resource the campaign's gangs asked for, as many
    as the pod's Ascend devices, select the NPU backend, and leave Ray to set the visible devices."""
    assert resource == NpuBackend.ray_resource
    manifests = sorted((REPO / "deploy" / "k8s" / "npu").glob("*.yaml"))
    checked = 0
    for path in manifests:
        for doc in yaml.safe_load_all(path.read_text()):
            spec = (doc or {}).get("spec", {})
            cluster = spec.get("rayClusterSpec", spec)
            for group in cluster.get("workerGroupSpecs", []):
                raw = group["rayStartParams"]["resources"].strip("'\"").replace('\\"', '"')
                declared = json.loads(raw)
                container = group["template"]["spec"]["containers"][0]
                limits = container["resources"]["limits"]
                devices = int(next(v for k, v in limits.items() if k.startswith("huawei.com/Ascend")))
                # the device resource matches the pod's NPUs; a mixed pool (issue 22) also names its kind
                kinds = {k: v for k, v in declared.items() if k.startswith("accelerator_type:")}
                assert {k: v for k, v in declared.items() if k not in kinds} == {resource: devices}, \
                    f"{path.name}: {declared} vs {resource} x {devices}"
                assert all(v == 1 for v in kinds.values()), f"{path.name}: {kinds}"
                env = {e["name"]: e.get("value") for e in container.get("env", [])}
                assert env.get("TRITON_DIST_DEVICE") == "npu", path.name
                noset = f"RAY_EXPERIMENTAL_NOSET_{NpuBackend.visible_devices_env}"
                assert noset not in env, f"{path.name}: {noset} would stop Ray from giving each actor its NPU"
                checked += 1
    assert checked >= 2  # the RayCluster and the RayJob
    campaign = yaml.safe_load((REPO / "deploy" / "campaigns" / "gemm-npu.yaml").read_text())
    assert campaign["device"] == "npu" and "ray_resource" not in campaign
