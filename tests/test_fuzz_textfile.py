"""Fuzz: hostile recorded hosts through ``scan --format prom`` never crash, hang, read outside
the input or show a planted secret, and every textfile written is one node_exporter takes
whole: it parses, no series twice, one label set per metric, promtool clean
(tests/fuzz_textfile.py makes and checks them).

A fixed seed and a time budget keep this bounded; the campaign is
``benchmarks/fuzz.py --kinds textfile``. Each run goes through ``doctor.commands.cli.main`` in
a fork of this process, and every 20th through a new interpreter, as a user runs it.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from tests import fuzz_runs as fuzz

pytestmark = [pytest.mark.fuzz, pytest.mark.live]

SEED = 20261217
BUDGET_S = fuzz.budget_s()  # LLM_DOCTOR_FUZZ_S, else 3 s: no input starts after it is spent
BOUND_S = 30.0  # per run: a replayed scan takes about a second
MAX_INPUTS = 100
MIN_INPUTS = 3  # the budget ends a campaign only after these: the work is fixed, not the speed


def _campaign(base: Path) -> tuple[int, list[str]]:
    rng = random.Random(SEED)
    out = fuzz.make_outside(base, rng)
    fuzz.warm_up()
    failures, n, started = [], 0, time.perf_counter()
    while n < MAX_INPUTS and (n < MIN_INPUTS or time.perf_counter() - started < BUDGET_S):
        runner = fuzz.run_subprocess if n % 20 == 19 else fuzz.run_forked
        for tried in fuzz.try_one("textfile", base, rng, out, n, BOUND_S, runner):
            for problem in tried.verdict.problems:
                failures.append(f"{tried.mutation}: {problem} (exit {tried.run.rc}) "
                                f"{tried.run.uncaught or tried.run.stderr[-200:]}")
        n += 1
    print(f"textfile: {n} inputs in {time.perf_counter() - started:.1f} s")
    return n, failures


def test_hostile_hosts_give_valid_textfiles(tmp_path):
    n, failures = _campaign(tmp_path)
    assert failures == [], f"{len(failures)} of {n} inputs:\n" + "\n".join(failures[:20])
