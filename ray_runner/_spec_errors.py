"""pydantic's validation errors → the campaign's ``field.path: message`` lines.

Messages are built here from each error's type, location and constraint, never from pydantic's
rendering: the models set ``hide_input_in_errors`` and an input is shown only as a bounded
glimpse (:func:`ray_runner._values.glimpse`), so no error renders a whole value (issue 17).
A field's own wording ("must be an import path ...") comes from its validator in
:mod:`ray_runner.spec` as a ``PydanticCustomError`` whose message is used as it is.
"""

from __future__ import annotations

import difflib
import functools
import re
import typing
from typing import Annotated, Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from ._values import brief, glimpse

__all__ = ["CAMPAIGN_ERROR", "error_lines", "field_path"]

#: the error type of the spec's own checks: their message is complete
CAMPAIGN_ERROR = "campaign"

# pydantic's error type -> what the value must be (the got-part is added)
_MUST = {
    "missing": "is required",
    "int_type": "must be an integer", "int_from_float": "must be an integer", "int_parsing": "must be an integer",
    "float_type": "must be a number", "float_parsing": "must be a number",
    "finite_number": "must be a finite number",
    "bool_type": "must be true or false", "bool_parsing": "must be true or false",
    "string_type": "must be a string",
    "dict_type": "must be a mapping", "model_type": "must be a mapping", "model_attributes_type": "must be a mapping",
    "list_type": "must be a list", "tuple_type": "must be a list",
    "literal_error": "must be one of {expected}",
    "greater_than_equal": "must be >= {ge}", "greater_than": "must be > {gt}",
    "less_than_equal": "must be <= {le}", "less_than": "must be < {lt}",
    "too_long": "must have at most {max_length} items",
    "string_pattern_mismatch": "must match {pattern}",
}
_BOUNDS = {"greater_than_equal", "greater_than", "less_than_equal", "less_than"}
_KINDS = {"List": "list", "Tuple": "list", "Dictionary": "mapping", "Value": "value"}


def field_path(loc: tuple[Any, ...]) -> str:
    """``('targets', 0, 'cases', 2, 'n')`` -> ``targets[0].cases[2].n``."""
    out = ""
    for part in loc:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            name = part if isinstance(part, str) else brief(part, 40)
            out += f".{name}" if out else name
    return out


def _model_at(root: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model whose fields are named at ``loc`` (following the fields' annotations)."""
    model: type[BaseModel] | None = root
    for part in loc:
        if isinstance(part, str) and model is not None and part in model.model_fields:
            model = _inner_model(model.model_fields[part].annotation)
    return model


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _unknown(root: type[BaseModel], loc: tuple[Any, ...]) -> str:
    model = _model_at(root, loc[:-1])
    known = list(model.model_fields) if model is not None else []
    name = loc[-1] if isinstance(loc[-1], str) else brief(loc[-1], 40)
    near = difflib.get_close_matches(name, known, n=1)
    return f"unknown field (did you mean {near[0]!r}?)" if near else f"unknown field; known fields: {', '.join(known)}"


@functools.lru_cache(maxsize=64)
def _missing(model: type[BaseModel] | None, name: Any) -> str:
    """A required field's absence, in the field's own words: what its check says of null
    ("must be an import path 'package.module:attribute', got nothing (null)")."""
    field = model.model_fields.get(name) if model is not None and isinstance(name, str) else None
    if field is None:
        return "is required"
    try:
        TypeAdapter(Annotated[(field.annotation, *field.metadata)]).validate_python(None)
    except ValidationError as exc:
        return _message(exc.errors(include_url=False)[0])
    return "is required"


def _message(error: Any) -> str:
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == CAMPAIGN_ERROR:
        return str(error["msg"])
    if kind == "too_short":
        return f"must be a non-empty {_KINDS.get(ctx.get('field_type'), 'value')}, got {glimpse(error.get('input'))}"
    template = _MUST.get(kind)
    if template is None:  # a check pydantic added that this table does not word yet
        return f"{error['msg']}, got {glimpse(error.get('input'))}"
    if kind == "missing":
        return template
    values = {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in ctx.items()}
    if "expected" in values:  # "'auto', 'npu' or 'cpu'" -> "auto, npu, cpu"
        values["expected"] = ", ".join(re.findall(r"'([^']*)'", str(values["expected"])))
    # a bound's input has the right type: the number alone says it ("must be >= 1, got 0")
    got = brief(error.get("input")) if kind in _BOUNDS else glimpse(error.get("input"))
    return f"{template.format(**values)}, got {got}"


def error_lines(exc: ValidationError, root: type[BaseModel]) -> list[str]:
    """One ``path: message`` line per error of ``exc`` (raised validating ``root``)."""
    lines = []
    for error in exc.errors(include_url=False):
        loc = tuple(error["loc"])
        if loc and loc[-1] == "[key]":  # a mapping's key failed its check: (..., key, "[key]")
            lines.append(f"{field_path(loc[:-2])}: a name {_message(error)}")
        elif error["type"] == "missing":
            lines.append(f"{field_path(loc)}: {_missing(_model_at(root, loc[:-1]), loc[-1])}")
        elif error["type"] == "extra_forbidden":
            lines.append(f"{field_path(loc)}: {_unknown(root, loc)}")
        else:
            lines.append(f"{field_path(loc)}: {_message(error)}" if loc else _message(error))
    return lines
