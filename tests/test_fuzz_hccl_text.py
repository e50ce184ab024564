"""Fuzz: HCCL's real error lines cut, spliced and mixed with garbage never crash the parser
(probes/helpers/hccl_text.py), and what it keeps stays bounded. The file reading it sits on
is net.nccl_log's (probes/helpers/log_files.py), fuzzed by tests/test_fuzz_nccl_log.py. A
fixed seed and a budget keep it bounded.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from tests.fuzz_runs import budget_s as fuzz_budget_s

from probes.helpers import hccl_text

pytestmark = pytest.mark.fuzz

SEED = 20261207
BUDGET_S = fuzz_budget_s()
LINES = [line for line in (Path(__file__).parent / "fixtures" / "ascend" / "sources" / "hccl-log-lines.txt")
         .read_text().splitlines() if line.strip() and not line.startswith("#")]
GARBAGE = ["\x00", "\udcff", "timeout[", "]", "timeout:", "=", "EI", "E", "0006", "(ms)=", "9" * 30, "\n", " "]


def mutated(rng: random.Random) -> list[str]:
    out = []
    for _ in range(rng.randint(1, 40)):
        line = rng.choice(LINES)
        cut = rng.randint(0, len(line))
        line = line[:cut] + "".join(rng.choice(GARBAGE) for _ in range(rng.randint(0, 6))) + line[cut:]
        out.append(line * rng.choice((1, 1, 1, 50)))
    return out


def test_mutated_real_lines_never_raise_and_stay_bounded():
    rng = random.Random(SEED)
    end = time.monotonic() + BUDGET_S
    runs = 0
    while time.monotonic() < end or runs < 50:
        lines = mutated(rng)
        said = hccl_text.parse(lines)
        assert said.failure_lines <= len(lines)
        assert len(said.failures) <= len(hccl_text.FAILURES)
        for f in said.failures:
            assert f.kind in {k for k, _ in hccl_text.FAILURES} and 1 <= f.count <= len(lines)
            assert len(f.line) <= hccl_text.MAX_SHOWN
            assert f.timeout_s is None or 0 <= f.timeout_s < 10**10
        runs += 1
