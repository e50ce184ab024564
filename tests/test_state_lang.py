"""The daemon's state file is the same whatever the daemon speaks; each adapter says it in
its own language (issue 29 §2).

A daemon configured to speak Chinese beats on a recorded host whose GPU fell off the bus; its
state is written in English, carrying each text's value, and ``npd --lang`` and
``slurm-healthcheck --lang`` read the same file in either language. Before, the state held
the daemon's Chinese, and an English adapter printed it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from doctor.commands.setup import load_daemon as load
from doctor.daemon.service import Daemon
from doctor.i18n import current
from doctor.seam.recorded import RecordedHost
from tests.conftest import FIXTURE_HOSTS, REPO

HOST = "h100-sxm-8x-gpu-lost"
CJK = re.compile(r"[\u4e00-\u9fff]")


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> Path:
    """The state a daemon speaking Chinese writes after beating on HOST."""
    tmp = tmp_path_factory.mktemp("state-lang")
    path = tmp / "state.json"
    config = tmp / "daemon.toml"
    config.write_text(f'lang = "zh_CN"\n[daemon]\nlevel = "quick"\ninterval = "15s"\n'
                      f'state_file = "{path}"\n')
    daemon = Daemon(load(str(config), (), {}), lambda: load(str(config), (), {}),
                    host=RecordedHost(str(FIXTURE_HOSTS / HOST)))
    try:
        daemon.beat()
        daemon.beat()
    finally:
        daemon.dispatcher.close()
    return path


def test_the_daemon_speaks_chinese_without_flipping_the_process_language(state):
    assert current() == "en"  # its own threads speak its language; probes and others their own


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("SLURMD_NODENAME", "LLM_DOCTOR_LANG", "LANG", "LC_ALL", "LC_MESSAGES")}
    return subprocess.run([sys.executable, "-m", "doctor.commands.entry", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env={**env, "PYTHONPATH": str(REPO), "PATH": "/nonexistent"})


def test_the_state_is_written_in_english_with_its_values(state):
    report = json.loads(state.read_text())["report"]
    assert report["lang"] == "en" and report["msg_version"] == 1
    findings = report["findings"]
    assert findings and not any(CJK.search(f["title"]) for f in findings)
    assert all(CJK.search(f["title_msg"]["texts"]["zh_CN"]) for f in findings)


def test_npd_reads_one_state_in_either_language(state):
    report = json.loads(state.read_text())["report"]
    first = next(f for f in report["findings"] if f["severity"] == "critical")
    lines = {}
    for lang in ("en", "zh_CN"):
        done = _run("npd", "--family", "gpu", "--state-file", str(state), "--lang", lang)
        assert done.returncode == 1, (done.stdout, done.stderr)
        lines[lang] = done.stdout.strip()
    assert not CJK.search(lines["en"]) and first["title"][:30] in lines["en"]
    assert first["title_msg"]["texts"]["zh_CN"][:12] in lines["zh_CN"]
    assert lines["en"].split()[0] == lines["zh_CN"].split()[0] == first["rule"]


def test_slurm_healthcheck_reads_one_state_in_either_language(state):
    report = json.loads(state.read_text())["report"]
    first = next(f for f in report["findings"] if f["severity"] == "critical")
    said = {}
    for lang in ("en", "zh_CN"):
        done = _run("slurm-healthcheck", "--dry-run", "--node", "gpu7", "--state-file",
                    str(state), "--lang", lang)
        assert done.returncode == 1, (done.stdout, done.stderr)
        said[lang] = done.stdout
    assert "NodeName=gpu7 State=DRAIN" in said["en"] and not CJK.search(said["en"])
    assert first["title"][:20] in said["en"]
    assert CJK.search(said["zh_CN"]) and first["title_msg"]["texts"]["zh_CN"][:8] in said["zh_CN"]
