"""ray_runner without a cluster: campaign validation, scheduling policy, merging, reports, CLI."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from ray_runner import scheduler as sch
from ray_runner.__main__ import main
from ray_runner.errors import GangStartError, describe_failure, root_cause
from ray_runner.merge import merge_entries
from ray_runner.report import config_text
from ray_runner.spec import load_campaign, parse_campaign
from triton_dist.errors import CampaignError, DeviceStateError, RankDisagreementError, RankFailureError

REPO = Path(__file__).resolve().parents[2]

GOOD = {
    "device": "cpu",
    "targets": [{"function": "pkg.mod:fn", "args": "pkg.mod:make_args", "world_size": 2,
                 "cases": [{"n": 1}], "grid": {"n": [1, 2], "dtype": ["float32", "float16"]}}],
}


def errors_of(data: dict) -> list[str]:
    with pytest.raises(CampaignError) as info:
        parse_campaign(data)
    return info.value.details["errors"]


def test_defaults_and_grid_expansion() -> None:
    campaign = parse_campaign(GOOD, default_name="x")
    assert (campaign.name, campaign.device, campaign.retries, campaign.case_timeout_s) == ("x", "cpu", 2, 600.0)
    assert campaign.placement_strategy == "STRICT_PACK" and campaign.check_correctness is True
    cases = [c.case for c in campaign.cases()]
    # the explicit case first; the grid's {n: 1, dtype: float32} is a different case (more keys)
    assert cases[0] == {"n": 1}
    assert len(cases) == 5 and {"n": 2, "dtype": "float16"} in cases
    assert all(c.world_size == 2 for c in campaign.cases())
    dup = copy.deepcopy(GOOD)
    dup["targets"][0]["cases"] = [{"n": 1, "dtype": "float32"}]
    assert len(parse_campaign(dup).cases()) == 4  # the duplicate from the grid is dropped


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d["targets"][0].update(world_size=0), "targets[0].world_size: must be >= 1, got 0"),
    (lambda d: d["targets"][0].update(world_size="2"), "targets[0].world_size: must be an integer"),
    (lambda d: d["targets"][0].update(function="no_colon"), "targets[0].function: must be an import path"),
    (lambda d: d["targets"][0].pop("args"), "targets[0].args: must be an import path"),
    (lambda d: d["targets"][0].update(cases=[{"n": 1}, 5]), "targets[0].cases[1]: must be a mapping"),
    (lambda d: d["targets"][0].update(grid={"n": []}), "targets[0].grid.n: must be a non-empty list"),
    (lambda d: d["targets"][0].update(world_sise=2),
     "targets[0].world_sise: unknown field (did you mean 'world_size'?)"),
    (lambda d: d.update(device="gpu"), "device: must be one of auto, npu, cuda, cpu"),
    (lambda d: d.update(retries=True), "retries: must be an integer"),
    (lambda d: d.update(retries=-1), "retries: must be >= 0"),
    (lambda d: d.update(case_timeout_s=0), "case_timeout_s: must be > 0"),
    (lambda d: d.update(env={"A": ["x"]}), "env.A: must be a string"),
    (lambda d: d.update(targets=[]), "targets: must be a non-empty list"),
    (lambda d: d["targets"][0].pop("cases") and d["targets"][0].pop("grid"), "targets[0]: has no cases"),
    # session 27's tester: a world past Ray's resource bound was a Ray traceback at run time, and
    # NaN or infinity in a case was written into the reports and keys as non-standard JSON
    (lambda d: d["targets"][0].update(world_size=10**20), "targets[0].world_size: must be <= 65536"),
    (lambda d: d["targets"][0].update(cases=[{"n": 8, "x": math.nan}]), "targets[0].cases[0].x: holds NaN"),
    (lambda d: d["targets"][0].update(grid={"y": [1, math.inf]}), "targets[0].grid.y: holds NaN or infinity"),
])
def test_errors_name_the_field_path(mutate, expected: str) -> None:
    data = copy.deepcopy(GOOD)
    mutate(data)
    errors = errors_of(data)
    assert any(e.startswith(expected) for e in errors), errors


def test_every_problem_is_reported_at_once(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("device: tpu\nretries: -1\ntargets:\n"
                    "  - {function: a.b:c, args: a.b:d, world_size: 0, cases: [{}]}\n"
                    "  - {function: x, args: a.b:d, cases: [{n: 1}]}\n")
    with pytest.raises(CampaignError) as info:
        load_campaign(path)
    message = str(info.value)
    assert str(path) in message
    for field in ("device:", "retries:", "targets[0].world_size:", "targets[1].function:"):
        assert f"  {field}" in message


def test_cli_validate_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(REPO / "examples/campaigns/cpu.yaml")]) == 0
    assert "valid campaign 'cpu'" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("targets:\n  - {function: a.b:c, args: a.b:d, world_size: 0, cases: [{n: 1}]}\n")
    assert main(["validate", str(bad)]) == 2
    assert "targets[0].world_size: must be >= 1" in capsys.readouterr().err
    (tmp_path / "broken.yaml").write_text("targets: [\n")
    assert main(["validate", str(tmp_path / "broken.yaml")]) == 2
    assert main(["validate", str(tmp_path / "missing.yaml")]) == 2


@pytest.mark.parametrize("name", ["cpu.yaml", "gemm-gpu.yaml"])
def test_example_campaigns_are_valid(name: str) -> None:
    campaign = load_campaign(REPO / "examples/campaigns" / name)
    assert {c.world_size for c in campaign.cases()} == {1, 2}


def test_ray_missing_says_how_to_install(tmp_path: Path) -> None:
    # a fresh interpreter in which `import ray` fails, as on a machine without the extra
    code = ("import sys; sys.modules['ray'] = None\n"
            "from ray_runner.__main__ import main\n"
            f"sys.exit(main(['run', {str(REPO / 'examples/campaigns/cpu.yaml')!r}, '--cache-dir', {str(tmp_path)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 3, proc.stderr
    assert "pip install 'triton-dist-autotune[ray]'" in proc.stderr


# ---------------------------------------------------------------------- scheduling policy

def test_gangs_are_as_large_as_the_largest_pending_size_and_only_as_many_as_the_work() -> None:
    # 4 devices on one node, cases of 1 and 2 ranks: two gangs of 2, each serving both sizes
    assert sch.plan_gangs({"a": 4}, [], {1: 4, 2: 2}) == [2, 2]
    # no more ranks than pending work; only single-rank work: gangs of one
    assert sch.plan_gangs({"a": 4}, [], {1: 1}) == [1]
    assert sch.plan_gangs({"a": 4}, [], {1: 3}) == [1, 1, 1]
    # what is running or starting counts; draining gangs hold devices but serve nothing
    assert sch.plan_gangs({"a": 4}, [("a", 2)], {1: 5, 2: 5}) == [2]
    assert sch.plan_gangs({"a": 4}, [], {1: 5}, occupied=[("a", 3)]) == [1]
    # STRICT_PACK: a gang of 2 needs two free devices on one node
    assert sch.plan_gangs({"a": 1, "b": 1}, [], {2: 1}) == []
    assert sch.plan_gangs({"a": 1, "b": 1}, [], {2: 1}, strict_pack=False) == [2]
    assert sch.plan_gangs({"a": 1, "b": 3}, [], {2: 1, 1: 4}) == [2, 1, 1]
    assert sch.largest_gang({"a": 2, "b": 3}) == 3


def test_blocks_take_the_largest_size_first_and_never_starve_it() -> None:
    assert sch.blocks(4, 2) == [(0, 1), (2, 3)] and sch.blocks(3, 2) == [(0, 1)]
    # an idle gang of 2: the pair case first
    assert sch.assign(2, set(), {1: 3, 2: 1}) == [(2, (0, 1))]
    # no pair case left: both ranks take single cases
    assert sch.assign(2, set(), {1: 3}) == [(1, (0,)), (1, (1,))]
    # a pair case waits for its block; rank 1 does not take single cases meanwhile
    assert sch.assign(2, {0}, {1: 3, 2: 1}) == []
    # a gang of 4: one pair block busy, the other takes the next pair; then singles
    assert sch.assign(4, {0, 1}, {2: 1, 1: 5}) == [(2, (2, 3))]
    assert sch.assign(4, {0, 1}, {1: 5}) == [(1, (2,)), (1, (3,))]
    assert sch.assign(1, set(), {2: 1}) == []


def test_queue_retries_then_fails_and_goes_on() -> None:
    campaign = parse_campaign({"retries": 1, "targets": [
        {"function": "m:f", "args": "m:a", "cases": [{"n": 1}, {"n": 2}]},
        {"function": "m:f", "args": "m:a", "world_size": 2, "cases": [{"n": 3}]}]})
    queue = sch.CaseQueue(campaign.cases(), campaign.retries)
    assert queue.pending_by_size() == {1: 2, 2: 1}
    first = queue.take(1)
    assert first is not None and first.attempts == 1
    assert queue.fail(first, "boom") is True  # retried first, before the next case
    assert queue.take(1) is first and first.attempts == 2
    assert queue.fail(first, "boom again") is False and first.status == sch.FAILED
    second = queue.take(1)
    assert second is not None and second.number == 1
    assert queue.fail(second, "config error", retry=False) is False
    assert [r.number for r in queue.fail_size(2, "cannot place")] == [2]
    assert queue.finished() and queue.counts() == {sch.FAILED: 3}
    assert first.errors == ["attempt 1: boom", "attempt 2: boom again"]


def test_a_case_merged_into_a_case_that_fails_is_tuned_itself() -> None:
    """Merged while its owner still ran, then the owner failed: the merged case was reported done
    without an entry, and re-runs never tuned it (a training job's miss, found 2026-12-03). It
    waits for its owner: merged when the owner's entry is there, queued again when it fails."""
    from ray_runner.claims import Claims

    campaign = parse_campaign({"retries": 0, "targets": [
        {"function": "m:f", "args": "m:a", "cases": [{"n": 1}, {"n": 1.0}, {"n": 2}, {"n": 2.0}]}]})
    done: list[tuple[int, str]] = []
    queue = sch.CaseQueue(campaign.cases(), campaign.retries, on_done=lambda r: done.append((r.number, r.status)))
    claims = Claims()
    owner, merged, owner2, merged2 = (queue.take(1) for _ in range(4))
    for run, key in ((owner, "a"), (merged, "a"), (owner2, "b"), (merged2, "b")):
        clash = claims.claim(run, {"function": "f", "id": key, "key": key})
        if clash is not None:
            assert queue.merge(run, clash.owner) is False and run.status == sch.WAITING
    assert queue.fail(owner, "every config failed", retry=False) is False
    assert merged.status == sch.PENDING and merged.merged_into is None
    assert queue.take(1) is merged and merged.attempts == 1  # its wait was not an attempt
    assert claims.claim(merged, {"function": "f", "id": "a", "key": "a"}) is None  # it owns the entry now
    queue.succeed(owner2, sch.TUNED, entry={})
    assert merged2.status == sch.MERGED and (3, sch.MERGED) in done  # merged once the entry is there
    queue.succeed(merged, sch.TUNED, entry={})
    assert queue.finished() and done == [(0, sch.FAILED), (2, sch.TUNED), (3, sch.MERGED), (1, sch.TUNED)]
    late = sch.CaseQueue(campaign.cases()[:2], 0)
    first, second = late.take(1), late.take(1)
    late.succeed(first, sch.TUNED, entry={})
    assert late.merge(second, first) is True and second.status == sch.MERGED and late.finished()


def test_describe_failure_marks_configuration_errors_final() -> None:
    text, retry = describe_failure(CampaignError("function: module 'x' has no attribute 'y'"))
    assert not retry and "no attribute" in text
    assert describe_failure(RuntimeError("flaky"))[1] is True
    assert describe_failure(GangStartError("no room", retry=True)) == ("no room", True)


def test_a_case_failure_says_which_rank_which_step_and_the_users_line() -> None:
    # "ValueError: boom" or "RuntimeError: bad case" named no rank, no step (arguments, key or
    # tuning) and no line (found by a tester, session 28): the worker's attribute() adds a note,
    # which survives Ray's pickling of the exception (a TritonDistError's too), and the failure's
    # text carries it.
    from ray import cloudpickle

    from ray_runner.worker import attribute
    from triton_dist.errors import NoValidConfigError

    def key_fn():
        raise ValueError("boom")

    with pytest.raises(ValueError) as caught, attribute(1, 2, "computing the key (key_fn)"):
        key_fn()
    text, retry = describe_failure(cloudpickle.loads(cloudpickle.dumps(caught.value)))
    assert retry and text.startswith("ValueError: boom [rank 1 of 2, computing the key (key_fn), at "
                                     "test_ray_spec.py:") and text.endswith(" in key_fn]"), text
    with pytest.raises(NoValidConfigError) as caught, attribute(0, 2, "tuning"):
        raise NoValidConfigError("every candidate failed", key="k")
    copy = cloudpickle.loads(cloudpickle.dumps(caught.value))
    assert copy.details == {"key": "k"} and "[rank 0 of 2, tuning" in describe_failure(copy)[0]
    with pytest.raises(RankFailureError) as caught, attribute(0, 2, "tuning"):  # another rank's echo: as it is
        raise RankFailureError("another rank failed")
    assert not getattr(caught.value, "__notes__", None)


def test_root_cause_prefers_a_poisoned_device_then_a_rank_of_its_own_over_the_peers_echo() -> None:
    echo, own = RankFailureError("another rank failed"), RuntimeError("rank 1: out of memory")
    poisoned = DeviceStateError("illegal memory access", index=3, reason="illegal memory access")
    known: dict[int, str] = {}
    assert root_cause([echo, own], known) is own and known == {}  # the peer's echo reported first
    assert root_cause([echo, own, poisoned], known) is poisoned
    assert known == {3: "illegal memory access"}  # the retry records it failed without running it
    assert root_cause([echo], {}) is echo  # nothing better: what was seen


# ---------------------------------------------------------------------- merging

def _entry(rank_error: str | None = None) -> dict:
    return {"schema": "triton_dist.autotune/v1", "id": "abc", "function": "f", "qualname": "m.f", "key": "(1,)",
            "source_hash": "s", "hardware": {"digest": "h"}, "world_size": 2,
            "best": {"index": 1, "config": {"cfg": 1}},
            "candidates": [{"index": 0, "time_ms": None, "error": rank_error},
                           {"index": 1, "time_ms": 1.5, "error": None}]}


def test_merge_checks_agreement_and_keeps_the_real_failure_reason() -> None:
    merged = merge_entries([_entry("failed on another rank of the group"), _entry("RuntimeError: out of memory")], 2)
    assert merged["candidates"][0]["error"] == "rank 1: RuntimeError: out of memory"
    # since 2026-12-04 a rank names the rank the config failed on (no log in a gang): still replaced
    merged = merge_entries([_entry("failed on rank 1 of the group of 2 ranks [0, 1]"),
                            _entry("RuntimeError: out of memory")], 2)
    assert merged["candidates"][0]["error"] == "rank 1: RuntimeError: out of memory"
    assert merged["best"] == {"index": 1, "config": {"cfg": 1}}
    other = _entry()
    other["best"] = {"index": 0, "config": {"cfg": 0}}
    other["candidates"][1]["time_ms"] = 2.5
    with pytest.raises(RankDisagreementError, match="best index"):
        merge_entries([_entry(), other], 2)
    with pytest.raises(RankDisagreementError):
        merge_entries([_entry()], 2)


def test_config_text_reads_triton_configs() -> None:
    encoded = {"cfg": {"triton.Config": {"kwargs": {"dict": [["BLOCK", 256]]}, "num_warps": 4, "num_stages": 3,
                                          "pre_hook": None}}}
    assert config_text(encoded) == "BLOCK=256, num_warps=4, num_stages=3"
    assert config_text({"a": 1, "b": {"tuple": [1, 2]}, "c": {"float": "inf"}}) == "a=1, b=(1, 2), c=inf"
    assert math.isfinite(json.loads(json.dumps(1.0)))


def test_seed_shared_needs_the_shared_directory(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(REPO / "examples/campaigns/cpu.yaml"), "--seed", "shared"]) == 3
    err = capsys.readouterr().err
    assert "--seed shared" in err and "--cache-dir DIR" in err


def test_unwritable_cache_dir_fails_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert main(["run", str(REPO / "examples/campaigns/cpu.yaml"), "--cache-dir", str(blocker / "cache")]) == 3
    assert "is not writable" in capsys.readouterr().err


def test_the_projects_variables_in_env_are_read_as_the_actors_would() -> None:
    base = {"targets": [{"function": "m:f", "args": "m:a", "cases": [{"n": 1}]}]}
    with pytest.raises(CampaignError) as info:
        parse_campaign({**base, "env": {"TRITON_DIST_DEVICE": "gpu", "TRITON_DIST_COMPILE_WORKERS": "many",
                                        "TRITON_DIST_AUTOTUNE_ALWAYS_TUNE": "yes", "OTHER": "anything"}})
    text = str(info.value)
    assert "TRITON_DIST_DEVICE='gpu'" in text and "TRITON_DIST_COMPILE_WORKERS='many'" in text
    assert "ALWAYS_TUNE" not in text.split("got dict")[0]  # "yes" is a valid flag
    assert parse_campaign({**base, "env": {"TRITON_DIST_DEVICE": "cpu"}}).env_dict() == {"TRITON_DIST_DEVICE": "cpu"}


def test_a_name_in_env_that_looks_like_a_setting_but_is_none_fails_the_file() -> None:
    """``TRITON_DIST_AUTOTUNE_CACHE_DIR: /shared`` was ignored on every node: each seeded and read
    its own ~/.triton_dist (an operator, 2026-12-05)."""
    base = {"targets": [{"function": "m:f", "args": "m:a", "cases": [{"n": 1}]}]}
    with pytest.raises(CampaignError) as info:
        parse_campaign({**base, "env": {"TRITON_DIST_AUTOTUNE_CACHE_DIR": "/shared", "OTHER": "anything"}})
    assert "TRITON_DIST_AUTOTUNE_CACHE_DIR is not a setting of this triton_dist and is ignored: did you mean " \
           "TRITON_DIST_AUTOTUNE_DIR?" in str(info.value)
    kept = {"TRITON_DIST_HARDWARE_OVERRIDE": "a", "TRITON_DIST_LOG_LEVEL": "info", "TRITON_DIST_AUTOTUNE_DIR": "/s"}
    assert parse_campaign({**base, "env": kept}).env_dict() == kept
