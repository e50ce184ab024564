"""The shape of the model an engine serves, read from its files: what sizing and offload judge by.

Source: ``<model_path>/config.json`` (layers, heads, hidden size, dtype; its sha256 names the
config for ``llm-doctor diff``), or a ``.gguf`` file's header (doctor/workload/model_shape.py,
read in a measurement, ``engine.capacity.gguf:<path>``, so a capture keeps the values and its
replay needs no weights). Read by engine.capacity and engine.offload. No privilege beyond
reading the model's files. Manual equivalent: ``jq . <model_path>/config.json``.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict

from doctor.i18n import t
from doctor.seam.host import Host, MeasurementError
from doctor.workload.model_shape import (ModelFileError, ModelShape, parse_config, read_shape,
                                         shape_from_config, shape_from_values)


def _gguf_shape(path: str) -> dict:
    """Live: the GGUF header's shape as plain values (a capture stores them as they are)."""
    try:
        return asdict(read_shape(path))
    except ModelFileError as exc:
        raise MeasurementError(str(exc)) from None


def _shape_from(values: object, name: str) -> ModelShape:
    """A recorded shape back into a ModelShape, each field checked: replays can be edited."""
    return shape_from_values(values, f"measurements.json, {name}", t("capture the host again"))


CONFIG_HASH_DIGITS = 16  # of a sha256: enough to tell two configs apart, short to read


def model_config(host: Host, model_path: str) -> tuple[ModelShape, str | None]:
    """The shape of the model at ``model_path`` (a directory with config.json, or a .gguf),
    and the sha256 (CONFIG_HASH_DIGITS hex digits) of the config.json text it was read from."""
    model = model_path.rstrip("/")
    if model.endswith(".gguf"):
        name = f"engine.capacity.gguf:{model}"
        return _shape_from(host.measure(name, lambda: _gguf_shape(model)), name), None
    path = f"{model}/config.json"
    text = host.read_text(path)
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:CONFIG_HASH_DIGITS]
    return shape_from_config(parse_config(text, path), path), digest


def model_shape(host: Host, model_path: str) -> ModelShape:
    """The shape of the model at ``model_path`` (a directory with config.json, or a .gguf)."""
    return model_config(host, model_path)[0]
