"""npu.hccl_log: what HCCL (Ascend's collective library) said went wrong, in each engine's
output: an NPU network port down (``EJ0002``/``EI0009 … The network port is down``), links
between ranks not set up in time (``EI0006 Getting socket times out``, plog's ``wait socket
establish timeout … timeout[120]``), a collective past HCCL_EXEC_TIMEOUT (``EI0002 … Notify
register times out``, ``hccl fftsplus task timeout … timeout:1836``). The words:
probes/helpers/hccl_text.py, from real reports (tests/fixtures/ascend/sources/SOURCES.md).

Sources: the file ``scan --hccl-log PATH`` names, alone (a saved engine log or plog file, on
any host); else each engine's standard output and error where they are regular files (vllm-ascend
runs as vLLM; lmdeploy and MindIE as whatever kind discovery names them), read inside the
engine's own root, the head and tail of a large one (probes/helpers/log_files.py, as
net.nccl_log reads NCCL's lines); where its stdout or stderr is not a file, the journal of its
systemd service since it started (probes/helpers/engine_journal.py). CANN prints the EI/EJ
lines in the Python exception the engine writes; the ``[ERROR] HCCL`` lines are plog's, CANN's
own log files, printed to stdout only with ``ASCEND_SLOG_PRINT_TO_STDOUT=1``: so the newest
``MAX_PLOGS`` files ``plog-<pid>_<timestamp>.log`` of the engine's plog folder are read too
(CANN's log reference: ``ASCEND_PROCESS_LOG_PATH`` first, default ``$HOME/ascend/log``; the
files under its ``debug/plog``, the path people paste; that ``ASCEND_PROCESS_LOG_PATH`` keeps
the same ``debug/plog`` below it is an inference), with the engine's own ``HOME`` and in its
root. The newest by the name's timestamp, not by the pid: an engine's workers are other
processes, each with its plog. Skips where npu-smi is absent (not an Ascend host).
Privilege: the engine's user or root for /proc/<pid>/fd and its environ. Manual equivalent:
``grep -E 'E[IJ][0-9]{4}|HCCL.*timeout|network port is down' vllm.log ~/ascend/log/debug/plog/plog-*.log``.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host, HostReadError
from probes.helpers.engine_discovery import found as found_engines
from probes.helpers.engine_journal import journal, started_at, unit_of
from probes.helpers.engine_output import file_of
from probes.helpers.gpu_common import reason_of
from probes.helpers.hccl_text import HcclFailure, parse
from probes.helpers.log_files import MAX_LINES, output_files, read_lines, size_of
from probes.helpers.npu_read import overview
from probes.helpers.process_env import env_value

MAX_LOGS = 8
MAX_ENGINES = 32
MAX_PLOGS = 4  # the newest plog files of an engine's folder
PLOG_DIR = "debug/plog"  # below the log root: $ASCEND_PROCESS_LOG_PATH, else $HOME/ascend/log
PLOG_NAME = re.compile(r"plog-(\d{1,10})_(\d{1,20})\.log")


@dataclass(frozen=True, slots=True)
class HcclLog:
    """One log and HCCL's failure lines in it (all empty when it was not read; ``error``
    says why)."""

    source: str  # "stdout of vllm at … pid 4242", "journal of …"
    path: str
    size_bytes: int | None
    bytes_read: int
    skipped_bytes: int  # the middle of a larger file, not read
    error: str | None  # one line: why the log was not read; None when it was
    failure_lines: int = 0
    failures: tuple[HcclFailure, ...] = ()


@dataclass(frozen=True, slots=True)
class HcclLogRecord:
    vendor: str  # "huawei"
    logs: tuple[HcclLog, ...]
    missing: dict[str, str] = field(default_factory=dict)


def _ascend(host: Host) -> None:
    """Skip where npu-smi is not installed (every NVIDIA or CPU host: one row with the other
    npu probes); an npu-smi that is there and fails still means an Ascend host."""
    try:
        overview(host)
    except Skip:
        raise
    except Exception:  # npu-smi ran: the host is Ascend's whatever it answered
        return


def _read(host: Host, source: str, path: str, at: str) -> HcclLog:
    size, why = size_of(host, at)
    if size is None:
        return HcclLog(source, path, None, 0, 0, why and why.replace(at, path))
    try:
        lines, got, skipped = read_lines(host, at, size)
    except HostReadError as exc:
        return HcclLog(source, path, size, 0, 0, t("{path}: not read ({reason})", path=path, reason=reason_of(exc)))
    said = parse(lines)
    return HcclLog(source, path, size, got, skipped, None, said.failure_lines, said.failures)


def _journal(host: Host, source: str, unit: str, since: int | None) -> HcclLog:
    lines, kept, cut, why = journal(host, unit, since)
    path = f"journalctl --unit={unit}"
    if why is not None:
        return HcclLog(source, path, None, 0, 0, why)
    said = parse(lines[:MAX_LINES])
    return HcclLog(source, path, kept + cut, kept, cut, None, said.failure_lines, said.failures)


def plog_files(host: Host, pid: int, label: str) -> list[tuple[str, str, str]]:
    """(source, path in the engine's root, path to read) of the newest plog files of the
    engine's log folder: ``$ASCEND_PROCESS_LOG_PATH/debug/plog``, else
    ``$HOME/ascend/log/debug/plog``, the first that lists any. Relative or unset: not read."""
    roots = []
    for name, below in (("ASCEND_PROCESS_LOG_PATH", ""), ("HOME", "ascend/log")):
        value = env_value(host, pid, name).value
        if value and value.startswith("/") and "\0" not in value:
            roots.append(posixpath.join(posixpath.normpath(value), below, PLOG_DIR))
    for folder in roots:
        try:
            names = host.list_files(f"/proc/{pid}/root{folder}")
        except HostReadError:
            continue
        plogs = [(int(m.group(2)), n) for n in names if (m := PLOG_NAME.fullmatch(n))]
        if plogs:
            newest = [n for _, n in sorted(plogs, reverse=True)[:MAX_PLOGS]]
            return [(f"plog of {label}", f"{folder}/{n}", f"/proc/{pid}/root{folder}/{n}") for n in newest]
    return []


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> HcclLogRecord:
    """HCCL's failure lines in the log named by --hccl-log, or in each engine's stdout/stderr
    files, its service's journal and its newest plog files."""
    if options.hccl_log:  # the operator says it is HCCL's: read it on any host (a saved plog)
        named = options.hccl_log
        return HcclLogRecord("huawei", (_read(host, "--hccl-log", named, named),))
    _ascend(host)
    engines = [e for e in found_engines(host, options, inputs).engines if e.pid is not None]
    if not engines:
        raise Skip(t("no engine process: no HCCL log to read"))
    logs: list[HcclLog] = []
    missing: dict[str, str] = {}
    seen: set[str] = set()
    for engine in engines[:MAX_ENGINES]:
        pid = engine.pid
        if pid is None:
            continue
        label = f"{engine.kind} at {engine.base_url} pid {pid}"
        for source, path, at in output_files(host, pid, label) + plog_files(host, pid, label):
            if at not in seen:
                seen.add(at)
                logs.append(_read(host, source, path, at))
        if all(file_of(host, pid, fd) is not None for fd in (1, 2)):
            continue  # its output goes to files, read above
        unit, why = unit_of(host, pid)
        if unit is None:
            missing[f"journal of {label}"] = why
        elif unit not in seen:
            seen.add(unit)
            logs.append(_journal(host, f"journal of {label}", unit, started_at(host, pid)))
    if not logs:
        why = t("; ").join(missing.values())
        raise Skip(t("no engine's output is a file or a service's journal: start the engine "
                     "with its output sent to a file") + (t(" (no journal: {why})", why=why) if why else ""))
    return HcclLogRecord("huawei", tuple(logs[:MAX_LOGS + MAX_PLOGS]), missing)


def summary(record: HcclLogRecord) -> str:
    return t("; ").join(_one(log) for log in record.logs)


def _one(log: HcclLog) -> str:
    if log.error is not None:
        return log.error
    if not log.failures:
        return t("{path}: no HCCL error line", path=log.path)
    return t("{path}: HCCL errors: {failures}", path=log.path,
             failures=", ".join(f"{f.kind} x{f.count}" for f in log.failures))
