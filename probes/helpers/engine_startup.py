"""How long an engine process has been up, and how big the weights it loads are.

An engine that is still loading its model answers 503 (llama.cpp ``Loading model``) or
holds no listening socket yet (vLLM, TGI bind their port once the weights are in): that is
a start, not a death, and is judged against how long a load may take. Sources:
``/proc/<pid>/stat`` field 22 (start time, clock ticks since boot) over ``/proc/uptime``;
the model's size from the directory listing of its path (a GGUF file, or the weight files
of a model directory). Units: seconds, bytes. No privilege needed for one's own processes.
Manual equivalent: ``ps -o etimes= -p PID; du -b MODEL``.
"""

from __future__ import annotations

import posixpath

from doctor.seam.host import Host, HostReadError

USER_HZ = 100  # clock ticks per second in /proc/<pid>/stat on every Linux llm-doctor runs on
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt", ".pth")
# A 503 (or other 5xx) whose message says the engine is getting ready, not failing: llama.cpp
# "Loading model"; SGLang and others "not ready", "starting", "warming up", "initializing".
LOADING_WORDS = ("loading", "not ready", "starting", "warming up", "warmup", "initializ")


def uptime_s(host: Host, pid: int | None) -> float | None:
    """Seconds since the process started; None without a pid or when unreadable."""
    if pid is None:
        return None
    try:
        stat = host.read_text(f"/proc/{pid}/stat")
        system_uptime = float(host.read_text("/proc/uptime").split()[0])
    except (HostReadError, ValueError, IndexError):
        return None
    fields = stat.rsplit(")", 1)[-1].split()  # the command name may hold spaces and ")"
    try:
        start_ticks = int(fields[19])  # field 22 overall; the 20th after "pid (comm)"
    except (IndexError, ValueError):
        return None
    return max(round(system_uptime - start_ticks / USER_HZ, 1), 0.0)


def model_bytes(host: Host, path: str | None) -> int | None:
    """Bytes of the weights at ``path``: the file itself, or the weight files directly in a
    model directory; None when there is no local path or it cannot be listed."""
    if not path or not path.startswith("/"):
        return None
    parent, name = posixpath.split(path.rstrip("/"))
    try:
        files = host.list_files(parent or "/")
    except HostReadError:
        files = {}
    if name in files:
        return files[name]
    try:
        inside = host.list_files(path)
    except HostReadError:
        return None
    weights = [size for file, size in inside.items() if file.endswith(WEIGHT_SUFFIXES)]
    return sum(weights) if weights else None


def says_loading(message: str | None) -> bool:
    """Whether an engine's 5xx message says it is getting ready (see LOADING_WORDS)."""
    said = (message or "").lower()
    return any(word in said for word in LOADING_WORDS)
