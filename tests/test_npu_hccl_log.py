"""npu.hccl_log and its rules on HCCL's own words.

The lines are real: what people pasted from vllm-ascend, lmdeploy and plog files
(tests/fixtures/ascend/sources/hccl-log-lines.txt, each section under its issue). The probe
reads them where an engine's stdout is a file, on a real captured vLLM (PID 30412 of
l40s-8x-nccl-p2p-disabled) given a real npu-smi table, as tests/test_net_nccl_log.py does for
NCCL's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from doctor.commands.cli import cli
from doctor.model import Level, ScanOptions, Severity, Skip
from doctor.scan import scan
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost
from probes.helpers import hccl_text
from probes.npu import hccl_log
from probes.registry import by_name
from tests.builtin_rules import builtin_rules

SOURCES = Path(__file__).parent / "fixtures" / "ascend" / "sources"
HOST = Path(__file__).parent / "fixtures" / "hosts" / "l40s-8x-nccl-p2p-disabled"
PID = 30412
RULES = [r for r in builtin_rules() if set(r.probes) == {"npu.hccl_log"}]


def sections() -> list[tuple[str, list[str]]]:
    """(first header line, its lines) of each section of hccl-log-lines.txt."""
    out: list[tuple[str, list[str]]] = []
    for block in (SOURCES / "hccl-log-lines.txt").read_text().split("\n\n"):
        header = [line for line in block.splitlines() if line.startswith("## ")]
        lines = [line for line in block.splitlines() if line.strip() and not line.startswith("#")]
        if header:
            out.append((header[0], lines))
    return out


# per section, in the file's order: (kind, code, count, timeout_s) of each failure
EXPECTED = [
    ("lmdeploy#3354", [("exec-timeout", None, 1, 1836)]),
    ("afd-plugin#229", [("connect-timeout", "EI0006", 1, None)]),
    ("vllm-ascend#382", [("watchdog-timeout", None, 1, 3600)]),
    ("plog-parser-107-0.log", []),  # the variable's value, no failure
    ("EI0009", [("port-down", None, 1, None)]),
    ("PD-disaggregation", [("port-down", "EI0009", 1, None)]),
    ("vllm-ascend#1955", [("connect-timeout", None, 1, 120)]),
    ("vllm-ascend#9447", [("connect-timeout", None, 1, 120)]),
    ("vllm-ascend#486", [("connect-timeout", "EI0006", 1, None)]),
    ("vllm-ascend#5461", [("connect-timeout", "EI0006", 1, None)]),
    ("lmdeploy#3354", [("exec-timeout", "EI0002", 1, None)]),
    ("vllm-ascend#1815", [("port-down", "EJ0002", 1, None)]),
]


def test_every_real_section_says_what_it_says():
    got = sections()
    assert len(got) == len(EXPECTED)
    for (header, lines), (where, want) in zip(got, EXPECTED):
        assert where in header, (header, where)
        said = hccl_text.parse(lines)
        assert [(f.kind, f.code, f.count, f.timeout_s) for f in said.failures] == want, header
        assert said.failure_lines == sum(c for _, _, c, _ in want)


def test_hostile_text_is_bounded_and_never_raises():
    huge = "EI0006 " + "x" * 100_000 + " timeout[99999999999]"
    said = hccl_text.parse([huge, "\x00\udcff The network port is down", "timeout[abc]"])
    assert [(f.kind, len(f.line) <= hccl_text.MAX_SHOWN) for f in said.failures] == [
        ("connect-timeout", True), ("port-down", True)]
    assert said.failures[0].timeout_s is None  # past the line's first 4,096 characters


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Path:
    """The recorded vLLM, copied once: its stdout and stderr sent to /var/log/vllm.log in its
    own root; each test writes the log and the answers it needs (``_story``)."""
    root = tmp_path_factory.mktemp("hccl") / "host"
    shutil.copytree(HOST, root, symlinks=True)
    (root / f"fs/proc/{PID}/root/var/log").mkdir(parents=True)
    fd = root / f"fs/proc/{PID}/fd"
    fd.mkdir(parents=True, exist_ok=True)
    for n, target in (("0", "/dev/null"), ("1", "/var/log/vllm.log"), ("2", "/var/log/vllm.log")):
        (fd / n).symlink_to(target)
    (root / "commands").mkdir(exist_ok=True)
    shutil.copy(SOURCES / "npu-smi-info-910b2c-23.0.2.1.txt", root / "commands/00-npu-smi-info.out")
    (root / "host.base.toml").write_text((root / "host.toml").read_text())
    return root


PLOG = "/home/vllm/ascend/log/debug/plog"  # $HOME/ascend/log/debug/plog of the engine (HOME=/home/vllm)


def _story(root: Path, log: str, npu_smi: bool = True, plogs: dict[str, str] | None = None) -> Path:
    """``root`` with ``log`` as the engine's stdout, ``plogs`` (name -> text) in its plog
    folder, and a real npu-smi info answer when ``npu_smi``."""
    (root / f"fs/proc/{PID}/root/var/log/vllm.log").write_text(log)
    toml = (root / "host.base.toml").read_text()
    assert toml.startswith("commands = []\n")
    if npu_smi:
        toml = toml.replace("commands = []\n", 'commands = [{ argv = ["npu-smi", "info"], rc = 0, '
                            'stdout_file = "commands/00-npu-smi-info.out", stderr = "" }]\n', 1)
    size = len(log.encode())
    toml += f'\n[files."/proc/{PID}/root/var/log"]\n"vllm.log" = {size}\n'
    folder = root / f"fs/proc/{PID}/root{PLOG}"
    shutil.rmtree(folder, ignore_errors=True)
    if plogs:
        folder.mkdir(parents=True)
        toml += f'\n[files."/proc/{PID}/root{PLOG}"]\n'
        for name, text in plogs.items():
            (folder / name).write_text(text)
            toml += f'"{name}" = {len(text.encode())}\n'
    (root / "host.toml").write_text(toml)
    return root


def _scan(root: Path):
    specs = [by_name()[n] for n in ("engine.discovery", "npu.hccl_log")]
    report = scan(RecordedHost(root), ScanOptions(level=Level.QUICK), specs, RULES)
    assert report.rule_errors == []
    probe = next(p for p in report.probes if p.name == "npu.hccl_log")
    return probe, sorted((f.rule, f.severity.label) for f in report.findings if f.severity >= Severity.WARNING)


@pytest.fixture(scope="module")
def sections_text() -> dict[str, str]:
    """Each section's lines as one text, by the source its header names first."""
    return {h.split()[1]: "\n".join(lines) + "\n" for h, lines in sections()}


@pytest.fixture(scope="module")
def logs(sections_text) -> dict[str, str]:
    text = sections_text
    banner = "INFO 07-15 12:45:01 [api_server.py:1090] vLLM API server version 0.9.1\n"
    return {"port-down": banner + text["vllm-project/vllm-ascend#1815"],
            "timeout": banner + text["vllm-project/vllm-ascend#1955"],
            "healthy": banner}


@pytest.mark.parametrize("story, rules", [
    ("port-down", [("hccl-log-port-down", "critical")]),
    ("timeout", [("hccl-log-timeout", "warning")]),
    ("healthy", []),
])
def test_an_engines_stdout_file_is_read_and_judged(host, logs, story, rules):
    probe, found = _scan(_story(host, logs[story]))
    assert probe.status == "ok", probe.reason
    log = probe.record.logs[0]
    assert (log.source, log.path, log.error) == (
        f"stdout of vllm at http://127.0.0.1:8000 pid {PID}", "/var/log/vllm.log", None)
    assert found == rules
    assert "\n" not in hccl_log.summary(probe.record)


def test_a_host_without_npu_smi_skips_with_the_npu_probes_words(host, logs):
    root = _story(host, logs["port-down"], npu_smi=False)
    with pytest.raises(Skip, match="no Ascend driver"):
        hccl_log.probe(RecordedHost(root), ScanOptions())


def test_the_newest_plog_files_of_the_engines_home_are_read(host, logs, sections_text):
    """plog's ``[ERROR] HCCL`` lines (vllm-ascend#9447's, at 120 s) in the engine's
    $HOME/ascend/log/debug/plog; of five files the four newest by the name's timestamp, an
    older one with a port-down line and a file not named as plog names its files unread."""
    plogs = {"plog-106335_20260521213958705.log": sections_text["vllm-project/vllm-ascend#9447"],
             "plog-106336_20260521213958800.log": "[INFO] HCCL(106336,):ok\n",
             "plog-106337_20260521213958900.log": "",
             "plog-106338_20260521214000000.log": "",
             "plog-90_20260101000000000.log": sections_text["vllm-project/vllm-ascend#1815"],
             "notes.log": sections_text["vllm-project/vllm-ascend#1815"]}
    probe, found = _scan(_story(host, logs["healthy"], plogs=plogs))
    newest = sorted((n for n in plogs if n.startswith("plog-1063")), reverse=True)
    assert [log.path for log in probe.record.logs] == ["/var/log/vllm.log"] + [f"{PLOG}/{n}" for n in newest]
    assert found == [("hccl-log-timeout", "warning")]
    timeout = next(log for log in probe.record.logs if log.failures)
    assert (timeout.source, timeout.failures[0].timeout_s) == (
        f"plog of vllm at http://127.0.0.1:8000 pid {PID}", 120)


# ---- scan --hccl-log PATH: a saved log or plog file, read as a hostile file -------------

def _named(path: Path):
    """The probe and its findings on the file ``path`` names, read on this machine (no
    npu-smi here: a saved plog is read on any host), in a scan that runs engine.discovery
    too, as `llm-doctor scan --hccl-log` does: where discovery skips (no engine here), the
    named file is still read."""
    specs = [by_name()[n] for n in ("engine.discovery", "npu.hccl_log")]
    report = scan(LiveHost(), ScanOptions(level=Level.QUICK, hccl_log=str(path), requests=False),
                  specs, RULES)
    assert report.rule_errors == []
    probe = next(p for p in report.probes if p.name == "npu.hccl_log")
    return probe, sorted((f.rule, f.severity.label) for f in report.findings if f.severity >= Severity.WARNING)


def test_a_named_plog_file_is_read_on_a_host_without_npu_smi(tmp_path, sections_text):
    plog = tmp_path / "plog-2717288_20250723034957177.log"
    plog.write_text(sections_text["vllm-project/vllm-ascend#1955"])
    probe, found = _named(plog)
    assert probe.status == "ok", probe.reason
    log = probe.record.logs[0]
    assert (log.source, log.path, log.error, log.failures[0].timeout_s) == ("--hccl-log", str(plog), None, 120)
    assert found == [("hccl-log-timeout", "warning")]
    port = tmp_path / "vllm.log"
    port.write_text(sections_text["vllm-project/vllm-ascend#1815"])
    assert _named(port)[1] == [("hccl-log-port-down", "critical")]


def test_a_named_file_absent_a_directory_or_a_fifo_is_one_line(tmp_path):
    fifo = tmp_path / "plog.fifo"
    os.mkfifo(fifo)  # never opened: a reader would block on it
    for path, words in ((tmp_path / "absent.log", "no such regular file"), (tmp_path, "is a directory"),
                        (fifo, "FIFO")):
        probe, found = _named(path)
        log = probe.record.logs[0]
        assert log.failure_lines == 0 and words in log.error and "\n" not in log.error, log.error
        assert str(path) in log.error and hccl_log.summary(probe.record) == log.error
        assert found == []


def test_scan_help_names_hccl_log():
    result = CliRunner().invoke(cli, ["scan", "--help"])
    assert result.exit_code == 0 and "--hccl-log PATH" in result.output and "plog" in result.output


@pytest.mark.slow
@pytest.mark.machine  # a quick scan of this machine
def test_scan_hccl_log_names_a_relative_file_and_finds_the_port_down(tmp_path, sections_text):
    (tmp_path / "vllm.log").write_text(sections_text["vllm-project/vllm-ascend#1815"])
    out = tmp_path / "scan.json"
    run = subprocess.run([sys.executable, "-m", "doctor.commands.entry", "scan", "--level", "quick",
                          "--no-progress", "--hccl-log", "vllm.log", "--format", "json", "-o", str(out)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
    report = json.loads(out.read_text())
    assert ("hccl-log-port-down", "critical") in {(f["rule"], f["severity"]) for f in report["findings"]}
    probe = next(p for p in report["probes"] if p["name"] == "npu.hccl_log")
    assert str(tmp_path / "vllm.log") in probe["summary"]
