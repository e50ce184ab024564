"""The HTML incident report: one self-contained file, no request leaves the page.

No script, no external stylesheet, font or image; a Content-Security-Policy of
``default-src 'none'`` makes sure of it even if a value slipped through. Every value is
escaped by jinja2's autoescape, and every string from the host (evidence, command lines,
records, reasons) is redacted first. Plots of what the scan measured (reports/plots.py) and
of the daemon's last hour are inline SVG; the page fits a 1280 px screen and prints.
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import replace
from typing import Any

import jinja2
from markupsafe import Markup, escape

from doctor import display
from doctor.i18n import current, t
from doctor.model import ScanReport, key_from_evidence
from doctor.vocabulary import SYMPTOM_WORDS, symptom_words
from reports.common import probe_rows, probe_summary, severity_word, show, status_word
from doctor.saved_scan import SavedScan, typed
from reports.json_report import sanitized, to_dict
from reports.plots import Unmeasured, sections
from reports.svg import MAX_SERIES, line_chart

# What the plots are for (issue: temperatures and clocks, KV-cache use, first-token latency,
# bandwidth): metric names matching these are plotted beside those of the findings' evidence
# (doctor/daemon/catalog names them; one series per CPU is not a plot, their mean is).
_ALWAYS = re.compile(r"(_celsius$|clock_hertz$|frequency_average_hertz$|kv_cache|"
                     r"time_to_first_token|_bytes_per_second$|busy_cores)")
MAX_CHARTS = 12
# A list of records with more fields than this is a card per record instead of a table row
# per record: engine.discovery's 17 fields in columns made a 2,200 px table.
WIDE_RECORD_FIELDS = 6
# An engine's text that is Python's spelling of a value (vLLM's cache_config_info labels:
# enable_prefix_caching="True", sliding_window="None"), as a person writes it.
PYTHON_WORDS = {"True": "yes", "False": "no", "None": display.ABSENT}
HTML_LANG = {"en": "en", "zh_CN": "zh-CN"}  # BCP 47, as <html lang> wants it


def _python_words() -> dict[str, str]:
    return {"True": t("yes"), "False": t("no"), "None": display.ABSENT}


def _symptom(value: Any) -> str:
    """A symptom row's words in a translated report (beside its id); nothing in English."""
    if current() == "en" or not isinstance(value, str) or value not in SYMPTOM_WORDS:
        return ""
    return symptom_words(value)


def _words(data: dict[str, Any], counts: dict[str, int]) -> dict[str, str]:
    """The page's own words in the report's language (the template holds no English)."""
    host: dict[str, Any] = data["host"] if isinstance(data.get("host"), dict) else {}
    hostname = host.get("hostname", t("host"))
    before, _, after = t("Probes of one family skipped for one reason share a row; "
                         "{verbose} shows each.", verbose="\0").partition("\0")
    return {
        "html_lang": HTML_LANG.get(current(), "en"), "host": t("host"),
        "title": t("llm-doctor report: {hostname}", hostname=hostname),
        "verdict": t("Verdict"), "counts": t("{critical} critical, {warning} warning, {info} info",
                                              **counts),
        "scanned": t("scanned {started} at level {level}", started=data.get("started_at", ""),
                     level=data.get("level", "")),
        "alert_firing": t("Alert firing:"), "since": t("since"), "colon": t(": "),
        "findings": t("Findings"),
        "no_findings": t("No findings: nothing measured crossed a rule's threshold."),
        "cause": t("Cause"), "rule": t("rule"), "item": t("item"),
        "row": t("troubleshooting row"), "rows": t("troubleshooting rows"),
        "first_step": t("First step:"), "evidence": t("evidence"), "value": t("value"),
        "playbook": t("Playbook"), "rule_errors": t("Rules that could not be evaluated"),
        "measured": t("What was measured"), "last_hour": t("The last hour"),
        "probes": t("Probes"), "probe": t("probe"), "status": t("status"),
        "seconds": t("seconds"), "summary": t("summary or reason"),
        "grouped_before": before, "grouped_after": after, "topology": t("GPU topology:"),
        "topology_legend": t("NV: NVLink; PIX/PXB: one PCIe switch; PHB: the CPU's root complex; "
                             "NODE: across root complexes in one NUMA node; SYS: across sockets."),
        "engine": t("Engine:"), "records": t("Records"), "yes": t("yes"), "no": t("no"),
        "not_measured": t("Not measured:"),
    }


def _redacted(value: Any) -> Any:
    """Every string and every key as ``show`` makes it (masked, control characters escaped)."""
    if isinstance(value, str):
        return show(value)
    if isinstance(value, dict):
        return {show(k): _redacted(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redacted(v) for v in value]
    return value


def _playbook(cause: str) -> list[tuple[str, Markup]]:
    """The playbook's sections (## headings) rendered from Markdown, raw HTML and images off.

    Looked up by known cause id only (``playbooks.text_of``): a saved scan's cause is
    someone else's text, and an id this version does not know has no playbook section."""
    from markdown_it import MarkdownIt

    from playbooks import text_of

    text = text_of(cause)
    if text is None:
        return []
    md = MarkdownIt("commonmark", {"html": False}).disable("image")
    sections: list[tuple[str, Markup]] = []
    for chunk in re.split(r"(?m)^## ", text)[1:]:
        heading, _, body = chunk.partition("\n")
        sections.append((heading.strip(), Markup(md.render(body))))  # noqa: S704 (escaped by markdown-it)
    return sections


def _matrix(value: Any) -> bool:
    return (isinstance(value, list) and len(value) > 1 and all(isinstance(r, list) for r in value)
            and all(not isinstance(c, (dict, list)) for r in value for c in r))


def _index(value: Any) -> bool:
    """A GPU index as NVML gives it (a saved scan may hold anything where one goes)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _pair_matrices(probes: list[dict]) -> list[tuple[str, list[list[str]]]]:
    """GPU pairs (items with ``a``, ``b`` and a ``level``) as the matrix ``nvidia-smi topo -m``
    prints: NV where NVLink joins them, else the PCIe path (PIX, PXB, PHB, NODE, SYS)."""
    out = []
    for probe in probes:
        for field, items in (probe["data"] or {}).items():
            if not (isinstance(items, list) and items and all(
                    isinstance(i, dict) and {"a", "b", "level"} <= i.keys()
                    and _index(i["a"]) and _index(i["b"]) for i in items)):
                continue
            gpus = sorted({i["a"] for i in items} | {i["b"] for i in items})
            cell = {(i["a"], i["b"]): "NV" if i.get("nvlink") else str(i["level"] or "?")
                    for i in items}
            rows = [["", *[f"GPU{g}" for g in gpus]]]
            for a in gpus:
                rows.append([f"GPU{a}", *["X" if a == b else cell.get((a, b)) or cell.get((b, a), "")
                                          for b in gpus]])
            out.append((f"{probe['name']}.{field}", rows))
    return out


def _about(history: Any, name: str) -> Any:
    """The daemon's description of a series (its record field, its ceiling), if it has one."""
    about = getattr(history, "about", None)
    return about(name) if about is not None else None


def _ceiling(history: Any, name: str) -> float | None:
    """For a bandwidth, the latest value of the ceiling its probe reports beside it."""
    ceiling = getattr(_about(history, name), "ceiling", "")
    if not ceiling:
        return None
    points: list[tuple[float, float]] = next(iter(history.series(ceiling).values()), [])
    return points[-1][1] if points else None


def _field(history: Any, name: str) -> str:
    """The record field a series comes from (``temp_c``): what a finding's evidence names."""
    return str(getattr(_about(history, name), "field", "")).rpartition(".")[2]


def _charts(history: Any, findings: list[dict]) -> list[Markup]:
    if history is None:
        return []
    wanted = {str(k) for f in findings for k in f["evidence"]}
    keys = {str(f.get("key") or "") for f in findings} - {""}
    names = sorted(n for n in history.names() if "ceiling" not in n  # drawn as a line instead
                   and (_ALWAYS.search(n) or _field(history, n) in wanted
                        or any(n.endswith("_" + w) for w in wanted)))
    charts = []
    for name in names[:MAX_CHARTS]:
        series = history.series(name)
        # the finding's own item first (its pid, its GPU), then the others up to the palette
        # (an empty label, an item without that value, names nothing)
        ranked = sorted(series.items(), key=lambda kv: not any(
            v and (v in keys or any(v in k for k in keys)) for _, v in kv[0]))
        shown = {", ".join(f"{k}={v}" for k, v in labels if v) or "value": pts
                 for labels, pts in ranked[:MAX_SERIES]}
        svg = line_chart(name, shown, _ceiling(history, name), len(ranked) - len(shown))
        if svg:
            charts.append(Markup(svg))  # noqa: S704 (reports/svg.py escapes every text)
    return charts


def _host_line(host: Any) -> list[tuple[str, Any]]:
    """The report's ``host`` as a person reads it: named in words, a recording by its path
    and capture time, and an identifier that was not read said as such, or left out where
    nothing is known of it (its file is absent: a container, a capture made without it)."""
    host = host if isinstance(host, dict) else {}
    names = {"hostname": t("hostname"), "captured_at": t("captured"),
             "machine_id": t("machine id"), "product_uuid": t("DMI product UUID")}
    out: list[tuple[str, Any]] = []
    for key, value in host.items():
        if key == "kind":
            if value == "recorded":
                out.append((t("recorded host"), host.get("path") or display.ABSENT))
        elif key == "path" and host.get("kind") == "recorded":
            continue
        elif key.endswith("_reason") and key[:-len("_reason")] in names:
            said = _unread(value)
            if said:
                out.append((names[key[:-len("_reason")]], said))
        else:
            out.append((names.get(key, key), value))
    return out


def _unread(reason: Any) -> str:
    """``no-permission: /sys/class/dmi/id/product_uuid (root only); not-found: ...``
    (doctor/seam/identity.py) as words; "" when every file was simply absent."""
    parts = [p.strip() for p in str(reason or "").split(";") if p.strip()]
    said = []
    for part in parts:
        word, _, path = part.partition(": ")
        if word == "not-found":
            continue
        said.append(t("{why}: {path}", why=display.why(word), path=path) if path else part)
    return "; ".join(said)


def _measured(plots: list[tuple[str, list[Markup]]]
              ) -> tuple[list[tuple[str, list[Markup]]], list[tuple[str, str]]]:
    """The sections with a plot to draw, and what was not measured as (what, why) pairs,
    one per reason: five empty boxes read as one line."""
    drawn: list[tuple[str, list[Markup]]] = []
    missing: dict[str, list[str]] = {}
    for heading, svgs in plots:
        shown = [s for s in svgs if not isinstance(s, Unmeasured)]
        for box in svgs:
            if isinstance(box, Unmeasured):
                missing.setdefault(box.why, []).append(box.what)
        if shown:
            drawn.append((heading, shown))
    return drawn, [(t(", ").join(titles), why) for why, titles in missing.items()]


def _lead(findings: list[Any], alert: Any) -> list[Any]:
    """The findings with the one that opened the incident first: its rule and key (the
    alert's finding itself when the hysteresis held it and this evaluation did not find it)."""
    if alert is None:
        return list(findings)
    own = [f for f in findings if f.rule == alert.rule and f.identity == alert.key]
    rest = [f for f in findings if not (f.rule == alert.rule and f.identity == alert.key)]
    return (own or [alert.finding]) + rest


def _breakable(key: Any) -> Markup:
    """A record's field name that may break after its underscores (output_tokens_per_s), and
    nowhere else: a column of such names is as narrow as its longest part, not its name."""
    return Markup("_<wbr>").join(escape(part) for part in str(key).split("_"))


@functools.lru_cache(maxsize=1)  # one a process: compiling the template took 50 ms a page
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("reports", "templates"),
                             autoescape=True, trim_blocks=True, lstrip_blocks=True)
    env.tests["matrix"] = _matrix
    env.filters["why"] = display.why  # a None: its reason, or —
    env.filters["number"] = display.number  # no -0.00
    env.filters["written"] = display.written  # no -0.00, no 48.0 requests
    env.filters["key"] = _breakable
    env.filters["severity"] = severity_word
    env.filters["status"] = status_word
    env.filters["symptom"] = _symptom
    env.tests["mapping"] = lambda v: isinstance(v, dict)
    env.tests["sequence_of_mappings"] = lambda v: (isinstance(v, list) and bool(v)
                                                   and all(isinstance(i, dict) for i in v))
    return env


def render_data(scan: SavedScan | dict[str, Any], history: Any = None, alert: Any = None,
                summaries: list[str] | None = None, verbose: bool = False) -> str:
    """The report from a JSON report's data: ``reports.json_report.to_dict``, or a saved
    report that ``reports.json_report.load`` has checked against the schema. Masked as
    ``to_dict`` masks it: a saved report may hold what its writer would have masked.
    ``verbose`` gives every probe its own row in the probe table (else a family skipped for
    one reason is one row)."""
    scan = scan if isinstance(scan, SavedScan) else typed(scan)
    data = _redacted(sanitized(dict(scan.data)))
    findings = data.get("findings", [])
    for finding, said in zip(findings, scan.findings):  # in the report's language
        finding["title"], finding["remediation"] = show(said.title()), show(said.remediation())
        finding["key"] = finding.get("key") or show(key_from_evidence(finding["evidence"]))
        if not isinstance(finding.get("missing"), dict):  # a JSON report from before 'missing'
            finding["missing"] = {}
        finding["sections"] = _playbook(finding["cause"])
    probes = data.get("probes", [])
    for i, (probe, result) in enumerate(zip(probes, scan.probes)):
        probe["summary"] = show(summaries[i] if summaries else result.said())
    counts = {s: sum(1 for f in findings if f["severity"] == s) for s in ("critical", "warning", "info")}
    alert_info = None
    if alert is not None:
        alert_info = {"rule": alert.rule, "key": show(alert.key), "state": alert.state,
                      "since": time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(alert.since)),
                      "title": show(alert.finding.title)}
    template = _environment().get_template("report.html.j2")
    # the report's fields, then what the page adds: a saved report may carry any other
    # top-level field (the schema allows new ones), and none may replace these
    table = probe_rows(probes, verbose)
    plots, unmeasured = _measured(sections(probes))
    return template.render({
        **data, "counts": counts, "alert": alert_info, "charts": _charts(history, findings),
        "plots": plots, "unmeasured": unmeasured, "host_line": _host_line(data.get("host")),
        "wide": WIDE_RECORD_FIELDS, "python_words": _python_words(),
        "w": _words(data, counts),
        "verdict_word": t("ok") if data.get("verdict") == "ok" else severity_word(data.get("verdict")),
        "probe_table": table, "grouped": len(table) < len(probes),
        "topology": [p for p in probes if p["name"].startswith("gpu.") and p["data"]],
        "pair_matrices": _pair_matrices([p for p in probes if p["data"]]),
        "engines": [p for p in probes if p["name"].startswith("engine.") and p["data"]]})


def render(report: ScanReport, history: Any = None, alert: Any = None,
           verbose: bool = False) -> str:
    """The report of a scan (``scan --format html``) or of the daemon's state."""
    return render_data(to_dict(report), history, alert, [probe_summary(p) for p in report.probes],
                       verbose)


def render_incident(report: ScanReport, history: Any, alert: Any) -> str:
    """The report an alert links to: it leads with the finding that opened the incident
    (a fd-limit-low incident led with a critical GPU finding found in the same evaluation)."""
    return render(replace(report, findings=_lead(report.findings, alert)), history, alert)
