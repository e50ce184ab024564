"""A vendor library's answer as JSON-able data, for the seam's NVML and AMD SMI layers
(doctor/seam/nvml.py, doctor/seam/amdsmi.py): the live host, a recording (``nvml.json``,
``amdsmi.json``) and a replay then hand probes the same thing."""

from __future__ import annotations

import ctypes
import enum
from typing import Any


def to_json(value: Any) -> Any:
    """Structs → dicts, arrays → lists, bytes → str, enums → their names (amdsmi), and the
    bindings' plain objects (pynvml's nvmlFriendlyObject, its process lists) → dicts of their
    public attributes; anything else → its text."""
    if isinstance(value, enum.Enum):
        return value.name
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\0")
    if isinstance(value, ctypes.Structure):
        return {name: to_json(getattr(value, name)) for name, *_ in value._fields_}
    if isinstance(value, ctypes.Array):
        return [to_json(v) for v in value]
    if isinstance(value, ctypes._SimpleCData):
        return to_json(value.value)
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if hasattr(value, "__dict__"):
        return {k: to_json(v) for k, v in vars(value).items() if not k.startswith("_")}
    return str(value)
