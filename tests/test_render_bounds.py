"""The renderers for people bound the text they lay out, and no host text breaks them.

A 5,000,000-character host name took 25 s in the terminal report and 62 s in ``diff``
(rich's wrapping is worse than linear) and made megabytes of Markdown and HTML. Every field
shown to people is cut at reports/common.py MAX_SHOWN characters with a mark that says so;
the JSON report and diff keep the field whole. A lone surrogate (a live host's name that is
not UTF-8) or control characters in a host name crash no format and reach no reader's
terminal unescaped. Sizes are asserted, never times.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from doctor.commands.diff import _text as diff_text
from doctor.commands.diff import run_diff
from doctor.commands.setup import FORMATS
from doctor.model import Finding, Level, ProbeResult, ScanReport, Severity
from reports.common import MAX_SHOWN, cut, show
from reports.diff_terminal import render as diff_terminal
from reports.json_report import render as render_json
from reports.terminal import render as terminal
from tests.conftest import REPO

BIG = 5_000_000
MARK = "more characters: the JSON output holds them all"
# a shown field is MAX_SHOWN characters and its mark; the report has a few dozen of them,
# Markdown may double a character with a backslash, HTML adds its page and styles
BOUND = 64 * 1024
# a name that is not UTF-8 (surrogateescape), a terminal title sequence, a bell, NUL, a
# right-to-left override, a lone high surrogate
ODD = "gpu\udcff-node\x1b]0;pwned\x07\x00\u202e\ud800-01"
RAW_CONTROL = ("\x1b", "\x07", "\x00", "\u202e")


def _report(text: str, hostname: str | None = None, model: str = "m",
            seen: str | None = None) -> ScanReport:
    """A finding whose title is ``text`` and whose evidence value and probe's summary are
    ``seen`` (else ``text``), on host ``hostname`` (else ``text``), with an engine started
    with ``--model MODEL`` (diff shows a changed flag as argv)."""
    seen = text if seen is None else seen
    finding = Finding(rule="cpu-contention", cause="cpu-contention", symptoms=("slowdown",),
                      severity=Severity.WARNING, title=text, evidence={"comm": seen, "cores": 2},
                      remediation="lower the load", playbook="")
    engine = {"kind": "vllm", "base_url": "http://127.0.0.1:8000", "model": model}
    return ScanReport(host={"kind": "recorded", "hostname": hostname or text,
                            "captured_at": "2026-11-29T10:52:31Z"},
                      level=Level.QUICK, started_at="2026-11-29T10:52:31Z", duration_s=0.5,
                      probes=[ProbeResult("host.cpu", "ok", 0.1, summary=seen),
                              ProbeResult("engine.discovery", "ok", 0.1, record={"engines": [engine]},
                                          summary="1 engine"),
                              ProbeResult("host.memory", "error", 0.1, reason="no /proc/meminfo")],
                      findings=[finding])


def _console_text(render, what) -> str:
    """What a terminal would get (the path ``scan`` and ``diff`` take with no -o)."""
    console = Console(file=io.StringIO(), width=80, record=True)
    render(what, console)
    return console.export_text()


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[Path, Path]:
    """Two saved scans of a host whose name, a finding's title and an engine's --model are
    each 5,000,000 characters (a hand-made file attached to a ticket): what diff shows.
    (Evidence and summaries it does not show are short: masking 5,000,000 characters is
    most of a second each time, and the scan formats' test has them.)"""
    folder = tmp_path_factory.mktemp("big")
    before, after = folder / "before.json", folder / "after.json"
    before.write_text(render_json(_report("h" * BIG, model="m" * BIG, seen="stress")))
    after.write_text(render_json(_report("h" * BIG, hostname="h" * (BIG - 1) + "2",
                                         model="m" * (BIG - 1) + "2", seen="stress")))
    return before, after


def test_cut_keeps_a_field_whole_up_to_its_bound_and_marks_the_rest():
    assert cut("x" * MAX_SHOWN) == "x" * MAX_SHOWN
    long = cut("x" * BIG)
    assert long.startswith("x" * MAX_SHOWN) and long[MAX_SHOWN] == "…"
    assert f"{BIG - MAX_SHOWN:,} {MARK}" in long and len(long) < MAX_SHOWN + 100
    assert show(long) == long  # a field cut once is not cut again


def test_a_secret_is_masked_before_the_cut():
    """The mask is decided on the whole text: a password whose '@' lies past the cut is
    still masked in what is shown."""
    shown = show("postgres://app:" + "p" * (MAX_SHOWN * 2) + "@db/x")
    assert "ppp" not in shown


@pytest.mark.slow
def test_every_scan_format_bounds_a_5_000_000_character_field():
    report = _report("h" * BIG)
    for fmt, render in FORMATS.items():
        out = render(report, False)
        if fmt == "json":  # the whole field, for whoever reads the data
            assert json.loads(out)["host"]["hostname"] == "h" * BIG
        elif fmt == "prom":  # free text is no label; a label is cut at MAX_LABEL
            assert len(out) < BOUND
        else:
            assert len(out) < BOUND, (fmt, len(out))
            assert MARK in out, fmt
    out = _console_text(terminal, report)
    assert len(out) < BOUND and MARK in out


@pytest.mark.slow
def test_every_diff_format_bounds_a_5_000_000_character_field(saved):
    before, after = saved
    diff = run_diff(str(before), str(after), None, "", True)
    for fmt in ("markdown", "html"):
        out = diff_text(diff, fmt)
        assert len(out) < BOUND and MARK in out, (fmt, len(out))
    out = _console_text(diff_terminal, diff)
    assert len(out) < BOUND and MARK in out, len(out)
    assert "--model" in out  # the engine's flag, as argv, cut as well
    data = json.loads(diff_text(diff, "json"))
    assert len(json.dumps(data)) > BIG  # the JSON diff keeps the host names whole


def test_every_scan_format_takes_a_host_name_with_a_surrogate_and_control_characters():
    report = _report("evidence " + ODD, hostname=ODD)
    for fmt, render in FORMATS.items():
        out = render(report, False)
        out.encode("utf-8")  # a lone surrogate would raise here, as on writing stdout
        if fmt in ("terminal", "markdown", "html"):
            assert not [c for c in RAW_CONTROL if c in out], fmt
            assert "pwned" in out, fmt  # shown, its escapes written out, not dropped
    out = _console_text(terminal, report)
    out.encode("utf-8")
    assert not [c for c in RAW_CONTROL if c in out]


@pytest.mark.parametrize("fmt", ["terminal", "json", "markdown", "html"])
def test_diff_on_the_command_line_takes_a_host_name_with_a_surrogate(fmt, tmp_path):
    """Through the command line, whose standard output is a pipe: a surrogate that reached
    it would be a UnicodeEncodeError and a traceback."""
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(render_json(_report("title " + ODD, hostname=ODD, model=ODD)))
    after.write_text(render_json(_report("other " + ODD, hostname=ODD + "2", model=ODD + "2")))
    result = subprocess.run([sys.executable, "-m", "doctor.commands.cli", "diff", str(before),
                             str(after), "--different-hosts", "--format", fmt],
                            capture_output=True, timeout=120, cwd=REPO)
    # 3: not comparable (the models differ), said on standard output like the rest
    assert result.returncode == 3, result.stderr.decode(errors="replace")
    assert b"Traceback" not in result.stderr
    out = result.stdout.decode("utf-8")  # valid UTF-8
    if fmt != "json":
        assert not [c for c in RAW_CONTROL if c in out], fmt
        assert "--model" in out and "pwned" in out  # the changed flag, its escapes shown
