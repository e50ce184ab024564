"""The verdict every adapter gives from the daemon's state: records in, verdicts out."""

from __future__ import annotations

import pytest

from doctor.daemon.state import State
from doctor.fleet.verdict import INVALID_RULE, Status, judge, masked
from doctor.model import Severity
from tests.saved_scans import complete

EVERY_FAMILY = [{"name": "gpu.nvml", "status": "ok"}, {"name": "engine.load", "status": "ok"},
                {"name": "host.cpu", "status": "ok"}]  # a daemon's report lists every probe


def _finding(rule: str, severity: str, title: str = "something") -> dict:
    return {"rule": rule, "severity": severity, "title": title}


def _state(findings=(), probes=EVERY_FAMILY, unknown="", families=None) -> State:
    families = families or {"gpu-lost": "gpu", "gpu-throttle": "gpu", "swap": "host",
                            "kv": "engine"}
    return State("/s.json", unknown, 1.0, 15.0, 4.0, families,
                 complete({"findings": list(findings), "probes": list(probes)}))


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
    assert judge(state).finding.rule == "swap"  # the whole host: first of the criticals


def test_below_min_severity_stays_silent_and_a_failed_probe_is_unknown():
    state = _state([_finding("gpu-throttle", "warning")],
                   [{"name": "gpu.nvml", "status": "ok"}, {"name": "host.cpu", "status": "ok"}])
    assert judge(state, "gpu", Severity.CRITICAL).status is Status.OK
    assert judge(state, "gpu").status is Status.PROBLEM
    failed = _state([], [{"name": "gpu.nvml", "status": "error", "reason": "NVML: driver gone"},
                         {"name": "host.cpu", "status": "ok"}])
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


def test_a_hung_probe_or_a_family_without_probes_is_unknown_never_ok():
    hung = _state([], [{"name": "gpu.nvml", "status": "timeout", "reason": None},
                       {"name": "host.cpu", "status": "ok"}])
    verdict = judge(hung, "gpu")
    assert verdict.status is Status.UNKNOWN and verdict.line == "unknown gpu.nvml failed: timeout"
    assert judge(hung, "host").status is Status.OK
    bare = _state([], [{"name": "host.cpu", "status": "ok"}])
    assert judge(bare, "engine").line == "unknown engine: the state lists no probe of this family"
    assert judge(_state([], []), None).status is Status.UNKNOWN  # the whole host, no probe
    assert judge(_state([_finding("gpu-lost", "critical")], []), "gpu").status is Status.PROBLEM


HOSTILE = "GPU\n3 \x1b[31m--api-key sk-LEAKLEAK1234\x1b[0m \u202egone\x00 token=hunter2hunter2"


def test_what_the_state_says_is_masked_and_flat_in_every_line():
    lines = [judge(_state([_finding("gpu-lost", "critical", HOSTILE)]), "gpu").line,
             judge(_state(unknown=HOSTILE)).line,
             judge(_state([], [{"name": "gpu.nvml", "status": "error", "reason": HOSTILE}]),
                   "gpu").line,
             judge(_state([], [{"name": "gpu.nvml", "status": "skipped", "reason": HOSTILE}]),
                   "gpu").line]
    for line in lines:
        assert "LEAKLEAK" not in line and "hunter2" not in line and "***" in line, line
        assert not any(c in line for c in "\n\x1b\u202e\x00"), line
    assert lines[0] == "gpu-lost critical: GPU 3 [31m--api-key *** [0m gone token=***"
    assert masked("--api-key\x1b[0msk-LEAKLEAK1234") == "--api-key ***"  # the escape split it


@pytest.mark.parametrize("rule", ["ok", "ok-gpu", "unknown", "unknown-x", "Gpu Lost", "a\nb",
                                  "", None, 7, "x" * 81])
def test_a_problem_line_never_starts_with_a_word_of_ours_or_a_foreign_id(rule):
    """States read from a file refuse such ids (doctor/daemon/state.py); one built otherwise
    (the quick fallback's) still never makes a problem read "ok"."""
    verdict = judge(_state([{"rule": rule, "severity": "critical", "title": "t"}]))
    assert verdict.status is Status.PROBLEM
    assert verdict.line == f"{INVALID_RULE} critical: t"


def test_the_verdict_names_the_states_finding_typed():
    """The adapters read the state's report through the saved-scan reader's types
    (doctor/saved_scan.py), not its dict: the finding a drain reason names is a SavedFinding."""
    from doctor.saved_scan import SavedFinding

    state = _state([_finding("gpu-throttle", "warning"), _finding("gpu-lost", "critical", "GPU 3 gone")])
    verdict = judge(state, "gpu")
    assert isinstance(verdict.finding, SavedFinding) and verdict.finding.severity is Severity.CRITICAL
    assert (verdict.finding.rule, verdict.finding.title()) == ("gpu-lost", "GPU 3 gone")
    assert [f.rule for f in verdict.problems] == ["gpu-throttle", "gpu-lost"]
