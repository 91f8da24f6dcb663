"""Pre-flight against a reference node (issue 21): a node whose entries are byte-identical to the
reference's reuses its verdicts, and every other pair goes through the hit rule on that node, so
the answer is exactly what the full rule (``check_node``) says there.

The nodes are cache roots of this process (a node's answer depends on its root, settings and
environment, which the tests change between the reference and the node); the entries are written
by inline tuning of ``tests.ray.ray_targets:host`` and ``tests.ray.preflight_targets:threaded``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from ray_runner.preflight_node import check_against, check_node, reference
from ray_runner.seed import build_packs, write_packs
from tests.served import served
from triton_dist._store import packs

HOST = ("tests.ray.ray_targets:host", "tests.ray.ray_targets:make_host_args")
THREADED = ("tests.ray.preflight_targets:threaded", "tests.ray.preflight_targets:make_args")


def _verdicts(rows: list[dict[str, Any]]) -> list[tuple]:
    """What a node says about its pairs that is not a plain hit (its answer's rows)."""
    return sorted((r["function"], r["case"]["n"], r["world_size"], r["rank"], r["hit"], r.get("why"),
                   r.get("path")) for r in rows if not r.get("hit") or r.get("compiles"))


def _rule(cases: list[tuple], root: Path) -> list[tuple]:
    return _verdicts(check_node(cases, str(root))["rows"])


@pytest.fixture
def tuned(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Entries for n = 1..4 of ``host`` and n = 1, 2 of ``threaded`` (one rank each) in the
    reference's root; the cases add a 2-rank world of ``host``, whose ranks miss (the entry was
    measured over 1 rank) although the file is there."""
    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    from tests.ray import preflight_targets, ray_targets

    for n in range(1, 5):  # tune() as a campaign's rank does (a call would hit the memory of an earlier test)
        ray_targets.host.tune(n)
    for n in (1, 2):
        preflight_targets.threaded.tune(n)
    return ([(*HOST, 1, {"n": n}) for n in range(1, 5)] + [(*HOST, 2, {"n": 1})]
            + [(*THREADED, 1, {"n": n}) for n in (1, 2)])


def _node(cache_dir: Path, tmp_path: Path) -> Path:
    """A node seeded with the reference's entries, as ``--seed nodes`` does: one pack per function."""
    items = [(p.relative_to(cache_dir).as_posix(), p.read_bytes()) for p in sorted(cache_dir.glob("*/*.json"))]
    node = tmp_path / "node"
    assert write_packs(node, build_packs(items)[0])["written"] == len(items) == 6
    assert not list(node.glob("*/*.json")) and len(list(node.glob("*/packs/*.pack"))) == 2
    return node


def test_identical_entries_take_the_reference_verdicts_and_the_rest_is_checked_here(
        tuned: list[tuple], cache_dir: Path, tmp_path: Path) -> None:
    first, expect = reference(tuned, str(cache_dir))
    assert first["checked"] == 8 and first["full_rule"] == 8
    assert [(r["case"]["n"], r["world_size"], r["rank"]) for r in first["rows"]] == [(1, 2, 0), (1, 2, 1)]
    assert all("measured over 1 rank" in r["why"] for r in first["rows"])
    node = _node(cache_dir, tmp_path)

    answer = check_against(tuned, str(node), expect, "ref")
    # the only pairs checked here are the misses whose file is there: their reasons name this
    # node's files, and they are the rule's own
    assert (answer["checked"], answer["full_rule"], answer["reference"]) == (8, 2, "ref")
    assert _verdicts(answer["rows"]) == _rule(tuned, node)
    assert all(r["path"].startswith(str(node)) for r in answer["rows"])

    # one entry shadowed by a corrupt loose file, one removed from its pack, one shadowed by
    # another (valid) entry's bytes
    ids = sorted(served(node, "host"))
    (node / "host" / f"{ids[0]}.json").write_text("{}")
    assert packs.remove(node, node / "host", [ids[1]]) == [ids[1]]
    (node / "host" / f"{ids[2]}.json").write_bytes(served(node, "host")[ids[3]])
    answer = check_against(tuned, str(node), expect, "ref")
    assert answer["full_rule"] == 2 + 3  # + the three entries that differ from the reference's
    assert _verdicts(answer["rows"]) == _rule(tuned, node)
    whys = {r["why"] for r in answer["rows"] if r["world_size"] == 1}
    assert whys == {"cache entry unusable (see warning)", "no cache entry", "cache entry is for another key or source"}


def test_a_node_whose_entries_all_miss_is_answered_without_the_rule(tuned: list[tuple], cache_dir: Path,
                                                                   tmp_path: Path) -> None:
    """A cluster not seeded yet: the reference finds no entry of ``host``; a node without the
    files either has the same misses, named in its own root, without building their arguments.
    The node also lacks ``threaded``'s entries, which the reference has: those two pairs are
    checked here."""
    for path in (cache_dir / "host").glob("*.json"):
        path.unlink()
    _, expect = reference(tuned, str(cache_dir))
    empty = tmp_path / "empty"
    answer = check_against(tuned, str(empty), expect, "ref")
    assert answer["full_rule"] == 2 and len(answer["rows"]) == 6 + 2
    assert _verdicts(answer["rows"]) == _rule(tuned, empty)


@pytest.mark.parametrize(("variable", "value", "field"), [
    ("TRITON_DIST_HARDWARE_OVERRIDE", "another device", "hardware"),
    ("TRITON_DIST_AUTOTUNE_VERSION_CHECK", "1", "version_check"),
    ("TRITON_DIST_AUTOTUNE_CACHE_ONLY", "strict", "cache_only"),
])
def test_a_node_with_another_fingerprint_runs_the_rule_on_every_pair(
        tuned: list[tuple], cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        variable: str, value: str, field: str) -> None:
    _, expect = reference(tuned, str(cache_dir))
    node = _node(cache_dir, tmp_path)
    monkeypatch.setenv(variable, value)
    answer = check_against(tuned, str(node), expect, "ref")
    assert answer["full_rule"] == answer["checked"] == 8
    assert field in answer["differs"]
    assert _verdicts(answer["rows"]) == _rule(tuned, node)
    if field == "hardware":  # entries of another device's digest: every pair misses there
        assert len(answer["rows"]) == 8


def test_a_key_that_reads_the_nodes_environment_is_caught_by_the_sample(
        tuned: list[tuple], cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same code, same settings, but the node's OMP_NUM_THREADS gives ``threaded`` other keys:
    reusing the reference's verdicts would report hits the node's jobs would not get."""
    _, expect = reference(tuned, str(cache_dir))
    node = _node(cache_dir, tmp_path)
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    answer = check_against(tuned, str(node), expect, "ref")
    assert "preflight_targets:threaded" in answer["differs"] and answer["full_rule"] == 8
    assert _verdicts(answer["rows"]) == _rule(tuned, node)
    assert {r["case"]["n"] for r in answer["rows"] if r["function"] == THREADED[0]} == {1, 2}


def test_an_entry_directory_that_leads_out_of_the_root_is_checked_here(
        tuned: list[tuple], cache_dir: Path, tmp_path: Path) -> None:
    _, expect = reference(tuned, str(cache_dir))
    node = _node(cache_dir, tmp_path)
    outside = tmp_path / "outside"
    shutil.move(node / "host", outside)
    os.symlink(outside, node / "host")
    answer = check_against(tuned, str(node), expect, "ref")
    assert answer["full_rule"] == 6  # every pair of host (4 + 2 ranks): its directory is a link
    assert _verdicts(answer["rows"]) == _rule(tuned, node)
    assert [r["why"] for r in answer["rows"]] == ["cache entry unusable (see warning)"] * 6


def test_without_a_reference_the_node_runs_the_rule(tuned: list[tuple], cache_dir: Path, tmp_path: Path) -> None:
    node = _node(cache_dir, tmp_path)
    packs.remove(node, node / "host", sorted(served(node, "host"))[:1])
    answer = check_against(tuned, str(node), None, "ref")
    assert answer["full_rule"] == 8 and "reference" not in answer
    assert _verdicts(answer["rows"]) == _rule(tuned, node) and len(answer["rows"]) == 3
