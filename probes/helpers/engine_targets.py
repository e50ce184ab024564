"""The engine endpoints the active engine probes talk to (warm-up, output, load state, exposure).

Source: engine discovery (engine.discovery's record handed over in the probe's inputs, else
probes/helpers/engine_discovery.py: engine processes from the process table and their
listening sockets, plus every ``--endpoint URL``). An engine that gave discovery no HTTP answer (refused, hung, broken before a status
line) is no target: the engine-unreachable finding says so once, and a hung engine costs
the scan one timeout instead of one per probe. Manual equivalent: ``ss -ltnp``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.seam.host import Host
from doctor.model import ScanOptions, Skip
from probes.helpers.engine_discovery import found as found_engines
from probes.helpers.engine_named import credentials
from probes.helpers.engine_named import named_bases as named_bases
from probes.helpers.engine_reach import answer_text

if TYPE_CHECKING:
    from doctor.workload.loadgen import RequestTarget

WILDCARDS = ("0.0.0.0", "[::]", "::", "*")


@dataclass(frozen=True, slots=True)
class Target:
    base_url: str  # always a loopback URL when the engine listens on this host
    pid: int | None
    kind: str | None  # vllm, sglang, tgi, llama.cpp, ollama, ...
    model: str | None
    api_key_set: bool | None
    listen: tuple[str, ...]  # the process's listening sockets; () for a named endpoint
    # from --endpoint http://:KEY@...: sent with requests, never shown or recorded
    api_key: str | None = field(default=None, repr=False)

    def endpoint(self) -> "RequestTarget":
        from doctor.workload.loadgen import RequestTarget

        return RequestTarget(self.base_url, model=self.model, api_key=self.api_key)

    @property
    def serves_completions(self) -> bool:
        """Triton and Ollama's native API do not speak /v1/completions streaming."""
        return self.kind not in ("triton", "tensorrt-llm")


def targets(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS,
            answering: bool = True) -> tuple[Target, ...]:
    """Every engine that has an HTTP endpoint and answered discovery, as discovery found it
    (memoized per scan); Skip says why when there were engines but none answered.
    ``answering=False``: those that did not answer too, for a probe that reads the process,
    not its HTTP API (py-spy's stacks of a hung engine say where it hangs)."""
    keys = {url: headers.get("Authorization", "").removeprefix("Bearer ") or None
            for url, headers in credentials(options).items()}
    discovered = found_engines(host, options, inputs)
    found, silent = [], []
    for e in discovered.engines:
        if not e.base_url:
            continue
        down = discovered.unanswered(e.base_url) if answering else None
        if down is not None:
            silent.append(t("{url} ({answer})", url=e.base_url, answer=answer_text(down.answer)))
            continue
        found.append(Target(e.base_url, e.pid, e.kind, e.model, e.api_key_set,
                            tuple(e.listen), keys.get(e.base_url)))
    if silent and not found:
        raise Skip(t("no engine answered: {engines} (engine.discovery's reads; see "
                     "engine-unreachable)", engines=t("; ").join(silent)))
    return tuple(found)


def active_targets(host: Host, options: ScanOptions,
                   inputs: Inputs = NO_INPUTS) -> list[Target]:
    """The endpoints an active probe may send completions to; Skip says why there are none.

    An engine that asks for an API key is left out unless the key was given
    (``--endpoint http://:KEY@HOST:PORT``): its answers would be 401s, not measurements.
    """
    found = [t for t in targets(host, options, inputs) if t.serves_completions]
    if not found:
        raise Skip(t("no engine endpoint: none found running, none named with --endpoint"))
    named = named_bases(options)
    if named and options.requests_to != "all":
        # issue 28: requests go where the user pointed; an engine discovered beside a named
        # one is read (its pages), never loaded, unless --requests-to all
        pointed = [t for t in found if t.base_url in named]
        if not pointed:
            raise Skip(t("no engine named with --endpoint takes completions here; the engines "
                         "discovered ({urls}) are only read (--requests-to all sends to them)",
                         urls=", ".join(t.base_url for t in found)))
        found = pointed
    usable = [t for t in found if t.api_key or not t.api_key_set]
    if not usable:
        raise Skip(t("{url} asks for an API key: give it as --endpoint http://:KEY@HOST:PORT "
                     "to measure it", url=found[0].base_url))
    return usable
