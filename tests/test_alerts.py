"""The alert lifecycle: pending, firing after 'for', resolved after a clear streak; sinks."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from doctor.daemon.alerts import AlertTracker, parse_duration
from doctor.daemon.sinks import AlertmanagerSink, Dispatcher, WebhookSink, alert_payload
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


def test_severity_label_stays_as_fired_when_the_finding_escalates():
    from doctor.model import Severity

    tracker = AlertTracker({}, resolve_after=1)
    alert = tracker.observe([finding()], RULES, 0.0).fired[0]
    tracker.observe([finding(severity=Severity.CRITICAL)], RULES, 15.0)
    assert alert_payload(alert, "h", 15.0, 60.0)["labels"]["severity"] == "warning"


def test_alerts_of_a_rule_removed_by_a_reload_resolve():
    tracker = AlertTracker({}, resolve_after=5)
    tracker.observe([finding()], RULES, 0.0)
    assert [a.rule for a in tracker.forget({"fd-limit-low"}, 10.0)] == ["cpu-contention"]
    assert tracker.active() == []
