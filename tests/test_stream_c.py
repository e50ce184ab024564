"""benchmarks/stream.c, the C STREAM the probe is compared against: it builds and checks out."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.daemon_helpers import need

STREAM_C = Path(__file__).resolve().parent.parent / "benchmarks" / "stream.c"


def _build(tmp_path: Path) -> str:
    gcc = need("gcc", "gcc")
    binary = str(tmp_path / "stream")
    subprocess.run([gcc, "-O3", "-fopenmp", "-Wall", "-Werror", str(STREAM_C), "-o", binary,
                    "-lm"], check=True, capture_output=True, timeout=120)
    return binary


def test_c_stream_prints_copy_add_and_triad_and_checks_them(tmp_path):
    binary = _build(tmp_path)
    elements, repeats = 100_003, 3
    done = subprocess.run([binary, str(elements), str(repeats)], capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="2"), timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["valid"] is True  # the copy, add, triad recurrence replayed on scalars
    assert (result["elements"], result["threads"], result["repeats"]) == (elements, 2, repeats)
    # STREAM's byte accounting: copy moves 2 arrays per element, add and triad 3.
    for kernel, arrays in (("copy", 2), ("add", 3), ("triad", 3)):
        assert result[f"{kernel}_gbps"] > 0
        assert result[f"{kernel}_gbps"] * 1e9 * result[f"{kernel}_best_s"] == \
            pytest.approx(arrays * 8 * elements, rel=1e-3)


def test_c_stream_refuses_a_bad_count_in_one_line(tmp_path):
    binary = _build(tmp_path)
    done = subprocess.run([binary, "0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == ["stream: ELEMENTS and REPEATS must be positive"]
