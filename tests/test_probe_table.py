"""The probe table people read: a family skipped for one reason is one row, ``--verbose``
shows each; evidence that is None says why in every format."""

from __future__ import annotations

import io

from rich.console import Console

import pytest

from doctor.model import Finding, Level, ProbeResult, ScanReport, Severity
from probes.registry import PROBES
from reports import html, markdown, terminal
from reports.common import probe_rows
from tests.conftest import FIXTURE_HOSTS

NO_DRIVER = "NVIDIA driver not loaded: libnvidia-ml.so.1 not found"
NO_ENGINE = "no serving engine in the process table and no --endpoint given"


def _row(name: str, status: str = "skipped", summary: str = NO_DRIVER) -> dict:
    return {"name": name, "status": status, "duration_s": 0.01, "summary": summary}


def test_a_family_skipped_for_one_reason_is_one_row_where_its_first_stood():
    rows = [_row("host.cpu", "ok", "2 CPUs"), *[_row(f"gpu.{n}") for n in ("a", "b", "c")],
            _row("engine.discovery", summary=NO_ENGINE), _row("engine.metrics", summary=NO_ENGINE),
            _row("engine.stacks", summary="py-spy is not installed"), _row("host.memory", "ok", "x")]
    shown = probe_rows(rows)
    assert [(r["name"], r["count"]) for r in shown] == [
        ("host.cpu", 1), ("gpu.* (3 probes)", 3), ("engine.{discovery,metrics} (2 probes)", 2),
        ("engine.stacks", 1), ("host.memory", 1)]
    assert shown[1]["summary"] == NO_DRIVER and abs(shown[1]["duration_s"] - 0.03) < 1e-9
    assert [r["name"] for r in probe_rows(rows, verbose=True)] == [r["name"] for r in rows]


def test_errors_and_lone_skips_keep_their_own_rows():
    rows = [_row("gpu.a", "error", "boom"), _row("gpu.b", "error", "boom"), _row("gpu.c")]
    assert [r["name"] for r in probe_rows(rows)] == ["gpu.a", "gpu.b", "gpu.c"]


@pytest.mark.slow
def test_a_host_without_driver_or_engine_reads_as_one_row_each_unless_verbose(cli):
    host = str(FIXTURE_HOSTS / "this-vm-epyc-2cpu")
    for fmt in ("terminal", "markdown", "html"):
        wide = {"COLUMNS": "300"}  # one table row a line
        grouped = cli("scan", "--replay", host, "--level", "quick", "--format", fmt, env=wide)
        verbose = cli("scan", "--replay", host, "--level", "quick", "--format", fmt, "--verbose",
                      env=wide)
        assert grouped.returncode == verbose.returncode == 0, grouped.stderr + verbose.stderr
        assert grouped.stdout.count("NVIDIA driver not loaded") == 1, fmt
        # the engine family's one row, and one row for each other family whose probes need
        # engine.discovery and so are skipped for its reason (net.nccl_env; npu.hccl_env and
        # npu.hccl_log share one row)
        borrowed = len({p.name.partition(".")[0] for p in PROBES if not p.name.startswith("engine.")
                        and "engine.discovery" in p.needs and p.level <= Level.QUICK})
        assert grouped.stdout.count(NO_ENGINE) == 1 + borrowed, fmt
        gpu_probes = sum(p.name.startswith("gpu.") and p.level <= Level.QUICK for p in PROBES)
        assert f"gpu.* ({gpu_probes} probes)" in grouped.stdout and "--verbose" in grouped.stdout
        assert verbose.stdout.count("NVIDIA driver not loaded") == gpu_probes, fmt
        assert "gpu.* (" not in verbose.stdout and "gpu.pcie" in verbose.stdout


def _report() -> ScanReport:
    finding = Finding(rule="model-on-slow-disk", cause="model-on-slow-disk",
                      symptoms=("slow-first-token",), severity=Severity.WARNING, title="t",
                      evidence={"read_mbps": None, "slot": None, "busy": -0.0},
                      remediation="r", playbook="playbooks/model-on-slow-disk.md",
                      missing={"read_mbps": "not measured at level quick"})
    return ScanReport(host={"hostname": "h"}, level=Level.QUICK, started_at="now", duration_s=0.1,
                      probes=[ProbeResult("host.storage", "ok", 0.0, None, None, "s")],
                      findings=[finding])


def test_evidence_that_is_none_says_why_in_every_format():
    out = io.StringIO()
    terminal.render(_report(), Console(file=out, width=300, color_system=None))
    texts = {"terminal": out.getvalue(), "markdown": markdown.render(_report()),
             "html": html.render(_report())}
    for fmt, text in texts.items():
        assert "not measured at level quick" in text, fmt
        assert "None" not in text and "-0.0" not in text, fmt
    assert "read_mbps=not measured at level quick, slot=—, busy=0.0" in texts["terminal"]
    assert "| slot | — |" in texts["markdown"]
