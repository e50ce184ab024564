"""The all-reduce kernel (probes/kernels/allreduce.py): NCCL's transport lines, nccl-tests'
bus bandwidth, its arguments, and a launcher whose workers die with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from probes.kernels import allreduce

REPO = Path(__file__).resolve().parent.parent

# Lines as NCCL 2.10-2.23 print them with NCCL_DEBUG=INFO (host:pid:tid [cuda dev] prefix).
TRANSPORT_LINES = [
    ("gpu-a:1234:1290 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC", "P2P/IPC"),
    ("gpu-a:1234:1290 [0] NCCL INFO Channel 01/0 : 0[18000] -> 1[19000] via P2P/CUMEM/read",
     "P2P/CUMEM"),
    ("gpu-a:1234:1290 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM", "P2P/CUMEM"),
    ("gpu-a:1234:1290 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct", "SHM"),
    ("gpu-a:1234:1290 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/IB/0/GDRDMA",
     "NET/IB"),
    ("gpu-a:1234:1290 [0] NCCL INFO Channel 00/1 : 0[0] -> 1[1] [send] via NET/Socket/0",
     "NET/Socket"),
    ("gpu-a:1234:1290 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via P2P/direct pointer",
     "P2P/direct"),
    ("gpu-a:1234:1290 [0] NCCL INFO Channel 00/02 :    0   1", None),  # the ring order: no transport
    ("gpu-a:1234:1290 [0] NCCL INFO Connected all rings", None),
    ("gpu-a:1234:1290 [0] NCCL INFO P2P plugin IBext_v8", None),
    ("Channel 00/0 : 0[0] -> 1[1] via P2P/IPC", None),  # not NCCL's INFO line
]


@pytest.mark.parametrize("line,transport", TRANSPORT_LINES, ids=[t or "none" for _, t in TRANSPORT_LINES])
def test_transport_of_one_nccl_line(line, transport):
    assert allreduce.parse_transports([line]) == ({transport: 1} if transport else {})


def test_the_transport_is_the_one_of_most_channels():
    lines = [line for line, _ in TRANSPORT_LINES]
    counts = allreduce.parse_transports(lines + [TRANSPORT_LINES[3][0]] * 3)
    assert counts["SHM"] == 4 and counts["P2P/CUMEM"] == 2
    assert allreduce.chosen_transport(counts) == "SHM"
    assert allreduce.chosen_transport({"P2P/IPC": 2, "P2P/CUMEM": 2}) == "P2P/CUMEM"  # ties: by name
    assert allreduce.chosen_transport({}) is None


@pytest.mark.parametrize("n,busbw", [(2, 10.0), (4, 15.0), (8, 17.5)])
def test_bus_bandwidth_is_nccl_tests_all_reduce_factor(n, busbw):
    assert allreduce.bus_bandwidth(10.0, n) == pytest.approx(busbw)


@pytest.mark.parametrize("argv,says", [
    (["--cpu", "1"], "2 to 64 ranks"),
    (["--devices", "0,x"], "GPU indexes separated by commas"),
    (["--cpu", "2", "--hold-rank", "2"], "ranks are 0-1"),
    (["--cpu", "2", "--bytes", "1"], "between 4 and 8 GiB"),
])
def test_bad_arguments_are_one_line(argv, says, capsys):
    with pytest.raises(SystemExit) as caught:
        allreduce.main(argv)
    assert caught.value.code == 1
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[-1].split()
            except OSError:
                continue
            if int(stat[1]) == pid:
                out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_workers_die_with_a_launcher_killed_from_outside():
    """The scan's own timeout SIGKILLs the launcher's session; the workers are in groups of
    their own, so they must go with it (PR_SET_PDEATHSIG), not run on holding the GPUs."""
    launcher = subprocess.Popen([sys.executable, "-m", "probes.kernels.allreduce", "--cpu", "2",
                                 "--hold-rank", "1", "--limit-s", "120"], cwd=REPO,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        workers: list[int] = []
        while len(workers) < 2 and time.monotonic() < deadline:
            workers = _children(launcher.pid)
            time.sleep(0.05)
        assert len(workers) == 2, "the launcher did not start its two workers"
        assert all(os.getpgid(w) == w for w in workers)  # each leads a group of its own
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait(10)
    deadline = time.monotonic() + 10
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(_alive(w) for w in workers)


def _python_without_torch() -> str | None:
    for path in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(path, os.X_OK) and subprocess.run(
                [path, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is not None)"],
                capture_output=True, timeout=30).returncode == 0:
            return path
    return None


def test_without_torch_the_kernel_says_skip():
    python = _python_without_torch()
    if python is None:
        pytest.skip("no Python without torch on this machine")
    out = subprocess.run([python, "-m", "probes.kernels.allreduce", "--cpu", "2"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert '"skip": "torch is not installed for ' + python in out.stdout


@pytest.mark.slow
def test_torch_without_cuda_makes_a_gpu_run_a_skip():
    import torch

    if torch.cuda.is_available():
        pytest.skip("torch sees a GPU here")
    out = subprocess.run([sys.executable, "-m", "probes.kernels.allreduce", "--devices", "0,1",
                          "--limit-s", "60"], cwd=REPO, capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert list(result) == ["skip"] and "sees no CUDA device" in result["skip"]
