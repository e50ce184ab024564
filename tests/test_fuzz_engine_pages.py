"""Fuzz: live scans of an engine whose pages hold hostile values (NaN, ±Inf, negative,
1e308, counters that go backwards between the two scrapes) never crash, hang, fail inside a
probe or a rule, or title a finding with None, nan or inf (tests/fuzz_engine_pages.py makes
the engines, tests/fuzz_runs.py checks the runs).

A fixed seed and a time budget keep this bounded; the campaign is
``benchmarks/fuzz.py --kinds engine-pages``. Every run goes through
``doctor.commands.cli.main`` in a fork of this process, and every 5th through a new
interpreter (in a PID namespace of its own where one can be made).
"""

from __future__ import annotations

import random
import time

import pytest

from tests import fuzz_runs as fuzz
from tests.fuzz_engine_pages import NOT_A_NUMBER, hostile_page, judged, restarted

pytestmark = pytest.mark.fuzz

SEED = 20261201
BUDGET_S = fuzz.budget_s()  # LLM_DOCTOR_FUZZ_S, else 3 s: no input starts after it is spent
BOUND_S = 20.0  # per run: the campaign's default bound
MAX_INPUTS = 40
MIN_INPUTS = 3  # the budget ends a campaign only after these: the work is fixed, not the speed


def test_engines_with_hostile_values(tmp_path):
    rng = random.Random(f"{SEED}-engine-pages")
    out = fuzz.make_outside(tmp_path, rng)
    fuzz.warm_up()
    failures, n, started = [], 0, time.perf_counter()
    while n < MAX_INPUTS and (n < MIN_INPUTS or time.perf_counter() - started < BUDGET_S):
        runner = fuzz.run_subprocess if n % 5 == 4 else fuzz.run_forked
        for tried in fuzz.try_one("engine-pages", tmp_path, rng, out, n, BOUND_S, runner):
            for problem in tried.verdict.problems:
                failures.append(f"{tried.mutation}: {problem} (exit {tried.run.rc}) "
                                f"{tried.run.uncaught or tried.run.stderr[-200:]}")
        n += 1
    print(f"engine-pages: {n} inputs in {time.perf_counter() - started:.1f} s")
    assert failures == [], f"{len(failures)} of {n} inputs:\n" + "\n".join(failures[:20])


def test_the_generator_changes_values_and_not_shapes():
    page = "# TYPE a_total counter\na_total 10.0\n# TYPE g gauge\ng{x=\"1\"} 3.0\n"
    done: list[str] = []
    hostile = hostile_page(page, random.Random(1), 1.0, done)
    assert [line.rpartition(" ")[0] for line in hostile.splitlines()] == \
        [line.rpartition(" ")[0] for line in page.splitlines()]
    assert len(done) == 2
    backwards = restarted(page, page.replace("10.0", "20.0"), random.Random(2))
    value = float(backwards.splitlines()[1].rpartition(" ")[2])
    assert value < 10.0  # the counter went backwards: the engine restarted between scrapes


def test_the_check_counts_rule_errors_and_none_in_titles():
    report = ('{"findings": [{"title": "block size 1 wastes None of the KV cache"}], '
              '"rule_errors": ["rule \'x\': TypeError"]}')
    errors, titles = judged(report)
    assert errors and titles
    assert judged('{"findings": [{"title": "KV 60% full"}], "rule_errors": []}') == ([], [])
    assert NOT_A_NUMBER.search("nan ms") and not NOT_A_NUMBER.search("inf-cpu-07")
