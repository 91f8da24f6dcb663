"""Campaign files → validated, frozen objects; every error names its field path.

A campaign file is YAML (see ``examples/campaigns/``)::

    name: gemm-pretune            # optional: names the report files (default: the file's stem)
    device: auto                  # auto | npu | cuda | cpu
    retries: 2                    # per case; each retry runs on a fresh gang
    case_timeout_s: 600
    max_cases: 100000             # optional: refuse more cases than this (counted before building)
    targets:
      - function: examples.gemm:matmul        # an autotune-decorated function
        args: examples.gemm:make_matmul_args  # (case, ctx) -> (args tuple, kwargs dict)
        world_size: 1
        cases: [{M: 4096, N: 4096, K: 4096, dtype: float16}]
        grid: {M: [1024, 2048], N: [4096], K: [4096], dtype: [float16]}

Validation is hand-written over frozen dataclasses rather than pydantic: the GPU and NPU images
that run campaigns carry PyYAML but not pydantic, and the checks are few. All problems of a file
are reported at once, one ``path: message`` line each.
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from triton_dist.errors import CampaignError
from triton_dist.settings import DEVICE_KINDS

from ._values import MAX_VALUE_DEPTH, MAX_VALUE_NODES, brief
from ._values import plain as _plain
from ._values import show as _show

__all__ = ["DEVICES", "Campaign", "CaseSpec", "TargetSpec", "load_campaign", "parse_campaign"]

DEVICES = ("auto", *DEVICE_KINDS)
STRATEGIES = ("STRICT_PACK", "PACK", "SPREAD", "STRICT_SPREAD")
_IMPORT_PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


@dataclasses.dataclass(frozen=True)
class TargetSpec:
    """One tuned function and the cases to tune it for."""

    function: str
    """``module:attr`` of an ``autotune``-decorated function (an ``AutoTuner``)."""
    args: str
    """``module:attr`` of the argument builder ``(case: dict, ctx) -> (args, kwargs)``."""
    world_size: int = 1
    """Ranks per case: each case runs on a gang of this many device actors."""
    cases: tuple[dict[str, Any], ...] = ()
    """The explicit cases (business parameters handed to the builder)."""
    grid: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    """Optional cartesian product of parameters, added after ``cases``."""

    def all_cases(self) -> list[dict[str, Any]]:
        """``cases`` then the grid's product, duplicates dropped (first occurrence kept)."""
        out: list[dict[str, Any]] = []
        seen: set[str] = set()
        names = [name for name, _ in self.grid]
        product = (dict(zip(names, values, strict=True)) for values in itertools.product(*(v for _, v in self.grid)))
        for case in itertools.chain(self.cases, product if self.grid else ()):
            text = case_text(case)
            if text not in seen:
                seen.add(text)
                out.append(dict(case))
        return out


@dataclasses.dataclass(frozen=True)
class CaseSpec:
    """One unit of work: a target and one case of it."""

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


@dataclasses.dataclass(frozen=True)
class Campaign:
    """A validated campaign file."""

    name: str
    """Names the report files; defaults to the file's stem."""
    targets: tuple[TargetSpec, ...]
    device: str = "auto"
    """``auto`` (NPU, else GPU, else CPU, from the cluster's resources), ``npu``, ``cuda`` or ``cpu``."""
    retries: int = 2
    """Extra attempts per case after a failure, each on a fresh gang."""
    case_timeout_s: float = 600.0
    """Time limit of one attempt of one case (argument building + tuning)."""
    placement_timeout_s: float = 120.0
    """How long a gang may wait for its placement group (its W devices) before the attempt fails."""
    report_dir: str = "reports"
    """Where the report JSON, Markdown and plot go (relative to the driver's working directory)."""
    env: tuple[tuple[str, str], ...] = ()
    """Extra environment variables of the device actors (e.g. ``TRITON_INTERPRET: "1"``)."""
    ray_resource: str | None = None
    """Ray resource one device actor asks for; default: the device's (``CPU``/``GPU``/``NPU``).
    A custom resource stands in for devices on clusters started with ``--resources``."""
    placement_strategy: str = "STRICT_PACK"
    """Placement-group strategy of a gang; STRICT_PACK keeps a gang on one node."""
    check_correctness: bool = True
    """Compare each candidate's output with the default config's; a mismatch is ``inf`` (issue 7)."""
    source: str | None = None
    """The file it was read from, if any."""

    def cases(self) -> list[CaseSpec]:
        out = []
        for t_index, target in enumerate(self.targets):
            for case in target.all_cases():
                out.append(CaseSpec(len(out), t_index, target, case))
        return out

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)


def case_text(case: Mapping[str, Any]) -> str:
    """A stable one-line form of a case (sorted keys): its identity in reports and logs."""
    return json.dumps(case, sort_keys=True, separators=(", ", ": "), default=str)


# ---------------------------------------------------------------------------- validation

class _Checker:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def error(self, path: str, message: str) -> None:
        self.errors.append(f"{path}: {message}")

    def unknown(self, path: str, data: Mapping[str, Any], known: tuple[str, ...]) -> None:
        for field in data:
            if field not in known:
                field = field if isinstance(field, str) else brief(field, 40)  # noqa: PLW2901
                near = difflib.get_close_matches(field, known, n=1)
                hint = f" (did you mean {near[0]!r}?)" if near else f"; known fields: {', '.join(known)}"
                self.error(f"{path}{'.' if path else ''}{field}", f"unknown field{hint}")

    def integer(self, path: str, value: Any, minimum: int) -> int | None:
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(path, f"must be an integer, got {_show(value)}")
            return None
        if value < minimum:
            self.error(path, f"must be >= {minimum}, got {value}")
            return None
        return value

    def seconds(self, path: str, value: Any) -> float | None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.error(path, f"must be a number of seconds, got {_show(value)}")
            return None
        if not 0 < value < float("inf"):
            self.error(path, f"must be > 0, got {value}")
            return None
        return float(value)

    def import_path(self, path: str, value: Any) -> str | None:
        if not isinstance(value, str) or not _IMPORT_PATH.match(value.strip()):
            self.error(path, f"must be an import path 'package.module:attribute', got {_show(value)}")
            return None
        return value.strip()

    def case(self, path: str, value: Any) -> dict[str, Any] | None:
        if not isinstance(value, dict):
            self.error(path, f"must be a mapping of parameter names to values, got {_show(value)}")
            return None
        ok = True
        for name, item in value.items():
            if not isinstance(name, str):
                self.error(f"{path}", f"parameter names must be strings, got {_show(name)}")
                ok = False
            elif not _plain(item):
                self.error(f"{path}.{name}", f"must be a plain value (number, string, bool, null or a "
                                             f"list/mapping of them, at most {MAX_VALUE_NODES} items "
                                             f"nested {MAX_VALUE_DEPTH} deep), got {_show(item)}")
                ok = False
        return dict(value) if ok else None


_TARGET_FIELDS = ("function", "args", "world_size", "cases", "grid")
_CAMPAIGN_FIELDS = ("name", "device", "retries", "case_timeout_s", "placement_timeout_s", "report_dir",
                    "env", "ray_resource", "placement_strategy", "check_correctness", "max_cases", "targets")

#: default bound of a campaign's cases (explicit cases plus every grid's product), counted before
#: any is built: an 8 x 10 grid is 10^8 cases from a 300-byte file (issue 17). ``max_cases:`` in
#: the campaign file raises it.
MAX_CASES = 100_000


def _count_cases(ck: _Checker, targets: list[TargetSpec], paths: list[str], limit: int) -> None:
    """Refuse a campaign whose cases would exceed ``limit``, from the grids' sizes alone."""
    total, parts = 0, []
    for path, target in zip(paths, targets, strict=True):
        size = math.prod(len(values) for _, values in target.grid) if target.grid else 0
        total += len(target.cases) + size
        if target.grid:
            shape = " x ".join(f"{len(v)} {name}" for name, v in target.grid)
            parts.append(f"{path}.grid is {shape} = {size} case(s)")
    if total > limit:
        ck.error("max_cases", f"the campaign has up to {total} cases, more than max_cases = {limit}: "
                              f"{'; '.join(parts) or 'explicit cases'}. Split the campaign, shrink the grid, "
                              f"or raise max_cases if you mean it.")


def _target(ck: _Checker, path: str, data: Any) -> TargetSpec | None:
    if not isinstance(data, dict):
        ck.error(path, f"must be a mapping with 'function', 'args', 'world_size' and 'cases'/'grid', got {_show(data)}")
        return None
    ck.unknown(path, data, _TARGET_FIELDS)
    before = len(ck.errors)
    function = ck.import_path(f"{path}.function", data.get("function"))
    args = ck.import_path(f"{path}.args", data.get("args"))
    world_size = ck.integer(f"{path}.world_size", data.get("world_size", 1), 1)
    cases: list[dict[str, Any]] = []
    raw_cases = data.get("cases", [])
    if raw_cases is None:
        raw_cases = []
    if not isinstance(raw_cases, list):
        ck.error(f"{path}.cases", f"must be a list of mappings, got {_show(raw_cases)}")
    else:
        for i, raw in enumerate(raw_cases):
            case = ck.case(f"{path}.cases[{i}]", raw)
            if case is not None:
                cases.append(case)
    grid: list[tuple[str, tuple[Any, ...]]] = []
    raw_grid = data.get("grid")
    if raw_grid is not None:
        if not isinstance(raw_grid, dict) or not raw_grid:
            ck.error(f"{path}.grid", f"must be a non-empty mapping of parameter -> list of values, got {_show(raw_grid)}")
        else:
            for name, values in raw_grid.items():
                if not isinstance(name, str):
                    ck.error(f"{path}.grid", f"parameter names must be strings, got {_show(name)}")
                elif not isinstance(values, list) or not values:
                    ck.error(f"{path}.grid.{name}", f"must be a non-empty list of values, got {_show(values)}")
                elif len(values) > MAX_VALUE_NODES or not all(_plain(v) for v in values):
                    ck.error(f"{path}.grid.{name}", "values must be plain (numbers, strings, bools, null), "
                                                    f"at most {MAX_VALUE_NODES} of them")
                else:
                    grid.append((name, tuple(values)))
    if not raw_cases and raw_grid is None:
        ck.error(path, "has no cases: give 'cases' (a list of mappings) and/or 'grid'")
    if len(ck.errors) > before:
        return None
    return TargetSpec(function=function, args=args, world_size=world_size,  # type: ignore[arg-type]
                      cases=tuple(cases), grid=tuple(grid))


def parse_campaign(data: Any, *, default_name: str = "campaign", source: str | None = None) -> Campaign:
    """Validate a loaded campaign mapping; raise :class:`CampaignError` listing every problem."""
    ck = _Checker()
    where = f" in {source}" if source else ""
    if not isinstance(data, dict):
        raise CampaignError(f"campaign file{where} must be a YAML mapping with 'targets', got {_show(data)}")
    ck.unknown("", data, _CAMPAIGN_FIELDS)
    name = data.get("name", default_name)
    if not isinstance(name, str) or not _NAME.match(name):
        ck.error("name", f"must be a file-name-safe string (letters, digits, '.', '_', '-'), got {_show(name)}")
    device = data.get("device", "auto")
    if device not in DEVICES:
        ck.error("device", f"must be one of {', '.join(DEVICES)}, got {_show(device)}")
    retries = ck.integer("retries", data.get("retries", 2), 0)
    case_timeout = ck.seconds("case_timeout_s", data.get("case_timeout_s", 600))
    placement_timeout = ck.seconds("placement_timeout_s", data.get("placement_timeout_s", 120))
    report_dir = data.get("report_dir", "reports")
    if not isinstance(report_dir, str) or not report_dir.strip():
        ck.error("report_dir", f"must be a directory path, got {_show(report_dir)}")
    env: list[tuple[str, str]] = []
    raw_env = data.get("env") or {}
    if not isinstance(raw_env, dict):
        ck.error("env", f"must be a mapping of variable names to values, got {_show(raw_env)}")
    else:
        for key, value in raw_env.items():
            if not isinstance(key, str) or not _ENV_NAME.match(key):
                ck.error("env", f"{_show(key)} is not a valid environment variable name")
            elif isinstance(value, bool) or not isinstance(value, (str, int, float)):
                ck.error(f"env.{key}", f"must be a string (quote it), got {_show(value)}")
            else:
                env.append((key, str(value)))
    resource = data.get("ray_resource")
    if resource is not None and (not isinstance(resource, str) or not resource.strip()):
        ck.error("ray_resource", f"must be a Ray resource name, got {_show(resource)}")
    strategy = data.get("placement_strategy", "STRICT_PACK")
    if strategy not in STRATEGIES:
        ck.error("placement_strategy", f"must be one of {', '.join(STRATEGIES)}, got {_show(strategy)}")
    check = data.get("check_correctness", True)
    if not isinstance(check, bool):
        ck.error("check_correctness", f"must be true or false, got {_show(check)}")
    max_cases = ck.integer("max_cases", data.get("max_cases", MAX_CASES), 1)
    targets: list[TargetSpec] = []
    paths: list[str] = []
    raw_targets = data.get("targets")
    if not isinstance(raw_targets, list) or not raw_targets:
        ck.error("targets", f"must be a non-empty list of targets, got {_show(raw_targets)}")
    else:
        for i, raw in enumerate(raw_targets):
            target = _target(ck, f"targets[{i}]", raw)
            if target is not None:
                targets.append(target)
                paths.append(f"targets[{i}]")
    if max_cases is not None:
        _count_cases(ck, targets, paths, max_cases)
    if ck.errors:
        lines = "\n".join(f"  {e}" for e in ck.errors)
        raise CampaignError(f"invalid campaign{where}:\n{lines}", errors=list(ck.errors))
    return Campaign(name=name, targets=tuple(targets), device=device, retries=retries,  # type: ignore[arg-type]
                    case_timeout_s=case_timeout, placement_timeout_s=placement_timeout,  # type: ignore[arg-type]
                    report_dir=report_dir, env=tuple(env), ray_resource=resource,
                    placement_strategy=strategy, check_correctness=check, source=source)


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
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CampaignError(f"campaign file {path} is not valid YAML: {exc}") from exc
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise CampaignError(f"campaign file {path} has a value Python cannot read: {exc}") from None
    except RecursionError:  # PyYAML composes nested nodes recursively
        raise CampaignError(f"campaign file {path} nests too deeply to be a campaign "
                            f"(values may nest at most {MAX_VALUE_DEPTH} levels)") from None
    return parse_campaign(data, default_name=path.stem if _NAME.match(path.stem) else "campaign",
                          source=str(path))
