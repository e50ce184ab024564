"""The CLI as a user runs it: live scans of this machine, planted faults, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import jsonschema
import pytest

from tests import live_stack
from tests.builtin_rules import builtin_rules
from tests.conftest import REPO

SCHEMA = json.loads((REPO / "docs" / "report-schema.json").read_text())
CONTENTION = next(r for r in builtin_rules() if r.id == "cpu-contention").params


def scan_json(cli, *args, **kw):
    result = cli("scan", "--format", "json", "--no-progress", *args, **kw)
    assert result.returncode in (0, 1, 2), result.stderr
    report = json.loads(result.stdout)
    jsonschema.validate(report, SCHEMA)
    assert report["exit_code"] == result.returncode
    return report


@pytest.mark.slow
def test_quick_scan_of_this_host_follows_the_schema(cli):
    report = scan_json(cli, "--level", "quick")
    names = {p["name"]: p for p in report["probes"]}
    assert {"host.limits", "host.sysctl", "host.cpu", "host.cpu_load", "host.memory"} <= set(names)
    assert "host.memory_bandwidth" not in names  # a micro-kernel: level standard
    assert names["host.memory"]["status"] == "ok"
    assert names["host.memory"]["data"]["total_mib"] > 0
    storage = names["host.storage"]
    if storage["status"] == "ok":  # an engine runs here: its model path is what is judged
        assert all(p["source"] != "--model-dir" for p in storage["data"]["paths"])
    else:
        assert storage["status"] == "skipped"
        assert "no --model-dir" in storage["reason"]


@pytest.mark.slow
def test_shell_with_ulimit_n_512_is_found(cli):
    report = scan_json(cli, "--level", "quick", shell_prefix="ulimit -n 512", private_pids=True)
    (finding,) = [f for f in report["findings"] if f["rule"] == "fd-limit-low"]
    assert finding["cause"] == "fd-limit-low"
    assert finding["symptoms"] == ["crash-under-concurrency", "queueing-under-load"]
    assert finding["severity"] == "warning"
    assert finding["evidence"]["nofile_soft"] == 512
    assert finding["evidence"]["role"] == "shell"
    assert finding["playbook"] == "playbooks/fd-limit-low.md"
    assert report["exit_code"] >= 1


@pytest.mark.slow
def test_a_process_spinning_on_a_core_is_found(cli):
    # A name of its own: the rule keys its findings by the process name, and a neighbour's
    # busy python3 would stand for a spinner called python3.
    name = f"ldspin{os.getpid() % 100000}"
    spin = live_stack.duty_spinner(name, 30, 1.0)
    try:
        time.sleep(0.3)
        report = scan_json(cli, "--level", "quick")
    finally:
        spin.kill()
        spin.wait(10)
    load = next(p for p in report["probes"] if p["name"] == "host.cpu_load")
    measured = [p for p in load["data"]["top"] if p["comm"] == name]  # its spinning child
    mine = [f for f in report["findings"] if f["rule"] == "cpu-contention" and f["key"] == name]
    # How much of a core the spinner gets is the machine's (a third on a loaded 2-core
    # machine): the rule is held to what the scan measured, half a core and more is named.
    named = bool(measured) and measured[0]["cpu_cores"] >= CONTENTION["min_cpu_cores"]
    assert bool(mine) == named, (measured, report["findings"])
    if mine:
        assert mine[0]["cause"] == "cpu-contention"
        assert mine[0]["evidence"]["process"] == f"{name} pid {measured[0]['pid']}"
        assert mine[0]["symptoms"] == ["slowdown"]
        assert mine[0]["evidence"]["cpu_cores"] == measured[0]["cpu_cores"]
    else:
        assert measured and measured[0]["cpu_cores"] > 0, load["data"]["top"]  # it was seen


@pytest.mark.slow
def test_capture_then_replay_gives_the_live_findings(cli, tmp_path):
    weights = tmp_path / "model"
    weights.mkdir()
    (weights / "model.safetensors").write_bytes(b"\1" * (8 * 1024 * 1024))
    cap = tmp_path / "cap"
    live = cli("capture", str(cap), "--model-dir", str(weights), "--format", "json",
               "--no-progress", timeout=300)
    assert live.returncode in (0, 1, 2), live.stderr
    live_report = json.loads(live.stdout)
    assert "recorded host written to" in live.stderr
    replay = scan_json(cli, "--replay", str(cap))
    assert replay["host"]["kind"] == "recorded"
    assert replay["level"] == "standard"
    assert replay["findings"] == live_report["findings"]
    assert [(p["name"], p["status"], p["data"]) for p in replay["probes"]] == \
           [(p["name"], p["status"], p["data"]) for p in live_report["probes"]]
    bandwidth = next(p for p in replay["probes"] if p["name"] == "host.memory_bandwidth")
    assert bandwidth["status"] == "ok" and bandwidth["data"]["triad_gbps"] > 0
    storage = next(p for p in replay["probes"] if p["name"] == "host.storage")
    assert storage["data"]["paths"][0]["read_mbps"] > 0


# machine: should the refusal regress, it would scan this machine (tests/tiers.py)
@pytest.mark.machine
def test_capture_refuses_a_non_empty_directory(cli, tmp_path):
    (tmp_path / "x").write_text("keep me")
    result = cli("capture", str(tmp_path), "--level", "quick")
    assert result.returncode == 3
    assert "not empty" in result.stderr and (tmp_path / "x").read_text() == "keep me"


@pytest.mark.slow
@pytest.mark.parametrize("args,message", [
    (("scan", "--levl", "quick"), "No such option '--levl'"),
    (("scan", "--replay", "/nonexistent"), "/nonexistent: not a directory"),
    (("scan", "--config", "/nonexistent.toml"), "config file not found"),
    (("playbook", "no-such-cause"), "no playbook for 'no-such-cause'"),
    (("scan", "--model-dir", "/no/such/models"), "--model-dir /no/such/models: no such file or directory"),
])
def test_the_scan_that_cannot_run_exits_3_with_a_clear_line(cli, args, message):
    result = cli(*args)
    assert result.returncode == 3
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_output_file_is_written_and_stdout_stays_empty(cli, tmp_path):
    out = tmp_path / "report.md"
    result = cli("scan", "--level", "quick", "--format", "markdown", "--output", str(out),
                 "--no-progress")
    assert result.returncode in (0, 1, 2)
    assert result.stdout == ""
    text = out.read_text()
    assert text.startswith("# llm-doctor report")
    assert "| `host.limits` | ok |" in text
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]  # no temporary left behind


@pytest.mark.slow
def test_terminal_report_has_verdict_findings_and_probes(cli):
    result = cli("scan", "--level", "quick", "--no-progress", shell_prefix="ulimit -n 512",
                 private_pids=True)
    assert result.returncode == 1
    first = result.stdout.splitlines()[0]
    assert first.startswith("WARNING")
    assert "open-files limit 512 is below 16384" in result.stdout
    assert "do: Raise the open-files limit" in result.stdout
    assert "host.cpu_load" in result.stdout


@pytest.mark.slow
def test_probes_and_rules_list_the_registries(cli):
    from probes.registry import PROBES
    from doctor.rules.loader import builtin_files, load_rules
    from probes.registry import by_name

    probes = cli("probes")
    assert probes.returncode == 0
    for spec in PROBES:
        assert spec.name in probes.stdout
    rules = cli("rules")
    assert rules.returncode == 0
    for rule in load_rules(builtin_files(), by_name()):
        assert rule.id in rules.stdout


@pytest.mark.slow
@pytest.mark.parametrize("cause,line", [
    ("fd-limit", "llm-doctor: no playbook for 'fd-limit' (did you mean 'fd-limit-low'?)"),
    ("slow-disk", "llm-doctor: no playbook for 'slow-disk' (did you mean 'model-on-slow-disk'?)"),
    ("xyzzy", "llm-doctor: no playbook for 'xyzzy'; 'llm-doctor rules' shows each rule's cause "
              "id, playbooks/README.md lists them all"),
])
def test_an_unknown_playbook_suggests_the_nearest_instead_of_listing_all(cli, cause, line):
    result = cli("playbook", cause)
    assert result.returncode == 3
    assert result.stderr.strip() == line  # one line, not the 48 cause ids


@pytest.mark.slow
def test_playbook_command_shows_the_playbook(cli):
    result = cli("playbook", "fd-limit-low")
    assert result.returncode == 0
    assert "Confirm" in result.stdout and "Verify" in result.stdout


def test_config_is_found_in_the_working_directory_then_the_user_directory(tmp_path):
    from doctor.config import find_config

    import os

    here = os.getcwd()
    try:
        os.chdir(tmp_path)
        os.environ["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
        assert find_config(None) is None
        user = tmp_path / "xdg" / "llm-doctor" / "config.toml"
        user.parent.mkdir(parents=True)
        user.write_text("[scan]\nlevel = 'quick'\n")
        assert find_config(None) == user
        (tmp_path / "llm-doctor.toml").write_text("")
        assert str(find_config(None)) == "llm-doctor.toml"
    finally:
        os.chdir(here)
        os.environ.pop("XDG_CONFIG_HOME")


@pytest.mark.slow
def test_config_scan_defaults_apply(cli, tmp_path):
    config = tmp_path / "c.toml"
    config.write_text("[scan]\nlevel = 'quick'\n")
    report = scan_json(cli, "--config", str(config))
    assert report["level"] == "quick"
    config.write_text("[scan]\nlevel = 'fast'\n")
    result = cli("scan", "--config", str(config))
    assert result.returncode == 3 and "scan.level = 'fast'; use quick, standard or full" in result.stderr


@pytest.mark.slow
def test_unwritable_output_is_a_clear_error(cli, tmp_path):
    result = cli("scan", "--level", "quick", "--output", str(tmp_path / "missing-dir" / "r.json"))
    assert result.returncode == 3
    assert "missing-dir" in result.stderr and "is not a writable directory" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_running_engine_is_judged_by_its_own_limits_and_model_path(cli, tmp_path):
    """A process that presents itself as llama-server (argv[0]) with 1024 open files."""
    model = tmp_path / "gemma.gguf"
    model.write_bytes(b"\0" * (4 * 1024 * 1024))
    engine = subprocess.Popen(
        ["bash", "-c", f"ulimit -n 1024; exec -a llama-server {sys.executable} "
                       f"-c 'import time; time.sleep(30)' -m {model} --port 8080"])
    try:
        deadline = time.monotonic() + 10
        while "llama-server" not in open(f"/proc/{engine.pid}/cmdline").read():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        report = scan_json(cli, "--level", "quick")
    finally:
        engine.kill()
        engine.wait()
    limits = next(p for p in report["probes"] if p["name"] == "host.limits")["data"]
    assert limits["engine_count"] >= 1
    fd = [f for f in report["findings"] if f["rule"] == "fd-limit-low"
          and f["evidence"]["process"].endswith(f"pid {engine.pid}")]
    assert fd and fd[0]["severity"] == "critical" and fd[0]["evidence"]["role"] == "engine"
    assert fd[0]["evidence"]["nofile_soft"] == 1024
    storage = next(p for p in report["probes"] if p["name"] == "host.storage")
    assert storage["status"] == "ok"
    (path,) = [p for p in storage["data"]["paths"] if p["path"] == str(model)]
    assert path["source"] == f"llama.cpp pid {engine.pid}"
    assert path["weight_files"] == 1 and path["weights_bytes"] == 4 * 1024 * 1024
