"""HCCL's own words: the error lines Huawei's collective library (and torch_npu's watchdog
over it) writes when a link cannot be set up, a collective times out or an NPU's network port
is down, read from text as hostile as any log.

The lines, as people pasted them from vllm-ascend, lmdeploy and plog files (verbatim in
tests/fixtures/ascend/sources/hccl-log-lines.txt, each under its issue):

* ``EJ0002: … The network port is down.`` and ``EI0009 … transport init error. Reason: The
  network port is down``: an NPU's RoCE port is down (kind ``port-down``);
* ``EI0006: … Getting socket times out``, ``Get_Socket_Timeout(EI0006)``,
  ``Communication_Error_Get_Socket(EI0006)`` and plog's ``wait socket establish timeout, role[1]
  rank[12] timeout[120]``: the links between ranks were not set up within
  HCCL_CONNECT_TIMEOUT (``connect-timeout``);
* ``EI0002: … The wait execution of the Notify register times out`` and ``hccl fftsplus task
  timeout occurred during task execution, … timeout:1836``: a collective did not finish
  within HCCL_EXEC_TIMEOUT (``exec-timeout``);
* ``Watchdog caught collective operation timeout: WorkHCCL(… Timeout(ms)=3600000)``:
  torch_npu's process-group timeout, not HCCL's (``watchdog-timeout``; kept, judged by none).

HCCL's own text after EI0006 and EI0002 says what to do: look for an earlier error on another
rank first, and raise the variable only when every rank reports the timeout. Nothing here
reads the host: ``parse(lines)`` is a function of text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_LINE_CHARS = 4096  # of one line parsed; HCCL's error paragraphs are under 2,000
MAX_SHOWN = 300  # characters of a failure's line kept

CODE = re.compile(r"\b(E[A-Z]\d{4})\b")
# (kind, what in a line says it); the first that matches names the failure
FAILURES = (
    ("port-down", re.compile(r"The network port is down")),
    ("connect-timeout", re.compile(r"\bEI0006\b|Getting socket times out|wait socket establish timeout")),
    ("exec-timeout", re.compile(r"\bEI0002\b|Notify register times out|hccl fftsplus task timeout")),
    ("watchdog-timeout", re.compile(r"Watchdog caught collective operation timeout: WorkHCCL")),
)
# the seconds a line says it waited: plog's timeout[120] / timeout[120 s], the device's
# timeout:1836 / timeout=1836s, the watchdog's Timeout(ms)=3600000
SECONDS = re.compile(r"\btimeout(?:\[(\d{1,7})(?: ?s)?\]|[:=](\d{1,7})s?\b)")
MILLISECONDS = re.compile(r"Timeout\(ms\)=(\d{1,10})")


@dataclass(frozen=True, slots=True)
class HcclFailure:
    kind: str  # port-down, connect-timeout, exec-timeout, watchdog-timeout
    code: str | None  # HCCL's error code on the first line (EJ0002, EI0006, EI0002); None: none said
    count: int  # lines of this kind
    line: str  # the first line that said it, cut to 300 characters
    timeout_s: int | None  # the timeout the first line that names one says; None: not said


@dataclass(frozen=True, slots=True)
class HcclSaid:
    failure_lines: int
    failures: tuple[HcclFailure, ...]


def _timeout(text: str) -> int | None:
    m = SECONDS.search(text)
    if m:
        return int(m.group(1) or m.group(2))
    m = MILLISECONDS.search(text)
    return int(m.group(1)) // 1000 if m else None


def parse(lines) -> HcclSaid:
    """What HCCL said in ``lines`` (an iterable of text lines)."""
    seen: dict[str, list] = {}  # kind -> [count, code, line, timeout]
    total = 0
    for raw in lines:
        text = raw[:MAX_LINE_CHARS]
        kind = next((k for k, pattern in FAILURES if pattern.search(text)), None)
        if kind is None:
            continue
        total += 1
        code = CODE.search(text)
        entry = seen.setdefault(kind, [0, code.group(1) if code else None, text.strip()[:MAX_SHOWN], None])
        entry[0] += 1
        if entry[3] is None:
            entry[3] = _timeout(text)
    return HcclSaid(total, tuple(HcclFailure(k, v[1], v[0], v[2], v[3]) for k, v in seen.items()))
