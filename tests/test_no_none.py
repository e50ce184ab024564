"""What a person reads never says None: every committed recorded host, at every level (quick,
standard, full replay what they recorded), in every format.

Person-facing text is the terminal report (grouped and --verbose), the Markdown and HTML
reports whole, and JSON's text for people: titles, remediations, probe reasons, rule errors
and the reasons a finding gives for its missing values. JSON's data keeps its nulls. Numbers
never show a signed zero (-0, -0.00) either, nor Python's True, False, nan or inf.
"""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from doctor.model import Level, ScanOptions
from doctor.scan import scan
from doctor.seam.recorded import RecordedHost
from reports import html, json_report, markdown, terminal
from tests.test_fixtures import HOSTS, RULES
from probes.registry import PROBES

NONE = re.compile(r"\bNone\b")
# Python's own spellings of a flag and of a number that is not one (issue 14: "True" in the
# HTML, "nan" where a rate divided by nothing): a person writes yes/no, "not a number", ∞
LITERALS = re.compile(r"(?<![\w-])(?:True|False|nan|NaN|inf)(?![\w-])")  # not inf-cpu-07
SIGNED_ZERO = re.compile(r"(?<![\w.])-0(?:\.0+)?(?![\d.])")  # -0, -0.00; not gpu-0, 1e-05


def _terminal(report, verbose: bool) -> str:
    out = io.StringIO()  # wide, so that a word is never cut at the edge
    terminal.render(report, Console(file=out, width=400, color_system=None), verbose)
    return out.getvalue()


def _json_text(report) -> str:
    data = json_report.to_dict(report)
    parts = [f["title"] for f in data["findings"]] + [f["remediation"] for f in data["findings"]]
    parts += [reason for f in data["findings"] for reason in f["missing"].values()]
    parts += [p["reason"] or "" for p in data["probes"]] + data["rule_errors"]
    parts += [r["reason"] for r in data["replaced_values"]]
    return "\n".join(parts)


def person_facing(report) -> dict[str, str]:
    return {"terminal": _terminal(report, False), "terminal --verbose": _terminal(report, True),
            "markdown": markdown.render(report), "html": html.render(report),
            "json (text for people)": _json_text(report)}


def _offending(text: str) -> list[str]:
    lines = []
    for line in text.splitlines():
        for found in (*NONE.finditer(line), *SIGNED_ZERO.finditer(line),
                      *LITERALS.finditer(line)):
            lines.append(line[max(0, found.start() - 80):found.end() + 40].strip())
    return lines


@pytest.mark.slow
@pytest.mark.parametrize("path", HOSTS, ids=[p.name for p in HOSTS])
def test_no_person_facing_output_of_a_recorded_host_says_none(path):
    problems = []
    for level in ("quick", "standard", "full"):
        host = RecordedHost(path)
        dirs = tuple(host.manifest["host"].get("model_dirs", []))
        report = scan(host, ScanOptions(level=Level.parse(level), model_dirs=dirs), PROBES, RULES)
        for fmt, text in person_facing(report).items():
            problems += [f"{level} {fmt}: {line}" for line in _offending(text)]
    assert problems == []


def test_the_check_finds_what_it_looks_for():
    assert _offending("a (vda (rotational), None MB/s) b") and _offending("-0.00 of 2 cores busy")
    assert _offending("busy -0 cores")
    assert not _offending("gpu-0 1e-05 2026-01-01 -0.5 cores, NoneType, none")
    assert _offending("read_under_load=True") and _offending("<td>False</td>")
    assert _offending("rate nan tokens/s") and _offending("ceiling inf GB/s")
    assert not _offending("info, nano, Trueness, infiniband, host inf-cpu-07")
