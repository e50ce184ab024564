"""Fuzz net.rdma: hostile sysfs counters, GID tables, port files and measurements never make
a traceback.

Each input is a recorded host holding two real ports (gpud's mlx5_0 InfiniBand rail and its
RoCE bond, with the bond's GID table: tests/fixtures/build_rdma_hosts.py) with files made
wrong: huge and negative numbers, binary, NUL bytes, empty files, a directory where a file
goes, missing files, garbage GIDs and GID types, and measurements of every wrong shape. The
probe must end in a record, a skip, or the seam's one-line errors (HostReadError, among
them MalformedError naming the file; MeasurementError naming the measurement); a record
must then go through the rules, the summary and the exporter's catalog without an error.
A fixed seed and a time budget keep it bounded (BUDGET_S; the work per input is fixed).
"""

from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path

import pytest

from doctor.daemon import catalog
from doctor.model import ProbeResult, ScanOptions, Skip
from doctor.rules.evaluate import evaluate
from doctor.seam.host import HostReadError, MeasurementError
from doctor.seam.recorded import RecordedHost
from probes.net import rdma
from tests.builtin_rules import builtin_rules
from tests.fixtures import build_rdma_hosts as rdma_hosts
from tests.fixtures.builders.recording import Recording
from tests.fixtures.convert_rdma_sysfs import files
from tests.fuzz_runs import budget_s as fuzz_budget_s

pytestmark = pytest.mark.fuzz

SEED = 20261207
BUDGET_S = fuzz_budget_s()  # LLM_DOCTOR_FUZZ_S, else 3 s: as every campaign
MIN_INPUTS = 20
MAX_INPUTS = 400
RULES = [r for r in builtin_rules() if r.probes == ("net.rdma",)]

HOSTILE_TEXT = ["-1\n", "18446744073709551616\n", "9" * 5000, "", "\n", "0x10\n", "1e9\n",
                "N/A (no PMA)\n", "4: ACTIVE\n", "99: \n", "400 Gb/sec (0X NDR)\n",
                "400 Gb/sec (4X NDR)" * 200, "\u202e4: ACTIVE\n", "fe80::1\n",
                "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff\n", "RoCE v3\n", "IB/RoCE v1\n",
                "0000:0000:0000:0000:0000:0000:0000:0000\n", "Ethernet\n", "InfiniBand\n"]
HOSTILE_BYTES = [b"\xff\xfe\x00\x01", b"\x00" * 64, b"12\x0034\n", bytes(range(256))]
HOSTILE_MEASUREMENTS = [
    None, [], "x", 7, {"window_s": 0, "ports": {}}, {"window_s": 1e308, "ports": {}},
    {"window_s": 1.0, "ports": []}, {"window_s": 1.0, "ports": {"mlx5_0/1": None}},
    {"window_s": 1.0, "ports": {"mlx5_0/1": {"symbol_error": [1, 2, 3]}}},
    {"window_s": 1.0, "ports": {"mlx5_0/1": {"symbol_error": [2**63, 0]}}},
    {"window_s": 1.0, "ports": {"mlx5_0/1": {"symbol_error": [0, 2**63 - 1]}}},
    {"window_s": 1.0, "ports": {"mlx5_0/1": {"link_downed": [True, False]}}},
    {"window_s": 1.0, "ports": {"x" * 5000: {"symbol_error": [0, 1]}}},
    {"window_s": 1e-9, "ports": {"mlx5_0/1": {"symbol_error": [0, 2**62]}}},
    {"error": "the sample failed"},
]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    tree = {p: t for p, t in files(rdma_hosts.GPUD).items()
            if p.startswith((f"{rdma_hosts.IB}/mlx5_0/", f"{rdma_hosts.IB}/mlx5_bond_0/"))}
    rdma_hosts._roce_bond(tree)
    rec = Recording(hostname="fuzz", captured_at="2026-12-07T00:00:00Z", level="quick")
    rec.fs.update(tree)
    rec.measurements = {rdma.NAME: rdma_hosts.measurement(tree, {})}
    root = tmp_path_factory.mktemp("rdma-base") / "h"
    rec.write(root)
    return root, tree


def _mutate(rng: random.Random, root: Path, paths: list[str]) -> str:
    """One to three hostile edits; returns what was done, for the failure message."""
    done = []
    for _ in range(rng.randint(1, 3)):
        path = rng.choice(paths)
        target = root / "fs" / path.lstrip("/")
        if target.is_dir():  # an earlier edit of this input made it one
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        how = rng.randrange(5)
        if how == 0:
            target.write_text(rng.choice(HOSTILE_TEXT))
            done.append(f"text {path}")
        elif how == 1:
            target.write_bytes(rng.choice(HOSTILE_BYTES))
            done.append(f"bytes {path}")
        elif how == 2:
            target.unlink(missing_ok=True)
            done.append(f"removed {path}")
        elif how == 3:
            target.unlink(missing_ok=True)
            (target / "inner").mkdir(parents=True)
            done.append(f"directory {path}")
        else:
            bad = rng.choice(HOSTILE_MEASUREMENTS)
            (root / "measurements.json").write_text(json.dumps({rdma.NAME: bad}))
            done.append(f"measurement {json.dumps(bad)[:60]}")
    return "; ".join(done)


def _one(root: Path) -> str | None:
    """The problem with one input, or None."""
    try:
        record = rdma.probe(RecordedHost(root), ScanOptions())
    except (Skip, HostReadError, MeasurementError) as exc:  # the runner's one-line outcomes
        text = str(exc)
        return None if "\n" not in text.strip() else f"a multi-line message: {text[:200]!r}"
    except Exception as exc:  # noqa: BLE001 - what the fuzz looks for
        return f"{type(exc).__name__}: {exc}"[:300]
    findings, errors = evaluate(RULES, [ProbeResult("net.rdma", "ok", 0.0, None, record)])
    if errors:
        return f"rule errors: {errors}"[:300]
    for finding in findings:
        str(finding.title)
    str(rdma.summary(record))
    assert catalog.table("net.rdma") is not None
    return None


def test_hostile_rdma_sysfs_never_tracebacks(base, tmp_path):
    root, tree = base
    paths = sorted(tree)
    rng = random.Random(SEED)
    failures, n, started = [], 0, time.perf_counter()
    while n < MAX_INPUTS and (n < MIN_INPUTS or time.perf_counter() - started < BUDGET_S):
        work = tmp_path / f"in{n}"
        shutil.copytree(root, work, symlinks=True)
        what = _mutate(rng, work, paths)
        problem = _one(work)
        if problem:
            failures.append(f"{what}: {problem}")
        shutil.rmtree(work)
        n += 1
    print(f"net.rdma: {n} inputs in {time.perf_counter() - started:.1f} s")
    assert failures == [], f"{len(failures)} of {n} inputs:\n" + "\n".join(failures[:20])
