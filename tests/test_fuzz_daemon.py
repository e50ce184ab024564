"""Fuzz: hostile [daemon] configs and hostile HTTP clients never crash, hang or silence the
daemon (tests/fuzz_daemon.py makes and checks them; benchmarks/fuzz.py --kinds daemon runs
the campaign). A fixed seed and a time budget keep this bounded; every 20th config run goes
through a new interpreter, as a user runs it."""

from __future__ import annotations

import random
import time

import pytest

from tests import fuzz_runs as fuzz
from tests.fuzz_daemon import stop_targets

pytestmark = pytest.mark.fuzz

SEED = 20261201
BUDGET_S = fuzz.budget_s()  # LLM_DOCTOR_FUZZ_S, else 3 s: no input starts after it is spent
BOUND_S = 10.0  # per run: a config is refused, or served, scraped and stopped, in about a second
MAX_INPUTS = 150
MIN_INPUTS = 10  # the budget ends a campaign only after these: the work is fixed, not the speed


def test_hostile_daemon_configs_and_clients(tmp_path):
    rng = random.Random(f"{SEED}-daemon")
    out = fuzz.make_outside(tmp_path, rng)
    fuzz.warm_up()
    failures, kinds, n, started = [], set(), 0, time.perf_counter()
    try:
        while n < MAX_INPUTS and (n < MIN_INPUTS or time.perf_counter() - started < BUDGET_S):
            runner = fuzz.run_subprocess if n % 20 == 19 else fuzz.run_forked
            for tried in fuzz.try_one("daemon", tmp_path, rng, out, n, BOUND_S, runner):
                kinds.add(tried.mutation.split(":", 1)[0])
                for problem in tried.verdict.problems:
                    failures.append(f"{tried.mutation[:160]}: {problem} (exit {tried.run.rc}) "
                                    f"{tried.run.uncaught or tried.run.stderr[-300:]}")
            n += 1
    finally:
        stop_targets()
    print(f"daemon: {n} inputs in {time.perf_counter() - started:.1f} s ({sorted(kinds)})")
    assert {"config", "client"} <= kinds
    assert failures == [], f"{len(failures)} of {n} inputs:\n" + "\n".join(failures[:20])
