"""Campaign files → validated, frozen objects; every error names its field path.

A campaign file is YAML (see ``examples/campaigns/``; every field: docs/campaigns.md)::

    name: gemm-pretune            # optional: names the report files (default: the file's stem)
    device: auto                  # auto | npu | cuda | cpu
    retries: 2                    # per case; each retry runs on a fresh gang
    case_timeout_s: 600
    max_cases: 100000             # optional: refuse more cases than this (counted before building)
    hardware: auto                # auto (every accelerator kind in the cluster) | [H100, H200]
    targets:
      - function: examples.gemm:matmul        # an autotune-decorated function
        args: examples.gemm:make_matmul_args  # (case, ctx) -> (args tuple, kwargs dict)
        world_size: 1
        cases: [{M: 4096, N: 4096, K: 4096, dtype: float16}]
        grid: {M: [1024, 2048], N: [4096], K: [4096], dtype: [float16]}

The pydantic models below are the one source of the fields, their types, defaults, descriptions
and checks; ``python -m ray_runner schema`` prints their JSON schema (docs/campaign.schema.json).
pydantic comes with ``ray[default]`` (the ``[ray]`` extra, both images). A loaded file is first
screened by :mod:`ray_runner._values` (issue 17: a value over 10,000 nodes or 32 levels, or not
plain data, is replaced by a marker every field rejects) and its case count is bounded from the
grids' sizes, so pydantic only ever sees bounded values; messages are built by
:mod:`ray_runner._spec_errors` (``path: message`` lines, did-you-mean hints), all at once.
The field types and their checks are :mod:`ray_runner.spec_fields`'s.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Field,
    PrivateAttr,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

from triton_dist.errors import CampaignError

from ._spec_errors import error_lines
from ._values import MAX_VALUE_DEPTH, Screen, glimpse
from .spec_fields import (
    DEVICES,
    ENV_NAME,
    MODEL,
    NAME,
    Case,
    Device,
    EnvName,
    EnvValue,
    GridValues,
    ImportPath,
    Name,
    ParamName,
    ReportDir,
    ResourceName,
    Strategy,
    fail,
    hardware_kinds,
    null_is,
    project_settings,
    seconds,
    targets_list,
)

__all__ = ["DEVICES", "MAX_CASES", "MAX_CASES_CEILING", "Campaign", "CaseSpec", "TargetSpec", "campaign_schema",
           "load_campaign", "parse_campaign"]

#: default bound of a campaign's cases (explicit cases plus every grid's product), counted before
#: any is built: an 8 x 10 grid is 10^8 cases from a 300-byte file (issue 17). ``max_cases:`` in
#: the campaign file raises it.
MAX_CASES = 100_000
#: the bound ``max_cases`` may be raised to: every case is built in the driver's memory (~0.5 kB
#: each, and validate, resume and the report each build the list), so a raised bound of 10^21 on
#: a 10^20-case grid ended in a raw MemoryError (a tester); split a larger campaign
MAX_CASES_CEILING = 2_000_000
_SHOWN = 100  # error lines in a CampaignError's message (its details keep all)


# ---------------------------------------------------------------------------- the models

#: the largest gang a case may ask for (a world larger than any job's; Ray refuses resource
#: quantities past 1e14, which a campaign once reached with a world of 10^20 and a traceback)
MAX_WORLD_SIZE = 65536


class TargetSpec(BaseModel):
    """One tuned function and the cases to tune it for (``targets[i]``)."""

    model_config = MODEL

    function: ImportPath = Field(description="`module:attr` of a function decorated with "
                                 "`triton_dist.tune.autotune`, importable on the device actors.")
    args: ImportPath = Field(description="`module:attr` of the argument builder "
                             "`builder(case: dict, ctx) -> (args: tuple, kwargs: dict)`.")
    world_size: int = Field(1, ge=1, le=MAX_WORLD_SIZE, strict=True, description="Ranks per case: each case runs "
                            "on a gang of this many device actors, in a world of exactly that size (at most 65536).")
    cases: Annotated[tuple[Case, ...], null_is(())] = Field(
        (), description="The explicit cases: mappings of parameter names to plain values, handed to the builder.")
    grid: Annotated[dict[ParamName, GridValues], Field(min_length=1)] | None = Field(
        None, description="Parameter -> non-empty list of plain values; the cartesian product is added "
                          "after `cases` (duplicates dropped).")

    @model_validator(mode="after")
    def _has_cases(self) -> TargetSpec:
        if not self.cases and self.grid is None:
            fail("has no cases: give 'cases' (a list of mappings) and/or 'grid'")
        return self

    def all_cases(self) -> list[dict[str, Any]]:
        """``cases`` then the grid's product, duplicates dropped (first occurrence kept)."""
        out: list[dict[str, Any]] = []
        seen: set[str] = set()
        grid = self.grid or {}
        product = (dict(zip(grid, values, strict=True)) for values in itertools.product(*grid.values()))
        for case in itertools.chain(self.cases, product if grid else ()):
            text = case_text(case)
            if text not in seen:
                seen.add(text)
                out.append(dict(case))
        return out


class Campaign(BaseModel):
    """A validated campaign file."""

    model_config = MODEL

    name: Name = Field(
        "campaign", description="Names the report files `<report_dir>/<name>.json`, `.md`, `.png`; "
                                "default: the file's stem (`campaign` where the stem is not a safe name).",
        json_schema_extra=lambda schema: schema.pop("default", None))  # the stem: no one default
    device: Device = Field(
        "auto", description="`auto` (NPU, else GPU, else CPU, from the cluster's resources), `npu`, `cuda` "
                            "or `cpu`: what the device actors tune on.")
    retries: int = Field(2, ge=0, strict=True, description="Extra attempts per case after a failure, each on "
                         "a fresh gang; then the case is recorded as failed.")
    case_timeout_s: float = seconds("Seconds one attempt of one case may take (argument building and "
                                     "tuning).", 600.0)
    placement_timeout_s: float = seconds("Seconds a gang may wait for its placement group (its "
                                          "`world_size` devices) before the attempt fails.", 120.0)
    report_dir: ReportDir = Field(
        "reports", description="Where the report JSON, Markdown and plot go (relative to the driver's "
                               "working directory).")
    env: Annotated[dict[EnvName, EnvValue], null_is({}), AfterValidator(project_settings),
                   WithJsonSchema(  # pydantic writes patternProperties,
        {"type": "object", "propertyNames": {"pattern": ENV_NAME.pattern},  # which let other names pass
         "additionalProperties": {"type": ["string", "number"]}})] = Field(
        default_factory=dict, description="Extra environment variables of the device actors, names to "
                                          "string values (e.g. `TRITON_INTERPRET: \"1\"`).")
    ray_resource: ResourceName | None = Field(
        None, description="The Ray resource one device actor asks for; default: the device's (`CPU`, `GPU`, "
                          "`NPU`). A custom resource stands in for devices on clusters started with `--resources`.")
    placement_strategy: Strategy = Field(
        "STRICT_PACK", description="Placement-group strategy of a gang; `STRICT_PACK` keeps a gang on one node.")
    check_correctness: bool = Field(True, strict=True, description="Compare each candidate's output with "
                                    "`config_space[0]`'s; a mismatch records the candidate as failed.")
    max_cases: int = Field(MAX_CASES, ge=1, strict=True, description="The most cases the campaign may have, "
                           "counted from `cases` and the grids' sizes before any case is built; raised above "
                           f"{MAX_CASES_CEILING}, that many still bound it (every case is built in the driver's "
                           "memory).")
    hardware: Annotated[tuple[str, ...] | None, BeforeValidator(hardware_kinds), WithJsonSchema(
        {"anyOf": [{"const": "auto"}, {"type": "null"}, {"type": "array", "items": {"type": "string"},
                                                         "minItems": 1}]})] = Field(
        None, json_schema_extra={"default": "auto"},
        description="The accelerator kinds every case is tuned on, once per kind: `auto` (every kind the "
                    "cluster's device nodes declare as Ray's `accelerator_type:<KIND>`; also when empty) or a "
                    "list; a listed kind the cluster lacks fails its cases (ray_runner/hardware.py).")
    targets: Annotated[tuple[TargetSpec, ...], BeforeValidator(targets_list)] = Field(
        description="The functions to tune and their cases (a non-empty list).", json_schema_extra={"minItems": 1})

    _source: str | None = PrivateAttr(default=None)

    @property
    def source(self) -> str | None:
        """The file it was read from, if any."""
        return self._source

    def cases(self) -> list[CaseSpec]:
        out: list[CaseSpec] = []
        for t_index, target in enumerate(self.targets):
            for case in target.all_cases():
                out.append(CaseSpec(len(out), t_index, target, case))
        return out

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)


@dataclasses.dataclass(frozen=True)
class CaseSpec:
    """One unit of work: a target and one case of it (built by :meth:`Campaign.cases`)."""

    number: int
    """Position in the campaign (0-based, stable for a given file)."""
    target_index: int
    target: TargetSpec
    case: dict[str, Any]

    @property
    def world_size(self) -> int:
        return self.target.world_size

    def label(self) -> str:
        return f"targets[{self.target_index}] {self.target.function} {case_text(self.case)} (W={self.world_size})"


def case_text(case: Mapping[str, Any]) -> str:
    """A stable one-line form of a case (sorted keys): its identity in reports and logs."""
    return json.dumps(case, sort_keys=True, separators=(", ", ": "), default=str)


def campaign_schema() -> dict[str, Any]:
    """The JSON schema of a campaign file (``python -m ray_runner schema``; docs/campaign.schema.json)."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **Campaign.model_json_schema()}


# ---------------------------------------------------------------------------- reading

def _screen(data: dict[Any, Any]) -> dict[Any, Any]:
    """The document with every value over the bounds replaced (see :class:`_values.Screen`)."""
    screen = Screen()

    def target(value: Any) -> Any:
        if not isinstance(value, dict):
            return screen.leaf(value)
        nested = {"cases": lambda v: screen.sequence(v, screen.mapping), "grid": screen.mapping}
        return {key: nested.get(key, screen.leaf)(item) for key, item in value.items()}

    return {key: screen.sequence(item, target) if key == "targets" else screen.leaf(item)
            for key, item in data.items()}


def _too_many_cases(data: dict[Any, Any]) -> str | None:
    """The ``max_cases`` error of a screened document, from its lists' lengths alone, or None.
    A malformed ``max_cases`` or target is left to the model to report."""
    limit = data.get("max_cases", Campaign.model_fields["max_cases"].default)
    targets = data.get("targets")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1 or not isinstance(targets, list):
        return None
    total, parts = 0, []
    for i, target in enumerate(targets):
        if not isinstance(target, dict):
            continue
        cases, grid = target.get("cases"), target.get("grid")
        total += len(cases) if isinstance(cases, list) else 0
        if isinstance(grid, dict) and grid and all(isinstance(v, list) for v in grid.values()):
            size = math.prod(len(v) for v in grid.values())
            total += size
            parts.append(f"targets[{i}].grid is {' x '.join(f'{len(v)} {k}' for k, v in grid.items())} "
                         f"= {size} case(s)")
    if total <= min(limit, MAX_CASES_CEILING):
        return None
    if total > MAX_CASES_CEILING:  # raising max_cases cannot help
        # a max_cases above the total is not what the campaign exceeds (a tester: "up to 2500000
        # cases, more than max_cases = 3000000")
        over = f"more than max_cases = {limit} and more than" if total > limit else "more than"
        return (f"max_cases: the campaign has up to {total} cases, {over} "
                f"any campaign may have ({MAX_CASES_CEILING}: every case is built in the driver's memory, ~0.5 kB "
                "each): "
                f"{'; '.join(parts) or 'explicit cases'}. Split the campaign into several files, or shrink the grid.")
    return (f"max_cases: the campaign has up to {total} cases, more than max_cases = {limit}: "
            f"{'; '.join(parts) or 'explicit cases'}. Split the campaign, shrink the grid, or raise max_cases "
            f"(at most {MAX_CASES_CEILING}) if you mean it.")


def parse_campaign(data: Any, *, default_name: str = "campaign", source: str | None = None) -> Campaign:
    """Validate a loaded campaign mapping; raise :class:`CampaignError` listing every problem."""
    where = f" in {source}" if source else ""
    if not isinstance(data, dict):
        raise CampaignError(f"campaign file{where} must be a YAML mapping with 'targets', got {glimpse(data)}")
    data = _screen({"name": default_name, **data})
    too_many = _too_many_cases(data)
    try:
        if too_many is not None:  # before pydantic walks the lists
            errors = [too_many]
        else:
            campaign = Campaign.model_validate(data, context={"screened": True})
            campaign._source = source
            return campaign
    except ValidationError as exc:
        errors = error_lines(exc, Campaign)
    # every problem is listed, up to a screenful: 50,000 aliases to one bad case are one mistake
    lines = "\n".join(f"  {e}" for e in errors[:_SHOWN])
    more = f"\n  ... and {len(errors) - _SHOWN} more" if len(errors) > _SHOWN else ""
    raise CampaignError(f"invalid campaign{where}:\n{lines}{more}", errors=errors)


def load_campaign(path: str | Path) -> Campaign:
    """Read and validate a campaign YAML file."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise CampaignError(f"cannot read campaign file {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise CampaignError(f"campaign file {path} is not UTF-8 text (byte {exc.start}: "
                            f"{exc.reason}); save it as UTF-8") from None
    loader = _loader_class()(text)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise CampaignError(f"campaign file {path} is not valid YAML: {exc}") from exc
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise CampaignError(f"campaign file {path} has a value Python cannot read: {exc}") from None
    except RecursionError:  # PyYAML composes nested nodes recursively
        raise CampaignError(f"campaign file {path} nests too deeply to be a campaign "
                            f"(values may nest at most {MAX_VALUE_DEPTH} levels)") from None
    finally:
        loader.dispose()
    if loader.duplicates:  # YAML keeps the last silently: almost always a paste mistake
        lines = "\n".join(f"  {d}" for d in loader.duplicates[:_SHOWN])
        raise CampaignError(f"campaign file {path} repeats keys in a mapping (YAML would keep the last value "
                            f"silently):\n{lines}\nKeep one of each.", errors=list(loader.duplicates))
    return parse_campaign(data, default_name=path.stem if NAME.match(path.stem) else "campaign",
                          source=str(path))


@functools.lru_cache(maxsize=1)
def _loader_class() -> type:
    """PyYAML's safe loader that records every key repeated in a mapping (``duplicates``)."""
    import yaml

    class Loader(yaml.SafeLoader):
        def __init__(self, stream: str) -> None:
            super().__init__(stream)
            self.duplicates: list[str] = []

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                seen: dict[str, int] = {}
                for key_node, _ in node.value:  # as written: before merge keys (<<) are flattened
                    if isinstance(key_node, yaml.ScalarNode) and key_node.value != "<<":
                        line = key_node.start_mark.line + 1
                        if key_node.value in seen:
                            self.duplicates.append(f"line {line}: key {key_node.value!r} again (first on "
                                                   f"line {seen[key_node.value]})")
                        else:
                            seen[key_node.value] = line
            return super().construct_mapping(node, deep)

    return Loader
