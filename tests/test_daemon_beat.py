"""One daemon beat after another on a recorded host: metrics, alerts, an incident report."""

from __future__ import annotations

from prometheus_client import generate_latest

import pytest

from doctor.daemon.service import Daemon
from doctor.commands.setup import load_daemon as load
from doctor.seam.recorded import RecordedHost
from tests.conftest import FIXTURE_HOSTS

HOST = FIXTURE_HOSTS / "xeon-gold-6338-2socket-powersave"


def _daemon(tmp_path, for_s: str) -> Daemon:
    config = tmp_path / "llm-doctor.toml"
    config.write_text(f'[daemon]\nlevel = "quick"\ninterval = "1s"\nreport_dir = "{tmp_path}/r"\n'
                      f'[daemon.for]\ncpu-powersave-governor = "{for_s}"\n')
    loaded = load(str(config), (), {})
    return Daemon(loaded, lambda: load(str(config), (), {}), host=RecordedHost(str(HOST)))


def test_a_finding_fires_once_with_a_report_and_shows_in_the_metrics(tmp_path):
    daemon = _daemon(tmp_path, "0s")
    try:
        # A beat waits for its probes 80% of the interval at most: on a loaded machine host.cpu
        # can finish in a later beat. Beat until it has (bounded), then twice more.
        for _ in range(20):
            daemon.beat()
            if "host.cpu" in daemon.latest:
                break
        for _ in range(2):
            daemon.beat()
    finally:
        daemon.dispatcher.close()
    page = generate_latest(daemon.registry).decode()
    assert 'llm_doctor_finding{cause="cpu-powersave-governor"' in page
    alerts = [line for line in page.splitlines() if line.startswith("llm_doctor_alert{")]
    assert any('alertstate="firing"' in line and 'rule="cpu-powersave-governor"' in line
               for line in alerts)
    assert not any('severity="info"' in line for line in alerts)  # info findings: metrics only
    assert 'llm_doctor_probe_success{probe="host.cpu"} 1.0' in page
    assert "llm_doctor_host_cpu_logical_cpus" in page
    reports = list((tmp_path / "r").glob("incident-*-cpu-powersave-governor-*.html"))
    assert len(reports) == 1  # one alert, one report, however many beats
    assert "powersave" in reports[0].read_text()
    assert daemon.dispatcher.failures == 0


def test_a_for_window_keeps_it_pending(tmp_path):
    daemon = _daemon(tmp_path, "1h")
    try:
        daemon.beat()
        daemon.beat()
    finally:
        daemon.dispatcher.close()
    assert [a.state for a in daemon.tracker.active() if a.rule == "cpu-powersave-governor"] == ["pending"]
    assert not (tmp_path / "r").exists()


@pytest.mark.slow
def test_reload_applies_a_new_for_window(tmp_path):
    daemon = _daemon(tmp_path, "1h")
    try:
        daemon.beat()
        (tmp_path / "llm-doctor.toml").write_text(
            '[daemon]\nlevel = "quick"\ninterval = "1s"\n[daemon.for]\ncpu-powersave-governor = "0s"\n')
        daemon.reload()
        daemon.beat()
    finally:
        daemon.dispatcher.close()
    assert [a.state for a in daemon.tracker.active() if a.rule == "cpu-powersave-governor"] == ["firing"]


def test_model_dirs_from_the_command_line_reach_the_probes(tmp_path):
    loaded = load(None, (), {"model_dirs": (str(tmp_path),), "level": "quick"})
    assert loaded.options.model_dirs == (str(tmp_path),)
    assert loaded.settings.level == "quick"
