"""The names rules can use: each probe's record fields, walked from the dataclasses."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator
from typing import Any

from doctor.model import ProbeSpec
from doctor.rules.expressions import element_type, optional_inner


def _type_name(tp: Any) -> str:
    text = str(tp).replace("typing.", "")
    return tp.__name__ if isinstance(tp, type) else text


def _walk(tp: Any, prefix: str) -> Iterator[tuple[str, str]]:
    for field in dataclasses.fields(tp):
        hint = typing.get_type_hints(tp)[field.name]
        inner = element_type(hint)
        if dataclasses.is_dataclass(inner):
            yield f"{prefix}{field.name}", f"list of {getattr(inner, '__name__', inner)}"
            yield from _walk(inner, f"{prefix}{field.name}[].")
        elif dataclasses.is_dataclass(optional_inner(hint)):
            yield from _walk(optional_inner(hint), f"{prefix}{field.name}.")
        else:
            yield f"{prefix}{field.name}", _type_name(hint)


def record_fields(spec: ProbeSpec) -> list[tuple[str, str]]:
    """[("processes", "list of ProcessLimits"), ("processes[].nofile_soft", "int | None"), …]"""
    record = typing.get_type_hints(spec.run).get("return")
    if record is None or not dataclasses.is_dataclass(record):
        return []
    return list(_walk(record, ""))
