"""net.nccl_log and checks/net_nccl.toml on NCCL's own words.

The logs are real: what users posted in public issue threads (tests/fixtures/nccl_logs/,
each cited in its README). Each runs through the probe (read from its file, as
``scan --nccl-log`` reads it) and the built-in rules; a log's verdict may depend on whether
RDMA devices are on the host, which the log alone does not say, so it is judged both ways.
An engine's stdout sent to a file is found through /proc/<pid>/fd/1 of a recorded host.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w

from doctor.model import ProbeResult, ScanOptions, Skip
from doctor.rules.evaluate import evaluate
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost
from probes.helpers import engine_journal, nccl_text
from probes.net import nccl_log
from tests.builtin_rules import builtin_rules

LOGS = Path(__file__).parent / "fixtures" / "nccl_logs"
HOST = Path(__file__).parent / "fixtures" / "hosts" / "l40s-8x-nccl-p2p-disabled"
RULES = [r for r in builtin_rules() if r.probes == ("net.nccl_log",) or r.probes == ["net.nccl_log"]]

# file → (rule ids firing without RDMA devices here, with them). GPU Direct RDMA Disabled is
# the log's own story only without RDMA devices here; with them net.gpudirect's rules say it
# (nccl-log-gdr-disabled, gpudirect-rdma-off: tests/test_net_gdr.py), not these.
GDR = "nccl-log-gdr-disabled-no-rdma-here"
EXPECTED = {
    "sglang-3398-ib-no-device-socket.log": (set(), {"nccl-socket-fallback"}),
    "nccl-1537-gdr-disabled-roce.log": ({GDR}, set()),
    "nccl-899-gdr-no-module.log": ({GDR}, set()),
    "nccl-367-no-libibverbs-socket.log": (set(), {"nccl-socket-fallback"}),
    "nccl-952-ib-no-device-socket-closed.log": ({"nccl-init-failed"}, {"nccl-init-failed", "nccl-socket-fallback"}),
    "nccl-2013-ibv-modify-qp.log": ({"nccl-init-failed"}, {"nccl-init-failed"}),
    "vllm-2084-no-socket-interface.log": ({"nccl-init-failed"}, {"nccl-init-failed"}),
    "vllm-8447-two-nodes-ib.log": (set(), set()),
    "vllm-19204-one-host-shm.log": (set(), set()),
    "nccl-tests-188-ib-disabled-socket.log": (set(), {"nccl-socket-fallback"}),
}


def findings(record, rdma: int):
    logs = tuple(dataclasses.replace(log, rdma_devices_here=rdma) for log in record.logs)
    result = ProbeResult("net.nccl_log", "ok", 0.0, None, dataclasses.replace(record, logs=logs))
    found, errors = evaluate(RULES, [result])
    assert errors == []
    return found


@pytest.fixture(scope="module")
def records():
    return {name: nccl_log.probe(LiveHost(), ScanOptions(nccl_log=str(LOGS / name))) for name in EXPECTED}


def test_every_log_in_the_folder_is_judged():
    assert {p.name for p in LOGS.glob("*.log")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_logs_give_the_findings_their_threads_describe(records, name):
    record = records[name]
    assert record.logs[0].error is None and record.logs[0].nccl_lines > 0
    for rdma, want in zip((0, 4), EXPECTED[name]):
        assert {f.rule for f in findings(record, rdma)} == want, (name, rdma)


def test_what_the_real_lines_say(records):
    said = {name: r.logs[0] for name, r in records.items()}
    assert said["vllm-8447-two-nodes-ib.log"].network == "IB" and said["vllm-8447-two-nodes-ib.log"].nodes == 2
    assert said["nccl-1537-gdr-disabled-roce.log"].ib_devices == ("mlx5_0:1/RoCE", "mlx5_1:1/RoCE")
    assert said["nccl-1537-gdr-disabled-roce.log"].gdr_disabled_hcas == ("mlx5_0", "mlx5_1")
    assert said["nccl-899-gdr-no-module.log"].transports == {"NET/IB": 11}
    assert said["nccl-952-ib-no-device-socket-closed.log"].transports == {"NET/Socket": 4, "P2P/IPC/read": 3}
    assert said["nccl-367-no-libibverbs-socket.log"].network == "Socket"  # NCCL 2.4: no "Using network"
    assert said["nccl-tests-188-ib-disabled-socket.log"].ib_disabled_by_env
    assert said["vllm-19204-one-host-shm.log"].failures == ()  # a RAS bind WARN is no init failure
    kinds = {f.kind for f in said["vllm-2084-no-socket-interface.log"].failures}
    assert kinds == {"no-socket-interface"}
    assert said["sglang-3398-ib-no-device-socket.log"].ranks == 16


def test_bootstrap_on_lo_across_hosts_is_critical_and_on_one_host_silent(tmp_path):
    lines = ["n1:1:1 [0] NCCL INFO Bootstrap : Using lo:127.0.0.1<0>",
             "n1:1:1 [0] NCCL INFO NET/IB : No device found.",
             "n1:1:1 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0>",
             "n1:1:1 [0] NCCL INFO comm 0x5581 rank 0 nRanks 2 nNodes {nodes} localRanks 1 localRank 0 MNNVL 0"]
    for nodes, want in ((2, {("nccl-bootstrap-loopback", "critical")}), (1, set())):
        path = tmp_path / f"lo{nodes}.log"
        path.write_text("\n".join(lines).format(nodes=nodes) + "\n")
        record = nccl_log.probe(LiveHost(), ScanOptions(nccl_log=str(path)))
        assert {(f.rule, f.severity.label) for f in findings(record, 0)} == want


@pytest.mark.parametrize("via, kind", [("NET/IB/0/GDRDMA", "NET/IB/GDRDMA"), ("NET/Socket/0", "NET/Socket"),
                                       ("P2P/CUMEM/CE", "P2P/CUMEM/CE"), ("SHM/direct/direct", "SHM/direct/direct")])
def test_transport_per_channel(via, kind):
    assert nccl_text.transport(via) == kind


@pytest.fixture(scope="module")
def engine_host(tmp_path_factory):
    """The recorded vLLM host, its stdout and stderr sent to /var/log/vllm.log and its
    NCCL_DEBUG_FILE=/tmp/nccl.%h.%p, all inside the engine's root (/proc/<pid>/root)."""
    root = tmp_path_factory.mktemp("stdout") / "host"
    shutil.copytree(HOST, root, symlinks=True)
    own = root / "fs/proc/30412/root"
    text = (LOGS / "nccl-899-gdr-no-module.log").read_bytes()
    (own / "var/log").mkdir(parents=True)
    (own / "var/log/vllm.log").write_bytes(text)
    (own / "tmp").mkdir()
    debug = {"nccl.gpu-node-7.30500": LOGS / "nccl-2013-ibv-modify-qp.log",
             "nccl.gpu-node-7.30501": LOGS / "vllm-8447-two-nodes-ib.log",
             "nccl.conf": LOGS / "vllm-2084-no-socket-interface.log"}  # not the pattern: not read
    for name, source in debug.items():
        (own / "tmp" / name).write_bytes(source.read_bytes())
    fd = root / "fs/proc/30412/fd"
    fd.mkdir(parents=True, exist_ok=True)
    for n, target in (("0", "/dev/null"), ("1", "/var/log/vllm.log"), ("2", "/var/log/vllm.log")):
        (fd / n).symlink_to(target)
    environ = root / "fs/proc/30412/environ"
    environ.write_bytes(environ.read_bytes() + b"NCCL_DEBUG_FILE=/tmp/nccl.%h.%p\0")
    listing = {name: (own / "tmp" / name).stat().st_size for name in debug}
    with open(root / "host.toml", "a") as f:
        f.write(f'\n[files."/proc/30412/root/var/log"]\n"vllm.log" = {len(text)}\n')
        f.write('\n[files."/proc/30412/root/tmp"]\n' + "".join(f'"{k}" = {v}\n' for k, v in listing.items()))
    return root


def test_an_engines_stdout_file_and_nccl_debug_files_are_read_in_its_root(engine_host):
    record = nccl_log.probe(RecordedHost(engine_host), ScanOptions())
    label = "vllm at http://127.0.0.1:8000 pid 30412"
    assert [(log.source, log.path) for log in record.logs] == [
        (f"stdout of {label}", "/var/log/vllm.log"),
        (f"NCCL_DEBUG_FILE of {label}", "/tmp/nccl.gpu-node-7.30500"),
        (f"NCCL_DEBUG_FILE of {label}", "/tmp/nccl.gpu-node-7.30501")]
    assert all(log.error is None for log in record.logs)
    assert {(f.rule, f.key) for f in findings(record, 0)} == {
        (GDR, "/var/log/vllm.log"), ("nccl-init-failed", "/tmp/nccl.gpu-node-7.30500")}


def test_a_missing_file_or_a_directory_is_one_clear_line(tmp_path):
    for path, words in ((tmp_path / "absent.log", "no such regular file"), (tmp_path, "is a directory")):
        record = nccl_log.probe(LiveHost(), ScanOptions(nccl_log=str(path)))
        log = record.logs[0]
        assert log.nccl_lines == 0 and words in log.error and "\n" not in log.error
        assert nccl_log.summary(record) == log.error
        assert findings(record, 4) == []


@pytest.mark.slow  # runs the command line: a quick scan of this machine
def test_scan_nccl_log_names_a_relative_file_and_finds_the_failure(tmp_path):
    out = tmp_path / "scan.json"
    run = subprocess.run([sys.executable, "-m", "doctor.commands.entry", "scan", "--level", "quick",
                          "--no-progress", "--nccl-log", "vllm-2084-no-socket-interface.log",
                          "--format", "json", "-o", str(out)],
                         cwd=LOGS, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert run.returncode == 2, run.stderr[-2000:]
    report = json.loads(out.read_text())
    assert ("nccl-init-failed", "critical") in {(f["rule"], f["severity"]) for f in report["findings"]}
    probe = next(p for p in report["probes"] if p["name"] == "net.nccl_log")
    assert str(LOGS / "vllm-2084-no-socket-interface.log") in probe["summary"]


# ---- the journal of the engine's systemd service (probes/helpers/engine_journal.py) -----

BOOT, START_TICKS = 1764300000, 123456  # /proc/stat btime; /proc/<pid>/stat starttime (1/100 s)
SINCE = BOOT + START_TICKS // 100
UNIT_ARGV = ["journalctl", "--unit=vllm.service", "--output=cat", "--no-pager",
             f"--lines={engine_journal.JOURNAL_LINES}", f"--since=@{SINCE - engine_journal.SINCE_SLACK_S}"]
JOURNAL_LOG = "nccl-2013-ibv-modify-qp.log"
CGROUP = ("12:cpu:/system.slice/vllm.service\n1:name=systemd:/system.slice/vllm.service\n"
          "0::/system.slice/vllm.service\n")
# journalctl's hint to a caller outside the systemd-journal and adm groups (systemd 252)
NO_PERMISSION_HINT = ("Hint: You are currently not seeing messages from other users and the system.\n"
                      "      Users in groups 'adm', 'systemd-journal' can see all messages.\n"
                      "      Pass -q to turn off this notice.\n")


@pytest.fixture(scope="module")
def journal_host(tmp_path_factory):
    """The recorded vLLM host as a systemd service runs it: its stdout and stderr the
    journal's stream sockets, in vllm.service's cgroup (v1 and v2 lines); what journalctl
    answers is set by each test (``_answers``)."""
    root = tmp_path_factory.mktemp("journal") / "host"
    shutil.copytree(HOST, root, symlinks=True)
    proc = root / "fs/proc/30412"
    (proc / "cgroup").write_text(CGROUP)
    fields = ["S", "1"] + ["0"] * 17 + [str(START_TICKS)] + ["0"] * 30  # fields 3.. of proc(5)'s stat
    (proc / "stat").write_text("30412 (python3) " + " ".join(fields) + "\n")
    (root / "fs/proc/stat").write_text(f"cpu  1 2 3 4\nbtime {BOOT}\nprocesses 1\n")
    (proc / "fd").mkdir()
    for n, target in (("0", "/dev/null"), ("1", "socket:[88213]"), ("2", "socket:[88213]")):
        (proc / "fd" / n).symlink_to(target)
    (root / "commands").mkdir(exist_ok=True)
    toml = (root / "host.toml").read_text()
    assert toml.startswith("commands = []\n")
    (root / "host.rest.toml").write_text(toml.split("\n", 1)[1])
    return root


def _answers(root: Path, *commands: dict) -> Path:
    """``root`` with ``commands`` in its host.toml: what journalctl answered there."""
    entries = []
    for i, cmd in enumerate(commands):
        name = f"commands/{i:02d}-journalctl.out"
        (root / name).write_bytes(cmd.get("stdout", b""))
        entries.append({"argv": cmd.get("argv", UNIT_ARGV), "rc": cmd.get("rc", 0),
                        "stdout_file": name, "stderr": cmd.get("stderr", "")})
    (root / "host.toml").write_text(tomli_w.dumps({"commands": entries})
                                    + (root / "host.rest.toml").read_text())
    return root


def test_a_services_journal_is_read_as_its_log(journal_host):
    """A real NCCL log as ``journalctl -o cat`` prints a service's messages."""
    host = _answers(journal_host, {"stdout": (LOGS / JOURNAL_LOG).read_bytes()})
    record = nccl_log.probe(RecordedHost(host), ScanOptions())
    label = "vllm at http://127.0.0.1:8000 pid 30412"
    assert [(log.source, log.path) for log in record.logs] == [
        (f"journal of {label}", "journalctl --unit=vllm.service")]
    log = record.logs[0]
    size = (LOGS / JOURNAL_LOG).stat().st_size
    assert log.error is None and (log.size_bytes, log.bytes_read, log.skipped_bytes) == (size, size, 0)
    assert log.failures[0].kind == "ibv-modify-qp"
    assert {(f.rule, f.key) for f in findings(record, 4)} == {
        ("nccl-init-failed", "journalctl --unit=vllm.service")}


WHY_ARGV = ["journalctl", "--unit=vllm.service", "--lines=0", "--no-pager"]  # asked when -o cat said nothing


@pytest.mark.parametrize("answers,words", [
    ([{}, {"argv": WHY_ARGV, "stderr": NO_PERMISSION_HINT, "stdout": b"-- No entries --\n"}],
     "no permission (root, or the systemd-journal or adm group"),
    ([{}, {"argv": WHY_ARGV, "stderr": "No journal files were found.\n", "stdout": b"-- No entries --\n"}],
     "this host keeps no journal"),
    ([{"rc": 1, "stderr": "No journal files were opened due to insufficient permissions.\n"}],
     "no permission (root"),  # what systemd 252 says to nobody (tests/test_engine_journal.py)
    ([{"rc": 1, "stderr": "Failed to add filter for units: No data available\n"}], "exited 1 (Failed to add"),
    ([{}, {"argv": WHY_ARGV, "stdout": b"-- No entries --\n"}], "holds no message since the engine started"),
    ([], "journalctl: not-found (not recorded)")],
    ids=["no-permission", "no-journal", "no-permission-exit-1", "failed", "empty", "not-recorded"])
def test_a_journal_that_cannot_be_read_is_a_reason(journal_host, answers, words):
    host = _answers(journal_host, *answers)
    record = nccl_log.probe(RecordedHost(host), ScanOptions())
    log = record.logs[0]
    assert log.error is not None and words in log.error and "\n" not in log.error
    assert log.nccl_lines == 0 and findings(record, 4) == []


class _Watched(RecordedHost):
    """A recorded host that keeps every argv it is asked to run."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.ran: list[tuple[str, ...]] = []

    def run(self, argv, timeout_s: float = 5.0):
        self.ran.append(tuple(argv))
        return super().run(argv, timeout_s)


@pytest.mark.parametrize("cgroup,words", [
    ("0::/system.slice/-vllm.service", "not a systemd unit name"),  # an option to journalctl
    ("0::/system.slice/.vllm.service", "not a systemd unit name"),
    ("0::/system.slice/v*.service", "not a systemd unit name"),  # a glob: every unit
    ("0::/system.slice/a\\x2db.service", "not a systemd unit name"),  # a glob's escape
    ("0::/system.slice/a b;reboot.service", "not a systemd unit name"),
    ("0::/system.slice/" + "v" * 250 + ".service", "not a systemd unit name"),  # over 255
    ("0::/system.slice/vllm.service\x1b]0;x\x07", "no systemd service"),
    ("0::/user.slice/user-1000.slice/user@1000.service/app.slice/vllm.service", "user's systemd manager"),
    ("0::/system.slice/docker-4f1e.scope", "no systemd service"),
    ("0::/\n", "no systemd service"),
    ("garbage", "expected 'id:controllers:/path'"),
], ids=["dash", "dot", "glob", "backslash", "shell", "long", "escape", "user", "docker", "root", "garbage"])
def test_a_hostile_or_missing_unit_never_reaches_journalctl(journal_host, cgroup, words):
    path = journal_host / "fs/proc/30412/cgroup"
    path.write_text(cgroup)
    try:
        host = _Watched(_answers(journal_host))
        with pytest.raises(Skip) as skipped:
            nccl_log.probe(host, ScanOptions())
    finally:
        path.write_text(CGROUP)
    assert host.ran == []
    assert words in str(skipped.value) and "\n" not in str(skipped.value)
    assert "\x1b" not in str(skipped.value)


def test_an_engine_whose_output_is_a_file_is_not_read_again_in_the_journal(engine_host):
    host = _Watched(engine_host)
    nccl_log.probe(host, ScanOptions())
    assert host.ran == []  # stdout and stderr are /var/log/vllm.log, read above


def test_a_journal_larger_than_the_bound_keeps_its_newest_bytes(journal_host):
    """4 MiB of messages: the last 3 MiB are parsed, the line cut by the bound dropped."""
    text = (LOGS / JOURNAL_LOG).read_bytes()
    filler = b"INFO 12-07 03:12:44 metrics.py:351] Avg prompt throughput: 0.0 tokens/s\n"
    big = filler * ((4 << 20) // len(filler)) + text
    host = _answers(journal_host, {"stdout": big})
    log = nccl_log.probe(RecordedHost(host), ScanOptions()).logs[0]
    assert (log.size_bytes, log.bytes_read) == (len(big), engine_journal.JOURNAL_BYTES)
    assert log.skipped_bytes == len(big) - engine_journal.JOURNAL_BYTES
    assert log.failures[0].kind == "ibv-modify-qp"  # the newest lines are kept
