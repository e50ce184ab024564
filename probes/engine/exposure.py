"""engine.exposure: does an engine answer without credentials on a non-loopback address?

Sources: the engine process's listening sockets (``/proc/net/tcp{,6}`` matched to its socket
inodes, through the process table) or the ``--endpoint`` URL's host, and one GET of
``/v1/models`` sent without an Authorization header (HTTP status; 5 s bound). A socket
bound to 0.0.0.0 or [::] is asked over loopback, which it also serves, so the question
never leaves the host. No privilege needed for your own processes; root to see another
user's sockets. Manual equivalent: ``ss -ltnp`` and ``curl -i http://HOST:PORT/v1/models``.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from doctor.i18n import t
from doctor.seam.host import Host, HostReadError
from doctor.model import ScanOptions, Skip
from doctor.inputs import NO_INPUTS, Inputs
from probes.helpers.engine_targets import WILDCARDS, Target, targets

TIMEOUT_S = 5.0


@dataclass(frozen=True, slots=True)
class Exposure:
    base_url: str  # the engine's URL on this host
    pid: int | None
    kind: str | None
    address: str  # "0.0.0.0:8080", "10.1.2.3:8000", or the --endpoint's host:port
    non_loopback: bool  # reachable from other machines: a wildcard or a non-loopback address
    api_key_set: bool | None  # the engine asks for a key (--api-key on its command line)
    checked_url: str | None  # the URL asked without credentials
    status: int | None  # its HTTP status; None when it could not be asked
    answered_without_auth: bool | None  # 2xx without credentials; None: not known
    note: str | None  # why it could not be asked


@dataclass(frozen=True, slots=True)
class ExposureRecord:
    listeners: tuple[Exposure, ...]
    non_loopback_count: int


def _host_of(address: str) -> str:
    host = address.rpartition(":")[0]
    return host.strip("[]")


def is_loopback_host(host: str) -> bool:
    return host.startswith("127.") or host in ("::1", "localhost")


def _ask_url(address: str) -> str:
    """Where to send the unauthenticated question: loopback for a wildcard socket."""
    host, port = _host_of(address), address.rpartition(":")[2]
    if f"[{host}]" in WILDCARDS or host in WILDCARDS:
        return f"http://127.0.0.1:{port}/v1/models"
    return f"http://[{host}]:{port}/v1/models" if ":" in host else f"http://{host}:{port}/v1/models"


def _addresses(target: Target) -> tuple[str, ...]:
    if target.listen:
        return target.listen
    parts = urlsplit(target.base_url)
    host = f"[{parts.hostname}]" if parts.hostname and ":" in parts.hostname else parts.hostname
    return (f"{host}:{parts.port or 80}",)


def judge(host: Host, target: Target, address: str) -> Exposure:
    raw_host = _host_of(address)
    non_loopback = not is_loopback_host(raw_host)
    url = _ask_url(address)
    status = answered = note = None
    try:
        response = host.http_get(url, timeout_s=TIMEOUT_S, max_bytes=1 << 20)
        status = response.status
        if 200 <= status < 300:
            answered = True
        elif status in (401, 403):
            answered = False
        else:
            note = f"{url} answered HTTP {status}; it does not tell whether a key is needed"
    except HostReadError as exc:
        note = str(exc)
    return Exposure(target.base_url, target.pid, target.kind, address, non_loopback,
                    target.api_key_set, url, status, answered, note)


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> ExposureRecord:
    """Judge every listening socket of every engine, and every --endpoint."""
    found = targets(host, options, inputs)
    if not found:
        raise Skip(t("no engine endpoint: none found running, none named with --endpoint"))
    seen: set[str] = set()
    out = []
    for target in found:
        for address in _addresses(target):
            if address not in seen:
                seen.add(address)
                out.append(judge(host, target, address))
    return ExposureRecord(tuple(out), sum(e.non_loopback for e in out))


def summary(record: ExposureRecord) -> str:
    return t("; ").join(
        t("{address}: {answer}", address=e.address,
          answer=t("answers without a key") if e.answered_without_auth else
          t("asks for a key") if e.answered_without_auth is False else t("unknown"))
        for e in record.listeners)
