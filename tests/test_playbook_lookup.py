"""Playbooks are found by known cause id only: a saved scan's cause is someone else's text.

A finding's ``cause`` that climbs out of playbooks/ (``../../x``), an absolute path or any
id this llm-doctor does not know names no file: ``llm-doctor report`` renders the finding
without a playbook and never reads, let alone embeds, a Markdown file it points at.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os

import pytest
from rich.console import Console

from doctor.model import Level, ScanReport
from doctor.vocabulary import CAUSES
from playbooks import FOLDER, PLAYBOOKS, path_of, text_of
from reports import terminal
from reports.json_report import render as render_json
from tests.daemon_helpers import finding

MARKER = "PLANTED-OUTSIDE-PLAYBOOK-7c41"


def test_every_known_cause_maps_to_its_file_in_the_folder():
    assert set(PLAYBOOKS) == set(CAUSES)
    for cause, path in PLAYBOOKS.items():
        assert path.parent == FOLDER and path.name == f"{cause}.md" and path.is_file()


@pytest.mark.parametrize("cause", ["../README", "../../etc/passwd", "/etc/hostname", "README",
                                   "cpu-contention/../cpu-contention", "cpu-contention.md",
                                   "", "\0", "x" * 5000])
def test_any_other_string_names_no_playbook(cause):
    assert path_of(cause) is None and text_of(cause) is None


def test_a_cause_that_is_not_a_string_names_no_playbook():
    assert path_of(5) is None and text_of(None) is None and text_of(["cpu-contention"]) is None


def _planted(tmp_path):
    outside = tmp_path / "elsewhere" / "notes.md"
    outside.parent.mkdir()
    outside.write_text(f"# Notes\n\n## What it means\n{MARKER}\n\n## Fix\n{MARKER}\n")
    return outside


def _causes(outside) -> list[str]:
    """Ways a cause can point at ``outside`` (whose name the lookup would add ``.md`` to)."""
    stem = str(outside)[:-len(".md")]
    relative = os.path.relpath(stem, FOLDER)
    return [relative, stem, "cpu-contention/../" + relative, "./" + relative]


@pytest.mark.slow
def test_report_never_reads_a_markdown_file_a_cause_points_at(cli, tmp_path):
    outside = _planted(tmp_path)
    report = ScanReport(host={"kind": "live", "hostname": "h"}, level=Level.QUICK,
                        started_at="2026-01-01T00:00:00Z", duration_s=0.1, probes=[],
                        findings=[finding(), finding(key="stress pid 43")])
    for cause in _causes(outside):
        data = json.loads(render_json(report))
        data["findings"][0]["cause"] = cause  # the second keeps its real playbook
        saved = tmp_path / "scan.json"
        saved.write_text(json.dumps(data))
        out = tmp_path / "out.html"
        result = cli("report", str(saved), "-o", str(out))
        # the saved-scan reader refuses a cause the vocabulary lacks before any page is made
        assert result.returncode == 3 and "findings[0].cause" in result.stderr, (cause, result.stderr)
        assert MARKER not in result.stdout + result.stderr and not out.exists(), cause
    data = json.loads(render_json(report))  # the known causes: their playbooks, and only theirs
    saved.write_text(json.dumps(data))
    assert cli("report", str(saved), "-o", str(out)).returncode == 0
    html = out.read_text()
    assert MARKER not in html
    assert html.count("<details><summary>Playbook") == 2  # the two findings of cpu-contention
    assert "What it means" in html and "taskset" in html  # playbooks/cpu-contention.md


def test_the_terminal_names_no_path_for_an_unknown_cause(tmp_path):
    outside = _planted(tmp_path)
    cause = _causes(outside)[0]
    known = finding()
    unknown = finding(key="stress pid 43")
    unknown = dataclasses.replace(unknown, cause=cause)
    report = ScanReport(host={"kind": "live", "hostname": "h"}, level=Level.QUICK,
                        started_at="2026-01-01T00:00:00Z", duration_s=0.1, probes=[],
                        findings=[known, unknown])
    console = Console(file=io.StringIO(), width=400, color_system=None)
    terminal.render(report, console)
    text = console.file.getvalue()
    assert f"playbook: none for cause {cause} in this llm-doctor" in text
    assert str(outside) not in text and str(FOLDER / "cpu-contention.md") in text


@pytest.mark.slow
def test_the_playbook_command_takes_known_ids_only(cli):
    assert cli("playbook", "fd-limit-low").returncode == 0
    for cause in ("../README", "/etc/hostname", "fd-limit-low/../fd-limit-low"):
        result = cli("playbook", cause)
        assert result.returncode == 3 and "no playbook for" in result.stderr, cause
        assert "Traceback" not in result.stderr
