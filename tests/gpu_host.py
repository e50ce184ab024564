"""A recorded GPU host written for a test: NVML answers, files, commands and measurements,
through the same RecordWriter that capture and the fixture builders use, read back with
RecordedHost (so the tests exercise the real replay, not a second fake).
"""

from __future__ import annotations

import tempfile
from typing import Any

from doctor.seam.host import CommandOutput, Reason
from doctor.seam.recorded import RecordedHost, RecordWriter


def gpu_host(entries: list[dict] | None, files: dict[str, str] | None = None,
             commands: dict[tuple[str, ...], CommandOutput] | None = None,
             measurements: dict[str, Any] | None = None,
             links: dict[str, str] | None = None) -> RecordedHost:
    """``entries`` as nvml.json holds them; None: a host without the driver (no nvml.json)."""
    tmp = tempfile.TemporaryDirectory(prefix="gpu-host-")
    root = tmp.name
    w = RecordWriter(root)
    for e in entries or []:
        w.nvml(e["call"], e["args"], Reason(e["error"]) if "error" in e else e["value"])
    procs = sorted({p.split("/")[2] for p in files or {} if p.startswith("/proc/")})
    w.dir("/proc", procs)
    for path, text in (files or {}).items():
        w.file(path, text)
    for path, target in (links or {}).items():
        w.link(path, target)
    for argv, out in (commands or {}).items():
        w.command(argv, out)
    for name, value in (measurements or {}).items():
        w.measurement(name, value)
    w.save({"level": "standard"}, hostname="gpu-test", captured_at="2026-11-29T00:00:00Z")
    host = RecordedHost(root)
    host._tmp = tmp  # removed with the host
    return host


def process_files(procs: dict[int, tuple[str, str]]) -> dict[str, str]:
    """/proc/<pid>/{comm,cmdline} for {pid: (comm, cmdline with spaces)}."""
    files = {}
    for pid, (comm, cmdline) in procs.items():
        files[f"/proc/{pid}/comm"] = comm + "\n"
        files[f"/proc/{pid}/cmdline"] = cmdline.replace(" ", "\0") + "\0"
    return files
