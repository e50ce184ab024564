"""Fuzz: live scans of an engine impostor with hostile answers never crash, hang, fail
inside a probe, print the endpoint's key, or send it anywhere but the origin
(tests/fuzz_endpoint.py makes the impostors, tests/fuzz_runs.py checks the runs).

A fixed seed and a time budget keep this bounded; the campaign is
``benchmarks/fuzz.py --kinds endpoint``. Every run goes through ``doctor.commands.cli.main`` in a
fork of this process, and every 5th through a new interpreter (in a PID namespace of its
own where one can be made, so neither sees the engines other tests run on this host).
"""

from __future__ import annotations

import random
import time

import pytest

from tests import fuzz_runs as fuzz

pytestmark = pytest.mark.fuzz

SEED = 20261201
BUDGET_S = fuzz.budget_s()  # LLM_DOCTOR_FUZZ_S, else 3 s: no input starts after it is spent
BOUND_S = 20.0  # per run: the campaign's default bound
MAX_INPUTS = 40
MIN_INPUTS = 3  # the budget ends a campaign only after these: the work is fixed, not the speed


def test_hostile_engine_endpoints(tmp_path):
    rng = random.Random(f"{SEED}-endpoint")
    out = fuzz.make_outside(tmp_path, rng)
    fuzz.warm_up()
    failures, n, started = [], 0, time.perf_counter()
    while n < MAX_INPUTS and (n < MIN_INPUTS or time.perf_counter() - started < BUDGET_S):
        runner = fuzz.run_subprocess if n % 5 == 4 else fuzz.run_forked
        for tried in fuzz.try_one("endpoint", tmp_path, rng, out, n, BOUND_S, runner):
            for problem in tried.verdict.problems:
                failures.append(f"{tried.mutation}: {problem} (exit {tried.run.rc}) "
                                f"{tried.run.uncaught or tried.run.stderr[-200:]}")
        n += 1
    print(f"endpoint: {n} inputs in {time.perf_counter() - started:.1f} s")
    assert failures == [], f"{len(failures)} of {n} inputs:\n" + "\n".join(failures[:20])
