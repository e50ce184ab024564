"""Reading a CDI (Container Device Interface) spec: its kind, device names and host files.

A spec is YAML or JSON (the CDI specification, github.com/cncf-tags/container-device-interface
SPEC.md). What llm-doctor needs of it is small: ``kind``, ``cdiVersion``, each device's
``name``, and the ``hostPath`` of every mount (the driver's files: ``libcuda.so.<version>``).
``nvidia-ctk cdi generate`` writes block-style YAML with two-space indents, one key per line,
devices as a list of mappings (tests/fixtures/cdi/). That subset is read here line by line,
with no YAML library: the project has PyYAML only for its tests, and a general YAML parser
on a file anyone with root may have written brings aliases that expand to gigabytes
(``&a [*b, *b, …]``) and tags that build objects; three fields do not need either. A value
written with YAML syntax this reader does not take (an alias, a tag, a flow collection
where a name belongs, a multi-line scalar) makes the value unreadable, said in one line,
never guessed. JSON is read by ``json``, its nesting bounded first.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

MAX_SPEC_BYTES = 1 << 20  # a generated spec for 8 GPUs is ~10 KB; a MIG host's a few 100 KB
MAX_LINES = 50_000
MAX_DEVICES = 4096  # names kept; 8 GPUs x 7 MIG slices x 3 names (index, UUID, all) is < 200
MAX_HOST_PATHS = 4096
MAX_JSON_DEPTH = 32

# libcuda.so.570.133.20 -> 570.133.20; the WSL driver store's libcuda.so.1.1 is not a driver
# version (three digits first: every Linux driver branch since R100 has them)
DRIVER_LIB = re.compile(r"/(libcuda|libnvidia-ml)\.so\.(\d{3,}\.\d+(?:\.\d+)?)$")
HOST_DRIVER_ARG = re.compile(r"--host-driver-version=(\d{3,}\.\d+(?:\.\d+)?)")
_KEY_LINE = re.compile(r"^( *)(- +)?([A-Za-z][A-Za-z0-9_-]*):(?: +(.*))?$")


class SpecError(ValueError):
    """The text is not a CDI spec this reader can take; the message says why, in one line."""


@dataclass(frozen=True, slots=True)
class CdiSpec:
    kind: str | None  # "nvidia.com/gpu"
    cdi_version: str | None  # "0.6.0"
    device_names: tuple[str, ...]  # "0", "GPU-6cf00fa7-…", "all"
    host_paths: tuple[str, ...]  # every mount's hostPath, in order
    host_driver_version: str | None  # the enable-cuda-compat hook's --host-driver-version


def driver_versions(spec: CdiSpec) -> dict[str, str]:
    """The driver versions the spec's files name: library (libcuda, libnvidia-ml) -> version,
    and "hook" for ``--host-driver-version``; the first of each."""
    out: dict[str, str] = {}
    for path in spec.host_paths:
        match = DRIVER_LIB.search(path)
        if match:
            out.setdefault(match.group(1), match.group(2))
    if spec.host_driver_version:
        out["hook"] = spec.host_driver_version
    return out


def parse(text: str) -> CdiSpec:
    """The spec in ``text`` (YAML as nvidia-ctk writes it, or JSON); SpecError otherwise."""
    if len(text) > MAX_SPEC_BYTES:
        raise SpecError(f"larger than {MAX_SPEC_BYTES >> 10} KiB")
    if text.lstrip().startswith("{"):
        return _from_json(text)
    return _from_yaml(text)


def _scalar(raw: str | None) -> str | None:
    """A plain or quoted one-line scalar; SpecError for YAML this reader does not take."""
    if raw is None:
        return None
    value = re.sub(r"\s+#.*$", "", raw).strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        inner = value[1:-1]
        if value[0] in inner:
            raise SpecError(f"a quoted value this reader does not take: {value[:60]!r}")
        return inner
    if not value or value[0] in "&*!|>[{\"'%@`":
        raise SpecError(f"YAML it does not take (alias, tag, block or flow value): {value[:60]!r}")
    return value


def _from_yaml(text: str) -> CdiSpec:
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        raise SpecError(f"more than {MAX_LINES} lines")
    kind = version = None
    names: list[str] = []
    paths: list[str] = []
    hook_version = None
    section = None  # the top-level key the line is under
    item_indent = None  # indent of the "- " of the devices list's items
    for number, line in enumerate(lines, 1):
        if "\t" in line[:len(line) - len(line.lstrip())]:
            raise SpecError(f"line {number}: a tab in the indent (YAML forbids it)")
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped in ("---", "..."):
            continue
        arg = HOST_DRIVER_ARG.search(stripped)
        if arg and hook_version is None:
            hook_version = arg.group(1)
        match = _KEY_LINE.match(line)
        if match is None:
            continue  # a list entry (an option, a hook argument) or a value llm-doctor skips
        indent, dash, key, raw = len(match.group(1)), match.group(2), match.group(3), match.group(4)
        try:
            if indent == 0 and not dash:
                section = key
                if key == "kind":
                    kind = _scalar(raw)
                elif key == "cdiVersion":
                    version = _scalar(raw)
                continue
            if section == "devices" and dash and item_indent is None:
                item_indent = indent  # the first item's "- ": deeper lists come after it
            if key == "hostPath" and len(paths) < MAX_HOST_PATHS:
                paths.append(_scalar(raw) or "")
            elif section == "devices" and key == "name" and len(names) < MAX_DEVICES and (
                    indent == item_indent if dash else indent == (item_indent or 0) + 2):
                names.append(_scalar(raw) or "")
        except SpecError as exc:
            raise SpecError(f"line {number}: {exc}") from None
    return _checked(kind, version, names, paths, hook_version)


def _from_json(text: str) -> CdiSpec:
    depth = most = 0
    for char in text:  # json's recursion would take a 100,000-deep document to the stack limit
        if char in "[{":
            depth += 1
            most = max(most, depth)
        elif char in "]}":
            depth -= 1
    if most > MAX_JSON_DEPTH:
        raise SpecError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise SpecError(f"not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise SpecError("the JSON is not an object")
    devices = doc.get("devices")
    devices = devices if isinstance(devices, list) else []
    names = [d["name"] for d in devices[:MAX_DEVICES]
             if isinstance(d, dict) and isinstance(d.get("name"), str)]
    paths: list[str] = []
    hook_version = None
    for edits in [doc.get("containerEdits")] + [d.get("containerEdits") for d in devices
                                                if isinstance(d, dict)]:
        if not isinstance(edits, dict):
            continue
        for mount in edits.get("mounts") or []:
            if isinstance(mount, dict) and isinstance(mount.get("hostPath"), str):
                paths.append(mount["hostPath"])
        for hook in edits.get("hooks") or []:
            args = hook.get("args") if isinstance(hook, dict) else None
            for arg in args if isinstance(args, list) else []:
                found = HOST_DRIVER_ARG.search(arg) if isinstance(arg, str) else None
                if found and hook_version is None:
                    hook_version = found.group(1)
    kind, version = doc.get("kind"), doc.get("cdiVersion")
    return _checked(kind if isinstance(kind, str) else None,
                    version if isinstance(version, str) else None,
                    names, paths[:MAX_HOST_PATHS], hook_version)


def _checked(kind: str | None, version: str | None, names: list[str], paths: list[str],
             hook_version: str | None) -> CdiSpec:
    if kind is None:
        raise SpecError("no top-level 'kind' (every CDI spec names its kind, e.g. nvidia.com/gpu)")
    if not names:
        raise SpecError("no device with a 'name' under 'devices'")
    return CdiSpec(kind=kind, cdi_version=version, device_names=tuple(names),
                   host_paths=tuple(paths), host_driver_version=hook_version)
