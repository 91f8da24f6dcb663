"""The campaign models as one source (issue 20): the committed JSON schema is theirs, the schema and
``validate`` agree on real campaign files (checked with the ``jsonschema`` library, not our code),
and the pydantic models keep issue 17's bounds — no value reaches them unscreened, no message
renders a whole value or pydantic's own wording."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import jsonschema
import pydantic
import pytest
import yaml

from ray_runner.__main__ import main
from ray_runner.spec import Campaign, TargetSpec, campaign_schema, load_campaign, parse_campaign
from triton_dist.errors import CampaignError

REPO = Path(__file__).resolve().parents[2]
SCHEMA_FILE = REPO / "docs" / "campaign.schema.json"
CAMPAIGN_FILES = sorted([*REPO.glob("examples/campaigns/*.yaml"), *REPO.glob("deploy/campaigns/*.yaml")])
GOOD = {"device": "cpu", "targets": [{"function": "pkg.mod:fn", "args": "pkg.mod:make_args", "world_size": 2,
                                      "cases": [{"n": 1}], "grid": {"n": [1, 2]}}]}


def test_the_committed_schema_is_the_models_and_the_cli_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert json.loads(SCHEMA_FILE.read_text()) == campaign_schema(), (
        "docs/campaign.schema.json is stale: python -m ray_runner schema > docs/campaign.schema.json")
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == campaign_schema()
    assert "(campaign.schema.json)" in (REPO / "docs" / "campaigns.md").read_text()
    jsonschema.Draft202012Validator.check_schema(campaign_schema())


@pytest.mark.parametrize("path", CAMPAIGN_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_campaign_file_of_the_repository_passes_schema_and_model(path: Path) -> None:
    data = yaml.safe_load(path.read_text())
    jsonschema.validate(data, campaign_schema())
    assert load_campaign(path).cases()


def test_schema_and_model_take_the_same_empty_hardware_and_the_schema_names_the_real_defaults() -> None:
    """Session 27's new user: the schema refused ``hardware:`` left empty, which the model takes as
    auto, and gave ``name`` a default of "campaign" where the file's stem is the default."""
    data = {**copy.deepcopy(GOOD), "hardware": None}
    jsonschema.validate(data, campaign_schema())
    assert parse_campaign(data).hardware is None  # auto
    properties = campaign_schema()["properties"]
    assert properties["hardware"]["default"] == "auto" and "default" not in properties["name"]


@pytest.mark.parametrize("mutate, path", [
    (lambda d: d.update(devise="cpu"), "devise"),
    (lambda d: d.update(device="gpu"), "device"),
    (lambda d: d.update(retries=-1), "retries"),
    (lambda d: d.update(check_correctness="yes"), "check_correctness"),
    (lambda d: d.update(placement_strategy="pack"), "placement_strategy"),
    (lambda d: d.update(env={"1A": "x"}), "env"),
    (lambda d: d.update(targets=[]), "targets"),
    (lambda d: d["targets"][0].update(world_size=0), "targets[0].world_size"),
    (lambda d: d["targets"][0].update(function="no_colon"), "targets[0].function"),
    (lambda d: d["targets"][0].pop("args"), "targets[0].args"),
    (lambda d: d["targets"][0].update(cases=[5]), "targets[0].cases[0]"),
    (lambda d: d["targets"][0].update(grid={}), "targets[0].grid"),
    (lambda d: d["targets"][0].update(grid={"n": []}), "targets[0].grid.n"),
])
def test_schema_and_model_refuse_the_same_mistakes(mutate, path: str) -> None:
    data = copy.deepcopy(GOOD)
    mutate(data)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, campaign_schema())
    with pytest.raises(CampaignError) as info:
        parse_campaign(data)
    errors = info.value.details["errors"]
    assert any(e.startswith(f"{path}: ") for e in errors), errors
    assert not any("Input should" in e or "errors.pydantic.dev" in e for e in errors), errors  # our wording


def test_the_models_are_frozen_and_refuse_unknown_fields() -> None:
    campaign = parse_campaign(GOOD)
    with pytest.raises(pydantic.ValidationError):
        campaign.retries = 5  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        TargetSpec(function="a:b", args="a:c", cases=({"n": 1},), colour="red")  # type: ignore[call-arg]
    assert "source" not in Campaign.model_fields  # where it was read from is not a file field
    assert parse_campaign(GOOD, source="x.yaml").source == "x.yaml"
    with pytest.raises(CampaignError, match="source: unknown field"):
        parse_campaign({**GOOD, "source": "y"})
    # built in code, not through parse_campaign: the models still bound what they are given
    with pytest.raises(pydantic.ValidationError, match="must be a plain value"):
        TargetSpec(function="a:b", args="a:c", cases=({"n": _bomb()},))


def _bomb(levels: int = 9, width: int = 9) -> list:
    """What YAML aliases build: 9^9 leaves from 9 shared lists (a 300-byte file)."""
    node: list = [1] * width
    for _ in range(levels - 1):
        node = [node] * width
    return node


@pytest.mark.timeout(60)
def test_a_shared_huge_value_in_every_slot_is_refused_quickly_with_glimpses() -> None:
    bomb = _bomb()
    target = {"function": "a.b:c", "args": "a.b:d", "world_size": bomb, "cases": [{"x": bomb}] * 1000,
              "grid": {"y": bomb}}
    data = {"name": bomb, "device": bomb, "retries": bomb, "env": {"A": bomb}, "ray_resource": bomb,
            "report_dir": bomb, "max_cases": 10**6, "targets": [target] * 20 + [bomb]}
    start = time.monotonic()
    with pytest.raises(CampaignError) as info:
        parse_campaign(data)
    assert time.monotonic() - start < 30  # one bounded walk per distinct object, not per reference
    errors = info.value.details["errors"]
    for path in ("name", "device", "retries", "env", "ray_resource", "report_dir", "targets[0].world_size",
                 "targets[0].cases[999].x", "targets[19].grid.y", "targets[20]"):
        assert any(e.startswith(f"{path}: ") for e in errors), (path, errors[:20])
    assert max(len(e) for e in errors) < 400  # a glimpse, never the tree
    assert len(errors) > 20 * 1000 and str(info.value).endswith(f"... and {len(errors) - 100} more")


def test_max_cases_is_counted_before_the_model_sees_the_cases() -> None:
    # 200 explicit cases over max_cases: refused from the list's length, naming the bound
    data = {"max_cases": 100, "targets": [{"function": "a:b", "args": "a:c", "cases": [{"n": i} for i in range(200)]}]}
    with pytest.raises(CampaignError, match="up to 200 cases, more than max_cases = 100: explicit cases"):
        parse_campaign(data)
    assert len(parse_campaign({**data, "max_cases": 200}).cases()) == 200


def test_a_raised_max_cases_still_refuses_what_memory_cannot_hold_before_building() -> None:
    """max_cases: 10**21 over a 10**20-case grid: validate built every case and died of a raw
    MemoryError (a tester). Above MAX_CASES_CEILING the campaign is refused from the grids' sizes."""
    from ray_runner.spec import MAX_CASES, MAX_CASES_CEILING

    grid = {c: list(range(10)) for c in "abcdefghijklmnopqrst"}
    started = time.monotonic()
    with pytest.raises(CampaignError) as info:
        parse_campaign({"max_cases": 10**21, "targets": [{"function": "a:b", "args": "a:c", "grid": grid}]})
    assert time.monotonic() - started < 5
    text = str(info.value)
    # the bound it passes is not named as the one it exceeds (it said "more than max_cases = 10**21")
    assert f"up to {10**20} cases, more than any campaign may have ({MAX_CASES_CEILING}" in text, text
    assert "max_cases = " not in text, text
    assert "Split the campaign" in text and "raise max_cases" not in text
    just_over = {"n": list(range(MAX_CASES_CEILING // 1000 + 1)), "m": list(range(1000))}
    with pytest.raises(CampaignError, match="more than any campaign may have"):
        parse_campaign({"max_cases": MAX_CASES_CEILING * 10, "targets": [
            {"function": "a:b", "args": "a:c", "grid": just_over}]})
    # with the default bound, a campaign over the ceiling is not told to raise max_cases (a reviewer)
    with pytest.raises(CampaignError) as info:
        parse_campaign({"targets": [{"function": "a:b", "args": "a:c", "grid": just_over}]})
    assert "more than any campaign may have" in str(info.value) and "raise max_cases" not in str(info.value)
    assert f"more than max_cases = {MAX_CASES} and more than" in str(info.value)  # both exceeded
    # a raised bound is still what it says below the ceiling
    small = parse_campaign({"max_cases": 10**21, "targets": [
        {"function": "a:b", "args": "a:c", "grid": {"n": [1, 2]}}]})
    assert len(small.cases()) == 2
