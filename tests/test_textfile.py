"""'scan --format prom' writes node_exporter's textfile format: the exporter's series, checked by
promtool, written atomically, and valid whatever the recorded host holds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from doctor.config import ConfigError
from doctor.daemon.settings import load_settings, with_flags
from doctor.fleet.textfile import MAX_LABEL, scan_text
from doctor.model import Finding, Level, ScanOptions, ScanReport, Severity
from doctor.scan import scan
from doctor.seam.recorded import RecordedHost
from probes.registry import PROBES
from tests.tiers import sampled
from tests.builtin_rules import builtin_rules
from tests.conftest import FIXTURE_HOSTS, REPO
from tests.daemon_helpers import need, prompt_histogram_host

POWERSAVE = FIXTURE_HOSTS / "xeon-gold-6338-2socket-powersave"
NOBODY = 65534


def _scan(cli, host: Path, out: str, *extra: str):
    return cli("scan", "--replay", str(host), "--format", "prom", "-o", out, "--no-progress",
               *extra)


def _promtool_clean(path: Path) -> None:
    promtool = need("promtool", "prometheus")
    with open(path, "rb") as f:
        check = subprocess.run([promtool, "check", "metrics"], stdin=f, capture_output=True,
                               text=True, timeout=60)
    assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), \
        check.stdout + check.stderr


def _promtool_lint(text: str) -> str:
    """promtool's complaints about a textfile ("" when it has none)."""
    promtool = need("promtool", "prometheus")
    check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=60)
    return "" if check.returncode == 0 and not check.stderr.strip() else check.stdout + check.stderr


def _host_text(path: Path) -> str:
    """'scan --format prom' of a recorded host at the level it was captured at, in-process
    (a CLI run each would make this test a minute)."""
    host = RecordedHost(path)
    meta = host.manifest["host"]
    options = ScanOptions(level=Level.parse(meta.get("level", "standard")),
                          model_dirs=tuple(meta.get("model_dirs", [])))
    return scan_text(scan(host, options, PROBES, RULES))


HOSTS = sorted(p for p in FIXTURE_HOSTS.iterdir() if (p / "host.toml").is_file())
RULES = builtin_rules()


@pytest.mark.parametrize("path", sampled(HOSTS))  # a quarter in the floor, all in the suite
def test_the_textfile_of_every_recorded_host_passes_promtool(path):
    """Every committed recorded host, GPU and vLLM ones included, not only a CPU host."""
    assert _promtool_lint(_host_text(path)) == ""


@pytest.mark.slow
def test_the_textfile_of_a_vllm_host_with_a_prompt_histogram_passes_promtool(tmp_path):
    """The row no committed host fills: llm_doctor_engine_prompt_histogram_requests was
    refused by promtool ("metric name should not include type 'histogram'")."""
    text = _host_text(prompt_histogram_host(tmp_path))
    assert "llm_doctor_engine_prompts_counted_requests{" in text
    assert _promtool_lint(text) == ""


def _samples(text: str) -> dict[str, list]:
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


@pytest.mark.slow
def test_scan_prom_is_clean_for_promtool_and_holds_the_exporters_series(cli, tmp_path):
    out = tmp_path / "llm-doctor.prom"
    before = time.time()
    result = _scan(cli, POWERSAVE, str(out))
    assert result.returncode == 1, result.stderr  # a warning: cpu-powersave-governor
    _promtool_clean(out)
    text = out.read_text()
    samples = _samples(text)
    findings = {s.labels["rule"]: s.labels for s in samples["llm_doctor_finding"]}
    # the daemon exporter's label set, so the exported alert rules match either
    assert findings["cpu-powersave-governor"] == {
        "rule": "cpu-powersave-governor", "cause": "cpu-powersave-governor",
        "severity": "warning", "symptoms": "slowdown,slow-first-token", "key": ""}
    success = {s.labels["probe"]: s.value for s in samples["llm_doctor_probe_success"]}
    assert success["host.cpu"] == 1.0 and success["gpu.inventory"] == 0.0
    status = {(s.labels["probe"], s.labels["status"]) for s in samples["llm_doctor_probe_status"]}
    assert ("host.cpu", "ok") in status and ("gpu.inventory", "skipped") in status
    assert {s.labels["probe"] for s in samples["llm_doctor_probe_duration_seconds"]} == set(success)
    assert samples["llm_doctor_scan_exit_code"][0].value == 1.0
    assert samples["llm_doctor_host_cpu_governor_cpus"][0].labels == {"governor": "powersave"}
    written = samples["llm_doctor_textfile_written_timestamp_seconds"][0].value
    assert before <= written <= time.time()
    evaluated = samples["llm_doctor_last_evaluation_timestamp_seconds"][0].value
    assert before - 2 <= evaluated <= written  # started_at is whole seconds
    # a scan has no daemon: no alerts, no count of evaluations, no scrape of its own
    assert not {"llm_doctor_alert", "llm_doctor_evaluations_total",
                "llm_doctor_scrape_timestamp_seconds"} & set(samples)
    # titles and evidence stay out: they are free text
    report = json.loads(cli("scan", "--replay", str(POWERSAVE), "--format", "json",
                            "--no-progress").stdout)
    for finding in report["findings"]:
        assert finding["title"] not in text
        for value in finding["evidence"].values():
            if isinstance(value, str) and len(value) > 3:
                assert f'"{value}"' not in text


@pytest.mark.slow
def test_scan_prom_goes_to_standard_output_without_o(cli):
    result = cli("scan", "--replay", str(POWERSAVE), "--format", "prom", "--no-progress")
    assert result.returncode == 1, result.stderr
    assert "llm_doctor_finding{" in result.stdout
    assert "llm_doctor_textfile_written_timestamp_seconds" in result.stdout


@pytest.mark.slow
def test_the_file_is_replaced_by_a_rename_and_nothing_else_is_left(cli, tmp_path):
    """node_exporter reads DIR/*.prom at any moment: each write is a new file renamed over
    the old one (a new inode), never the old one truncated and rewritten."""
    out = tmp_path / "llm-doctor.prom"
    assert _scan(cli, POWERSAVE, str(out)).returncode == 1
    first = os.stat(out)
    assert _scan(cli, POWERSAVE, str(out)).returncode == 1
    second = os.stat(out)
    assert first.st_ino != second.st_ino
    assert os.listdir(tmp_path) == ["llm-doctor.prom"]  # no temporary file left beside it
    assert second.st_mode & 0o777 == 0o644  # node_exporter runs as another user


@pytest.mark.slow
def test_a_bad_output_is_one_line_and_exit_3(cli, tmp_path):
    folder = tmp_path / "a-directory.prom"
    folder.mkdir()
    cases = {str(folder): "is a directory",
             str(tmp_path / "missing" / "x.prom"): "is not a writable directory"}
    link = tmp_path / "link.prom"
    link.symlink_to(tmp_path / "elsewhere.prom")
    cases[str(link)] = "is a symbolic link"
    for path, why in cases.items():
        result = _scan(cli, POWERSAVE, path)
        assert result.returncode == 3, (path, result.stderr)
        assert why in result.stderr and path in result.stderr
        assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "elsewhere.prom").exists()


def test_an_output_folder_this_user_may_not_write_is_exit_3():
    """As nobody when the tests run as root (root writes anywhere), in a folder of /tmp
    that nobody may enter but not write (pytest's own tmp_path is root's alone)."""
    with tempfile.TemporaryDirectory(prefix="llm-doctor-textfile-") as tmp:
        os.chmod(tmp, 0o755)
        folder = Path(tmp) / "textfile"
        folder.mkdir()
        folder.chmod(0o555)
        argv = [sys.executable, "-m", "doctor.commands.cli", "scan", "--replay", str(POWERSAVE),
                "--format", "prom", "-o", str(folder / "x.prom"), "--no-progress"]
        if os.geteuid() == 0:
            setpriv = need("setpriv", "util-linux")
            argv = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                                stdin=subprocess.DEVNULL, cwd=REPO)
        assert result.returncode == 3, result.stdout + result.stderr
        assert f"{folder} is not a writable directory" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
        assert os.listdir(folder) == []


HOSTILE = 'a "quoted" back\\slash {brace} =eq,comma ' + "x" * 3000


def hostile_host(folder: Path) -> Path:
    """The powersave host with label values no exporter should trust: quotes, backslashes,
    newlines, a lone surrogate, a right-to-left override, 3,000 and 100,000 characters."""
    host = folder / "hostile-host"
    shutil.copytree(POWERSAVE, host)
    cpuinfo = host / "fs/proc/cpuinfo"
    cpuinfo.write_text(cpuinfo.read_text().replace("Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
                                                   HOSTILE))
    (host / "fs/sys/kernel/mm/transparent_hugepage/enabled").write_text(
        'always [mad"vi\\se\u202e] never\n')
    measurements = json.loads((host / "measurements.json").read_text())
    top = measurements["host.cpu_load"]["top"]
    top[0]["comm"] = 'evil"\n\\comm\udcff' + "y" * 100_000
    top[1]["comm"] = "line\nbreak"
    (host / "measurements.json").write_text(json.dumps(measurements))
    return host


@pytest.mark.slow
def test_a_hostile_host_still_gives_a_valid_file(cli, tmp_path):
    out = tmp_path / "hostile.prom"
    result = _scan(cli, hostile_host(tmp_path), str(out))
    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr
    _promtool_clean(out)
    samples = _samples(out.read_text())
    model = samples["llm_doctor_host_cpu_info"][0].labels["model"]
    assert model == HOSTILE[:MAX_LABEL - 1] + "…"  # escaped on the way out, read back whole
    comms = {s.labels["comm"] for s in samples["llm_doctor_host_top_process_cpu_cores"]}
    assert "line\nbreak" in comms
    assert any(c.startswith('evil"\n\\comm\ufffd') and len(c) == MAX_LABEL for c in comms)
    success = {s.labels["probe"]: s.value for s in samples["llm_doctor_probe_success"]}
    assert success["host.sysctl"] == 0.0  # the hostile THP file is the probe's named error


def test_series_that_meet_once_cut_are_written_once():
    """Two keys that differ only past MAX_LABEL characters would be one series twice, and
    node_exporter drops the repeat and logs a gathering error at every scrape."""
    def finding(key: str) -> Finding:
        return Finding(rule="cpu-contention", cause="cpu-contention", symptoms=("slowdown",),
                       severity=Severity.CRITICAL, title="t", evidence={}, remediation="r",
                       playbook="playbooks/cpu-contention.md", key=key)

    report = ScanReport(host={}, level=Level.QUICK, started_at="2026-12-01T10:00:00Z",
                        duration_s=1.5, findings=[finding("k" * 2000 + "a"),
                                                  finding("k" * 2000 + "b")])
    text = scan_text(report, written_at=1796119202.0)
    samples = _samples(text)
    assert len(samples["llm_doctor_finding"]) == 1
    assert samples["llm_doctor_scan_exit_code"][0].value == 2.0
    assert samples["llm_doctor_last_evaluation_timestamp_seconds"][0].value == 1796119201.5
    assert samples["llm_doctor_textfile_written_timestamp_seconds"][0].value == 1796119202.0


def test_the_daemons_textfile_setting_is_checked_as_the_others(tmp_path):
    config = tmp_path / "llm-doctor.toml"
    config.write_text('[daemon]\ntextfile = "/var/lib/node_exporter/textfile/llm-doctor.prom"\n')
    assert load_settings(config).textfile == "/var/lib/node_exporter/textfile/llm-doctor.prom"
    for value, why in (('"/var/lib/node_exporter/textfile/llm-doctor.txt"', "named *.prom"),
                       ("5", "must be a string"), ('"a\\nb.prom"', "control character")):
        config.write_text(f"[daemon]\n\ntextfile = {value}\n")
        with pytest.raises(ConfigError) as raised:
            load_settings(config)
        assert f"{config}:3: daemon.textfile" in str(raised.value) and why in str(raised.value)
    with pytest.raises(ConfigError, match=r"^--textfile = 'llm-doctor': node_exporter's textfile"):
        with_flags(load_settings(None), textfile="llm-doctor")
    assert with_flags(load_settings(None), textfile="").textfile == ""  # '' writes none
