"""One page per problem: a finding that turns critical keeps its warning alert and adds a
critical one (Alertmanager tells alerts apart by their labels), and the inhibit rule that
``llm-doctor rules export --alertmanager`` prints (and contrib/alertmanager/ ships) hides the
warning. Checked against the real Alertmanager: ``amtool check-config`` on both files, then
the daemon's own payloads of an escalated alert and the exported Prometheus rules' labels
posted to a running Alertmanager, whose API says which alerts are suppressed and by what."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request

import pytest

from doctor.daemon.alerts import AlertTracker
from doctor.daemon.promrules import alert_name
from doctor.daemon.sinks import payloads, rfc3339
from doctor.model import Severity
from tests import live_stack as stack
from tests.conftest import REPO
from tests.daemon_helpers import finding, need

CONTRIB = REPO / "contrib" / "alertmanager" / "alertmanager.yml"
ROUTE = "route:\n  receiver: 'null'\n  group_wait: 1s\nreceivers:\n  - name: 'null'\n"


def _exported() -> str:
    out = subprocess.run([sys.executable, "-m", "doctor.commands.cli", "rules", "export",
                          "--alertmanager"], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "LANG": "C"})
    assert out.returncode == 0, out.stderr
    return out.stdout


def _check(amtool: str, path) -> str:
    out = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_the_export_and_the_contrib_config_pass_amtool_and_agree(tmp_path):
    amtool = need("amtool", "prometheus-alertmanager")
    exported = _exported()
    config = tmp_path / "alertmanager.yml"
    config.write_text(ROUTE + exported)
    assert "1 inhibit rules" in _check(amtool, config)
    assert "1 inhibit rules" in _check(amtool, CONTRIB)
    rules = exported[exported.index("inhibit_rules:"):]
    assert CONTRIB.read_text().rstrip().endswith(rules.rstrip())  # regenerate it from the export


@pytest.mark.slow
def test_rules_export_wants_one_kind_and_alertmanager_alone():
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "doctor.commands.cli", "rules", "export",
                               *args], capture_output=True, text=True, timeout=60,
                              env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})

    none = run()
    assert none.returncode != 0 and "--prometheus" in none.stderr and "--alertmanager" in none.stderr
    both = run("--alertmanager", "--fleet")
    assert both.returncode != 0 and "--alertmanager" in both.stderr
    assert "Traceback" not in none.stderr + both.stderr


def _post(url: str, alerts: list[dict]) -> None:
    request = urllib.request.Request(f"{url}/api/v2/alerts", json.dumps(alerts).encode(),
                                     {"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 (loopback)
        assert response.status == 200


def _states(url: str) -> dict[tuple[str, str, str], tuple[str, int]]:
    """llm-doctor's alerts (a ``rule`` label): (alertname, key, severity) -> (state, how
    many alerts inhibit it)."""
    body = json.loads(stack.get(f"{url}/api/v2/alerts?inhibited=true&silenced=true&active=true"))
    return {(a["labels"]["alertname"], a["labels"].get("key", ""), a["labels"]["severity"]):
            (a["status"]["state"], len(a["status"]["inhibitedBy"])) for a in body
            if "rule" in a["labels"]}


def _prometheus_alert(rule: str, key: str, severity: str, now: float) -> dict:
    """An alert as the exported Prometheus rules fire it: their labels (BY, severity)."""
    labels = {"alertname": alert_name(rule), "instance": "gpu-7:9808", "job": "llm-doctor",
              "rule": rule, "cause": "fd-limit-low", "key": key, "symptoms": "errors",
              "severity": severity}
    return {"labels": labels, "startsAt": rfc3339(now), "endsAt": rfc3339(now + 600)}


@pytest.mark.live
@pytest.mark.timeout(120)
def test_a_critical_alert_hides_its_warning_in_a_real_alertmanager(tmp_path):
    am_bin = need("prometheus-alertmanager", "prometheus-alertmanager")
    config = tmp_path / "alertmanager.yml"
    config.write_text(ROUTE + _exported())
    port = stack.free_port()
    proc = stack.Proc("alertmanager", [am_bin, f"--config.file={config}",
                                       f"--storage.path={tmp_path / 'am-data'}",
                                       f"--web.listen-address=127.0.0.1:{port}",
                                       "--cluster.listen-address="], tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        stack.wait_for("Alertmanager ready", lambda: stack.get(url + "/-/ready") is not None, 30)
        # the daemon's own: one finding escalated (warning, then critical), another warning
        tracker = AlertTracker({}, resolve_after=1)
        tracker.observe([finding(key="hog pid 1"), finding(key="other pid 2")], {"cpu-contention"}, 0.0)
        moved = tracker.observe([finding(key="hog pid 1", severity=Severity.CRITICAL),
                                 finding(key="other pid 2")], {"cpu-contention"}, 15.0)
        assert [a.key for a in moved.escalated] == ["hog pid 1"]
        now = time.time()
        sent = payloads(tracker.firing(), "gpu-7", now, 600.0)
        assert sorted(p["labels"]["severity"] for p in sent) == ["critical", "warning", "warning"]
        # the exported Prometheus rules': both severities of one key, a warning of another
        sent += [_prometheus_alert("fd-limit-low", "engine llama.cpp@127.0.0.1:8080", s, now)
                 for s in ("warning", "critical")]
        sent.append(_prometheus_alert("fd-limit-low", "engine llama.cpp@127.0.0.1:8081", "warning", now))
        # not llm-doctor's (no rule label): never muted by llm-doctor's inhibit rule
        sent.append({"labels": {"alertname": "cpu-contention", "instance": "gpu-7",
                                "severity": "warning", "key": "hog pid 1"},
                     "startsAt": rfc3339(now), "endsAt": rfc3339(now + 600)})
        _post(url, sent)
        want = {
            ("cpu-contention", "hog pid 1", "critical"): ("active", 0),
            ("cpu-contention", "hog pid 1", "warning"): ("suppressed", 1),
            ("cpu-contention", "other pid 2", "warning"): ("active", 0),
            ("LlmDoctorFdLimitLow", "engine llama.cpp@127.0.0.1:8080", "critical"): ("active", 0),
            ("LlmDoctorFdLimitLow", "engine llama.cpp@127.0.0.1:8080", "warning"): ("suppressed", 1),
            ("LlmDoctorFdLimitLow", "engine llama.cpp@127.0.0.1:8081", "warning"): ("active", 0),
        }

        def settled():
            seen = _states(url)
            return seen if {k: seen.get(k) for k in want} == want else None

        try:
            seen = stack.wait_for("the warnings beside a critical suppressed", settled, 30, 0.5)
        except AssertionError:
            raise AssertionError(f"want {want}, seen {_states(url)}") from None
        # the foreign alert shares alertname, instance and key with a critical: still active
        foreign = [a for a in json.loads(stack.get(f"{url}/api/v2/alerts"))
                   if "rule" not in a["labels"]]
        assert [a["status"]["state"] for a in foreign] == ["active"], seen
    finally:
        proc.stop()
