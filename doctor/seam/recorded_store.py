"""The recorded directory on disk: guarded reads and checked manifests.

Every read a replay makes of a recorded host goes through ``Store``: only regular files
and directories inside the recorded directory are read. A symbolic link out of it (or
to itself), a FIFO, a device or an oversized file is refused with a message that names
it, so that a recording from someone else can neither hang a scan nor make it read and
report this machine's files. ``load_manifest`` and ``load_json`` check every section's
types before a probe sees them: a wrong value is an error naming the file and key.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any, Callable

from doctor.endpoints import EndpointError
from doctor.endpoints import parse as parse_endpoint
from doctor.model import Level
from doctor.seam.host import HostReadError, Reason
from doctor.tomlfile import parse as parse_toml

FS_FILE_LIMIT = 16 << 20  # a /proc or /sys file; cpuinfo of 512 CPUs is ~1 MiB
DATA_FILE_LIMIT = 64 << 20  # host.toml, measurements.json, a recorded page
READABLE_FORMATS = (1, 2)
LEVELS = Level.names()
MAX_INT = 2**63
MAX_GPUS = 64  # devices a recorded host may count: four times the largest NVSwitch servers


class RecordedHostError(Exception):
    """A recorded host directory cannot be read; the message says which file and why."""


class Store:
    """A recorded host's directory, read only through guards."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.real_root = os.path.realpath(self.root)
        self.fs = self.root / "fs"

    def _inside(self, real: str) -> bool:
        return real == self.real_root or real.startswith(self.real_root + os.sep)

    def read_bytes(self, local: Path, what: str, limit: int = FS_FILE_LIMIT) -> bytes:
        """A regular file inside the directory; HostReadError(what, …) otherwise."""
        if not os.path.lexists(local):
            raise HostReadError(what, Reason.NOT_FOUND)
        real = os.path.realpath(local)
        if not self._inside(real):
            raise HostReadError(what, Reason.FAILED, f"{local} points outside the recorded host")
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError as exc:  # a link to itself (ELOOP), to nothing, or unreadable
            raise HostReadError(what, Reason.FAILED, f"{local}: {exc.strerror}") from None
        mode = os.fstat(fd).st_mode  # before fdopen, which refuses a directory itself
        if not stat.S_ISREG(mode):
            os.close(fd)
            if stat.S_ISDIR(mode):
                raise HostReadError(what, Reason.NOT_FOUND, f"{local} is a directory")
            raise HostReadError(what, Reason.FAILED,
                                f"{local} is a {_kind_of(mode)}, not a regular file")
        with os.fdopen(fd, "rb") as f:
            data = f.read(limit + 1)
        if len(data) > limit:
            raise HostReadError(what, Reason.FAILED, f"{local} is larger than {limit >> 20} MiB")
        return data

    def read_range(self, local: Path, what: str, offset: int, size: int) -> bytes:
        """``size`` bytes of a regular file inside the directory from ``offset`` (fewer past
        its end): a capture keeps only the ranges a probe read, at their offsets."""
        if not os.path.lexists(local):
            raise HostReadError(what, Reason.NOT_FOUND)
        real = os.path.realpath(local)
        if not self._inside(real):
            raise HostReadError(what, Reason.FAILED, f"{local} points outside the recorded host")
        try:
            fd = os.open(real, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError as exc:
            raise HostReadError(what, Reason.FAILED, f"{local}: {exc.strerror}") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise HostReadError(what, Reason.FAILED, f"{local} is not a regular file")
            if not 0 <= offset < 1 << 62:  # past the end of any file
                return b""
            return os.pread(fd, max(0, min(size, FS_FILE_LIMIT)), offset)
        finally:
            os.close(fd)

    def list_dirs(self, local: Path, what: str) -> list[str]:
        """Real subdirectories (not links, not dot-names) of a directory inside the root."""
        real = os.path.realpath(local)
        if not self._inside(real):
            raise HostReadError(what, Reason.FAILED, f"{local} points outside the recorded host")
        if os.path.islink(local) or not os.path.isdir(local):
            raise HostReadError(what, Reason.NOT_FOUND)
        try:
            with os.scandir(local) as it:
                return sorted(e.name for e in it
                              if not e.name.startswith(".") and e.is_dir(follow_symlinks=False))
        except OSError as exc:
            raise HostReadError(what, Reason.FAILED, f"{local}: {exc.strerror}") from None

    def read_link(self, local: Path, what: str) -> str:
        """The target text of a stored link; the target itself is never followed."""
        parent = os.path.realpath(local.parent)
        if not self._inside(parent):
            raise HostReadError(what, Reason.FAILED, f"{local} points outside the recorded host")
        if not os.path.islink(local):
            raise HostReadError(what, Reason.NOT_FOUND)
        return os.readlink(local)


def _kind_of(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def _read_data(store: Store, name: str) -> str | None:
    path = store.root / name
    try:
        data = store.read_bytes(path, str(path), DATA_FILE_LIMIT)
    except HostReadError as exc:
        if exc.reason == Reason.NOT_FOUND:
            return None
        raise RecordedHostError(f"{path}: cannot be read: {exc.detail or exc.reason}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RecordedHostError(f"{path}: not UTF-8 text (byte {exc.start}); "
                                "recordings are written as UTF-8") from None


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number; write null for a value that is absent")


class _Numbers:
    """JSON numbers as a recording holds them: integers that fit in 64 bits (what NVML,
    the kernel and a capture's measurements give) and finite floats. The text of the first
    one refused is kept, to find its line."""

    def __init__(self) -> None:
        self.refused = ""

    def integer(self, text: str) -> int:
        # JSON writes no leading zero: past 20 digits is past 64 bits, and int() is not asked
        value = int(text) if len(text.lstrip("-")) <= 20 else None
        if value is None or not -MAX_INT <= value < 2 * MAX_INT:
            self.refused = text
            shown = text if len(text) <= 24 else f"{text[:12]}… ({len(text)} digits)"
            raise ValueError(f"the integer {shown} does not fit in 64 bits; no recorded value "
                             "is that large")
        return value

    def real(self, text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            self.refused = text
            raise ValueError(f"{text[:24]} is beyond a float's range; write null for a value "
                             "that is absent")
        return value


def load_json(store: Store, name: str, default: Any) -> Any:
    """``name`` inside the directory as JSON (no NaN, no Infinity, no integer beyond 64
    bits), or ``default``."""
    text = _read_data(store, name)
    if text is None:
        return default
    numbers = _Numbers()
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_int=numbers.integer,
                          parse_float=numbers.real)
    except json.JSONDecodeError as exc:
        raise RecordedHostError(f"{store.root / name}: not valid JSON: {exc}") from None
    except RecursionError:
        raise RecordedHostError(f"{store.root / name}: nested too deeply to be a recording") from None
    except ValueError as exc:  # NaN, 1e999, an integer past 64 bits or of thousands of digits
        at = text.find(numbers.refused) if numbers.refused else -1
        line = f":{text.count(chr(10), 0, at) + 1}" if at >= 0 else ""
        raise RecordedHostError(f"{store.root / name}{line}: {exc}") from None


def load_manifest(store: Store) -> dict[str, Any]:
    path = store.root / "host.toml"
    text = _read_data(store, "host.toml")
    if text is None:
        raise RecordedHostError(
            f"{path}: not found. A recorded host is a directory written by "
            "'llm-doctor capture DIR' with a host.toml inside (docs/recorded-host.md).")
    manifest = parse_toml(text, path, RecordedHostError)  # keys and nesting bounded first
    check_manifest(manifest, str(path))
    return manifest


class _Checker:
    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, key: str, expected: str, value: Any) -> None:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        raise RecordedHostError(f"{self.where}: {key}: expected {expected}, got {shown}")

    def table(self, value: Any, key: str) -> dict:
        if not isinstance(value, dict):
            self.fail(key, "a table", value)
        return value

    def text(self, value: Any, key: str) -> str:
        if not isinstance(value, str):
            self.fail(key, "a string", value)
        return value

    def count(self, value: Any, key: str, low: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value < MAX_INT:
            self.fail(key, f"an integer from {low} to 2^63", value)
        return value

    def strings(self, value: Any, key: str) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.fail(key, "a list of strings", value)
        return value

    def reason(self, value: Any, key: str) -> None:
        if not isinstance(value, str) or value not in {r.value for r in Reason}:
            self.fail(key, "a read-failure reason (" + ", ".join(r.value for r in Reason) + ")", value)


def check_manifest(manifest: dict[str, Any], where: str) -> None:
    """Every section's types, so that a probe never meets a wrong one (docs/recorded-host.md)."""
    c = _Checker(where)
    host = c.table(manifest.get("host", {}), "[host]")
    version = host.get("format")
    if isinstance(version, bool) or not isinstance(version, int):
        c.fail("[host] format", "an integer format version", version)
        return
    if version not in READABLE_FORMATS:
        newer = version > max(READABLE_FORMATS)
        raise RecordedHostError(
            f"{where}: [host] format = {version}; this llm-doctor reads format "
            f"{' and '.join(map(str, READABLE_FORMATS))}. "
            + ("Upgrade llm-doctor to replay it." if newer else "Re-capture the host with this version."))
    for key in ("hostname", "captured_at", "llm_doctor_version"):
        if key in host:
            c.text(host[key], f"[host] {key}")
    if "level" in host and host["level"] not in LEVELS:
        c.fail("[host] level", "one of quick, standard, full", host["level"])
    if "model_dirs" in host:
        c.strings(host["model_dirs"], "[host] model_dirs")
    for key in ("requests", "busy_ok"):  # the capture's options, repeated on replay
        if key in host and not isinstance(host[key], bool):
            c.fail(f"[host] {key}", "true or false", host[key])
    for url in c.strings(host.get("endpoints", []), "[host] endpoints"):
        try:
            parse_endpoint(url)
        except EndpointError as exc:
            c.fail("[host] endpoints", "engine base URLs like 'http://127.0.0.1:8000'",
                   f"{url} ({exc})")
    for key, reason in c.table(manifest.get("errors", {}), "[errors]").items():
        c.reason(reason, f"[errors] {key!r}")
    for path, info in c.table(manifest.get("paths", {}), "[paths]").items():
        at = f"[paths.{path!r}]"
        c.table(info, at)
        device = c.text(info.get("device"), f"{at} device")
        if not all(p.isdigit() for p in device.split(":")) or device.count(":") != 1:
            c.fail(f"{at} device", "MAJOR:MINOR like '259:1'", device)
        if not isinstance(info.get("is_dir", True), bool):
            c.fail(f"{at} is_dir", "true or false", info.get("is_dir"))
        for key in ("fs_total_bytes", "fs_free_bytes"):
            c.count(info.get(key), f"{at} {key}")
    for path, listing in c.table(manifest.get("files", {}), "[files]").items():
        for name, size in c.table(listing, f"[files.{path!r}]").items():
            c.count(size, f"[files.{path!r}] {name!r}")
    for path, listing in c.table(manifest.get("links", {}), "[links]").items():
        for name, target in c.table(listing, f"[links.{path!r}]").items():
            c.text(target, f"[links.{path!r}] {name!r}")
    commands = manifest.get("commands", [])
    if not isinstance(commands, list):
        c.fail("[[commands]]", "an array of tables", commands)
    for i, cmd in enumerate(commands):
        at = f"[[commands]] #{i + 1}"
        c.table(cmd, at)
        if not c.strings(cmd.get("argv"), f"{at} argv"):
            c.fail(f"{at} argv", "a non-empty list of strings", [])
        if "rc" in cmd and (isinstance(cmd["rc"], bool) or not isinstance(cmd["rc"], int)
                            or not -256 < cmd["rc"] < 256):
            c.fail(f"{at} rc", "an exit status from -255 to 255", cmd["rc"])
        for key in ("stdout_file", "stderr"):
            if key in cmd:
                c.text(cmd[key], f"{at} {key}")


def check_nvml(entries: Any, where: str) -> dict[tuple, dict]:
    """nvml.json's answers by (call, args), each ``{"value": …}`` or ``{"error": reason,
    "detail": …}``. Every entry must name its call and give its arguments as the probes pass
    them (integers, the device index first). The device count is answered only when the
    recording holds answers for every device it counts: a count of 2**62 on a two-GPU
    recording would have the probes ask for devices that are not there, forever."""
    return _check_calls(entries, where, "nvmlDeviceGetCount", "NVML",
                        lambda name: name.startswith("nvmlDevice"))


def check_amdsmi(entries: Any, where: str) -> dict[tuple, dict]:
    """amdsmi.json's answers, checked as nvml.json's are; the device count is the answer to
    ``amdsmi_get_processor_handles`` (doctor/seam/amdsmi.py), and every other call with
    arguments takes the device index first."""
    return _check_calls(entries, where, "amdsmi_get_processor_handles", "AMD SMI",
                        lambda name: name != "amdsmi_get_processor_handles")


def _check_calls(entries: Any, where: str, count_call: str, library: str,
                 per_device: Callable[[str], bool]) -> dict[tuple, dict]:
    c = _Checker(where)
    calls: dict[tuple, dict] = {}
    for i, entry in enumerate(check_entries(entries, where, ("call", "args"))):
        name, args = entry["call"], entry["args"]
        if not isinstance(name, str) or not name:
            c.fail(f"entry #{i + 1} call", f"the name of an {library} call", name)
        if not isinstance(args, list) or not all(_nvml_arg(a) for a in args):
            c.fail(f"entry #{i + 1} ({name[:60]}) args",
                   "a list of integers (the device index first)", args)
        answer = ({"error": entry["error"], "detail": "recorded"} if "error" in entry
                  else {"value": entry.get("value")})
        calls[(name, tuple(args))] = {**answer, "entry": i + 1}
    count = calls.get((count_call, ()))
    if count is not None and "value" in count:
        problem = _count_problem(count["value"], calls, count_call, per_device)
        if problem:
            calls[(count_call, ())] = {
                "error": Reason.FAILED.value, "entry": count["entry"],
                "detail": f"{where} entry #{count['entry']}: {problem}"}
    return calls


def _nvml_arg(value: Any) -> bool:
    return isinstance(value, str) or isinstance(value, int) and not isinstance(value, bool)


def _count_problem(count: Any, calls: dict[tuple, dict], count_call: str,
                   per_device: Callable[[str], bool]) -> str | None:
    """Why ``count`` cannot be answered from these calls, or None; its own type is the
    probes' to judge (probes/helpers/gpu_common.py: 'expected a GPU count')."""
    if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
        return None
    held = {args[0] for name, args in calls if per_device(name) and args
            and isinstance(args[0], int) and not isinstance(args[0], bool)}
    missing = next((i for i in range(min(count, MAX_GPUS + 1)) if i not in held), None)
    if missing is not None:
        have = sorted(i for i in held if 0 <= i < count)
        shown = ", ".join(map(str, have[:16])) + (" …" if len(have) > 16 else "")
        return (f"{count_call} is {count}, but the recording holds answers for "
                f"{'devices ' + shown if have else 'no device'} (none for device {missing}); "
                "set the count to the devices recorded, or capture the host again")
    if count > MAX_GPUS:
        return f"{count_call} is {count}; a recorded host holds at most {MAX_GPUS} GPUs"
    return None


def check_entries(entries: Any, where: str, key_fields: tuple[str, ...]) -> list[dict]:
    """http.json, nvml.json and amdsmi.json: a list of objects with ``key_fields`` and a value or error."""
    c = _Checker(where)
    if not isinstance(entries, list):
        c.fail("top level", "a JSON list of objects", entries)
    for i, entry in enumerate(entries):
        at = f"entry #{i + 1}"
        c.table(entry, at)
        for key in key_fields:
            if key not in entry:
                c.fail(at, f"a '{key}' field", entry)
        if "error" in entry:
            c.reason(entry["error"], f"{at} error")
    return entries
