"""The fix tests' scans as ``build_plan`` takes them: typed (doctor/saved_scan.py).

A test writes only the fields a plan reads (a finding's rule, cause, key, evidence; a
probe's name and data); ``saved`` fills the others as ``to_dict`` writes them and types
the whole as reports/json_report.py ``read`` types a checked scan. It does not check: the
hostile-scan tests plan from values the reader would refuse, to show the plan holds even so.
"""

from __future__ import annotations

from doctor.saved_scan import SavedScan, typed

_TOP = {"level": "quick", "started_at": "", "duration_s": 0.0, "verdict": "ok", "exit_code": 0,
        "rule_errors": []}
_PROBE = {"status": "ok", "reason": None, "duration_s": 0.0, "data": None}
_FINDING = {"symptoms": [], "severity": "warning", "title": "", "remediation": "",
            "playbook": "", "key": "", "evidence": {}}


def saved(report: dict) -> SavedScan:
    data = {**_TOP, **report, "host": report.get("host") or {"hostname": "?"},
            "probes": [{**_PROBE, **p} for p in report.get("probes", [])],
            "findings": [{**_FINDING, **f} for f in report.get("findings", [])]}
    return typed(data)
