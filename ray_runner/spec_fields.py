"""The campaign file's field types and their checks: the annotated types and validators the
models of :mod:`ray_runner.spec` are built from (import paths, plain values and grids, names,
environment variables and the project's own settings among them, hardware, timeouts), each
failing with a message that names what the field must be.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, NoReturn

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StringConstraints,
    ValidationInfo,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from triton_dist.settings import DEVICE_KINDS

from ._spec_errors import CAMPAIGN_ERROR
from ._values import MAX_VALUE_DEPTH, MAX_VALUE_NODES, Unchecked, glimpse, non_finite, plain
from .hardware import parse_hardware

DEVICES = ("auto", *DEVICE_KINDS)
STRATEGIES = ("STRICT_PACK", "PACK", "SPREAD", "STRICT_SPREAD")
IMPORT_PATH = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")



def fail(message: str) -> NoReturn:
    # the message goes in as context: a glimpse of a mapping has braces a template would read
    raise PydanticCustomError(CAMPAIGN_ERROR, "{message}", {"message": message})


def _text(pattern: re.Pattern[str], what: str, *, strip: bool = False) -> Any:
    """A string matching ``pattern``; anything else fails with "must be <what>"."""
    def check(value: Any) -> str:
        if isinstance(value, str) and pattern.match(value.strip() if strip else value):
            return value.strip() if strip else value
        fail(f"must be {what}, got {glimpse(value)}")
    return Annotated[str, StringConstraints(pattern=pattern.pattern), BeforeValidator(check)]


def _nonblank(what: str) -> Any:
    def check(value: Any) -> str:
        if isinstance(value, str) and value.strip():
            return value
        fail(f"must be {what}, got {glimpse(value)}")
    return Annotated[str, StringConstraints(min_length=1), BeforeValidator(check)]


def _screened(info: ValidationInfo) -> bool:
    """parse_campaign has bounded every value already (see _screen): no second walk per reference."""
    return isinstance(info.context, dict) and info.context.get("screened") is True


def _plain_and_finite(value: Any, info: ValidationInfo, refused: str) -> Any:
    """``value`` where it is plain (bounded already by parse_campaign, or walked here) and finite;
    else the error ``refused`` followed by a glimpse of what it got."""
    if isinstance(value, Unchecked) or not (_screened(info) or plain(value)):
        fail(f"{refused}, got {glimpse(value)}")
    if non_finite(value):
        fail(f"holds NaN or infinity ({glimpse(value)}), which JSON cannot hold (the reports and cache keys "
              "are JSON): write it as a string, e.g. 'inf', and convert it in the argument builder")
    return value


def _plain_value(value: Any, info: ValidationInfo) -> Any:
    return _plain_and_finite(value, info, "must be a plain value (number, string, bool, null or a list/mapping "
                             f"of them, at most {MAX_VALUE_NODES} items nested {MAX_VALUE_DEPTH} deep)")


def _grid_values(value: Any, info: ValidationInfo) -> Any:
    if not isinstance(value, (list, Unchecked)):
        fail(f"must be a non-empty list of values, got {glimpse(value)}")
    return _plain_and_finite(value, info, "values must be plain (numbers, strings, bools, null), at most "
                             f"{MAX_VALUE_NODES} of them")


def _env_value(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        fail(f"must be a string (quote it), got {glimpse(value)}")
    return str(value)


def targets_list(value: Any) -> Any:
    # here, not as min_length: pydantic counts a list's valid items, so a list of bad targets
    # would also be reported as empty
    if value is None or (isinstance(value, list) and not value):
        fail(f"must be a non-empty list of targets, got {glimpse(value)}")
    return value


def hardware_kinds(value: Any) -> tuple[str, ...] | None:
    """``auto`` (None) or the list of accelerator kinds (:func:`ray_runner.hardware.parse_hardware`)."""
    problems: list[str] = []
    # the field's own path is already the error line's ("hardware: ..."), an item's is not
    kinds = parse_hardware(lambda path, message: problems.append(
        message if path == "hardware" else f"{path}: {message}"), value)
    if problems:
        fail("; ".join(problems))
    return kinds


def project_settings(env: dict[str, str]) -> dict[str, str]:
    """The project's own variables among ``env`` are read as every actor would read them: a value
    it would refuse (``TRITON_DIST_DEVICE: gpu``) fails the file, not every case on the cluster;
    so does a name that looks like a setting but is none (``TRITON_DIST_AUTOTUNE_CACHE_DIR``)."""
    from triton_dist.errors import SettingsError
    from triton_dist.settings import _parse, unknown_names

    problems = unknown_names(env)  # a misspelt name would be ignored on every node (an operator)
    for name, value in env.items():
        if name.startswith("TRITON_DIST_"):
            try:
                _parse({name: value})
            except SettingsError as exc:
                problems.append(str(exc))
    if problems:
        raise PydanticCustomError("settings", "{problems}", {"problems": " ".join(problems)})
    return env


def null_is(empty: Any) -> BeforeValidator:
    """``field:`` with nothing after it (YAML null) reads as the empty default."""
    return BeforeValidator(lambda value: empty if value is None else value)


ImportPath = _text(IMPORT_PATH, "an import path 'package.module:attribute'", strip=True)
PlainValue = Annotated[Any, BeforeValidator(_plain_value), WithJsonSchema(
    {"description": "a number, string, bool, null, or a list/mapping of them "
                    f"(at most {MAX_VALUE_NODES} items nested {MAX_VALUE_DEPTH} deep)"})]
ParamName = Annotated[str, Strict()]
Case = dict[ParamName, PlainValue]
GridValues = Annotated[tuple[PlainValue, ...], Field(min_length=1, max_length=MAX_VALUE_NODES),
                       BeforeValidator(_grid_values)]
EnvName = _text(ENV_NAME, "an environment variable name (letters, digits, '_', not starting with a digit)")
EnvValue = Annotated[str, BeforeValidator(_env_value)]
Name = _text(NAME, "a file-name-safe string (letters, digits, '.', '_', '-')")
ReportDir = _nonblank("a directory path")
ResourceName = _nonblank("a Ray resource name")
Device = Literal[DEVICES]  # type: ignore[valid-type]
Strategy = Literal[STRATEGIES]  # type: ignore[valid-type]


def seconds(description: str, default: float) -> Any:
    return Field(default, gt=0, allow_inf_nan=False, strict=True, description=description)


MODEL = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True, validate_default=False)
