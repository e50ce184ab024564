"""Fuzz: mutated recorded hosts, rule files and config files never crash, hang, read outside
the recorded host, or show a planted secret (tests/fuzz_inputs.py makes them, tests/fuzz_runs.py checks the runs).

A fixed seed and a time budget per kind keep this bounded (tests/fuzz_runs.budget_s: 3 s a
kind, LLM_DOCTOR_FUZZ_S for more); the campaign of 10,000 inputs is benchmarks/fuzz.py. Each run goes through ``doctor.commands.cli.main`` in a fork
of this process, and every 20th through a new interpreter, as a user runs it.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from tests import fuzz_runs as fuzz

pytestmark = pytest.mark.fuzz

SEED = 20261129
BUDGET_S = fuzz.budget_s()  # LLM_DOCTOR_FUZZ_S, else 3 s: no input starts after it is spent
BOUND_S = 8.0  # per run: a recorded host is read in well under a second
MAX_INPUTS = 150
MIN_INPUTS = 5  # the budget ends a campaign only after these: the work is fixed, not the speed

# Known failures in others' files, by (mutation prefix, problem). Each names its cause.
KNOWN: dict[tuple[str, str], str] = {}  # (mutation prefix, problem) → why it is tolerated: none


def _campaign(kind: str, base: Path) -> tuple[int, list[str]]:
    rng = random.Random(f"{SEED}-{kind}")
    out = fuzz.make_outside(base, rng)
    fuzz.warm_up()
    failures, n, started = [], 0, time.perf_counter()
    while n < MAX_INPUTS and (n < MIN_INPUTS or time.perf_counter() - started < BUDGET_S):
        runner = fuzz.run_subprocess if n % 20 == 19 else fuzz.run_forked
        for tried in fuzz.try_one(kind, base, rng, out, n, BOUND_S, runner):
            for problem in tried.verdict.problems:
                if not any(tried.mutation.startswith(m) and problem == p for m, p in KNOWN):
                    failures.append(f"{tried.mutation}: {problem} (exit {tried.run.rc}) "
                                    f"{tried.run.uncaught or tried.run.stderr[-200:]}")
        n += 1
    print(f"{kind}: {n} inputs in {time.perf_counter() - started:.1f} s")
    return n, failures


def test_mutated_recorded_hosts(tmp_path):
    n, failures = _campaign("host", tmp_path)
    assert failures == [], f"{len(failures)} of {n} inputs:\n" + "\n".join(failures[:20])


def test_mutated_rule_files(tmp_path):
    n, failures = _campaign("rules", tmp_path)
    assert failures == [], f"{len(failures)} of {n} inputs:\n" + "\n".join(failures[:20])


def test_mutated_config_files(tmp_path):
    n, failures = _campaign("config", tmp_path)
    assert failures == [], f"{len(failures)} of {n} inputs:\n" + "\n".join(failures[:20])
