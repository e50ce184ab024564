"""Fuzz: hostile state files and flags for ``llm-doctor npd`` (tests/fuzz_npd.py) always give
node-problem-detector an answer it can use: exit 0, 1 or 2 (2 wherever the state cannot be
trusted), one line of at most 80 bytes of clean UTF-8, no traceback, no hang past NPD's 5 s.

A fixed seed and a time budget keep this bounded; the campaign of 2,000 inputs is
``benchmarks/fuzz.py --kinds npd``. Each run goes through ``doctor.commands.cli.main`` in a
fork of this process, and every 20th through a new interpreter.
"""

from __future__ import annotations

import random
import time

import pytest

from tests import fuzz_runs as fuzz
from tests.fuzz_npd import base_states

pytestmark = pytest.mark.fuzz

SEED = 20261201
BUDGET_S = fuzz.budget_s()  # LLM_DOCTOR_FUZZ_S, else 3 s: no input starts after it is spent
BOUND_S = 5.0  # NPD's default kill
MAX_INPUTS = 150
MIN_INPUTS = 5  # the budget ends a campaign only after these: the work is fixed, not the speed


def test_hostile_states_and_flags_always_give_npd_an_answer(tmp_path):
    rng = random.Random(f"{SEED}-npd")
    out = fuzz.make_outside(tmp_path, rng)
    fuzz.warm_up()
    base_states(tmp_path)  # the daemon-written states, once, before the clock starts
    failures, n, started = [], 0, time.perf_counter()
    while n < MAX_INPUTS and (n < MIN_INPUTS or time.perf_counter() - started < BUDGET_S):
        runner = fuzz.run_subprocess if n % 20 == 19 else fuzz.run_forked
        for tried in fuzz.try_one("npd", tmp_path, rng, out, n, BOUND_S, runner):
            failures += [f"{tried.mutation}: {problem} (exit {tried.run.rc}) "
                         f"{tried.run.stdout[:100]!r} {tried.run.uncaught or tried.run.stderr[-200:]}"
                         for problem in tried.verdict.problems]
        n += 1
    print(f"npd: {n} inputs in {time.perf_counter() - started:.1f} s")
    assert failures == [], f"{len(failures)} of {n} inputs:\n" + "\n".join(failures[:20])
