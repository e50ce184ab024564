"""Fuzz kind ``plan``: mutated config.json files and GGUF headers never make ``llm-doctor plan``
crash, hang, print an internal error or non-strict JSON, exit 1 or 2 without that verdict,
or fail without one line naming the input (tests/fuzz_plan.py makes and checks them).

A fixed seed and a time budget keep this bounded; the campaign is
``benchmarks/fuzz.py --kinds plan``. Each run goes through ``doctor.commands.cli.main`` in a fork of
this process, and every 20th through a new interpreter, as a user runs it.
"""

from __future__ import annotations

import random
import time

import pytest

from tests import fuzz_runs as fuzz

pytestmark = pytest.mark.fuzz

SEED = 20261212
BUDGET_S = fuzz.budget_s()  # LLM_DOCTOR_FUZZ_S, else 3 s: no input starts after it is spent
BOUND_S = 5.0  # per run: a plan takes milliseconds
MAX_INPUTS = 400
MIN_INPUTS = 20  # the budget ends a campaign only after these: the work is fixed, not the speed


def test_mutated_config_json_and_gguf_files(tmp_path):
    rng = random.Random(SEED)
    out = fuzz.make_outside(tmp_path, rng)
    fuzz.warm_up()
    failures, n, started, exits = [], 0, time.perf_counter(), set()
    while n < MAX_INPUTS and (n < MIN_INPUTS or time.perf_counter() - started < BUDGET_S):
        runner = fuzz.run_subprocess if n % 20 == 19 else fuzz.run_forked
        for tried in fuzz.try_one("plan", tmp_path, rng, out, n, BOUND_S, runner):
            exits.add(tried.run.rc)
            failures += [f"{tried.mutation}: {problem} (exit {tried.run.rc}) "
                         f"{tried.run.uncaught or tried.run.stderr[-200:]}"
                         for problem in tried.verdict.problems]
        n += 1
    print(f"plan: {n} inputs in {time.perf_counter() - started:.1f} s, exits {sorted(exits)}")
    assert failures == [], f"{len(failures)} of {n} inputs:\n" + "\n".join(failures[:20])
