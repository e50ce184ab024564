"""An engine endpoint's reachability: what discovery asked of it and what came back.

Discovery's reads of an engine's pages (probes/helpers/engine_pages.py) are also its
reachability: refused, timed out, an HTTP status, an answer in no engine's shape. It is
measured once a scan, and the active probes (probes/helpers/engine_targets.py) ask nothing
of an engine that gave no HTTP answer: a hung engine costs the scan one timeout, not one per
probe. Manual equivalent: ``curl -sS -m 3 -w '%{http_code}\\n' :8000/metrics``.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.i18n import t
from doctor.redact import safe_display
from doctor.seam.host import HostReadError, Reason, detail_text
from doctor.values import field, page_json, text
from probes.helpers import engine_startup
from probes.helpers.engine_flags import Engine

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


def unanswered(found: Reachability | None) -> Reachability | None:
    """``found`` when its engine gave no HTTP answer (refused, hung, broken before a status
    line) or is getting ready: the active probes ask it nothing more."""
    return found if found is not None and found.outcome in NO_ANSWER + GETTING_READY else None


class Tries:
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
        self.tried.append(f"{path}: {no_answer(exc)}")

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
            return "timeout", no_answer(timeout)
        if not self.statuses and not self.errors:  # the read ended before its first page
            return "failed", "nothing could be read"
        if not self.statuses:
            first = self.errors[0]
            return ("refused" if "connection refused" in first.detail else "failed",
                    no_answer(first))
        shown = ", ".join(str(s) for s in sorted(set(self.statuses)))
        return "not-engine", f"answered HTTP {shown}, but as no serving engine"


def no_answer(exc: HostReadError) -> str:
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


def label_text(label: str) -> str:
    """An engine's label as engine.capacity, engine.offload and engine.quant keep it in
    their records ("vllm at http://127.0.0.1:8000 pid 4410") for people."""
    kind, sep, rest = label.partition(" at ")
    if not sep:
        return label
    url, _, pid = rest.partition(" pid ")
    return (t("{kind} at {url} pid {pid}", kind=kind, url=url, pid=pid) if pid
            else t("{kind} at {url}", kind=kind, url=url))
