"""net.nccl_log: what NCCL itself said about the network it chose (``NCCL_DEBUG=INFO``).

Sources: the log ``scan --nccl-log PATH`` names, else each NCCL engine's standard output
and error where they are regular files (``/proc/<pid>/fd/1`` and ``2`` link to a file: an
engine started as ``vllm serve … > vllm.log 2>&1``; a pipe, a socket or a terminal is not
read) and the files its ``NCCL_DEBUG_FILE`` names, each read inside the engine's own root
(``/proc/<pid>/root``, a container's: probes/helpers/log_files.py, shared with npu.hccl_log); and where its stdout or stderr is not a file, the
journal of the systemd service it runs under, since it started (``journalctl --unit``:
probes/helpers/engine_journal.py, bounded in lines, bytes and time). The text is hostile: only a regular file is read (its size is listed
first, so a FIFO or a device is never opened), its first MiB (where NCCL's init lines are)
and its last 2 MiB (the newest: a failure at start is the end of the log), each line cut at
4,096 characters, undecodable bytes replaced. What the lines say: probes/helpers/nccl_text.py.
Privilege: the engine's user or root for its /proc/<pid>/fd; the file's own permissions.
Manual equivalent: ``grep -E 'NCCL (INFO|WARN)' vllm.log | grep -E 'Bootstrap|NET/|via|GPU Direct'``
(``journalctl -u vllm.service -o cat | grep …`` for a service).
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from dataclasses import dataclass, field

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host, HostReadError
from probes.helpers.engine_discovery import found as found_engines
from probes.helpers.engine_flags import Engine
from probes.helpers.engine_journal import journal, started_at, unit_of
from probes.helpers.engine_output import file_of
from probes.helpers.gpu_common import reason_of
from probes.helpers.log_files import HEAD_BYTES as HEAD_BYTES  # the bounds tests read here
from probes.helpers.log_files import TAIL_BYTES as TAIL_BYTES
from probes.helpers.log_files import CHUNK as CHUNK
from probes.helpers.log_files import MAX_LINES, output_files, read_lines, size_of
from probes.helpers.nccl_text import Failure, Said, parse
from probes.helpers.process_env import env_value

KINDS = ("vllm", "sglang", "tensorrt-llm", "triton")  # engines that run NCCL groups
MAX_LOGS = 8


@dataclass(frozen=True, slots=True)
class NcclLog:
    """One log and what NCCL said in it (probes/helpers/nccl_text.py ``Said``, field for
    field; all empty when it was not read, and ``error`` says why)."""

    source: str  # "--nccl-log", "stdout of vllm at … pid 4242"
    path: str
    size_bytes: int | None
    bytes_read: int
    skipped_bytes: int  # the middle of a larger file, not read
    rdma_devices_here: int | None  # /sys/class/infiniband entries on this host; None: unreadable
    error: str | None  # one line: why the file was not read; None when it was
    nccl_lines: int = 0
    warn_lines: int = 0
    network: str | None = None  # "IB", "Socket", a plugin's name
    bootstrap_ifs: tuple[str, ...] = ()  # "eth0:10.0.0.1"
    socket_ifs: tuple[str, ...] = ()
    ib_devices: tuple[str, ...] = ()  # "mlx5_0:1/RoCE"
    ib_no_device: bool = False
    ib_disabled_by_env: bool = False
    gdr_disabled_hcas: tuple[str, ...] = ()
    gdr_enabled: bool = False
    transports: dict[str, int] = field(default_factory=dict)  # channel lines per transport
    nodes: int | None = None  # the largest nNodes said
    ranks: int | None = None
    bootstrap_on_lo: bool = False
    failures: tuple[Failure, ...] = ()


@dataclass(frozen=True, slots=True)
class NcclLogRecord:
    logs: tuple[NcclLog, ...]
    missing: dict[str, str] = field(default_factory=dict)


def read_log(host: Host, source: str, path: str, rdma: int | None, at: str | None = None) -> NcclLog:
    """``path`` read (at ``at``, where the engine's root puts it) and parsed."""
    size, why = size_of(host, at or path)
    if size is None:
        return NcclLog(source, path, None, 0, 0, rdma, why and why.replace(at or path, path))
    try:
        lines, got, skipped = read_lines(host, at or path, size)
    except HostReadError as exc:
        return NcclLog(source, path, size, 0, 0, rdma, t("{path}: not read ({reason})", path=path, reason=reason_of(exc)))
    said = parse(lines)
    return NcclLog(source, path, size, got, skipped, rdma, None,
                   **{f.name: getattr(said, f.name) for f in dataclasses.fields(Said)})


def nccl_engines(host: Host, options: ScanOptions, inputs: Inputs) -> list[Engine]:
    """The engines found that run NCCL groups and have a pid to read."""
    return [e for e in found_engines(host, options, inputs).engines if e.pid is not None and e.kind in KINDS]


def _label(engine: Engine) -> str:
    return f"{engine.kind} at {engine.base_url} pid {engine.pid}"


def engine_logs(host: Host, engines: list[Engine]) -> list[tuple[str, str, str]]:
    """(source, path as the engine names it, path to read) of each NCCL engine's
    stdout/stderr that is a file, and of the files its NCCL_DEBUG_FILE names. Read through
    ``/proc/<pid>/root``: the path an engine in a container names is in its own root."""
    out: list[tuple[str, str, str]] = []
    for engine in engines:
        pid = engine.pid
        if pid is None:
            continue
        label, root = _label(engine), f"/proc/{pid}/root"
        for entry in output_files(host, pid, label):
            if entry[1] not in (p for _, p, _ in out):
                out.append(entry)
        for path in debug_files(host, pid):
            if path not in (p for _, p, _ in out):
                out.append((f"NCCL_DEBUG_FILE of {label}", path, root + path))
    return out[:MAX_LOGS]


def engine_journals(host: Host, engines: list[Engine], rdma: int | None) -> tuple[list[NcclLog], dict[str, str]]:
    """The journal of the systemd service of each NCCL engine whose stdout or stderr is not
    a file (probes/helpers/engine_journal.py), and why an engine's journal was not read."""
    logs: list[NcclLog] = []
    missing: dict[str, str] = {}
    for engine in engines:
        pid = engine.pid
        if pid is None or all(file_of(host, pid, fd) is not None for fd in (1, 2)):
            continue  # its output goes to files, read above
        unit, why = unit_of(host, pid)
        if unit is None:
            missing[f"journal of {_label(engine)}"] = why
            continue
        logs.append(journal_log(host, f"journal of {_label(engine)}", unit, started_at(host, pid), rdma))
    return logs[:MAX_LOGS], missing


def journal_log(host: Host, source: str, unit: str, since: int | None, rdma: int | None) -> NcclLog:
    """The messages of ``unit``'s journal since ``since`` read and parsed; ``path`` names
    the unit as journalctl is given it."""
    lines, kept, cut, why = journal(host, unit, since)
    path = f"journalctl --unit={unit}"
    if why is not None:
        return NcclLog(source, path, None, 0, 0, rdma, why)
    said = parse(lines[:MAX_LINES])
    return NcclLog(source, path, kept + cut, kept, cut, rdma, None,
                   **{f.name: getattr(said, f.name) for f in dataclasses.fields(Said)})


def debug_files(host: Host, pid: int) -> list[str]:
    """The files the engine's ``NCCL_DEBUG_FILE`` names: NCCL writes one per process, with
    ``%h`` the host name and ``%p`` the pid (src/debug.cc); the ranks are the engine's
    workers, so every pid matches. Relative to the engine's working directory."""
    pattern = env_value(host, pid, "NCCL_DEBUG_FILE").value
    if not pattern:
        return []
    if not pattern.startswith("/"):
        try:
            pattern = posixpath.join(host.read_link(f"/proc/{pid}/cwd"), pattern)
        except HostReadError:
            return []
    folder, base = posixpath.split(posixpath.normpath(pattern))
    wanted = re.compile(re.escape(base).replace("%h", "[^/]+").replace("%p", "[0-9]+"))
    try:
        names = host.list_files(f"/proc/{pid}/root{folder}")
    except HostReadError:
        return []
    return [posixpath.join(folder, n) for n in sorted(names) if wanted.fullmatch(n)][:MAX_LOGS]


def rdma_count(host: Host) -> int | None:
    try:
        return len(host.list_dirs("/sys/class/infiniband"))
    except HostReadError as exc:
        return 0 if reason_of(exc) == "not-found" else None


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> NcclLogRecord:
    """NCCL's lines in the named log, or in each NCCL engine's stdout/stderr files or its
    service's journal."""
    named = options.nccl_log
    if named:
        return NcclLogRecord((read_log(host, "--nccl-log", named, rdma_count(host)),))
    engines = nccl_engines(host, options, inputs)
    sources = engine_logs(host, engines)
    rdma = rdma_count(host) if engines else None
    journals, missing = engine_journals(host, engines, rdma)
    if not sources and not journals:
        why = t("; ").join(missing.values())
        raise Skip(t("no NCCL log: name one with --nccl-log PATH (an engine started with "
                     "NCCL_DEBUG=INFO), or start the engine with its output sent to a file")
                   + (t(" (no journal: {why})", why=why) if why else ""))
    logs = [read_log(host, source, path, rdma, at) for source, path, at in sources]
    return NcclLogRecord(tuple(logs) + tuple(journals), missing)


def summary(record: NcclLogRecord) -> str:
    return t("; ").join(_one(log) for log in record.logs)


def _one(log: NcclLog) -> str:
    if log.error is not None:
        return log.error
    said = log
    if not said.nccl_lines:
        return t("{path}: no NCCL INFO/WARN line (start the engine with NCCL_DEBUG=INFO)", path=log.path)
    line = t("{path}: {lines} NCCL lines, network {network}", path=log.path, lines=said.nccl_lines,
             network=said.network or t("not said"))
    if said.transports:
        line += t(", channels via {transports}", transports=", ".join(f"{k} x{v}" for k, v in said.transports.items()))
    if said.failures:
        line += t(", failures: {failures}", failures=", ".join(_failure(f) for f in said.failures))
    return line


def _failure(f: Failure) -> str:
    return f"{f.kind} x{f.count}"
