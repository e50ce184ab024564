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

from doctor.model import ProbeResult, ScanOptions
from doctor.rules.evaluate import evaluate
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost
from probes.helpers import nccl_text
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
