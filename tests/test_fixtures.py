"""Recorded hosts (tests/fixtures/hosts/*): each scan raises exactly its expected findings.

Each fixture has an ``expected.toml``: the findings at warning or above that a replay must
raise, with a subset of their evidence; nothing else may be raised at warning or above.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from doctor._toml import tomllib
from doctor.seam.recorded import RecordedHost
from doctor.model import Level, ScanOptions, Severity
from probes.registry import PROBES
from doctor.scan import scan
from tests.builtin_rules import builtin_rules
from tests.conftest import FIXTURE_HOSTS

RULES = builtin_rules()
HOSTS = sorted(p for p in FIXTURE_HOSTS.iterdir() if (p / "host.toml").is_file())


def replay(path: Path, level: str | None = None):
    host = RecordedHost(path)
    meta = host.manifest["host"]
    options = ScanOptions(level=Level.parse(level or meta.get("level", "standard")),
                          model_dirs=tuple(meta.get("model_dirs", [])))
    return scan(host, options, PROBES, RULES)


def test_there_are_recorded_hosts():
    assert len(HOSTS) >= 5


@pytest.mark.parametrize("path", HOSTS, ids=[p.name for p in HOSTS])
def test_recorded_host_raises_exactly_its_expected_findings(path):
    expected = tomllib.loads((path / "expected.toml").read_text())
    report = replay(path, expected.get("level"))
    assert report.rule_errors == []
    failed = [(p.name, p.reason) for p in report.probes if p.status in ("error", "timeout")]
    assert failed == []
    raised = sorted((f.rule, f.severity.label) for f in report.findings
                    if f.severity >= Severity.WARNING)
    wanted = sorted((f["rule"], f["severity"]) for f in expected.get("finding", []))
    assert raised == wanted
    for want in expected.get("finding", []):
        finding = next(f for f in report.findings if f.rule == want["rule"])
        for key, value in want.get("evidence", {}).items():
            assert finding.evidence[key] == value, (want["rule"], key)
