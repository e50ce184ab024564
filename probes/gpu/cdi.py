"""gpu.cdi: the container device specs (CDI) against the GPUs and the driver NVML sees.

Source: the CDI spec files in ``/etc/cdi`` and ``/var/run/cdi`` and in the directories the
toolkit's config names (``[nvidia-container-runtime.modes.cdi] spec-dirs``) (``*.yaml``, ``*.yml``,
``*.json``; at most MAX_SPECS files of at most 1 MiB, read by probes/helpers/cdi_spec.py),
and the NVIDIA Container Toolkit's ``/etc/nvidia-container-runtime/config.toml`` (its
``[nvidia-container-runtime] mode``: legacy, cdi, csv or auto; the toolkit's default is auto,
which picks cdi for a CDI device request). The GPUs and the driver are gpu.inventory's
record (``after``), else NVML here: ``nvmlSystemGetDriverVersion``, ``nvmlDeviceGetUUID``.

A spec is generated once (``nvidia-ctk cdi generate``) and names the driver's files by
version (``libcuda.so.570.133.20``) and the GPUs by index and UUID. A driver upgraded after
it leaves those files gone: a container asking for ``nvidia.com/gpu=all`` fails to start
("error running hook … no such file or directory") or starts without the GPU. A GPU replaced
leaves its UUID in the spec and the new one out ("unresolvable CDI devices"). Only specs of
an ``nvidia.com`` kind are judged against NVML; MIG devices (``MIG-…``, ``0:1``) are not
(gpu.inventory does not list MIG UUIDs). Root is not needed: the files are world-readable.
Manual equivalent: ``nvidia-ctk cdi list``, ``grep -h 'libcuda.so\\.' /etc/cdi/*.yaml
/var/run/cdi/*.yaml``, ``nvidia-smi -L``, ``nvidia-ctk config | grep mode``.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host, HostReadError
from doctor.tomlfile import parse as parse_toml
from probes.helpers.cdi_spec import MAX_SPEC_BYTES, CdiSpec, SpecError, driver_versions, parse
from probes.helpers.gpu_common import Reader, gpu_count, reason_of

SPEC_DIRS = ("/etc/cdi", "/var/run/cdi")  # the CDI specification's default directories
MAX_DIRS = 8  # spec-dirs a config may add: more is no config llm-doctor follows
SUFFIXES = (".yaml", ".yml", ".json")
MAX_SPECS = 16  # nvidia-ctk writes one or two; more is not a host llm-doctor judges file by file
RUNTIME_CONFIG = "/etc/nvidia-container-runtime/config.toml"
MAX_GPUS = 64
INVENTORY = "gpu.inventory"


@runtime_checkable
class InventoryShape(Protocol):
    """What is read of gpu.inventory's record (probes/gpu/inventory.py)."""

    driver_version: str | None
    gpus: tuple


@dataclass(frozen=True, slots=True)
class CdiSpecFile:
    path: str  # /etc/cdi/nvidia.yaml
    kind: str | None  # "nvidia.com/gpu"
    cdi_version: str | None
    device_names: tuple[str, ...]
    driver_version: str | None  # the version its libcuda.so.<v> (else libnvidia-ml, else hook) names
    driver_source: str | None  # "libcuda", "libnvidia-ml" or "hook": which file said it
    # the spec's driver is not the one running (None: not an nvidia.com spec, or either unknown)
    driver_stale: bool | None
    unknown_devices: tuple[str, ...]  # GPU UUIDs and indexes NVML does not list
    error: str | None  # why the file could not be read as a spec; None when it was


@dataclass(frozen=True, slots=True)
class GpuCdiRecord:
    specs: tuple[CdiSpecFile, ...]
    runtime_mode: str | None  # config.toml [nvidia-container-runtime] mode; "auto" when unset
    # [nvidia-container-runtime.modes.cdi] spec-dirs: where the toolkit's runtime reads specs
    # (its default, SPEC_DIRS, when the file or the key is absent)
    toolkit_spec_dirs: tuple[str, ...]
    spec_dirs: tuple[str, ...]  # the directories read: SPEC_DIRS (containerd's, CRI-O's, podman's) and the toolkit's
    driver_version: str | None  # nvmlSystemGetDriverVersion: "570.133.20"
    gpu_uuids: tuple[str, ...]  # nvmlDeviceGetUUID of each GPU, in NVML's order
    gpu_count: int | None
    stale_specs: int  # specs whose driver or devices are not this host's
    missing: dict[str, str]


def _nvml(host: Host, inputs: Inputs) -> tuple[str | None, tuple[str, ...], int | None, dict]:
    """The running driver's version, the GPUs' UUIDs and their count; the reasons for absence."""
    record = inputs.get(INVENTORY, InventoryShape)  # type: ignore[type-abstract]
    if record is not None:
        uuids = tuple(g.uuid for g in record.gpus[:MAX_GPUS] if isinstance(getattr(g, "uuid", None), str))
        why = {} if record.driver_version else {"driver_version": "not read by gpu.inventory"}
        return record.driver_version, uuids, len(record.gpus), why
    r = Reader(host)
    driver = r.text("driver_version", "nvmlSystemGetDriverVersion")
    count = r.integer("gpu_count", "nvmlDeviceGetCount")
    found = [r.text("gpu_uuids", "nvmlDeviceGetUUID", i) for i in range(min(count or 0, MAX_GPUS))]
    return driver, tuple(u for u in found if u), count, r.missing


def _unknown(names: tuple[str, ...], uuids: tuple[str, ...], count: int | None) -> tuple[str, ...]:
    known = {u.lower() for u in uuids}
    out = []
    for name in names:
        if name.startswith("GPU-") and uuids and name.lower() not in known:
            out.append(name)
        # "0" (nvidia-ctk's default name), "gpu0" (--device-name-strategy=type-index)
        elif (index := name.removeprefix("gpu")).isdigit() and count is not None and int(index) >= count:
            out.append(name)
    return tuple(out)


def _spec_file(path: str, text: str | None, error: str | None, nvml: tuple) -> CdiSpecFile:
    driver, uuids, count, _ = nvml
    spec: CdiSpec | None = None
    if text is not None:
        try:
            spec = parse(text)
        except SpecError as exc:
            error = str(exc)
    if spec is None:
        return CdiSpecFile(path, None, None, (), None, None, None, (), error)
    versions = driver_versions(spec)
    source = next((k for k in ("libcuda", "libnvidia-ml", "hook") if k in versions), None)
    version = versions.get(source) if source else None
    # nvidia.com/gpu, and management.nvidia.com/gpu (nvidia-ctk --mode=management)
    nvidia = spec.kind is not None and spec.kind.split("/")[0].endswith("nvidia.com")
    stale = None if not (nvidia and version and driver) else version != driver
    return CdiSpecFile(path=path, kind=spec.kind, cdi_version=spec.cdi_version,
                       device_names=spec.device_names, driver_version=version,
                       driver_source=source, driver_stale=stale,
                       unknown_devices=_unknown(spec.device_names, uuids, count) if nvidia else (),
                       error=None)


def _spec_paths(host: Host, dirs: tuple[str, ...], missing: dict[str, str]) -> list[tuple[str, int]]:
    found: list[tuple[str, int]] = []
    for directory in dirs:
        try:
            files = host.list_files(directory)
        except HostReadError as exc:
            if reason_of(exc) != "not-found":
                missing[directory] = reason_of(exc)
            continue
        found += [(f"{directory}/{name}", size) for name, size in sorted(files.items())
                  if name.endswith(SUFFIXES) and not name.startswith(".")]
    if len(found) > MAX_SPECS:
        missing["specs"] = f"{len(found)} spec files; the first {MAX_SPECS} read"
    return found[:MAX_SPECS]


def _config(host: Host, missing: dict[str, str]) -> dict | None:
    try:
        text = host.read_text(RUNTIME_CONFIG)
    except HostReadError as exc:
        missing["runtime_mode"] = reason_of(exc)
        return None
    try:  # doctor/tomlfile's parse: bounded shape, every TOML error one line naming the file
        return parse_toml(text, Path(RUNTIME_CONFIG), ValueError)
    except ValueError as exc:
        missing["runtime_mode"] = exc.args[0] if exc.args else str(exc)
        return None


def runtime_mode(doc: dict | None, missing: dict[str, str]) -> str | None:
    """``mode`` of the toolkit's config; "auto" (its default) when the file leaves it out."""
    if doc is None:
        return None
    table = doc.get("nvidia-container-runtime", {})
    mode = table.get("mode", "auto") if isinstance(table, dict) else None
    if not isinstance(mode, str):
        missing["runtime_mode"] = f"{RUNTIME_CONFIG}: [nvidia-container-runtime] mode is not a string"
        return None
    return mode[:40]


def spec_dirs(doc: dict | None, missing: dict[str, str]) -> tuple[str, ...]:
    """``[nvidia-container-runtime.modes.cdi] spec-dirs``: the directories the toolkit's runtime
    reads CDI specs from (NVIDIA/nvidia-container-toolkit internal/config: the default config
    writes ``spec-dirs = ["/etc/cdi", "/var/run/cdi"]``, the same as when it is left out).
    Anything but a list of absolute, normalised paths is the default, with the reason."""
    runtime = doc.get("nvidia-container-runtime") if doc else None
    modes = runtime.get("modes") if isinstance(runtime, dict) else None
    table = modes.get("cdi") if isinstance(modes, dict) else None
    if not isinstance(table, dict) or "spec-dirs" not in table:
        return SPEC_DIRS
    dirs = table["spec-dirs"]
    where = f"{RUNTIME_CONFIG}: [nvidia-container-runtime.modes.cdi] spec-dirs"
    if not isinstance(dirs, list) or not 0 < len(dirs) <= MAX_DIRS:
        missing["toolkit_spec_dirs"] = f"{where} is not a list of 1 to {MAX_DIRS} directories; the default read"
        return SPEC_DIRS
    if not all(isinstance(d, str) and 0 < len(d) <= 256 and d.startswith("/") and "\0" not in d
               and posixpath.normpath(d) == d.rstrip("/") for d in dirs):
        missing["toolkit_spec_dirs"] = f"{where} holds an entry that is no absolute, normalised path; the default read"
        return SPEC_DIRS
    return tuple(dict.fromkeys(d.rstrip("/") or "/" for d in dirs))


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> GpuCdiRecord:
    if inputs.get(INVENTORY, InventoryShape) is None:  # type: ignore[type-abstract]
        gpu_count(host)  # no driver, no GPU or NVML failing: as every gpu.* probe says it
    missing: dict[str, str] = {}
    doc = _config(host, missing)
    mode, toolkit_dirs = runtime_mode(doc, missing), spec_dirs(doc, missing)
    dirs = tuple(dict.fromkeys(SPEC_DIRS + toolkit_dirs))  # other runtimes read the defaults
    paths = _spec_paths(host, dirs, missing)
    if not paths and mode is None and not any(d in missing for d in dirs):
        raise Skip(t("no CDI spec in /etc/cdi or /var/run/cdi and no NVIDIA Container Toolkit config"))
    nvml = _nvml(host, inputs)
    missing.update(nvml[3])
    specs = []
    for path, size in paths:
        text, error = None, None
        if size > MAX_SPEC_BYTES:
            error = f"{size} bytes, over the {MAX_SPEC_BYTES >> 10} KiB a spec is read to"
        else:
            try:
                text = host.read_text(path)
            except HostReadError as exc:
                error = reason_of(exc)
        specs.append(_spec_file(path, text, error, nvml))
    return GpuCdiRecord(specs=tuple(specs), runtime_mode=mode, toolkit_spec_dirs=toolkit_dirs,
                        spec_dirs=dirs, driver_version=nvml[0],
                        gpu_uuids=nvml[1], gpu_count=nvml[2],
                        stale_specs=sum(1 for s in specs if s.driver_stale or s.unknown_devices),
                        missing=missing)


def summary(record: GpuCdiRecord) -> str:
    mode = record.runtime_mode or "?"
    if not record.specs:
        return t("no CDI spec; container runtime mode {mode}", mode=mode)
    return t("{n} CDI spec(s), {stale} stale; container runtime mode {mode}",
             n=len(record.specs), stale=record.stale_specs, mode=mode)
