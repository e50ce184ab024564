"""The daemon speaks its config's ``lang``: a daemon with ``lang = "zh_CN"`` on a recorded
hot GPU sends a real Alertmanager and a webhook receiver alerts whose summary and
description are Chinese (their labels as in English), writes a Chinese incident report, and
logs in Chinese; ``--lang`` wins over the config, and the config over LLM_DOCTOR_LANG.

The alert comes from a site rule file with its own Chinese beside it (``zh_CN/site.toml``,
doctor/rules/texts.py), so the test does not depend on the built-in rules' translations.
"""

from __future__ import annotations

import json
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from doctor.config import Config, ConfigError, load_config
from doctor.daemon.service import daemon_lang
from tests import live_stack as stack
from tests.conftest import FIXTURE_HOSTS, REPO
from tests.daemon_helpers import need

HOST = FIXTURE_HOSTS / "h100-thermal-88c"  # GPU0 at 88 C
CONFIG = """lang = "zh_CN"

[daemon]
level = "quick"
interval = "1s"
resend_interval = "2s"
[daemon.for]
site-gpu-hot = "0s"
"""
SITE_RULES = """[[rule]]
id = "site-gpu-hot"
cause = "gpu-thermal-throttling"
symptoms = ["slowdown"]
severity = "warning"
probes = ["gpu.thermal_power"]
each = "gpu.thermal_power.gpus"
when = "item.temp_c is not None and item.temp_c > 80"
title = "GPU{gpu} is above 80 C: {temp_c} C"
remediation = "Check the fans with `nvidia-smi -q -d TEMPERATURE`."
playbook = "gpu-thermal-throttling"
[rule.evidence]
gpu = "item.index"
temp_c = "item.temp_c"
"""
SITE_RULES_ZH = """[site-gpu-hot]
title = "GPU{gpu} 温度超过 80 C：{temp_c} C"
remediation = "用 `nvidia-smi -q -d TEMPERATURE` 检查风扇。"
"""
CJK = re.compile(r"[\u4e00-\u9fff]")


def test_lang_is_the_flag_then_the_config_then_the_environment():
    zh, plain = Config(lang="zh_CN"), Config()
    env = {"LLM_DOCTOR_LANG": "zh_CN"}
    assert daemon_lang(zh, "en", env) == "en"
    assert daemon_lang(zh, None, {"LLM_DOCTOR_LANG": "en"}) == "zh_CN"
    assert daemon_lang(plain, None, env) == "zh_CN"
    assert daemon_lang(plain, None, {"LANG": "zh_CN.UTF-8"}) == "zh_CN"
    assert daemon_lang(plain, None, {}) == "en"


def test_a_bad_lang_in_the_config_names_its_file_and_line(tmp_path):
    path = tmp_path / "llm-doctor.toml"
    path.write_text('# site settings\n\nlang = "fr"\n[scan]\nlevel = "quick"\n')
    with pytest.raises(ConfigError, match=r"llm-doctor.toml:3: lang: 'fr' is not a language "
                                          r"llm-doctor speaks; use en or zh_CN"):
        load_config(path)
    path.write_text("lang = 1\n")
    with pytest.raises(ConfigError, match=r"llm-doctor.toml:1: lang must be a string"):
        load_config(path)
    path.write_text('lang = "zh-CN"\n')
    assert load_config(path).lang == "zh_CN"


class _Hook(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)  # type: ignore[attr-defined]
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def _daemon(folder: Path, *flags: str, env: dict | None = None) -> tuple[stack.Proc, str]:
    (folder / "llm-doctor.toml").write_text(CONFIG)
    (folder / "zh_CN").mkdir(exist_ok=True)
    (folder / "site.toml").write_text(SITE_RULES)
    (folder / "zh_CN" / "site.toml").write_text(SITE_RULES_ZH)
    argv = [sys.executable, "-m", "doctor.commands.cli", "daemon", "--listen", "127.0.0.1:0",
            "--config", str(folder / "llm-doctor.toml"), "--rules", str(folder / "site.toml"),
            "--replay", str(HOST), "--state-file", "", *flags]
    proc = stack.Proc("daemon", argv, folder, env={"PYTHONPATH": str(REPO), **(env or {})})

    def address():
        if proc.popen.poll() is not None:
            raise AssertionError(f"the daemon exited: {proc.log()}")
        match = re.search(r"https?://(\S+)/metrics", proc.log())
        return match.group(1) if match else None

    return proc, stack.wait_for("the daemon to listen", address, 60)


@pytest.mark.live
@pytest.mark.timeout(240)
def test_a_chinese_daemon_sends_chinese_alerts_and_reports(tmp_path):
    am_bin = need("prometheus-alertmanager", "prometheus-alertmanager")
    hook = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    hook.bodies = []  # type: ignore[attr-defined]
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    reports = tmp_path / "reports"
    procs: list[stack.Proc] = []
    daemon = None
    try:
        am, am_url = stack.alertmanager(am_bin, tmp_path)
        procs.append(am)
        daemon, address = _daemon(tmp_path, "--alertmanager", am_url, "--report-dir", str(reports),
                                  "--webhook", f"http://127.0.0.1:{hook.server_address[1]}/hook",
                                  env={"LLM_DOCTOR_LANG": "en"})  # the config wins over it
        procs.append(daemon)

        def ours():
            alerts = json.loads(stack.get(am_url + "/api/v2/alerts?filter=alertname%3D%22site-gpu-hot%22"))
            return [a for a in alerts if a["labels"].get("rule") == "site-gpu-hot"]

        fired = stack.wait_for("the alert in Alertmanager", ours, 90, 1.0)
        labels, notes = fired[0]["labels"], fired[0]["annotations"]
        # the labels are those of an English daemon; the text for people is Chinese
        assert labels["alertname"] == "site-gpu-hot" and labels["severity"] == "warning"
        assert labels["cause"] == "gpu-thermal-throttling" and labels["job"] == "llm-doctor"
        assert labels["key"] == "0"
        assert notes["summary"] == "GPU0 温度超过 80 C：88 C", notes
        assert notes["description"] == "用 `nvidia-smi -q -d TEMPERATURE` 检查风扇。"
        assert notes["symptoms"] == "slowdown"

        body = stack.wait_for("the webhook's alert", lambda: [
            a for b in hook.bodies for a in b["alerts"]  # type: ignore[attr-defined]
            if a["labels"]["rule"] == "site-gpu-hot"], 30)
        assert body[0]["annotations"]["summary"] == notes["summary"]

        report = stack.wait_for("an incident report",
                                lambda: list(reports.glob("incident-*-site-gpu-hot-*.html")), 30)
        page = report[0].read_text()
        assert '<html lang="zh-CN">' in page
        assert "<h2>诊断发现</h2>" in page and "GPU0 温度超过 80 C：88 C" in page
        assert "告警触发" in page

        log = daemon.log()
        assert "告警触发：site-gpu-hot 0 [warning] GPU0 温度超过 80 C：88 C" in log, log[-3000:]
        assert "正在提供指标" in log and "serving metrics" not in log
        page = stack.get(f"http://{address}/metrics")  # the metrics' names and labels as ever
        assert 'llm_doctor_finding{' in page and 'rule="site-gpu-hot"' in page
        assert not CJK.search("\n".join(line for line in page.splitlines()
                                        if not line.startswith("#")))
    except AssertionError:
        if daemon is not None:
            print(daemon.log()[-6000:])
        raise
    finally:
        hook.shutdown()
        for proc in reversed(procs):
            proc.stop()


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_lang_on_the_command_line_wins_over_the_config(tmp_path):
    daemon, _ = _daemon(tmp_path, "--lang", "en")
    try:
        stack.wait_for("an evaluation", lambda: "site-gpu-hot" in daemon.log(), 60)
        log = daemon.log()
        assert "serving metrics on http://" in log
        assert "alert firing: site-gpu-hot 0 [warning] GPU0 is above 80 C: 88 C" in log
        assert not CJK.search(log), log[-3000:]
    finally:
        daemon.stop()
