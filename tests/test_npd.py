"""``llm-doctor npd`` run the way node-problem-detector's custom plugin monitor runs it.

NPD's binary is not run here (it is not available on this machine). ``npd_run`` stands in for
its ``pkg/custompluginmonitor/plugin/plugin.go``: it execs the rule's path and args from the
config ``llm-doctor npd --config`` writes, in a process group of its own that is killed
(SIGKILL) at the rule's timeout, reads at most 4 KiB of stdout, trims the white space around
it, cuts it at ``max_output_length`` bytes, and maps the exit code: 0 OK, 1 NonOK, any other
(a kill included) Unknown. The states it reads are written by real daemon beats on recorded
hosts.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from doctor.commands.setup import load_daemon as load
from doctor.daemon import state
from doctor.daemon.service import Daemon
from doctor.fleet import npd
from doctor.seam.recorded import RecordedHost
from tests.conftest import FIXTURE_HOSTS, REPO

STDOUT_MAX_BYTES = 4 * 1024  # plugin.go's maxCustomPluginBufferBytes


def _duration_s(text: str) -> float:
    assert text.endswith("s") and text[:-1].replace(".", "", 1).isdigit(), text
    return float(text[:-1])


def npd_run(rule: dict, config: dict) -> tuple[str, str, float]:
    """(status, message, seconds) for one rule, as NPD's plugin runner gives them."""
    timeout = min(_duration_s(rule.get("timeout") or "5s"),
                  _duration_s(config["pluginConfig"].get("timeout", "5s")))
    start = time.monotonic()
    proc = subprocess.Popen([rule["path"], *rule.get("args", [])], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)  # Setpgid
    killed = False
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        killed = True
        os.killpg(proc.pid, signal.SIGKILL)  # syscall.Kill(-pid, SIGKILL)
        out, _ = proc.communicate()
    seconds = time.monotonic() - start
    message = out[:STDOUT_MAX_BYTES].decode("utf-8", "replace").strip()
    if killed:
        message = f"Timeout when running plugin {rule['path']!r}: output - {message!r}"
    cut = message.encode()[:config["pluginConfig"].get("max_output_length", 80)]
    message = cut.decode("utf-8", "replace")  # a split character shows as U+FFFD
    status = {0: "OK", 1: "NonOK"}.get(proc.returncode, "Unknown")
    return status, message, seconds


def launcher(directory: Path) -> Path:
    """An ``llm-doctor`` console script as pip writes one (pyproject's [project.scripts]),
    running this checkout."""
    path = directory / "llm-doctor"
    path.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(REPO)!r})\n"
                    "from doctor.commands.entry import main\nsys.exit(main())\n")
    path.chmod(0o755)
    return path


def write_state(tmp: Path, host: str) -> Path:
    """The state a real daemon writes after beating on the recorded ``host``."""
    path = tmp / f"{host}.state.json"
    config = tmp / f"{host}.toml"
    config.write_text(f'[daemon]\nlevel = "quick"\ninterval = "15s"\nstate_file = "{path}"\n')
    daemon = Daemon(load(str(config), (), {}), lambda: load(str(config), (), {}),
                    host=RecordedHost(str(FIXTURE_HOSTS / host)))
    try:
        for _ in range(20):  # host.cpu can land a beat late on a loaded machine (bounded)
            daemon.beat()
            if "host.cpu" in daemon.latest:
                break
        daemon.beat()
    finally:
        daemon.dispatcher.close()
    return path


@pytest.fixture(scope="module")
def states(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("npd")
    return {host: write_state(tmp, host) for host in
            ("h100-sxm-8x-gpu-lost", "h100-sxm-8x-gpu-gone", "h100-sxm-8x-torch-cu128",
             "healthy-epyc-9654-vllm", "h100-8x-ndr-rail-down", "h100-8x-ndr-rails")}


@pytest.fixture(scope="module")
def binary(tmp_path_factory) -> Path:
    return launcher(tmp_path_factory.mktemp("bin"))


def _config(binary: Path, state_file: Path | str, *more: str) -> dict:
    out = subprocess.run([str(binary), "npd", "--config", "--binary", str(binary),
                          "--state-file", str(state_file), *more],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _run_family(binary: Path, state_file: Path | str, family: str, *more: str):
    config = _config(binary, state_file, *more)
    rule = next(r for r in config["rules"] if r["args"][r["args"].index("--family") + 1] == family)
    return npd_run(rule, config)


@pytest.mark.slow
def test_a_gpu_fallen_off_the_bus_sets_the_gpu_condition_and_only_it(states, binary):
    path = states["h100-sxm-8x-gpu-lost"]
    status, message, seconds = _run_family(binary, path, "gpu")
    assert status == "NonOK"
    assert message.startswith("gpu-hardware-errors critical: GPU5 (00000000:AB:00.0)")
    assert len(message.encode()) <= 80 and "\ufffd" not in message  # cut at a character
    # answered within NPD's timeout (a plugin past it reads Unknown), from the state alone:
    # test_the_plugin_path_imports_no_probe_renderer_or_torch holds what it loads, not a clock
    for family in ("engine", "host"):
        status, message, _ = _run_family(binary, path, family)
        assert (status, message.split()[0]) == ("OK", "ok"), message


@pytest.mark.slow
def test_an_rdma_rail_down_sets_the_network_condition_and_only_it(states, binary):
    status, message, _ = _run_family(binary, states["h100-8x-ndr-rail-down"], "net")
    assert status == "NonOK" and message.startswith("rdma-port-down critical: RDMA port mlx5_5/1"), message
    assert _config(binary, states["h100-8x-ndr-rail-down"])["conditions"][-1]["type"] == "LlmDoctorNetworkProblem"
    for family in ("gpu", "engine", "host"):
        assert _run_family(binary, states["h100-8x-ndr-rail-down"], family)[0] == "OK", family
    status, message, _ = _run_family(binary, states["h100-8x-ndr-rails"], "net")
    # net.rdma and net.gpudirect ran on this RDMA host, and neither found anything
    assert status == "OK" and message.startswith("ok net: 2 probes ran"), message


@pytest.mark.slow
def test_a_gpu_gone_from_the_pci_bus_sets_the_gpu_condition(states, binary):
    status, message, _ = _run_family(binary, states["h100-sxm-8x-gpu-gone"], "gpu")
    assert status == "NonOK" and message.startswith("gpu-fallen-off-the-bus critical: "), message


@pytest.mark.slow
def test_healthy_hosts_are_ok_in_every_family(states, binary):
    for host in ("h100-sxm-8x-torch-cu128", "healthy-epyc-9654-vllm"):
        for family in npd.BY_NAME:
            status, message, _ = _run_family(binary, states[host], family)
            assert status == "OK", (host, family, message)
            assert message.startswith(f"ok {family}: ")
            # the healthy EPYC has no GPU: its GPU family says why nothing was judged
            assert "nothing at critical" in message or "no probe ran" in message, message


@pytest.mark.slow
def test_a_warning_sets_the_condition_only_with_min_severity_warning(states, binary):
    path = states["h100-sxm-8x-torch-cu128"]  # the CUDA runtime newer than the driver: a warning
    assert _run_family(binary, path, "gpu")[0] == "OK"
    status, message, _ = _run_family(binary, path, "gpu", "--min-severity", "warning")
    assert status == "NonOK" and message.startswith("cuda-runtime-minor-newer-than-driver warning")


def test_a_stale_state_is_unknown_never_ok(states, binary, tmp_path):
    data = json.loads(states["healthy-epyc-9654-vllm"].read_text())
    data["taken_at"] = time.time() - 4 * data["interval_s"]  # older than three intervals
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps(data))
    status, message, _ = _run_family(binary, stale, "host")
    assert status == "Unknown"
    assert message.startswith("unknown the state in ") and "s old" in message


@pytest.mark.slow
def test_a_missing_or_broken_state_is_unknown(binary, tmp_path):
    status, message, _ = _run_family(binary, tmp_path / "absent.json", "gpu")
    assert (status, message.split()[:4]) == ("Unknown", ["unknown", "no", "state", "file"])
    for text in ("", "{", '{"kind": "llm-doctor-state"}', "\x00" * 100, "[1, 2]"):
        broken = tmp_path / "broken.json"
        broken.write_text(text)
        status, message, _ = _run_family(binary, broken, "engine")
        assert status == "Unknown" and message.startswith("unknown "), (text, message)


@pytest.mark.parametrize("args", [
    ["npd"],  # no family
    ["npd", "--family", "network"],
    ["npd", "--family", "gpu", "--min-severity", "info"],
    ["npd", "--family", "gpu", "--bogus"],
    ["npd", "--family", "gpu", "-o", "x.json"],  # -o goes with --config
    ["npd", "--family"],
])
def test_a_bad_flag_is_unknown_with_one_line_on_stdout(binary, tmp_path, args):
    out = subprocess.run([str(binary), *args], capture_output=True, text=True, timeout=30,
                         cwd=tmp_path)
    assert out.returncode == 2, out
    assert out.stdout.startswith("unknown usage: ") and out.stdout.count("\n") == 1
    assert len(out.stdout.strip().encode()) <= 80
    assert "Traceback" not in out.stderr and not (tmp_path / "x.json").exists()


@pytest.mark.slow
def test_the_whole_command_line_answers_the_same(states):
    path = str(states["h100-sxm-8x-gpu-lost"])
    for argv in (["-m", "doctor.commands.cli"], ["-m", "doctor.commands.entry"]):
        out = subprocess.run([sys.executable, *argv, "npd", "--family", "gpu", "--state-file",
                              path], capture_output=True, text=True, timeout=60, cwd=REPO)
        assert out.returncode == 1 and out.stdout.startswith("gpu-hardware-errors critical"), out
        bad = subprocess.run([sys.executable, *argv, "npd", "--nope"], capture_output=True,
                             text=True, timeout=60, cwd=REPO)
        assert bad.returncode == 2 and bad.stdout.startswith("unknown usage:"), bad


def test_the_plugin_path_imports_no_probe_renderer_or_torch(states):
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "doctor.commands.entry",
                          "npd", "--family", "gpu", "--state-file",
                          str(states["healthy-epyc-9654-vllm"])],
                         capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 0, out
    modules = {line.rsplit("|", 1)[-1].strip() for line in out.stderr.splitlines()
               if line.startswith("import time:")}
    heavy = sorted(m for m in modules if m.split(".")[0] in ("probes", "torch", "numpy", "rich")
                   or m in ("doctor.scan", "doctor.runner", "doctor.seam.live",
                            "doctor.commands.cli", "reports.terminal", "reports.html"))
    assert "doctor.commands.npd" in modules and heavy == []


@pytest.mark.slow
def test_npd_kills_a_plugin_that_outlives_its_timeout_and_reads_it_unknown(tmp_path):
    """The stand-in itself: a plugin still running at the timeout is killed, with its group."""
    slow = tmp_path / "slow"
    slow.write_text("#!/bin/sh\necho started\nsleep 30 &\nsleep 30\n")
    slow.chmod(0o755)
    config = {"pluginConfig": {"timeout": "1s", "max_output_length": 80}}
    status, message, seconds = npd_run({"path": str(slow), "args": [], "timeout": "1s"}, config)
    assert status == "Unknown" and message.startswith("Timeout when running plugin")
    assert 1 <= seconds < 30  # killed at its 1 s timeout, not before, nor at its sleep's end


def test_fit_bytes_keeps_a_line_within_npds_byte_cut():
    line = "gpu-thermal critical: " + "GPU0 at 88 °C — throttling " * 5
    fitted = npd.fit_bytes(line)
    assert len(fitted.encode()) <= 80 and fitted.endswith("…")
    assert fitted.encode()[:80].decode() == fitted  # NPD's cut leaves it whole
    assert npd.fit_bytes("ok  gpu:\n3 probes") == "ok gpu: 3 probes"


def test_the_families_are_the_states():
    assert tuple(npd.BY_NAME) == state.FAMILIES


@pytest.mark.slow
def test_without_a_daemon_fallback_quick_answers_from_its_own_quick_scan(binary, tmp_path):
    absent = tmp_path / "absent.json"
    out = subprocess.run([str(binary), "npd", "--family", "host", "--state-file", str(absent),
                          "--fallback-quick", "--fallback-budget", "30"],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.count("\n") == 1 and len(out.stdout.strip().encode()) <= 80
    assert not out.stdout.startswith("unknown"), out  # this machine, scanned at level quick
    assert (out.returncode == 0) == out.stdout.startswith("ok host: "), out
    assert not absent.exists()  # it answers; it writes no state
    late = subprocess.run([str(binary), "npd", "--family", "host", "--state-file", str(absent),
                           "--fallback-quick", "--fallback-budget", "0.001"],
                          capture_output=True, text=True, timeout=60)
    assert late.returncode == 2 and "the quick scan took longer than 0.001s" in late.stdout


def test_fallback_quick_never_stands_in_for_a_stale_daemon(states, binary, tmp_path):
    data = json.loads(states["h100-sxm-8x-gpu-lost"].read_text())
    data["taken_at"] -= 3600
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps(data))
    out = subprocess.run([str(binary), "npd", "--family", "gpu", "--state-file", str(stale),
                          "--fallback-quick"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout.startswith("unknown the state in stale.json is ")


def test_fit_bytes_leaves_no_control_character_in_a_condition():
    line = npd.fit_bytes("gpu-x critical: \x1b[31mred\x1b[0m \x00 \u202eevil \ud800 end")
    assert line == "gpu-x critical: ?[31mred?[0m ? ?evil ? end"
    assert line.encode()  # valid UTF-8: the lone surrogate is gone


def test_a_huge_flag_value_is_answered_at_once(binary):
    """A 100,000-character --min-severity: the cut is linear, not a character at a time (quadratic
    in its length: the run's 60 s bound fails it, with no clock of the test's own)."""
    out = subprocess.run([str(binary), "npd", "--family", "gpu", "--min-severity", "x" * 100_000],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout.startswith("unknown usage: ")
    assert len(out.stdout.strip().encode()) <= 80


def _changed(source: Path, target: Path, **changes) -> Path:
    data = json.loads(source.read_text())
    data.update({"taken_at": time.time(), **changes})
    target.write_text(json.dumps(data))
    return target


@pytest.mark.parametrize("changes", [
    {"taken_at": 1.0, "interval_s": 1e308}, {"taken_at": 1.0, "interval_s": 1e12},
    {"taken_at": 1.0, "interval_s": 2**63 - 1}, {"interval_s": 0.5}, {"interval_s": 86401},
    {"taken_at": 0}, {"taken_at": 1e18}, {"taken_at": -1.0}, {"taken_at": time.time() + 3600},
    {"daemon_pid": True}, {"evaluations": "17"}])
def test_a_state_no_daemon_writes_is_unknown_never_ok(states, binary, tmp_path, changes):
    """A state from 1970 whose interval is 1e308 answered OK: a healthy host, fresh for ever."""
    path = _changed(states["healthy-epyc-9654-vllm"], tmp_path / "state.json", **changes)
    status, message, _ = _run_family(binary, path, "host")
    assert status == "Unknown" and message.startswith("unknown "), message


def test_a_hostile_title_reaches_the_condition_masked_and_flat(states, binary, tmp_path):
    data = json.loads(states["h100-sxm-8x-gpu-lost"].read_text())
    data["report"]["findings"][0]["title"] = ("\x1b[31m--api-key\nsk-LEAKLEAK1234\x1b[0m "
                                              "token=hunter2hunter2 \u202eGPU5 gone")
    path = _changed(states["h100-sxm-8x-gpu-lost"], tmp_path / "state.json",
                    report=data["report"])
    status, message, _ = _run_family(binary, path, "gpu")
    assert status == "NonOK"
    # masked twice: on the way in (the saved-scan reader: the value runs to the space, the
    # escape sequence with it) and on the way out (control characters to blanks, then masked)
    assert message == "gpu-hardware-errors critical: [31m--api-key *** token=*** GPU5 gone"


@pytest.mark.parametrize("rule", ["ok", "ok-gpu", "unknown", "unknown-gpu", "ok gpu:",
                                  "gpu\nok"])
def test_a_rule_id_that_would_read_as_ok_or_unknown_makes_the_state_unknown(
        states, binary, tmp_path, rule):
    """A problem line starts with its rule id: an id 'ok-gpu' would read 'ok-gpu critical: …',
    which a reader of the line (or a regex ``^ok\\b``) takes for healthy."""
    data = json.loads(states["h100-sxm-8x-gpu-lost"].read_text())
    data["report"]["findings"][0]["rule"] = rule
    data["families"][rule] = "gpu"
    path = _changed(states["h100-sxm-8x-gpu-lost"], tmp_path / "state.json",
                    report=data["report"], families=data["families"])
    status, message, _ = _run_family(binary, path, "gpu")
    assert status == "Unknown" and message.startswith("unknown state.json: "), message
    assert not message.startswith(("ok", "unknown-", "unknown gpu"))


def test_a_secret_in_a_bad_flag_value_is_masked_on_stdout_and_stderr(binary):
    out = subprocess.run([str(binary), "npd", "--family", "gpu", "--min-severity",
                          "--api-key=sk-LEAKLEAK1234"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout.startswith("unknown usage: ")
    assert "LEAKLEAK" not in out.stdout + out.stderr and "***" in out.stderr, out
