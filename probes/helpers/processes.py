"""The process table, read once per scan through the host seam, and serving engines in it.

Sources: ``/proc/<pid>/cmdline`` and ``/proc/<pid>/comm`` (world-readable, no root
needed); for engine processes, their listening TCP sockets: ``/proc/net/tcp`` and
``/proc/net/tcp6`` rows in state LISTEN, matched by socket inode to the links in
``/proc/<pid>/fd`` (reading another user's fd/ needs root or the same user). Manual
equivalent: ``ps -eo pid,comm,args`` and ``ss -ltnp``.

Command lines are kept as recordings keep them (doctor/redact.py): an engine's whole with
secrets masked, any other process's cut to its program.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass

from doctor.engines import engine_of
from doctor.seam.host import Host, HostReadError, MalformedError
from doctor.redact import program_only, redact_cmdline

__all__ = ["Process", "engine_of", "engine_processes", "flag_value", "model_path_of",
           "parse_listening", "process_table"]

# The flag each engine takes its weights from (a local path or a hub id).
MODEL_FLAGS = ("--model", "--model-path", "--model-id", "-m")
CMDLINE_CHARS = 4000  # what a record keeps of an engine's command line
TCP_LISTEN = "0A"  # include/net/tcp_states.h: TCP_LISTEN = 10


@dataclass(frozen=True, slots=True)
class Process:
    pid: int
    comm: str  # /proc/<pid>/comm
    cmdline: str  # NULs as spaces; an engine's with secrets as ***, others' the program only
    engine: str | None  # vllm, sglang, tgi, llama.cpp, ollama, tensorrt-llm, triton
    # Listening TCP sockets ("127.0.0.1:8080", "[::]:8000"); read for engines only, and
    # () when their fd/ cannot be read (another user's process without root).
    listen: tuple[str, ...] = ()


def process_table(host: Host) -> tuple[Process, ...]:
    """Every process with a command line (kernel threads have none), read once per scan."""
    return host.memo("process_table", lambda: _read_table(host))


def engine_processes(host: Host) -> tuple[Process, ...]:
    return tuple(p for p in process_table(host) if p.engine)


def _read_table(host: Host) -> tuple[Process, ...]:
    processes = []
    sockets: dict[str, str] | None = None
    for entry in host.list_dirs("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = host.read_text(f"/proc/{entry}/cmdline")
        except HostReadError:  # the process exited while we looked
            continue
        if not raw:
            continue
        engine = engine_of(raw.replace("\0", " "))
        kept = redact_cmdline(raw) if engine else program_only(raw)
        cmdline = kept.replace("\0", " ").strip()[:CMDLINE_CHARS]
        try:
            comm = host.read_text(f"/proc/{entry}/comm").strip()
        except HostReadError:
            comm = os.path.basename(cmdline.split(" ", 1)[0])
        listen: tuple[str, ...] = ()
        if engine:
            if sockets is None:
                sockets = _listening_sockets(host)
            listen = _listen_of(host, int(entry), sockets)
        processes.append(Process(int(entry), comm, cmdline, engine, listen))
    return tuple(processes)


def _listening_sockets(host: Host) -> dict[str, str]:
    """{socket inode: "addr:port"} of every listening TCP socket the host can show."""
    found: dict[str, str] = {}
    for path, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        try:
            found.update(parse_listening(host.read_text(path), path, v6))
        except HostReadError:
            continue  # no IPv6, or a recording without it
    return found


def parse_listening(text: str, path: str, v6: bool) -> dict[str, str]:
    """``/proc/net/tcp{,6}`` → {inode: "127.0.0.1:8080"} for rows in state LISTEN."""
    lines = text.splitlines()
    if not lines or not lines[0].split() or lines[0].split()[0] != "sl":
        raise MalformedError(path, "expected a header line starting with 'sl'")
    found = {}
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split()
        if len(fields) < 10:
            raise MalformedError(path, f"line {number}: expected at least 10 fields, got {len(fields)}")
        if fields[3] != TCP_LISTEN:
            continue
        try:
            found[fields[9]] = _address(fields[1], v6)
        except ValueError:
            raise MalformedError(path, f"line {number}: bad address {fields[1][:60]!r}") from None
    return found


def _address(text: str, v6: bool) -> str:
    """``0100007F:1F90`` → ``127.0.0.1:8080``: the kernel prints each 32-bit word in host
    (little-endian) order."""
    hex_ip, hex_port = text.split(":")
    port = int(hex_port, 16)
    words = [bytes.fromhex(hex_ip[i:i + 8])[::-1] for i in range(0, len(hex_ip), 8)]
    if len(words) != (4 if v6 else 1):
        raise ValueError(text)
    ip = ipaddress.ip_address(b"".join(words))
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}"


def _listen_of(host: Host, pid: int, sockets: dict[str, str]) -> tuple[str, ...]:
    try:
        fds = host.list_links(f"/proc/{pid}/fd")
    except HostReadError:
        return ()
    inodes = {t[len("socket:["):-1] for t in fds.values() if t.startswith("socket:[")}
    return tuple(sorted({sockets[i] for i in inodes if i in sockets}))


def flag_value(cmdline: str, *flags: str) -> str | None:
    """The value of the first of ``flags`` on a command line: ``--x 256`` or ``--x=256``."""
    args = cmdline.split()
    for i, arg in enumerate(args):
        for flag in flags:
            if arg == flag and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    return None


def model_path_of(cmdline: str) -> str | None:
    """The weights' path from an engine's command line, when it is a local absolute path.

    ``python -m vllm.entrypoints...`` has a ``-m`` that is not a model: every flag
    occurrence is tried until one holds an absolute path."""
    args = cmdline.split()
    for i, arg in enumerate(args):
        for flag in MODEL_FLAGS:
            if arg == flag and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
            else:
                continue
            if value.startswith("/"):
                return value
        # `vllm serve /models/x` takes the model as its first positional argument
        if arg == "serve" and i + 1 < len(args) and args[i + 1].startswith("/"):
            return args[i + 1]
    return None


def lasting_name(proc: Process) -> str:
    """What names an engine across its restarts, for a finding's key (a pid changes with
    every restart): its kind and listening sockets ("vllm on 0.0.0.0:8000"), else its kind
    and model path, else its kind alone."""
    kind = proc.engine or proc.comm or "engine"
    if proc.listen:
        return f"{kind} on {','.join(proc.listen)}"
    model = model_path_of(proc.cmdline)
    return f"{kind} serving {model}" if model else kind


def redact(cmdline: str) -> str:
    """Kept for callers not yet moved to doctor.redact."""
    return redact_cmdline(cmdline)
