"""The process table, read through the host seam, and serving-engine detection.

Sources: ``/proc/<pid>/cmdline`` and ``/proc/<pid>/comm`` (world-readable, no root needed).
Manual equivalent: ``ps -eo pid,comm,args``.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from doctor.host import Host, HostReadError

# Patterns on the whole command line (NUL turned into spaces). Order matters: the first
# match names the engine. Sources: each engine's documented launch commands.
ENGINE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # vLLM v1 and SGLang retitle their worker processes (setproctitle): VLLM::EngineCore,
    # VLLM::Worker_TP0, sglang::scheduler_TP0.
    ("vllm", re.compile(r"(^|[\s/])vllm(\s+serve\b|\.entrypoints\.)|^VLLM::")),
    ("sglang", re.compile(r"\bsglang\.launch_server\b|(^|[\s/])sglang\s+serve\b|^sglang::")),
    ("tgi", re.compile(r"(^|/)text-generation-(launcher|router|server)\b")),
    ("llama.cpp", re.compile(r"(^|/)llama-server(\s|$)|\bllama_cpp\.server\b")),
    ("ollama", re.compile(r"(^|/)ollama\s+(serve|runner)\b")),
    ("tensorrt-llm", re.compile(r"(^|/)trtllm-serve\b|(^|/)tritonserver\b")),
)

# Values that are secrets, shown and recorded as "***": flags (--api-key sk-…, --token=…)
# and NAME=value words whose name says token, secret, password or key.
SECRET_FLAG = re.compile(
    r"(--[\w-]*(?:api-key|token|password|secret)[=\s\0]|\b[\w]*(?:TOKEN|SECRET|PASSWORD|API_KEY)[\w]*=)"
    r"[^\s\0]+", re.I)

# The flag each engine takes its weights from (a local path or a hub id).
MODEL_FLAGS = ("--model", "--model-path", "--model-id", "-m")


@dataclass(frozen=True, slots=True)
class Process:
    pid: int
    comm: str  # /proc/<pid>/comm
    cmdline: str  # /proc/<pid>/cmdline, NULs as spaces, secrets as ***, cut at 2000 characters
    engine: str | None  # vllm, sglang, tgi, llama.cpp, ollama, tensorrt-llm


def redact(cmdline: str) -> str:
    """Hide the values of secret-bearing flags (API keys, tokens) in a command line."""
    return SECRET_FLAG.sub(r"\1***", cmdline)


def engine_of(cmdline: str) -> str | None:
    for name, pattern in ENGINE_PATTERNS:
        if pattern.search(cmdline):
            return name
    return None


def list_processes(host: Host) -> list[Process]:
    """Every process whose command line can be read (kernel threads have none)."""
    processes = []
    for entry in host.list_dirs("/proc"):
        if not entry.isdigit():
            continue
        try:
            raw = host.read_text(f"/proc/{entry}/cmdline")
        except HostReadError:  # the process exited while we looked
            continue
        if not raw:
            continue
        cmdline = redact(raw).replace("\0", " ").strip()
        try:
            comm = host.read_text(f"/proc/{entry}/comm").strip()
        except HostReadError:
            comm = os.path.basename(cmdline.split(" ", 1)[0])
        processes.append(Process(int(entry), comm, cmdline[:2000], engine_of(cmdline)))
    return processes


def engine_processes(host: Host) -> list[Process]:
    return [p for p in list_processes(host) if p.engine]


def model_path_of(cmdline: str) -> str | None:
    """The weights' path from an engine's command line, when it is a local absolute path."""
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
