"""The verdict every adapter gives from the daemon's state: records in, verdicts out."""

from __future__ import annotations

from doctor.daemon.state import State
from doctor.fleet.verdict import Status, judge
from doctor.model import Severity


def _finding(rule: str, severity: str, title: str = "something") -> dict:
    return {"rule": rule, "severity": severity, "title": title}


def _state(findings=(), probes=(), unknown="", families=None) -> State:
    families = families or {"gpu-lost": "gpu", "gpu-throttle": "gpu", "swap": "host",
                            "kv": "engine"}
    return State("/s.json", unknown, 1.0, 15.0, 4.0, families,
                 {"findings": list(findings), "probes": list(probes)})


def test_a_stale_state_is_unknown_never_ok():
    verdict = judge(_state(unknown="the state in /s.json is 99s old"))
    assert verdict.status is Status.UNKNOWN and verdict.line.startswith("unknown ")


def test_the_worst_finding_of_the_family_is_named_first_of_equals():
    state = _state([_finding("swap", "critical"), _finding("gpu-throttle", "warning"),
                    _finding("gpu-lost", "critical", "GPU 3 fell off the bus"),
                    _finding("gpu-throttle", "critical", "GPU 1 throttles")])
    verdict = judge(state, "gpu")
    assert verdict.status is Status.PROBLEM
    assert verdict.line == "gpu-lost critical: GPU 3 fell off the bus (+2 more)"
    assert judge(state, "engine").status is Status.OK
    assert judge(state).finding["rule"] == "swap"  # the whole host: first of the criticals


def test_below_min_severity_stays_silent_and_a_failed_probe_is_unknown():
    state = _state([_finding("gpu-throttle", "warning")],
                   [{"name": "gpu.nvml", "status": "ok"}, {"name": "host.cpu", "status": "ok"}])
    assert judge(state, "gpu", Severity.CRITICAL).status is Status.OK
    assert judge(state, "gpu").status is Status.PROBLEM
    failed = _state([], [{"name": "gpu.nvml", "status": "error", "reason": "NVML: driver gone"}])
    verdict = judge(failed, "gpu")
    assert verdict.status is Status.UNKNOWN and "gpu.nvml failed: NVML: driver gone" in verdict.line
    assert judge(failed, "host").status is Status.OK  # another family's failure is not this one's


def test_the_line_fits_its_width_and_keeps_its_id():
    long = _state([_finding("gpu-lost", "critical", "x" * 300), _finding("gpu-lost", "critical")])
    for width in (80, 40):
        line = judge(long, "gpu", width=width).line
        assert len(line) <= width and line.startswith("gpu-lost critical: ")
        assert line.endswith("(+1 more)")
    assert "\n" not in judge(_state([_finding("kv", "warning", "a\nb")]), "engine").line


def test_a_family_whose_probes_were_all_skipped_says_why_it_is_ok():
    state = _state([], [{"name": "gpu.nvml", "status": "skipped", "reason": "no NVIDIA driver"},
                        {"name": "gpu.topology", "status": "skipped", "reason": "no NVIDIA driver"}])
    verdict = judge(state, "gpu")
    assert verdict.status is Status.OK
    assert verdict.line == "ok gpu: no probe ran (gpu.nvml: no NVIDIA driver)"
