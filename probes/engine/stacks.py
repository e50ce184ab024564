"""engine.stacks: where a Python engine process spends its time, from py-spy stack samples.

Source: ``py-spy dump --pid PID --json`` taken ``SAMPLES`` times, ``INTERVAL_S`` apart (about
4 s in all, each dump pauses the process for a few milliseconds). Unit: shares of the
samples of active threads. A sample is *logging* when a frame is in the ``logging`` package
(or loguru, structlog), *tokenisation* when a frame is in a tokenizer library
(transformers' tokenization_*, tokenizers, sentencepiece, tiktoken), *waiting for the GIL*
when the thread is active but another thread of the process owns the GIL, *grammar* when a
frame is in a structured-output backend (xgrammar, outlines, llguidance, lm-format-enforcer,
vLLM's ``vllm/v1/structured_output/``, SGLang's ``sglang/srt/constrained/``): compiling a
grammar or filling its token mask.

Privilege: ptrace of the engine process: the same user with ``kernel.yama.ptrace_scope``
at 0 (or 1 for a child), root, or CAP_SYS_PTRACE in a container. Manual equivalent:
``py-spy dump --pid PID`` a few times, or ``py-spy top --pid PID``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from functools import partial

from doctor.i18n import lazy, t, translated
from doctor.seam.host import Host, HostReadError
from doctor.model import ScanOptions, Skip
from doctor.inputs import NO_INPUTS, Inputs
from probes.helpers.engine_targets import targets
from doctor.display import text

SAMPLES = 20
INTERVAL_S = 0.2
PYTHON_ENGINES = ("vllm", "sglang")  # engines written in Python; the others are C++/Rust/Go
LOGGING = ("/logging/", "loguru/", "structlog/")
TOKENISATION = ("tokenization_", "/tokenizers/", "sentencepiece", "tiktoken",
                "tokenizer_utils", "/detokenizer")
GRAMMAR = ("/xgrammar/", "/outlines/", "/outlines_core/", "/llguidance/", "/lmformatenforcer/",
           "/vllm/v1/structured_output/", "/sglang/srt/constrained/")
PTRACE_HELP = lazy("py-spy needs ptrace permission on the engine: run llm-doctor as root or as the "
                   "engine's user with `sudo sysctl kernel.yama.ptrace_scope=0`; in a container "
                   "add `--cap-add SYS_PTRACE` (docker) or `securityContext.capabilities.add: "
                   "[SYS_PTRACE]` (Kubernetes)")


@dataclass(frozen=True, slots=True)
class StackProcess:
    pid: int
    kind: str | None
    dumps: int  # dumps that succeeded
    samples: int  # active-thread samples
    logging_share: float | None
    tokenisation_share: float | None
    gil_wait_share: float | None
    top_frames: tuple[str, ...]  # the most frequent innermost frames, "function (file:line)"
    error: str | None  # why sampling failed (ptrace refused, py-spy missing)
    base_url: str | None = None  # the engine's address: with its kind, its key in findings
    grammar_share: float | None = None  # of the samples in a structured-output backend
    missing: dict[str, str] = field(default_factory=dict)  # a share -> why it is None


@dataclass(frozen=True, slots=True)
class StacksRecord:
    processes: tuple[StackProcess, ...]


def py_spy() -> str | None:
    """py-spy beside this Python (the venv's bin), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "py-spy")
    return beside if os.access(beside, os.X_OK) else shutil.which("py-spy")


def _in(frames: list[dict], needles: tuple[str, ...]) -> bool:
    return any(any(n in (f.get("filename") or "") for n in needles) for f in frames)


def classify(dumps: list[list[dict]]) -> dict:
    """Shares of active-thread samples in logging, tokenisation, grammar work and GIL waits."""
    samples = logging_n = token_n = gil_wait = grammar_n = 0
    inner: dict[str, int] = {}
    for threads in dumps:
        holder = any(t.get("owns_gil") for t in threads)
        for thread in threads:
            if not thread.get("active"):
                continue
            frames = thread.get("frames") or []
            samples += 1
            logging_n += _in(frames, LOGGING)
            token_n += _in(frames, TOKENISATION)
            grammar_n += _in(frames, GRAMMAR)
            gil_wait += holder and not thread.get("owns_gil")
            if frames:
                top = frames[0]
                key = f"{top.get('name')} ({top.get('short_filename')}:{top.get('line')})"
                inner[key] = inner.get(key, 0) + 1
    share = (lambda n: round(n / samples, 3)) if samples else (lambda n: None)
    top = tuple(k for k, _ in sorted(inner.items(), key=lambda kv: -kv[1])[:5])
    return {"samples": samples, "logging_share": share(logging_n),
            "tokenisation_share": share(token_n), "gil_wait_share": share(gil_wait),
            "grammar_share": share(grammar_n), "top_frames": top}


def _denied(stderr: str) -> bool:
    text = stderr.lower()
    return "permission denied" in text or "operation not permitted" in text or "ptrace" in text


def sample(host: Host, pid: int, samples: int = SAMPLES, interval_s: float = INTERVAL_S) -> dict:
    """Dump ``pid``'s Python stacks ``samples`` times; the counts and shares as a dict."""
    exe = py_spy()
    if exe is None:
        return {"dumps": 0, "error": lazy("py-spy is not installed (pip install py-spy)")}
    dumps, error = [], None
    for index in range(samples):
        if index:
            time.sleep(interval_s)
        try:
            out = host.run([exe, "dump", "--pid", str(pid), "--json"], timeout_s=10.0)
        except HostReadError as exc:
            error = str(exc)
            continue
        if out.rc != 0:
            error = (PTRACE_HELP if _denied(out.stderr)
                     else f"py-spy dump failed: {out.stderr.strip()[:200]}")
            if _denied(out.stderr) or "no such process" in out.stderr.lower():
                break
            continue
        try:
            dumps.append(json.loads(out.stdout))
        except ValueError:
            error = lazy("py-spy printed something that is not JSON")
    return {"dumps": len(dumps), "error": None if dumps else error, **classify(dumps)}


def _python_engines(host: Host, options: ScanOptions,
                    inputs: Inputs) -> list[tuple[int, str | None, str | None]]:
    seen: set[int] = set()
    out: list[tuple[int, str | None, str | None]] = []
    for target in targets(host, options, inputs, answering=False):  # a hung engine's stacks too
        if target.pid is None or target.pid in seen:
            continue
        try:
            comm = host.read_text(f"/proc/{target.pid}/comm").strip()
        except HostReadError:
            comm = ""
        if target.kind in PYTHON_ENGINES or comm.startswith("python"):
            seen.add(target.pid)
            out.append((target.pid, target.kind, target.base_url))
    return out


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> StacksRecord:
    """Sample each Python engine process's stacks for about four seconds."""
    found = _python_engines(host, options, inputs)
    if not found:
        raise Skip(t("no Python engine process on this host (vLLM, SGLang); llama.cpp, TGI's "
                     "router and Ollama are not Python"))
    out = []
    for pid, kind, base_url in found:
        data = host.measure(f"engine.stacks {pid}", partial(sample, host, pid))
        out.append(StackProcess(pid=pid, kind=kind, dumps=data.get("dumps", 0),
                                samples=data.get("samples", 0),
                                logging_share=data.get("logging_share"),
                                tokenisation_share=data.get("tokenisation_share"),
                                gil_wait_share=data.get("gil_wait_share"),
                                top_frames=tuple(data.get("top_frames", ())),
                                error=data.get("error"), base_url=base_url,
                                grammar_share=data.get("grammar_share"),
                                missing=_missing(data)))
    return StacksRecord(tuple(out))


SHARES = ("logging_share", "tokenisation_share", "gil_wait_share", "grammar_share")


def _missing(data: dict) -> dict[str, str]:
    """Why a share the rules judge is None: sampling failed (its error), or no sample."""
    why = data.get("error") or lazy("no engine thread was seen running while it sampled: "
                                    "the engine was idle; sample it under load")
    return {name: why for name in SHARES if data.get(name) is None}


def summary(record: StacksRecord) -> str:
    # the error is the measurement's (recorded in English): its fixed phrases said in words
    return t("; ").join(
        t("pid {pid}: {error}", pid=p.pid, error=translated(p.error)) if p.error else
        t("pid {pid}: logging {logging}, tokenisation {tokenisation}, GIL wait {gil} of "
          "{samples} samples", pid=p.pid, logging=text(p.logging_share),
          tokenisation=text(p.tokenisation_share), gil=text(p.gil_wait_share), samples=p.samples)
        for p in record.processes)



