"""Heterogeneous fleets without a cluster: the ``hardware`` field, the plan of kinds from
``ray.nodes()`` records, the bundles that pin a gang to its kind, seeding by kind, the report's
columns per kind, and pre-flight's per-kind summary (the cluster run: test_ray_fleet.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ray_runner import scheduler as sch
from ray_runner.campaign import CampaignResult
from ray_runner.fleet import seed_groups
from ray_runner.gang import GangOptions
from ray_runner.hardware import plan_fleet
from ray_runner.preflight import summarize
from ray_runner.report import build_report, markdown
from ray_runner.spec import parse_campaign
from triton_dist.errors import CampaignError

REPO = Path(__file__).resolve().parents[2]
TARGET = {"function": "pkg.mod:fn", "args": "pkg.mod:make_args", "cases": [{"n": 1}, {"n": 2}]}


def campaign(**fields: Any) -> Any:
    return parse_campaign({"device": "cuda", "targets": [TARGET], **fields})


def node(address: str, gpus: int, *kinds: str, alive: bool = True) -> dict[str, Any]:
    """A record as ``ray.nodes()`` returns it (the fields the planner reads)."""
    resources = {"CPU": 8.0, "GPU": float(gpus), **{f"accelerator_type:{k}": 1.0 for k in kinds}}
    return {"NodeID": f"id-{address}", "NodeManagerAddress": address, "Alive": alive,
            "Resources": {k: v for k, v in resources.items() if v}}


# ---------------------------------------------------------------------- the field

def test_hardware_field_auto_list_and_resource_names() -> None:
    assert campaign().hardware is None and campaign(hardware="auto").hardware is None
    assert campaign(hardware=["H100", "accelerator_type:H200"]).hardware == ("H100", "H200")
    assert campaign(hardware="Ascend910B").hardware == ("Ascend910B",)


@pytest.mark.parametrize(("value", "message"), [
    ([], "hardware: must be 'auto' or a non-empty list"),
    (["H100", "H100"], "hardware[1]: 'H100' is listed twice"),
    (["H100", 7], "hardware[1]: must be an accelerator kind as Ray names it"),
    (["H 100"], "hardware[0]: must be an accelerator kind"),
    ({"H100": 1}, "hardware: must be 'auto' or a non-empty list"),
])
def test_bad_hardware_is_named(value: Any, message: str) -> None:
    with pytest.raises(CampaignError) as info:
        campaign(hardware=value, retries=-1)
    assert message in str(info.value) and "retries" in str(info.value)  # every problem at once


# ---------------------------------------------------------------------- the plan

def test_auto_plans_every_kind_with_the_device_resource() -> None:
    nodes = [node("a1", 8, "H100"), node("a2", 8, "H100"), node("b1", 4, "H200"), node("head", 0),
             node("dead", 8, "B200", alive=False), node("cpu", 0, "L4")]
    plan = plan_fleet(None, nodes, "GPU")
    assert plan.kinds == ("H100", "H200") and plan.heterogeneous and not plan.absent
    assert plan.nodes == {"H100": ("a1", "a2"), "H200": ("b1",)} and plan.devices == {"H100": 16, "H200": 4}
    assert plan.notes("GPU") == []


def test_no_kinds_is_one_unconstrained_lane() -> None:
    assert plan_fleet(None, [node("a", 2), node("b", 2)], "GPU").kinds == (None,)
    # a CPU campaign is about the CPU: the nodes' accelerator kinds do not split it
    plan = plan_fleet(None, [node("a", 2, "H100"), node("b", 2, "H200")], "CPU")
    assert plan.kinds == (None,) and not plan.heterogeneous


def test_explicit_kinds_name_absent_untuned_and_kindless_nodes() -> None:
    nodes = [node("a", 8, "H100"), node("b", 8, "H200"), node("c", 8)]
    plan = plan_fleet(("H100", "B200"), nodes, "GPU")
    assert plan.kinds == ("H100",) and plan.absent == ("B200",) and plan.untuned == ("H200",)
    message = plan.absent_message("B200", "GPU")
    assert "no alive node of kind 'B200'" in message and "accelerator_type:B200" in message
    assert "H100 (8 GPU on 1 node(s))" in message and "remove 'B200'" in message
    notes = plan.notes("GPU")
    assert any("'H200'" in n and "start cold" in n for n in notes)
    assert any("c have GPU but declare no 'accelerator_type:<KIND>'" in n for n in notes)


def test_a_gang_of_a_kind_asks_for_the_kind_in_every_bundle() -> None:
    opts = GangOptions(kind="cuda", resource="GPU", placement_timeout_s=1, rendezvous_timeout_s=1, hardware="H200")
    assert opts.bundle() == {"GPU": 1, "accelerator_type:H200": 0.001}  # what Ray's accelerator_type= asks
    assert opts.describe() == "GPU of kind H200"
    plain = GangOptions(kind="cuda", resource="GPU", placement_timeout_s=1, rendezvous_timeout_s=1)
    assert plain.bundle() == {"GPU": 1} and plain.describe() == "GPU"


# ---------------------------------------------------------------------- seeding, report

def entry(case: int, kind: str, best: int, best_ms: float, default_ms: float) -> dict[str, Any]:
    return {"id": f"{kind}-{case}", "function": "fn", "key": f"({case},)",
            "best": {"index": best, "config": {"block": (32, 64, 128)[best]}, "time_ms": best_ms},
            "default_time_ms": default_ms}


def runs(c: Any) -> list[sch.CaseRun]:
    out = []
    outcomes = {("H100", 0): (1, 0.5, 2.0), ("H100", 1): (2, 1.0, 3.0), ("H200", 0): (2, 0.25, 1.0),
                ("H200", 1): None}
    for kind in ("H100", "H200"):
        for spec in c.cases():
            run = sch.CaseRun(spec, hardware=kind, attempts=1)
            found = outcomes[(kind, spec.number)]
            if found is None:
                run.status, run.errors = sch.FAILED, ["attempt 1: boom"]
            else:
                run.status, run.entry = sch.TUNED, entry(spec.number, kind, *found)
            out.append(run)
    return out


def test_each_node_is_seeded_with_its_own_kinds_entries() -> None:
    # the entry files by kind, as the results stream names them (ray_runner.results.entry_paths_by_kind)
    paths = {"H100": ["/c/H100-0.json", "/c/H100-1.json"], "H200": ["/c/H200-0.json"]}
    nodes = [node("a", 8, "H100"), node("a2", 8, "H100"), node("b", 8, "H200"), node("head", 0), node("x", 8, "B200")]
    groups = {kind: ([n["NodeManagerAddress"] for n in members], [Path(p).stem for p in chosen])
              for kind, members, chosen in seed_groups(paths, nodes)}
    assert groups == {"H100": (["a", "a2"], ["H100-0", "H100-1"]), "H200": (["b"], ["H200-0"]),
                      None: (["head", "x"], ["H100-0", "H100-1", "H200-0"])}  # no tuned kind: every entry
    # only what the campaign hands over is seeded (e.g. without failed or merged cases)
    assert [Path(p).stem for _, _, chosen in seed_groups({"H100": paths["H100"][:1]}, nodes[:1])
            for p in chosen] == ["H100-0"]
    # two kinds with one hardware digest share their entry files: a kindless node gets each once
    twins = {"H100": ["/c/e.json"], "H200": ["/c/e.json"]}
    assert [chosen for kind, _, chosen in seed_groups(twins, [node("head", 0)])] == [["/c/e.json"]]


def test_the_report_has_a_column_per_kind_and_names_disagreements(tmp_path: Any) -> None:
    c = campaign(report_dir=str(tmp_path))
    hardware = [{"hardware": k, "present": True, "nodes": ["a"], "devices": 8, "counts": {}} for k in ("H100", "H200")]
    result = CampaignResult(c, runs(c), "cuda", "GPU", "/cache", 10.0, {"a": 8, "b": 8}, {}, hardware=hardware)
    report = build_report(result)
    first, second = report["by_case"]
    assert first["agree"] is False and second["agree"] is None  # case 1 failed on H200: nothing to compare
    assert first["kinds"]["H100"]["best_config"] == "block=64" and first["kinds"]["H200"]["speedup"] == 4.0
    assert second["kinds"]["H200"]["status"] == "failed"
    text = markdown(report)
    assert "| # | function | W | case | `H100` | `H200` | same best? |" in text
    assert ("| 0 | `pkg.mod:fn` | 1 | `{\"n\": 1}` | block=64; 0.5000 ms; 4.00× | block=128; 0.2500 ms; 4.00× "
            "| **no** |") in text
    assert "- case 0 `pkg.mod:fn` `{\"n\": 1}`: `H100` → block=64 (0.5000 ms); `H200` → block=128 (0.2500 ms)" in text
    assert "| 1 | `H200` | `pkg.mod:fn` |" in text  # the per-run table names the kind
    homogeneous = build_report(CampaignResult(c, runs(c)[:2], "cuda", "GPU", "/c", 1.0, {}, {}))
    assert homogeneous["by_case"] == [] and "same best?" not in markdown(homogeneous)
    twins = [{**k, "digests": ["d0"]} for k in hardware]
    assert "kinds `H100`, `H200` have the same hardware digest `d0`" in markdown(build_report(
        CampaignResult(c, runs(c), "cuda", "GPU", "/cache", 10.0, {}, {}, hardware=twins)))
    one = markdown(build_report(CampaignResult(c, runs(c)[:2], "cuda", "GPU", "/c", 1.0, {}, {},
                                               hardware=hardware[:1])))
    assert "- `H100`: 8 GPU on 1 node(s)" in one and "same best?" not in one and "disagree" not in one


# ---------------------------------------------------------------------- pre-flight

def checked(kind: str | None, digest: str, hits: int, misses: int) -> dict[str, Any]:
    # as a node answers (preflight._check_node_brief): its misses, and how many pairs it checked
    rows = [{"function": "f", "case": {"n": i}, "world_size": 1, "rank": 0, "hit": False, "why": "no entry"}
            for i in range(misses)]
    return {"host": f"h-{digest}", "address": f"10.0.0.{len(digest)}", "root": "/r", "device": "cuda:0",
            "rows": rows, "checked": hits + misses, "digest": digest, "hardware": kind}


def test_preflight_counts_per_kind_and_refuses_two_digests_under_one_kind() -> None:
    ok, lines = summarize([checked("H100", "d1", 4, 0), checked("H100", "d1", 4, 0), checked("H200", "d2", 3, 1)])
    assert not ok
    assert "kind H100: 2 node(s), 8 hit(s), 0 miss(es), hardware digest(s) d1" in lines
    assert "kind H200: 1 node(s), 3 hit(s), 1 miss(es), hardware digest(s) d2" in lines
    ok, lines = summarize([checked("H100", "d1", 2, 0), checked("H100", "d3", 2, 0)])
    assert not ok and "DIFFERENT hardware under one kind" in lines[0]
    ok, lines = summarize([checked("H100", "d1", 2, 0), checked("H200", "d2", 2, 0)])
    assert ok, lines


def test_a_declared_kind_next_to_rays_detected_one() -> None:
    # the operator declared finer kinds (SXM, PCIe) on nodes Ray calls H100 alike
    nodes = [node("s", 8, "H100", "H100-SXM"), node("p", 8, "H100", "H100-PCIe")]
    plan = plan_fleet(("H100-SXM", "H100-PCIe"), nodes, "GPU")
    assert plan.kinds == ("H100-SXM", "H100-PCIe") and plan.untuned == () and plan.notes("GPU") == []
    auto = plan_fleet(None, nodes, "GPU")
    assert auto.kinds == ("H100", "H100-PCIe", "H100-SXM")
    assert any("declare several kinds" in n and "s, p" in n for n in auto.notes("GPU"))


def test_validate_without_a_cluster_says_the_kinds_are_unchecked(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture) -> None:
    from ray_runner.__main__ import main

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.chdir(REPO)  # validate may import the targets
    path = tmp_path / "mixed.yaml"
    path.write_text("device: cuda\nhardware: [H100, H200]\ntargets:\n"
                    "  - {function: 'tests.ray.fleet_targets:scaled', args: 'tests.ray.fleet_targets:make_args', "
                    "cases: [{n: 1}]}\n")
    assert main(["validate", str(path)]) == 0
    assert "hardware ['H100', 'H200']: not checked against a cluster (pass --address)" in capsys.readouterr().out
    path.write_text(path.read_text().replace("[H100, H200]", "[H100, 'H 200']"))
    assert main(["validate", str(path)]) == 2
    assert "hardware[1]: must be an accelerator kind" in capsys.readouterr().err


def test_nodes_that_share_an_address_are_told_apart_by_id() -> None:
    # several raylets on one machine (ray.cluster_utils.Cluster, or host networking)
    a, b = node("10.0.0.1", 2, "KA"), node("10.0.0.1", 2, "KB")
    b["NodeID"] = "id-other"
    plan = plan_fleet(("KA", "KC"), [a, b], "GPU")
    assert plan.untuned == ("KB",) and plan.absent == ("KC",)
    assert plan.nodes == {"KA": ("10.0.0.1",), "KB": ("10.0.0.1",)}
