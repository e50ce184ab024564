"""The alert lifecycle: pending, firing after 'for', resolved after a clear streak; sinks."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from doctor.daemon.alerts import AlertTracker, parse_duration
from doctor.daemon.sinks import AlertmanagerSink, Dispatcher, WebhookSink, alert_payload
from tests.builtin_rules import builtin_rules
from tests.daemon_helpers import finding

RULES = {"cpu-contention"}


def run(tracker: AlertTracker, present: list[bool], step: float = 15.0, key: str = "p 1"):
    """Feed one evaluation per entry (finding present or not); returns transitions by step."""
    events = []
    for i, on in enumerate(present):
        moved = tracker.observe([finding(key=key)] if on else [], RULES, i * step)
        events.append(("F" if moved.fired else "") + ("R" if moved.resolved else ""))
    return events


@pytest.mark.parametrize("text, seconds", [("30s", 30), ("5m", 300), ("1h", 3600), (None, 0)])
def test_durations_parse(text, seconds):
    assert parse_duration(text) == seconds


def test_bad_duration_says_what_is_expected():
    with pytest.raises(ValueError, match="like 30s, 5m or 1h"):
        parse_duration("5 minutes")


def test_pending_until_for_then_fires_once_then_resolves_after_two_clear():
    tracker = AlertTracker({"cpu-contention": 30.0}, resolve_after=2)
    events = run(tracker, [True, True, True, True, True, False, False, False])
    # fires at t=30 (third evaluation), once; resolves on the second clear evaluation
    assert events == ["", "", "F", "", "", "", "R", ""]


def test_hovering_at_threshold_does_not_flap():
    tracker = AlertTracker({"cpu-contention": 0.0}, resolve_after=2)
    events = run(tracker, [True, False, True, False, True, False, True])
    assert events.count("F") == 1 and "R" not in events


def test_short_blip_never_fires_with_a_for_window():
    tracker = AlertTracker({"cpu-contention": 60.0}, resolve_after=1)
    assert run(tracker, [True, False, False, True, False]) == ["", "", "", "", ""]


def test_two_items_are_two_alerts_and_the_same_item_is_one():
    tracker = AlertTracker({}, resolve_after=1)
    moved = tracker.observe([finding(key="a pid 1"), finding(key="b pid 2"), finding(key="a pid 1")],
                            RULES, 0.0)
    assert sorted(a.key for a in moved.fired) == ["a pid 1", "b pid 2"]
    assert len(tracker.firing()) == 2


def test_a_rule_that_could_not_be_evaluated_keeps_its_alert():
    tracker = AlertTracker({}, resolve_after=1)
    tracker.observe([finding()], RULES, 0.0)
    moved = tracker.observe([], set(), 15.0)  # its probe failed: missing data is no recovery
    assert not moved.resolved and tracker.firing()
    assert tracker.observe([], RULES, 30.0).resolved


def test_alertmanager_payload_has_labels_annotations_and_times():
    tracker = AlertTracker({}, resolve_after=1)
    alert = tracker.observe([finding()], RULES, 1_700_000_000.0).fired[0]
    body = alert_payload(alert, "host-a", 1_700_000_000.0, 240.0, "/r/x.html")
    assert body["labels"] == {"alertname": "cpu-contention", "rule": "cpu-contention",
                              "cause": "cpu-contention", "severity": "warning",
                              "instance": "host-a", "job": "llm-doctor", "key": "stress pid 42"}
    assert body["startsAt"] == "2023-11-14T22:13:20.000Z"
    assert body["endsAt"] == "2023-11-14T22:17:20.000Z"  # expires unless re-sent
    assert body["annotations"]["report"] == "/r/x.html"
    resolved = tracker.observe([], RULES, 1_700_000_060.0).resolved[0]
    assert alert_payload(resolved, "host-a", 0, 240.0)["endsAt"] == "2023-11-14T22:14:20.000Z"


class _Receiver(BaseHTTPRequestHandler):
    bodies: list = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        length = int(self.headers["Content-Length"])
        self.bodies.append((self.path, json.loads(self.rfile.read(length))))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_dispatcher_posts_to_alertmanager_and_webhook_and_survives_a_dead_one():
    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        dead = AlertmanagerSink("http://127.0.0.1:9")  # discard port: refused
        dispatcher = Dispatcher([dead, AlertmanagerSink(base), WebhookSink(base + "/hook")])
        dispatcher.submit([{"labels": {"rule": "x"}}], "firing")
        dispatcher.close(timeout_s=10)
    finally:
        server.shutdown()
    assert ("/api/v2/alerts", [{"labels": {"rule": "x"}}]) in _Receiver.bodies
    assert ("/hook", {"status": "firing", "alerts": [{"labels": {"rule": "x"}}]}) in _Receiver.bodies
    assert dispatcher.failures == 1


def test_an_escalation_adds_a_critical_alert_beside_the_warning_and_both_resolve():
    """Alertmanager tells alerts apart by their labels: a warning that becomes critical keeps
    its warning alert (as the exported Prometheus rules do, an inhibit rule hides it) and
    fires a critical one once; re-sends carry both; the resolve ends both."""
    from doctor.daemon.sinks import payloads
    from doctor.model import Severity

    tracker = AlertTracker({}, resolve_after=1)
    alert = tracker.observe([finding()], RULES, 0.0).fired[0]
    moved = tracker.observe([finding(severity=Severity.CRITICAL)], RULES, 15.0)
    assert moved.escalated == [alert] and not moved.fired
    assert alert_payload(alert, "h", 15.0, 60.0)["labels"]["severity"] == "critical"
    again = tracker.observe([finding(severity=Severity.CRITICAL)], RULES, 30.0)
    assert not again.escalated and not again.fired  # once, not every evaluation
    down = tracker.observe([finding()], RULES, 45.0)  # back to warning: no churn either
    assert not down.escalated and not down.resolved and alert.severity == "critical"
    assert [p["labels"]["severity"] for p in payloads([alert], "h", 45.0, 60.0)] == [
        "warning", "critical"]
    gone = tracker.observe([], RULES, 60.0).resolved
    assert gone == [alert]
    assert [(p["labels"]["severity"], p["endsAt"]) for p in payloads(gone, "h", 60.0, 60.0)] == [
        ("warning", "1970-01-01T00:01:00.000Z"), ("critical", "1970-01-01T00:01:00.000Z")]


def test_alerts_of_a_rule_removed_by_a_reload_resolve():
    tracker = AlertTracker({}, resolve_after=5)
    tracker.observe([finding()], RULES, 0.0)
    assert [a.rule for a in tracker.forget({"fd-limit-low"}, 10.0)] == ["cpu-contention"]
    assert tracker.active() == []


# --- identity and hysteresis with the real rules (issue 14 §3) ---------------------------

from doctor.config import Config  # noqa: E402
from doctor.daemon.alerts import clear_levels, held_findings  # noqa: E402
from doctor.model import ProbeResult, Severity  # noqa: E402
from doctor.rules.evaluate import evaluate  # noqa: E402
from doctor.rules.loader import DEFAULT_KEY_FIELDS  # noqa: E402
from probes.host.cpu_load import CpuLoadRecord, ProcessCpu  # noqa: E402
from probes.host.limits import LimitsRecord  # noqa: E402
from probes.registry import by_name  # noqa: E402

BUILTIN = builtin_rules()
CONTENTION = [r for r in BUILTIN if r.id == "cpu-contention"]


def _host(cores: float | None, pid: int = 4242, comm: str = "busyloop") -> list[ProbeResult]:
    """One quick scan of a 2-CPU host: a hog at ``cores`` (None: gone), nothing else."""
    top = () if cores is None else (ProcessCpu(pid, comm, "/usr/bin/" + comm, cores, None, False, False),)
    load = CpuLoadRecord(0.5, 2, (cores or 0.0) + 0.05, top)
    return [ProbeResult("host.cpu_load", "ok", 0.5, None, load),
            ProbeResult("host.limits", "ok", 0.01, None, LimitsRecord((), 0))]


def _daemon(samples: list[tuple[float | None, int]], config: Config | None = None,
            for_s: float = 3.0, step: float = 1.0) -> list[str]:
    """Evaluations as the daemon makes them (doctor/daemon/service.py: findings, the
    findings at the clear levels, the tracker); "F" fired, "R" resolved, per evaluation."""
    config = config or Config()
    tracker = AlertTracker({"cpu-contention": for_s}, resolve_after=2)
    events = []
    for i, (cores, pid) in enumerate(samples):
        results = _host(cores, pid)
        findings, errors = evaluate(CONTENTION, results, config)
        assert errors == []
        moved = tracker.observe(findings, {"cpu-contention"}, i * step,
                                held_findings(CONTENTION, results, config))
        events.append("F" * len(moved.fired) + "R" * len(moved.resolved))
    return events


def test_a_hog_measured_at_037_to_064_cores_is_one_alert_that_resolves_once_it_ends():
    # issue 14: a real 50 s busy loop read 0.37-0.64 cores, fired, and resolved while running
    readings = [0.55, 0.41, 0.37, 0.52, 0.64, 0.38, 0.4, 0.47, 0.61, 0.37, 0.39, 0.5, 0.44, 0.38]
    events = _daemon([(c, 4242) for c in readings] + [(None, 0)] * 4)
    assert "".join(events) == "FR"
    assert events.index("F") == 3  # after the 3 s 'for', held through the dips under 0.5
    assert events.index("R") == len(readings) + 1  # the second clear evaluation after it ended


def test_two_pids_of_one_program_are_one_alert():
    # a script that starts a new worker every few seconds: the pid changes, the alert does not
    samples = [(0.9, 1000 + i // 3) for i in range(12)] + [(None, 0)] * 3
    assert "".join(_daemon(samples)) == "FR"


def test_a_finding_absent_one_evaluation_and_present_the_next_neither_resolves_nor_refires():
    samples = [(0.9, 7), (0.9, 7), (0.9, 7), (0.9, 7), (None, 0), (0.9, 7), (None, 0), (0.9, 7),
               (0.9, 7), (None, 0), (None, 0)]
    assert "".join(_daemon(samples)) == "FR"


def test_the_clear_level_holds_an_alert_but_starts_none():
    # under the threshold (0.5) and over its clear level (0.25) from the start: nothing fires
    assert "".join(_daemon([(0.4, 7)] * 10)) == ""


def test_a_configured_clear_level_is_used():
    config = Config(rules={"cpu-contention": {"min_cpu_cores_clear": 0.45}})
    samples = [(0.6, 7)] * 5 + [(0.4, 7)] * 3  # 0.4 is under the configured clear level
    assert "".join(_daemon(samples, config)) == "FR"
    assert "".join(_daemon(samples)) == "F"  # the default 0.25 holds it


def test_clear_levels_name_their_threshold():
    (rule,) = CONTENTION
    assert clear_levels(rule) == {"min_cpu_cores": 0.25}
    assert clear_levels(rule, {"min_cpu_cores_clear": 0.1}) == {"min_cpu_cores": 0.1}
    assert clear_levels([r for r in BUILTIN if r.id == "fd-limit-low"][0]) == {}


def test_a_held_finding_keeps_the_severity_it_fired_with():
    tracker = AlertTracker({}, resolve_after=1)
    alert = tracker.observe([finding(key="busyloop", severity=Severity.CRITICAL)], RULES, 0.0).fired[0]
    moved = tracker.observe([], RULES, 1.0, [finding(key="busyloop")])
    assert not moved.resolved and alert.state == "firing" and alert.severity == "critical"


def _item_type(path: str):
    import dataclasses
    import typing

    from doctor.rules.expressions import element_type, optional_inner

    root, probe, *fields = path.split(".")
    tp = typing.get_type_hints(by_name()[f"{root}.{probe}"].run)["return"]
    for name in fields:
        tp = optional_inner(typing.get_type_hints(tp)[name])
        tp = element_type(tp)
    assert dataclasses.is_dataclass(tp), path
    return tp


def test_no_builtin_rule_is_keyed_by_something_that_churns():
    """A pid changes with every restart and every short-lived process, and a GPU's model
    name is the same for every GPU of a host: an alert's identity is neither."""
    import dataclasses

    for rule in BUILTIN:
        if not rule.each:
            continue
        if rule.key:
            assert "pid" not in rule.key, f"{rule.id}: key {rule.key!r} names a pid"
            continue
        names = {f.name for f in dataclasses.fields(_item_type(rule.each))}
        default = next((n for n in DEFAULT_KEY_FIELDS if n in names), None)
        assert default not in ("pid", "name"), f"{rule.id}: keyed by its items' {default}"


def test_an_engine_is_named_by_what_outlives_its_pid():
    from probes.helpers.processes import Process, lasting_name

    def proc(pid, listen=(), cmdline="python -m vllm.entrypoints.openai.api_server"):
        return Process(pid, "python3", cmdline, "vllm", listen=listen)

    assert lasting_name(proc(1, ("0.0.0.0:8000",))) == lasting_name(proc(2, ("0.0.0.0:8000",)))
    assert lasting_name(proc(1, ("0.0.0.0:8000",))) == "vllm on 0.0.0.0:8000"
    assert lasting_name(proc(7, cmdline="vllm serve /models/llama-3-8b")) == \
        "vllm serving /models/llama-3-8b"
    assert "7" not in lasting_name(proc(7)) and lasting_name(proc(7)) == "vllm"
