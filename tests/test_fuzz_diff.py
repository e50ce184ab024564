"""Fuzz: mutated saved scans on either side of ``llm-doctor diff`` never crash, hang, print
invalid JSON or show a planted secret, in any format (tests/fuzz_diff.py makes and checks
them).

A fixed seed and a time budget keep this bounded; the campaign is
``benchmarks/fuzz.py --kinds diff``. Each run goes through ``doctor.commands.cli.main`` in a
fork of this process, and every 20th through a new interpreter, as a user runs it.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from tests import fuzz_runs as fuzz

pytestmark = pytest.mark.fuzz

SEED = 20261218
BUDGET_S = fuzz.budget_s()  # LLM_DOCTOR_FUZZ_S, else 3 s: no input starts after it is spent
BOUND_S = 10.0  # per run: two saved scans compare in well under a second
MAX_INPUTS = 150
MIN_INPUTS = 5  # the budget ends a campaign only after these: the work is fixed, not the speed


def _campaign(base: Path) -> tuple[int, list[str]]:
    rng = random.Random(SEED)
    out = fuzz.make_outside(base, rng)
    fuzz.warm_up()
    failures, n, started = [], 0, None
    while n < MAX_INPUTS and (started is None or n < MIN_INPUTS
                             or time.perf_counter() - started < BUDGET_S):
        runner = fuzz.run_subprocess if n % 20 == 19 else fuzz.run_forked
        for tried in fuzz.try_one("diff", base, rng, out, n, BOUND_S, runner):
            for problem in tried.verdict.problems:
                failures.append(f"{tried.mutation}: {problem} (exit {tried.run.rc}) "
                                f"{tried.run.uncaught or tried.run.stderr[-200:]}")
        if started is None:  # the first input also made a base scan: time from here
            started = time.perf_counter()
        n += 1
    print(f"diff: {n} inputs in {time.perf_counter() - started:.1f} s")
    return n, failures


def test_mutated_saved_scans_on_either_side(tmp_path):
    n, failures = _campaign(tmp_path)
    assert failures == [], f"{len(failures)} of {n} inputs:\n" + "\n".join(failures[:20])
