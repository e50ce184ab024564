"""Scans as the typed consumers take them (doctor/saved_scan.py): the fix plan, the fleet
adapters' verdict.

A test writes only the fields it is about (a finding's rule, cause, key, evidence, title;
a probe's name, status and data); ``complete`` fills the others as ``to_dict`` writes them,
and ``saved`` types the whole as reports/json_report.py ``read`` types a checked scan. It
does not check: the hostile-scan tests feed values the reader would refuse, to show the
consumer holds even so.
"""

from __future__ import annotations

from typing import Any

from doctor.saved_scan import SavedFinding, SavedScan, typed

_TOP = {"level": "quick", "started_at": "", "duration_s": 0.0, "verdict": "ok", "exit_code": 0,
        "rule_errors": []}
_PROBE = {"status": "ok", "reason": None, "duration_s": 0.0, "data": None}
_FINDING = {"cause": "", "symptoms": [], "severity": "warning", "title": "", "remediation": "",
            "playbook": "", "key": "", "evidence": {}}


def complete(report: dict[str, Any]) -> dict[str, Any]:
    return {**_TOP, **report, "host": report.get("host") or {"hostname": "?"},
            "probes": [{**_PROBE, **p} for p in report.get("probes", [])],
            "findings": [{**_FINDING, **f} for f in report.get("findings", [])]}


def saved(report: dict[str, Any]) -> SavedScan:
    return typed(complete(report))


def finding_of(finding: dict[str, Any]) -> SavedFinding:
    """One finding (a test's dict: its rule at least), typed."""
    typed_finding, = saved({"findings": [finding]}).findings
    return typed_finding
