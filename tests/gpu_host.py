"""An in-memory host answering NVML from nvml.json-style entries, for the GPU probes' tests.

It answers as a replay of a recorded host does (SEAM.md): a call is matched on (call, args);
an unrecorded call is "not-found" (or "library-missing" when there are no entries at all).
Files and commands come from small dicts; everything else is "not-found".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from doctor.host import CommandOutput, HostReadError, MeasurementError


class GpuHost:
    kind = "recorded"

    def __init__(self, entries: list[dict] | None, files: dict[str, str] | None = None,
                 commands: dict[tuple[str, ...], CommandOutput] | None = None,
                 measurements: dict[str, Any] | None = None) -> None:
        self.entries = entries
        self.answers = {(e["call"], json.dumps(e["args"])): e for e in entries or []}
        self.files = files or {}
        self.commands = commands or {}
        self.measurements = measurements or {}
        self.calls: list[tuple] = []

    def nvml(self, name: str, *args: int | str) -> Any:
        self.calls.append((name, args))
        path = f"nvml {name}{tuple(args)}"
        if not self.entries:
            raise HostReadError(path, "library-missing", "")
        entry = self.answers.get((name, json.dumps(list(args))))
        if entry is None:
            raise HostReadError(path, "not-found", "not recorded")
        if "error" in entry:
            raise HostReadError(path, entry["error"], "recorded")
        return entry["value"]

    def read_text(self, path: str) -> str:
        if path in self.files:
            return self.files[path]
        raise HostReadError(path, "not-found")

    def list_dirs(self, path: str) -> list[str]:
        if path == "/proc":
            return sorted({p.split("/")[2] for p in self.files if p.startswith("/proc/")})
        raise HostReadError(path, "not-found")

    def list_files(self, path: str) -> dict[str, int]:
        raise HostReadError(path, "not-found")

    def read_link(self, path: str) -> str:
        raise HostReadError(path, "not-found")

    def stat(self, path: str):
        raise HostReadError(path, "not-found")

    def run(self, argv: Sequence[str], timeout_s: float = 5.0) -> CommandOutput:
        if tuple(argv) in self.commands:
            return self.commands[tuple(argv)]
        raise HostReadError(" ".join(argv), "not-found", "not recorded")

    def measure(self, name: str, fn: Callable[[], dict]) -> dict:
        if name not in self.measurements:
            raise MeasurementError(f"{name}: not measured")
        return self.measurements[name]

    def memo(self, key: str, fn: Callable[[], Any]) -> Any:
        return fn()

    def describe(self) -> dict[str, str]:
        return {"kind": "recorded", "hostname": "gpu-test"}


def process_files(procs: dict[int, tuple[str, str]]) -> dict[str, str]:
    """/proc/<pid>/{comm,cmdline} for {pid: (comm, cmdline with spaces)}."""
    files = {}
    for pid, (comm, cmdline) in procs.items():
        files[f"/proc/{pid}/comm"] = comm + "\n"
        files[f"/proc/{pid}/cmdline"] = cmdline.replace(" ", "\0") + "\0"
    return files
