"""Where ``ollama serve`` listens when its sockets cannot be matched to it.

Ollama takes its address from ``OLLAMA_HOST`` (``/proc/<pid>/environ``, that variable only),
not a flag; unset, it listens at port 11434. The ``ollama runner`` children it starts, one
per loaded model, serve none of its API and are no engine of their own.
Manual equivalent: ``tr '\\0' '\\n' < /proc/$(pgrep -f 'ollama serve')/environ | grep OLLAMA_HOST``.
"""

from __future__ import annotations

from doctor.redact import MASK
from doctor.seam.host import Host
from probes.helpers.process_env import env_value

OLLAMA_DEFAULT_PORT = 11434  # `ollama serve` without OLLAMA_HOST


def ollama_runner(cmdline: str) -> bool:
    """``ollama runner --model <blob> --port N``: Ollama starts one per loaded model and
    talks to it on a loopback port of its own; it serves none of Ollama's API."""
    words = cmdline.split()
    return len(words) > 1 and words[0].rsplit("/", 1)[-1] == "ollama" and words[1] == "runner"


def ollama_base_url(host: Host, pid: int) -> str | None:
    """Where ``ollama serve`` listens by its OLLAMA_HOST (``0.0.0.0:11434``, ``:8080``,
    ``http://127.0.0.1``; port 11434 unless given), read from ``/proc/<pid>/environ`` (that
    variable only) when its sockets cannot be matched; None when unset or unreadable."""
    found = env_value(host, pid, "OLLAMA_HOST")
    raw = (found.value or "").strip()
    if not raw or raw == MASK:
        return None
    scheme, _, rest = raw.rpartition("://")
    scheme = scheme if scheme in ("http", "https") else "http"
    address, _, port_text = rest.split("/", 1)[0].rpartition(":")
    if not address and not port_text.isdigit():  # "127.0.0.1": a host, no port
        address, port_text = port_text, ""
    port = int(port_text) if port_text.isdigit() and 0 < int(port_text) < 65536 else (
        None if port_text else OLLAMA_DEFAULT_PORT)
    if port is None:
        return None
    address = address.strip("[]")
    if address in ("", "0.0.0.0", "::", "*", "localhost"):
        address = "127.0.0.1"
    if not all(c.isalnum() or c in ".-:" for c in address):
        return None
    return f"{scheme}://{'[' + address + ']' if ':' in address else address}:{port}"
