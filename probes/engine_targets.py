"""The engine endpoints the active engine probes talk to (warm-up, output, load state, exposure).

Source: engine discovery (probes/engine_discovery.py: engine processes from the process
table and their listening sockets, plus every ``--endpoint URL``), memoized per scan by the
host. Where discovery is not available, engine processes' listening sockets from the process
table (``/proc/net/tcp{,6}`` matched to the process's socket inodes) and ``--endpoint``.
Manual equivalent: ``ss -ltnp``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from typing import TYPE_CHECKING

from doctor.host import Host
from doctor.model import ScanOptions

if TYPE_CHECKING:
    from doctor.loadgen import Endpoint

LOOPBACK_PREFIXES = ("127.", "[::1]", "::1", "localhost")
WILDCARDS = ("0.0.0.0", "[::]", "::", "*")


@dataclass(frozen=True, slots=True)
class Target:
    base_url: str  # always a loopback URL when the engine listens on this host
    pid: int | None
    kind: str | None  # vllm, sglang, tgi, llama.cpp, ollama, ...
    model: str | None
    api_key_set: bool | None
    listen: tuple[str, ...]  # the process's listening sockets; () for a named endpoint
    api_key: str | None = field(default=None, repr=False)  # from --endpoint http://:KEY@...; never shown

    def endpoint(self) -> "Endpoint":
        from doctor.loadgen import Endpoint

        return Endpoint(self.base_url, model=self.model, api_key=self.api_key)

    @property
    def serves_completions(self) -> bool:
        """Triton and Ollama's native API do not speak /v1/completions streaming."""
        return self.kind not in ("triton", "tensorrt-llm")


def loopback_url(address: str) -> str:
    """``0.0.0.0:8000`` or ``[::]:8000`` as ``http://127.0.0.1:8000`` (traffic stays on loopback)."""
    host, _, port = address.rpartition(":")
    if host in WILDCARDS or host.startswith(LOOPBACK_PREFIXES):
        return f"http://127.0.0.1:{port}" if not host.startswith(("[::1]", "::1")) \
            else f"http://[::1]:{port}"
    return f"http://{host}:{port}"


def is_loopback(address: str) -> bool:
    host = address.rpartition(":")[0] if ":" in address else address
    return host.startswith(LOOPBACK_PREFIXES)


def _from_discovery(host: Host, options: ScanOptions) -> tuple[Target, ...] | None:
    try:
        from probes.engine_discovery import credentials, discover
    except ImportError:
        return None
    keys = {url: headers.get("Authorization", "").removeprefix("Bearer ") or None
            for url, headers in credentials(host, options).items()}
    return tuple(Target(e.base_url, e.pid, e.kind, e.model, e.api_key_set, tuple(e.listen),
                        keys.get(e.base_url))
                 for e in discover(host, options) if e.base_url)


def _from_processes(host: Host, options: ScanOptions) -> tuple[Target, ...]:
    from probes import processes

    out = []
    for process in processes.engine_processes(host):
        listen = process.listen
        if not listen:
            continue
        api_key = "--api-key" in process.cmdline
        out.append(Target(loopback_url(listen[0]), process.pid, process.engine, None, api_key,
                          listen))
    named = {t.base_url for t in out}
    for url in options.endpoints:
        if url.rstrip("/") not in named:
            out.append(Target(url.rstrip("/"), None, None, None, None, ()))
    return tuple(out)


def targets(host: Host, options: ScanOptions) -> tuple[Target, ...]:
    """Every engine endpoint, once per scan."""
    def find() -> tuple[Target, ...]:
        found = _from_discovery(host, options)
        return found if found is not None else _from_processes(host, options)

    return host.memo("engine.targets", find)


def active_targets(host: Host, options: ScanOptions) -> list[Target]:
    """The endpoints an active probe may send completions to; Skip says why there are none.

    An engine that asks for an API key is left out unless the key was given
    (``--endpoint http://:KEY@HOST:PORT``): its answers would be 401s, not measurements.
    """
    from doctor.model import Skip

    found = [t for t in targets(host, options) if t.serves_completions]
    if not found:
        raise Skip("no engine endpoint: none found running, none named with --endpoint")
    usable = [t for t in found if t.api_key or not t.api_key_set]
    if not usable:
        raise Skip(f"{found[0].base_url} asks for an API key: give it as --endpoint "
                   "http://:KEY@HOST:PORT to measure it")
    return usable
