"""Fuzz: hostile NCCL logs never crash, hang or read more than their bound.

Real files on this machine, read as ``scan --nccl-log`` reads them: a line of 8 MB, random
binary bytes (NUL and invalid UTF-8), a FIFO with no writer (must not be opened: it would
block), a 100 MB file (sparse: only its first MiB and last 2 MiB are read), a link to
/dev/zero, real NCCL lines cut at random points and spliced with garbage. A fixed seed and a
budget keep it bounded.
"""

from __future__ import annotations

import os
import random
import threading
import time
from pathlib import Path

import pytest
from tests.fuzz_runs import budget_s as fuzz_budget_s

from doctor.model import ScanOptions
from doctor.seam.live import LiveHost
from probes.net import nccl_log

pytestmark = pytest.mark.fuzz

SEED = 20261207
BUDGET_S = fuzz_budget_s()  # LLM_DOCTOR_FUZZ_S, else 3 s: as every campaign
BOUND_S = 5.0  # one read of a hostile file: far above the 3 MiB it may read
LOGS = Path(__file__).parent / "fixtures" / "nccl_logs"


def bounded(path: Path):
    """The probe's record for ``path``, run in a thread that must end within BOUND_S."""
    out: dict = {}

    def run() -> None:
        try:
            out["record"] = nccl_log.probe(LiveHost(), ScanOptions(nccl_log=str(path)))
        except BaseException as exc:  # noqa: BLE001 - the test reports any escape
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(BOUND_S)
    assert not thread.is_alive(), f"{path.name}: still reading after {BOUND_S} s"
    assert "error" not in out, f"{path.name}: {out.get('error')!r}"
    record = out["record"]
    log = record.logs[0]
    assert log.bytes_read <= nccl_log.HEAD_BYTES + nccl_log.TAIL_BYTES
    assert "\n" not in nccl_log.summary(record)
    return log


def test_named_hostile_files(tmp_path):
    huge = tmp_path / "huge-line.log"
    huge.write_bytes(b"x NCCL INFO Bootstrap : Using " + b"eth0:" * 1_600_000 + b"<0>")
    binary = tmp_path / "binary.log"
    binary.write_bytes(random.Random(SEED).randbytes(3_000_000))
    fifo = tmp_path / "fifo.log"
    os.mkfifo(fifo)
    big = tmp_path / "big.log"
    with open(big, "wb") as f:  # 100 MB, sparse: the head and the tail hold NCCL's lines
        f.write(b"h:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB\n")
        f.seek(100_000_000)
        f.write(b"\nh:1:1 [0] NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out\n")
    zero = tmp_path / "zero.log"
    zero.symlink_to("/dev/zero")
    loop = tmp_path / "loop.log"
    loop.symlink_to(loop)

    assert bounded(huge).bootstrap_ifs == ()  # one 8 MB line: cut at 4,096 characters
    assert bounded(binary).nccl_lines == 0
    for path in (fifo, zero, loop):
        log = bounded(path)
        assert log.error and log.nccl_lines == 0
    far = bounded(big)
    assert far.size_bytes == big.stat().st_size > 100_000_000 and far.skipped_bytes == far.size_bytes - far.bytes_read
    assert far.ib_devices == ("mlx5_0:1/IB",) and [f.kind for f in far.failures] == ["ibv-modify-qp"]


def test_real_lines_cut_and_spliced_with_garbage(tmp_path):
    rng = random.Random(SEED)
    lines = [line for p in sorted(LOGS.glob("*.log")) for line in p.read_bytes().splitlines()]
    started, n = time.perf_counter(), 0
    while n < 5 or time.perf_counter() - started < BUDGET_S:
        chosen = rng.sample(lines, k=min(len(lines), rng.randint(1, 40)))
        out = []
        for line in chosen:
            cut = rng.randint(0, len(line))
            noise = rng.randbytes(rng.randint(0, 64))
            out.append(rng.choice([line[:cut], line[cut:] + noise, noise + line, line.replace(b" ", b"\0", 1),
                                   line * rng.randint(1, 200)]))
        path = tmp_path / f"spliced-{n}.log"
        path.write_bytes(b"\n".join(out))
        said = bounded(path)
        assert said.error is None and said.nccl_lines <= len(out) and len(said.failures) <= 6
        n += 1
        if n >= 200:
            break
