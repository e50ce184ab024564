"""Outputs that cannot hurt: valid JSON whatever the records hold, reports that never crash
and never pass a terminal escape on, and ``-o`` that replaces nothing but a regular file."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import stat
import threading

import jsonschema
import pytest
from rich.console import Console

from doctor.model import Finding, Level, ProbeResult, ScanReport, Severity
from doctor.output import check_target, write_atomic
from doctor.redact import safe_display
from probes.host.cpu_load import CpuLoadRecord, ProcessCpu
from reports import json_report, markdown, terminal
from doctor.runner import summarise
from probes.registry import by_name
from reports.common import probe_summary
from tests.conftest import FIXTURE_HOSTS, REPO

SCHEMA = json.loads((REPO / "docs" / "report-schema.json").read_text())
ESC = "\x1b"
HOSTILE = f"evil{ESC}]0;owned{ESC}\\{ESC}[2J|`x`\nnext"  # retitle, clear, break a table


def _report(record=None, evidence=None, **finding) -> ScanReport:
    """A report as a scan of a hostile recording could produce it."""
    record = record or CpuLoadRecord(
        window_s=0.5, logical_cpus=2, busy_cores=float("nan"),
        top=(ProcessCpu(7, f"comm{ESC}[31m", f"llama-server --x {HOSTILE}", float("inf"),
                        "llama.cpp", False, False),))
    fields = {"rule": "cpu-contention", "cause": "cpu-contention", "symptoms": ("slowdown",),
              "severity": Severity.WARNING, "title": f"title {HOSTILE}",
              "evidence": evidence if evidence is not None else {"process": HOSTILE},
              "remediation": "Run `kill`.", "playbook": "playbooks/cpu-contention.md"}
    fields.update(finding)
    return ScanReport(
        host={"kind": "recorded", "hostname": f"host{ESC}]0;pwned{ESC}\\", "captured_at": "now"},
        level=Level.QUICK, started_at="2026-01-01T00:00:00Z", duration_s=1.0,
        probes=[ProbeResult("host.cpu_load", "ok", 0.5, None, record,
                            summarise(by_name()["host.cpu_load"], record)),
                ProbeResult("host.memory", "error", 0.1, f"reason {HOSTILE}", None)],
        findings=[Finding(**fields)],
        rule_errors=[f"rule 'x': {HOSTILE}"],
    )


def _json(report: ScanReport) -> dict:
    text = json_report.render(report)
    assert "NaN" not in text and "Infinity" not in text and ESC not in text
    data = json.loads(text)
    jsonschema.validate(data, SCHEMA)
    return data


def test_nan_and_infinity_become_null_and_say_where():
    data = _json(_report(evidence={"load": float("nan"), "peak": float("-inf"), "ok": 1.5}))
    load = data["probes"][0]["data"]
    assert load["busy_cores"] is None and load["top"][0]["cpu_cores"] is None
    assert data["findings"][0]["evidence"] == {"load": None, "peak": None, "ok": 1.5}
    pointers = {r["pointer"]: r["reason"] for r in data["replaced_values"]}
    assert pointers["/probes/0/data/busy_cores"] == "nan is not a JSON number; shown as null"
    assert "/findings/0/evidence/peak" in pointers
    assert data["host"]["hostname"] == f"host{ESC}]0;pwned{ESC}\\"  # kept, as a JSON escape


def test_values_json_cannot_hold_become_text():
    deep: list = []
    for _ in range(200):
        deep = [deep]
    evidence = {"bytes": b"\xff\x00ab", "set": {3}, "huge": 10**5000, "big": 2**70,
                "deep": deep, "obj": object(), (1, 2): "tuple key", 5: "int key", "5": "dup"}
    data = _json(_report(evidence=evidence, rule=17, remediation=["a", 1], title=None,
                         symptoms="slowdown"))
    finding = data["findings"][0]
    assert finding["rule"] == "17" and finding["remediation"] == "['a', 1]"
    assert finding["title"] == "None" and finding["symptoms"] == ["slowdown"]
    ev = finding["evidence"]
    assert ev["bytes"] == "\ufffd\x00ab" and ev["set"] == [3] and ev["big"] == str(2**70)
    assert ev["huge"].startswith("0x") and ev["(1, 2)"] == "tuple key"
    assert ev["obj"].startswith("<object object")
    reasons = " ".join(r["reason"] for r in data["replaced_values"])
    assert "nested deeper than 64 levels" in reasons and "a second key" in reasons


def test_a_secret_that_slipped_into_a_record_is_masked_in_every_format():
    report = _report(evidence={"cmd": "x --api-key sk-SLIPPED HF_TOKEN=hf_SLIPPED"})
    for text in (json_report.render(report), markdown.render(report), _terminal(report)):
        assert "SLIPPED" not in text
        assert "--api-key ***" in text or "--api-key \\*\\*\\*" in text


def test_a_record_that_is_not_an_object_is_wrapped():
    data = _json(_report(record=[1, 2]))
    assert data["probes"][0]["data"] == {"value": [1, 2]}


def _terminal(report: ScanReport) -> str:
    out = io.StringIO()
    terminal.render(report, Console(file=out, width=200, force_terminal=True, color_system=None))
    return out.getvalue()


def _unmd(text: str) -> str:
    """Markdown's backslash escapes undone: the text a viewer shows."""
    return re.sub(r"\\(.)", r"\1", text)


def test_terminal_and_markdown_show_escapes_instead_of_obeying_them():
    report = _report()
    for text in (_terminal(report), _unmd(markdown.render(report))):
        assert ESC not in text and "\x07" not in text
        assert "host\\x1b]0;pwned\\x1b" in text
        assert "comm\\x1b[31m" in text


def test_markdown_cells_and_code_spans_stay_one_cell():
    text = markdown.render(_report())
    (row,) = [line for line in text.splitlines() if line.startswith("| process |")]
    assert _unmd(row) == f"| process | {safe_display(HOSTILE)} |"
    assert row.replace("\\|", "").count("|") == 3  # two cells: no cell split by host text
    assert markdown.mdcode("a`b") == "``a`b``"
    assert markdown.mdcode("`x`") == "`` `x` ``"
    assert markdown.mdcode("a|b", in_table=True) == "`a\\|b`"
    assert markdown.mdtext("[click](http://x) <img src=x>") == \
        "\\[click\\](http://x) \\<img src=x\\>"


def test_a_record_of_the_wrong_type_shows_as_unreadable_never_crashes():
    bad = CpuLoadRecord(window_s=0.5, logical_cpus=2, busy_cores="x", top=5)  # type: ignore[arg-type]
    report = _report(record=bad)
    line = probe_summary(report.probes[0])
    assert line.startswith(("(unreadable: ValueError:", "(unreadable: TypeError:"))
    assert "(unreadable:" in _terminal(report)
    assert "(unreadable:" in markdown.render(report)
    _json(report)


def test_every_probe_has_a_summary_in_its_own_module():
    import sys

    from probes.registry import PROBES

    for spec in PROBES:
        assert spec.summary is not None, spec.name
        assert spec.summary.__module__ == spec.run.__module__ == sys.modules[spec.run.__module__].__name__
    assert not (REPO / "reports" / "summaries.py").exists()


def test_the_summary_of_a_recorded_host_reads_its_figures():
    from doctor.model import ScanOptions
    from doctor.seam.recorded import RecordedHost
    from probes.registry import PROBES
    from doctor.runner import run_probes

    host = RecordedHost(FIXTURE_HOSTS / "healthy-epyc-9654-vllm")
    results = run_probes(PROBES, host, ScanOptions(level=Level.QUICK))
    lines = {r.name: probe_summary(r) for r in results}
    assert "MiB total" in lines["host.memory"]
    assert "cores busy" in lines["host.cpu_load"]
    assert "somaxconn" in lines["host.sysctl"]


@pytest.mark.slow
def test_a_recorded_measurement_of_the_wrong_shape_names_the_key(cli, tmp_path):
    host = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "healthy-epyc-9654-vllm", host, symlinks=True)
    path = host / "measurements.json"
    measurements = json.loads(path.read_text())
    measurements["host.cpu_load"]["busy_cores"] = "x"
    path.write_text(json.dumps(measurements))
    for fmt in ("json", "markdown", "terminal"):
        result = cli("scan", "--replay", str(host), "--level", "quick", "--format", fmt,
                     "--no-progress")
        assert result.returncode in (0, 1, 2) and "Traceback" not in result.stderr, result.stderr
        flat = "".join(result.stdout.replace("│", "").split())  # the terminal wraps cells
        assert "busy_cores='x'" in flat, fmt


# --- -o FILE --------------------------------------------------------------------------

def test_a_regular_file_is_replaced_whole_and_keeps_its_mode(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old")
    target.chmod(0o600)
    write_atomic(target, "new")
    assert target.read_text() == "new" and stat.S_IMODE(target.stat().st_mode) == 0o600
    write_atomic(tmp_path / "fresh.json", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh.json", "r.json"]


def test_a_directory_and_a_symbolic_link_are_refused_and_left_alone(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "target").write_text("keep")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        write_atomic(tmp_path / "d", "x")
    with pytest.raises(OSError, match="is a symbolic link"):
        write_atomic(tmp_path / "link", "x")
    assert (tmp_path / "link").is_symlink() and (tmp_path / "target").read_text() == "keep"
    with pytest.raises(OSError, match="is a symbolic link"):
        check_target(tmp_path / "link")


def test_a_fifo_is_written_through_when_read_and_refused_when_not(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="FIFO with no reader"):
        write_atomic(fifo, "x")  # returns at once: no reader, no wait
    got: list[str] = []
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    reader = threading.Thread(target=lambda: got.append(os.read(fd, 100).decode()))
    write_atomic(fifo, "report")
    reader.start()
    reader.join(5)
    os.close(fd)
    assert got == ["report"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_dev_full_fails_and_stays_a_device():
    with pytest.raises(OSError) as caught:
        write_atomic("/dev/full", "x")
    assert caught.value.strerror == "No space left on device"
    assert stat.S_ISCHR(os.lstat("/dev/full").st_mode)
    write_atomic("/dev/null", "x")
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)


def test_dash_and_dev_stdout_write_to_standard_output(capfd):
    write_atomic("-", "one\n")
    write_atomic("/dev/stdout", "two\n")
    assert capfd.readouterr().out == "one\ntwo\n"
    assert os.path.islink("/dev/stdout") or not os.path.exists("/dev/stdout")


@pytest.mark.slow
def test_scan_to_dev_full_exits_3_and_keeps_the_device(cli):
    result = cli("scan", "--level", "quick", "-o", "/dev/full", "--no-progress")
    assert result.returncode == 3 and "Traceback" not in result.stderr
    assert "/dev/full" in result.stderr
    assert stat.S_ISCHR(os.lstat("/dev/full").st_mode)


def test_a_block_device_or_socket_is_refused_before_the_scan(tmp_path):
    import socket

    sock_path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        with pytest.raises(OSError, match="not a regular file, terminal, /dev/null or FIFO"):
            write_atomic(sock_path, "x")
    assert stat.S_ISSOCK(os.lstat(sock_path).st_mode)
    block = next((p for p in ("/dev/loop0", "/dev/sda", "/dev/vda") if os.path.exists(p)
                  and stat.S_ISBLK(os.stat(p).st_mode)), None)
    if block:  # check_target only looks: it never opens the device
        with pytest.raises(OSError, match="not a regular file"):
            check_target(block)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["-", "/dev/stdout"])
def test_scan_to_standard_output_prints_the_report(cli, target):
    if target == "/dev/stdout" and os.geteuid() != 0:
        pytest.skip("cli._check_output asks for a writable /dev until it calls check_target")
    result = cli("scan", "--level", "quick", "--format", "json", "-o", target, "--no-progress")
    assert result.returncode in (0, 1, 2), result.stderr
    jsonschema.validate(json.loads(result.stdout), SCHEMA)
    assert os.path.islink("/dev/stdout") or not os.path.lexists("/dev/stdout")
