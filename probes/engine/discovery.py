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

The work is in probes/helpers (engine_discovery: the composition; engine_pages: reading
an engine's pages; engine_reach: its reachability; engine_named: the --endpoint URLs;
ollama_address; engine_argv); this module makes the record and its line for people. The
probes that read it name engine.discovery in their registry ``needs`` and are handed its
record by the runner.

These reads are also each engine's reachability (``reachability``): what was asked, what
came back (refused, timed out, an HTTP status, an answer in no engine's shape). It is
measured here once, and the active probes (probes/helpers/engine_targets.py) ask nothing of
an engine that gave no HTTP answer: a hung engine costs the scan one timeout, not one per
probe. Manual equivalent: ``curl -sS -m 3 -w '%{http_code}\n' :8000/metrics``.
"""


from __future__ import annotations

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host
from probes.helpers.engine_argv import EngineArgv as EngineArgv
from probes.helpers.engine_discovery import DiscoveryRecord, discover_all, record_of
from probes.helpers.engine_discovery import discover as discover  # for tests and callers
from probes.helpers.engine_flags import Engine
from probes.helpers.engine_reach import GETTING_READY, Reachability, answer_text
from probes.helpers.engine_reach import label_text as label_text
from probes.helpers.ollama_address import ollama_base_url as ollama_base_url


def reachability(host: Host, options: ScanOptions) -> dict[str, Reachability]:
    """Each engine's reachability by base URL, as discovery measures it."""
    return discover_all(host, options).reached


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> DiscoveryRecord:
    record = record_of(host, options)
    if not record.engines:
        raise Skip(t("no serving engine in the process table and no --endpoint given"))
    return record


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
