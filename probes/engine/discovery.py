"""engine.discovery: serving engines on this host (and at --endpoint URLs), with their config.

Sources: the process table (``/proc/<pid>/cmdline`` and the listening sockets matched from
``/proc/net/tcp{,6}``, through probes.helpers.processes), then the engine's own pages over HTTP:
``/metrics`` (``vllm:cache_config_info``), ``/v1/models``, SGLang ``/server_info``, TGI
``/info``, llama.cpp ``/props``, Ollama ``/api/ps``, and vLLM's ``/version`` (the engine's
version, probes/helpers/engine_version.py; the others state it on the pages above). Ollama is its ``ollama serve`` process
(the ``ollama runner`` children it starts, one per loaded model, serve none of its API and are
no engine of their own) at its socket, else at its ``OLLAMA_HOST`` (``/proc/<pid>/environ``,
that variable only), else at port 11434. Every request is bounded (2 s, 1 MiB)
and an endpoint that does not answer is asked nothing more. No privilege is needed, but
another user's sockets are only matched to its process when run as that user or root.
An API key is reported as set or not, never its value. Each engine process's whole argv is
kept (``argv``: ``/proc/<pid>/cmdline``, secrets masked by doctor.redact) for ``llm-doctor
diff``, which compares every flag. A model path an engine reports is
kept only for an engine on this host (a process here, or a loopback endpoint): other
probes read files under it, and an engine elsewhere names paths on its own machine.
Manual equivalent:
``ss -ltnp; curl -s :8000/v1/models; curl -s :8000/metrics | grep cache_config_info``.

``discover(host, options)`` is memoized per scan: the probes that read it name engine.discovery
in their registry ``needs``, so it has run, under its own timeout, before they start.

These reads are also each engine's reachability (``reachability``): what was asked, what
came back (refused, timed out, an HTTP status, an answer in no engine's shape). It is
measured here once, and the active probes (probes/helpers/engine_targets.py) ask nothing of
an engine that gave no HTTP answer: a hung engine costs the scan one timeout, not one per
probe. Manual equivalent: ``curl -sS -m 3 -w '%{http_code}\n' :8000/metrics``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from doctor.endpoints import EndpointError
from doctor.i18n import t
from doctor.endpoints import parse as parse_endpoint
from doctor.seam.host import Host, HostReadError, Reason, detail_text
from doctor.model import ScanOptions, Skip
from doctor.inputs import NO_INPUTS, Inputs
from probes.helpers.promtext import Page, PageError, parse
from doctor.redact import MASK, redact_cmdline, safe_display
from doctor.values import field, page_json, text
from probes.helpers import engine_flags, engine_startup, engine_version
from probes.helpers.engine_flags import Engine
from probes.helpers.engine_names import kind_of_page
from probes.helpers.process_env import env_value
from probes.helpers.processes import engine_processes

PAGE_TIMEOUT_S = 2.0  # JSON pages
PAGE_MAX_BYTES = 1 << 20
METRICS_TIMEOUT_S = 3.0  # /metrics: engine.metrics takes this read as its first scrape
METRICS_MAX_BYTES = 8 << 20  # real pages are 50-200 KB; 8 MiB leaves room for many LoRAs
NO_ANSWER = ("refused", "timeout", "failed")  # outcomes where no HTTP answer came back
# outcomes of an engine getting ready: "loading" (a 5xx that says so: llama.cpp's 503
# "Loading model"), "starting" (a process of this host that holds no listening socket yet
# refused: vLLM and TGI bind their port once the weights are in). Asked nothing more, like
# NO_ANSWER, and judged by engine-loading against how long a load may take, never as down.
GETTING_READY = ("loading", "starting")
# Engines whose HTTP server starts after the model is loaded: vLLM's API server once its
# engine core is up, SGLang's launch_server after its scheduler, TGI's router after the
# shards. llama.cpp and Ollama listen at once (llama.cpp answers 503 while it loads), so a
# refused port of theirs is no start.
BINDS_AFTER_LOAD = ("vllm", "sglang", "tgi")
OLLAMA_DEFAULT_PORT = 11434  # `ollama serve` without OLLAMA_HOST
SNIPPET_CHARS = 60  # of a 5xx answer's message ("Loading model"), for people


@dataclass(frozen=True, slots=True)
class Reachability:
    """Whether one engine endpoint answered discovery's reads as an engine (once a scan)."""

    endpoint: str  # the base URL asked, without credentials
    pid: int | None  # the engine process; None for an --endpoint not found in the table
    kind: str  # as discovery knows it: from the process table or its pages; "unknown"
    # where the URL came from: "named" (--endpoint, [scan] endpoints), "listening" (the
    # process's own socket), "flagged" (no socket of it seen: its --port), "default" (no
    # socket, no flag: the engine's default port, a guess, as for a worker process)
    basis: str
    # "engine" (a page named an engine), "key-required" (401/403: it is up), "refused",
    # "timeout", "failed" (no HTTP answer), "http-error" (5xx), "not-engine" (answered,
    # in no engine's shape), "not-recorded" (a recorded host without the engine's pages)
    outcome: str
    reachable: bool | None  # engine or key-required; None: not recorded, so not known
    answer: str  # what came back, for people: "connection refused", "timed out after 3 s"
    tried: tuple[str, ...]  # each page asked and its answer: "/metrics: HTTP 404"
    # read only for an engine getting ready (GETTING_READY): seconds its process has been up
    # (/proc/<pid>/stat), and the bytes of the weights it loads (its model path's listing)
    uptime_s: float | None = None
    model_bytes: int | None = None
    model_path: str | None = None


MAX_ARGS = 512  # of one engine's argv kept
MAX_ARG_CHARS = 1024  # of one argument kept


@dataclass(frozen=True, slots=True)
class EngineArgv:
    """An engine process's whole command line, for ``llm-doctor diff`` to compare every flag."""

    pid: int
    argv: tuple[str, ...]  # /proc/<pid>/cmdline split at its NULs, secrets as *** (doctor.redact)
    reason: str | None  # why it was not read; None when it was


@dataclass(frozen=True, slots=True)
class DiscoveryRecord:
    engines: tuple[Engine, ...]
    engine_count: int
    reachability: tuple[Reachability, ...] = ()  # one per engine with a URL, in engines' order
    argv: tuple[EngineArgv, ...] = ()  # one per engine with a pid, in engines' order


def discover(host: Host, options: ScanOptions) -> tuple[Engine, ...]:
    """Every engine found, once per scan (memoized on the host)."""
    return host.memo("engine.discovery", lambda: _discover(host, options))


def first_pages(host: Host) -> dict[str, tuple[Page | HostReadError | PageError, float]]:
    """The /metrics pages discovery read (or how reading failed), by base URL, with
    time.monotonic() of the read: engine.metrics takes them as its first scrape, so an
    engine is asked for its page twice and a dead endpoint is not asked again."""
    return host.memo("engine.discovery.pages", dict)


def reachability(host: Host, options: ScanOptions) -> dict[str, Reachability]:
    """Each engine's reachability by base URL, as discovery measured it (memoized)."""
    discover(host, options)
    return _reached(host)


def _reached(host: Host) -> dict[str, Reachability]:
    return host.memo("engine.discovery.reachability", dict)


def answered(host: Host, options: ScanOptions, base_url: str) -> Reachability | None:
    """The engine at ``base_url``'s reachability when it gave no HTTP answer (refused,
    hung, broken before a status line): the active probes ask it nothing more."""
    found = reachability(host, options).get(base_url)
    return found if found is not None and found.outcome in NO_ANSWER + GETTING_READY else None


def credentials(host: Host, options: ScanOptions) -> dict[str, dict[str, str]]:
    """Headers per base URL for --endpoint URLs that carry a key (http://:KEY@host:port)."""
    return host.memo("engine.credentials", lambda: _credentials(options))


def _discover(host: Host, options: ScanOptions) -> tuple[Engine, ...]:
    engines: dict[str, Engine] = {}
    basis: dict[str, str] = {}
    unbound: list[Engine] = []
    for proc in engine_processes(host):
        if proc.engine == "ollama" and _ollama_runner(proc.cmdline):
            continue  # the server's child for one loaded model: engine.ollama counts them
        engine = engine_flags.from_process(proc)
        from_env = None  # Ollama takes its address from OLLAMA_HOST, not a flag
        if engine.kind == "ollama" and not engine.listen and engine.pid is not None:
            from_env = ollama_base_url(host, engine.pid)
            engine = replace(engine, base_url=from_env or engine.base_url)
        if engine.base_url is None:
            unbound.append(engine)
        elif engine.base_url not in engines or _richer(engine, engines[engine.base_url]):
            # a worker (VLLM::EngineCore, sglang::scheduler) guessed at the server's port
            # yields to the process that holds the socket and carries the flags
            engines[engine.base_url] = engine
            basis[engine.base_url] = "flagged" if from_env else _basis(engine, proc.cmdline)
    auth = credentials(host, options)
    for url in options_endpoints(options):
        try:
            base = public_base(url)
        except EndpointError as exc:  # the command line refuses these; other callers may not
            unbound.append(replace(engine_flags.blank(None), error=str(exc)))
            continue
        known = engines.get(base) or _same_port(engines, base)
        if known is not None:
            engines.pop(known.base_url or "")
            engines[base] = replace(known, base_url=base, source="process+endpoint")
        else:
            engines[base] = engine_flags.blank(base)
        basis[base] = "named"
    found = [_ask_engine(host, e, auth.get(e.base_url or "", {})) for e in engines.values()]
    reached = _reached(host)
    for e in found:  # the kind its pages named, and where its URL came from
        base = e.base_url or ""
        if base in reached:
            reached[base] = _getting_ready(host, e, replace(
                reached[base], kind=e.kind, basis=basis.get(base, "default")))
    return tuple(found + unbound)


def _getting_ready(host: Host, engine: Engine, found: Reachability) -> Reachability:
    """A refused engine process of this host with no listening socket, of a kind that
    binds its port only once the weights are in, is starting; one that is loading or
    starting gets its uptime and the size of its weights, for engine-loading to judge."""
    if found.outcome == "refused" and engine.pid is not None and not engine.listen \
            and found.basis == "flagged" and engine.kind in BINDS_AFTER_LOAD:
        found = replace(found, outcome="starting", answer="not listening yet")
    if found.outcome not in GETTING_READY:
        return found
    return replace(found, uptime_s=engine_startup.uptime_s(host, engine.pid),
                   model_bytes=engine_startup.model_bytes(host, engine.model_path),
                   model_path=engine.model_path)


def _ollama_runner(cmdline: str) -> bool:
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


def ollama_ps_pages(host: Host) -> dict[str, tuple[object, float]]:
    """The /api/ps answers discovery read (parsed JSON), by base URL, with time.monotonic()
    of the read: engine.ollama takes them as its first read of the models loaded."""
    return host.memo("engine.discovery.ollama_ps", dict)


def _basis(engine: Engine, cmdline: str) -> str:
    """How a process's URL was found: its own socket, its port flag, or only a guess."""
    if engine.listen:
        return "listening"
    names = engine_flags.FLAGS["port"].get(engine.kind, ())
    return "flagged" if names and engine_flags.flag(cmdline.split(), *names) else "default"


def _richer(new: Engine, old: Engine) -> bool:
    def score(e: Engine) -> tuple[bool, int]:
        return bool(e.listen), sum(v is not None for v in engine_flags.as_dict(e).values())
    return score(new) > score(old)


def options_endpoints(options: ScanOptions) -> tuple[str, ...]:
    return tuple(getattr(options, "endpoints", ()) or ())


def _same_port(engines: dict[str, Engine], base: str) -> Engine | None:
    """An --endpoint at 127.0.0.1:P is the local process listening on 0.0.0.0:P."""
    parts = urlsplit(base)
    if parts.hostname not in ("127.0.0.1", "localhost", "::1"):
        return None
    for engine in engines.values():
        if engine.source == "process" and engine.base_url and not parts.path.strip("/") \
                and urlsplit(engine.base_url).port == parts.port:
            return engine
    return None


def public_base(url: str) -> str:
    """scheme://host:port of an endpoint, without credentials or a known page path
    (doctor/endpoints.py); EndpointError when ``url`` is not an endpoint."""
    return parse_endpoint(url).base_url


def _credentials(options: ScanOptions) -> dict[str, dict[str, str]]:
    out = {}
    for url in options_endpoints(options):
        try:
            named = parse_endpoint(url)
        except EndpointError:
            continue
        if named.key:
            out[named.base_url] = named.headers
    return out


def _get(host: Host, url: str, headers: dict[str, str], metrics: bool = False):
    return host.http_get(url, timeout_s=METRICS_TIMEOUT_S if metrics else PAGE_TIMEOUT_S,
                         max_bytes=METRICS_MAX_BYTES if metrics else PAGE_MAX_BYTES,
                         headers=headers or None)


class _Tries:
    """What discovery asked of one endpoint and what came back: its reachability."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.tried: list[str] = []
        self.statuses: list[int] = []
        self.errors: list[HostReadError] = []
        self.server_error: str | None = None  # the first 5xx, with its message
        self.loading = False  # a 5xx whose message says the engine is getting ready
        self.identified = False  # a page named an engine
        self.key_required = False

    def error(self, path: str, exc: HostReadError) -> None:
        self.errors.append(exc)
        self.tried.append(f"{path}: {_no_answer(exc)}")

    def status(self, path: str, answer, note: str = "") -> None:
        self.statuses.append(answer.status)
        self.tried.append(f"{path}: HTTP {answer.status}" + (f", {note}" if note else ""))
        if answer.status >= 500 and self.server_error is None:
            said = _message(answer.body)
            self.server_error = f"HTTP {answer.status}" + (f" ({said})" if said else "")
            self.loading = engine_startup.says_loading(said)
        if answer.status in (401, 403):
            self.key_required = True

    def result(self, engine: Engine) -> Reachability:
        outcome, answer = self._judged()
        reachable = None if outcome == "not-recorded" else outcome in ("engine", "key-required")
        return Reachability(self.base, engine.pid, engine.kind, "default", outcome, reachable,
                            answer, tuple(self.tried))

    def _judged(self) -> tuple[str, str]:
        if self.identified:
            return "engine", "answered as an engine"
        if self.key_required:
            return "key-required", "asks for an API key"
        if self.errors and all("not recorded" in e.detail for e in self.errors) \
                and not self.statuses:
            return "not-recorded", "the recorded host holds none of its pages"
        if self.server_error:
            return ("loading" if self.loading else "http-error"), self.server_error
        timeout = next((e for e in self.errors if e.reason is Reason.TIMEOUT), None)
        if timeout is not None:
            return "timeout", _no_answer(timeout)
        if not self.statuses and not self.errors:  # the read ended before its first page
            return "failed", "nothing could be read"
        if not self.statuses:
            first = self.errors[0]
            return ("refused" if "connection refused" in first.detail else "failed",
                    _no_answer(first))
        shown = ", ".join(str(s) for s in sorted(set(self.statuses)))
        return "not-engine", f"answered HTTP {shown}, but as no serving engine"


def _no_answer(exc: HostReadError) -> str:
    """A failed read in the words of the finding: "timed out after 3 s", "connection refused"."""
    if exc.reason is Reason.TIMEOUT:
        bound = METRICS_TIMEOUT_S if exc.path.endswith("/metrics") else PAGE_TIMEOUT_S
        detail = exc.detail or ""  # "no answer in 3 s", "body not complete in 3 s"
        return f"timed out after {bound:g} s" + (
            f" ({safe_display(detail)})" if detail and not detail.startswith("no answer") else "")
    return safe_display(exc.detail or exc.reason.value)


def _message(body: str) -> str:
    """What a 5xx answer says, in a few words: llama.cpp's ``{"error": {"message": "Loading
    model"}}``, FastAPI's ``{"detail": ...}``, else its first line of text."""
    try:
        data = page_json(body)
    except ValueError:
        data = None
    said = (text(field(data, "error", "message")) or text(field(data, "error"))
            or text(field(data, "message")) or text(field(data, "detail")))
    if said is None and data is None:
        said = body.strip().splitlines()[0] if body.strip() else None
    if not said or said.lstrip().startswith("<"):  # an HTML error page says nothing short
        return ""
    said = " ".join(said.split())
    return safe_display(said[:SNIPPET_CHARS] + ("..." if len(said) > SNIPPET_CHARS else ""))


def _ask_engine(host: Host, engine: Engine, headers: dict[str, str]) -> Engine:
    """Recognise the engine from what it serves and read its live configuration."""
    base = engine.base_url or ""
    tries = _Tries(base)
    try:
        return _read_pages(host, engine, headers, tries)
    finally:
        _reached(host)[base] = tries.result(engine)


def _read_pages(host: Host, engine: Engine, headers: dict[str, str], tries: _Tries) -> Engine:
    base = engine.base_url or ""
    try:
        metrics = _get(host, f"{base}/metrics", headers, metrics=True)
    except HostReadError as exc:
        first_pages(host)[base] = (exc, time.monotonic())
        tries.error("/metrics", exc)
        return replace(engine, error=str(exc))
    kind, found = engine.kind, dict(engine_flags.as_dict(engine))
    sources = list(engine.config_from)
    error = None
    if metrics.status == 200:
        try:
            page = parse(metrics.body, f"{base}/metrics")
        except PageError as exc:
            # not Prometheus text: the pages below still tell an engine from another server
            first_pages(host)[base] = (exc, time.monotonic())
            tries.status("/metrics", metrics, "not Prometheus text")
            error = str(exc)
        else:
            named = kind_of_page(page.names())
            tries.status("/metrics", metrics, f"{named} metrics" if named
                         else "a Prometheus page with no engine's metrics")
            tries.identified = named is not None
            kind = named or kind
            first_pages(host)[base] = (page, time.monotonic())
            info = page.first_labels("vllm:cache_config_info")
            if info:
                engine_flags.merge(found, engine_flags.from_cache_config(info))
                sources.append("/metrics")
    else:
        tries.status("/metrics", metrics)
    asked: dict[str, object] = {}  # path → its JSON, or what came back instead (the version's)
    hung = False
    for path, reader in engine_flags.PAGES.get(kind, engine_flags.PROBE_ORDER):
        try:
            answer = _get(host, f"{base}{path}", headers)
        except HostReadError as exc:
            tries.error(path, exc)
            asked[path] = engine_version.Unread(exc.reason.value)
            if exc.reason is Reason.TIMEOUT:
                hung = True
                break  # an endpoint that stops answering is asked nothing more
            continue
        if answer.status in (401, 403):
            tries.status(path, answer)
            asked[path] = engine_version.Unread(f"HTTP {answer.status}")
            found["api_key_set"] = True
            continue
        if answer.status != 200:
            tries.status(path, answer)
            asked[path] = engine_version.Unread(f"HTTP {answer.status}")
            continue
        try:
            data = page_json(answer.body)
        except ValueError:
            tries.status(path, answer, "not JSON")
            asked[path] = engine_version.Unread("not JSON")
            continue
        asked[path] = data
        if path == "/api/ps":
            ollama_ps_pages(host)[base] = (data, time.monotonic())
        figures = reader(data)
        tries.status(path, answer, "an engine's page" if figures else "no engine's fields")
        if figures:
            tries.identified = True
            kind = figures.pop("kind", None) or kind
            engine_flags.merge(found, figures)
            sources.append(path)
            if engine.kind == "unknown" and kind != "unknown":
                break
    if engine.pid is None and not _on_this_host(base):
        # an engine elsewhere names a path on its own machine: nothing here to read there
        found["model_path"] = None
    # not part of reachability (tries): a page that states a version, not one that finds an engine
    version, why = engine_version.read(
        kind, asked, None if hung else lambda path: _get(host, f"{base}{path}", headers))
    return replace(engine, kind=kind, config_from=tuple(dict.fromkeys(sources)), error=error,
                   version=version, version_reason=why or None, **found)


def _on_this_host(base_url: str) -> bool:
    host = urlsplit(base_url).hostname or ""
    return host == "localhost" or host == "::1" or host.startswith("127.")


def engine_argv(host: Host, pid: int) -> EngineArgv:
    """``/proc/<pid>/cmdline`` as its arguments, masked where they hold a secret (an
    engine's command line is kept whole, as a capture keeps it; the NULs between arguments
    are kept through the masking, so an argument with spaces stays one)."""
    try:
        raw = host.read_text(f"/proc/{pid}/cmdline")
    except HostReadError as exc:
        return EngineArgv(pid, (), str(getattr(exc.reason, "value", exc.reason)))
    args = redact_cmdline(raw).rstrip("\0").split("\0")
    return EngineArgv(pid, tuple(a[:MAX_ARG_CHARS] for a in args[:MAX_ARGS] if a), None)


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> DiscoveryRecord:
    engines = discover(host, options)
    if not engines:
        raise Skip(t("no serving engine in the process table and no --endpoint given"))
    reached = reachability(host, options)
    pids = dict.fromkeys(e.pid for e in engines if e.pid is not None)
    return DiscoveryRecord(engines, len(engines),
                           tuple(reached[e.base_url] for e in engines if e.base_url in reached),
                           tuple(engine_argv(host, pid) for pid in pids))


def summary(record: DiscoveryRecord) -> str:
    down = {r.endpoint: r.answer for r in record.reachability
            if r.reachable is False and r.outcome not in GETTING_READY}
    ready = {r.endpoint: r for r in record.reachability if r.outcome in GETTING_READY}
    return t("; ").join(_one(e, down, ready) for e in record.engines)


def _one(e: Engine, down: dict[str, str], ready: dict[str, Reachability]) -> str:
    where = e.base_url or t("no socket")
    line = (t("{kind} at {url} (pid {pid})", kind=e.kind, url=where, pid=e.pid) if e.pid
            else t("{kind} at {url}", kind=e.kind, url=where))
    if e.base_url in down:
        line += t(": unreachable, {answer}", answer=answer_text(down[e.base_url]))
    elif e.base_url in ready:
        up = ready[e.base_url].uptime_s
        line += (t(": starting, loading its model ({answer}), up {seconds} s",
                   answer=answer_text(ready[e.base_url].answer), seconds=f"{up:.0f}")
                 if up is not None else
                 t(": starting, loading its model ({answer})",
                   answer=answer_text(ready[e.base_url].answer)))
    return line


def label_text(label: str) -> str:
    """An engine's label as engine.capacity, engine.offload and engine.quant keep it in
    their records ("vllm at http://127.0.0.1:8000 pid 4410") for people."""
    kind, sep, rest = label.partition(" at ")
    if not sep:
        return label
    url, _, pid = rest.partition(" pid ")
    return (t("{kind} at {url} pid {pid}", kind=kind, url=url, pid=pid) if pid
            else t("{kind} at {url}", kind=kind, url=url))


def answer_text(answer: str) -> str:
    """A reachability's ``answer`` (kept in English in the record) for people, in the
    current language where it is one of discovery's own phrases."""
    fixed = {
        "answered as an engine": t("answered as an engine"),
        "asks for an API key": t("asks for an API key"),
        "the recorded host holds none of its pages": t("the recorded host holds none of its pages"),
        "nothing could be read": t("nothing could be read"),
        "connection refused": t("connection refused"),
        "not listening yet": t("not listening yet"),
    }
    if answer in fixed:
        return fixed[answer]
    head, sep, rest = answer.partition(" s")
    if head.startswith("timed out after ") and sep:
        said = t("timed out after {seconds} s", seconds=head[len("timed out after "):])
        inner = rest.strip()
        if inner.startswith("(") and inner.endswith(")"):
            return t("{answer} ({detail})", answer=said, detail=detail_text(inner[1:-1]))
        return said + rest
    if answer.startswith("answered HTTP ") and answer.endswith(", but as no serving engine"):
        return t("answered HTTP {statuses}, but as no serving engine",
                 statuses=answer[len("answered HTTP "):-len(", but as no serving engine")])
    return detail_text(answer)  # a read's own detail ("connection refused")
