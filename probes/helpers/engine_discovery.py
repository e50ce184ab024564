"""Finding the serving engines of this host (and at --endpoint URLs): engine.discovery's work.

Sources: the process table (``/proc/<pid>/cmdline`` and the listening sockets matched from
``/proc/net/tcp{,6}``, through probes.helpers.processes), Ollama's address
(probes/helpers/ollama_address.py), the endpoints the user named
(probes/helpers/engine_named.py), then each engine's own pages
(probes/helpers/engine_pages.py), which are also its reachability
(probes/helpers/engine_reach.py).

In a scan, engine.discovery runs this once and the runner hands its record to the probes
that name it in ``needs`` (``found(host, options, inputs)`` reads it from their inputs); the
daemon hands it over the same way. A probe run without it (on its own, or where
engine.discovery was not chosen) finds the engines here, once; the pages discovery reads are
kept per scan on the host (probes/helpers/engine_pages.py), so an engine is not asked twice.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from doctor.endpoints import Endpoint
from doctor.inputs import Inputs
from doctor.model import ScanOptions
from doctor.seam.host import Host
from probes.helpers import engine_flags, engine_startup
from probes.helpers.engine_argv import EngineArgv, engine_argv
from probes.helpers.engine_flags import Engine
from probes.helpers.engine_named import credentials, named
from probes.helpers.engine_pages import ask_engine
from probes.helpers.engine_reach import GETTING_READY, Reachability, unanswered
from probes.helpers.ollama_address import ollama_base_url, ollama_runner
from probes.helpers.processes import engine_processes

NAME = "engine.discovery"  # the probe whose record this is, in ProbeSpec.needs
# Engines whose HTTP server starts after the model is loaded: vLLM's API server once its
# engine core is up, SGLang's launch_server after its scheduler, TGI's router after the
# shards. llama.cpp and Ollama listen at once (llama.cpp answers 503 while it loads), so a
# refused port of theirs is no start.
BINDS_AFTER_LOAD = ("vllm", "sglang", "tgi")


@dataclass(frozen=True, slots=True)
class DiscoveryRecord:
    engines: tuple[Engine, ...]
    engine_count: int
    reachability: tuple[Reachability, ...] = ()  # one per engine with a URL, in engines' order
    argv: tuple[EngineArgv, ...] = ()  # one per engine with a pid, in engines' order


@dataclass(frozen=True, slots=True)
class Found:
    """What discovery found: the engines, and each URL's reachability by base URL."""

    engines: tuple[Engine, ...]
    reached: dict[str, Reachability]

    def unanswered(self, base_url: str) -> Reachability | None:
        """The engine at ``base_url``'s reachability when it gave no HTTP answer (refused,
        hung, broken before a status line) or is getting ready: ask it nothing more."""
        return unanswered(self.reached.get(base_url))


def found(host: Host, options: ScanOptions, inputs: Inputs) -> Found:
    """The engines engine.discovery handed over in ``inputs``, else found here."""
    record = inputs.get(NAME, DiscoveryRecord)
    if record is not None:
        return Found(record.engines, {r.endpoint: r for r in record.reachability})
    return discover_all(host, options)


def record_of(host: Host, options: ScanOptions) -> DiscoveryRecord:
    """engine.discovery's record: every engine found, its reachability and its argv."""
    found = discover_all(host, options)
    pids = dict.fromkeys(e.pid for e in found.engines if e.pid is not None)
    return DiscoveryRecord(found.engines, len(found.engines),
                           tuple(found.reached[e.base_url] for e in found.engines
                                 if e.base_url in found.reached),
                           tuple(engine_argv(host, pid) for pid in pids))


def with_discovery(host: Host, options: ScanOptions, inputs: Inputs) -> Inputs:
    """``inputs`` holding engine.discovery's record: the one handed over, else found here
    once; a probe run without it calls this at its start, so that its reads after (its
    targets, the scrape) do not find the engines again."""
    if inputs.get(NAME, DiscoveryRecord) is not None:
        return inputs
    return inputs.adding(NAME, record_of(host, options))


def discover_all(host: Host, options: ScanOptions) -> Found:
    """Every engine found and its reachability (engine.discovery's work; a probe that needs
    it reads its record through ``found``)."""
    return _discover(host, options)


def discover(host: Host, options: ScanOptions) -> tuple[Engine, ...]:
    """Every engine found."""
    return discover_all(host, options).engines


def _discover(host: Host, options: ScanOptions) -> Found:
    engines: dict[str, Engine] = {}
    basis: dict[str, str] = {}
    unbound: list[Engine] = []
    for proc in engine_processes(host):
        if proc.engine == "ollama" and ollama_runner(proc.cmdline):
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
    auth = credentials(options)
    for endpoint in named(options):
        if not isinstance(endpoint, Endpoint):  # the command line refuses these; others may not
            unbound.append(replace(engine_flags.blank(None), error=str(endpoint)))
            continue
        base = endpoint.base_url
        known = engines.get(base) or _same_port(engines, base)
        if known is not None:
            engines.pop(known.base_url or "")
            engines[base] = replace(known, base_url=base, source="process+endpoint")
        else:
            engines[base] = engine_flags.blank(base)
        basis[base] = "named"
    reached: dict[str, Reachability] = {}
    found_ = [ask_engine(host, e, auth.get(e.base_url or "", {}), reached)
              for e in engines.values()]
    for e in found_:  # the kind its pages named, and where its URL came from
        base = e.base_url or ""
        if base in reached:
            reached[base] = _getting_ready(host, e, replace(
                reached[base], kind=e.kind, basis=basis.get(base, "default")))
    return Found(tuple(found_ + unbound), reached)


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
