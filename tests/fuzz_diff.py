"""Fuzz kind ``diff``: mutated saved scans through ``llm-doctor diff BEFORE AFTER``.

Each input pairs a real saved scan of a committed recorded host (tests/fuzz_report.py makes
them once per process) with a copy made wrong by that module's mutations (a wrong type,
deletion or deep nesting at any path, huge integers, NaN, raw damage, planted secrets in
values and keys, a file that is not one), on either side or both, in any of the three
formats. Besides what every run must hold (tests/fuzz_runs.py ``check``), a run that
compared (exit 0-3 with a JSON diff) prints valid JSON, and no planted secret appears in
what it wrote, in any format, even when the secret is the thing that changed.

Import ``tests.fuzz_runs`` (which registers this kind), not this module, first.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

from tests.fuzz_inputs import Outside
from tests.fuzz_report import NEEDLES, SOURCES, _base, make_report
from tests.fuzz_runs import Run, Tried, check

FORMATS = ("json", "json", "terminal", "markdown", "html")


def try_diff(base: Path, work: Path, rng: random.Random, out: Outside, n: int, bound_s: float,
             runner: Callable[[list[str], float, Path], Run], evaluate_share: float) -> list[Tried]:
    text = _base(rng.choice(SOURCES), work, bound_s, runner)
    clean = work / "clean.json"
    clean.write_text(text)
    mutated_dir = work / "mutated"
    mutated_dir.mkdir()
    mutated, what = make_report(mutated_dir, text, rng, out)
    side = rng.choice(("after", "after", "before", "both"))
    if side == "both":
        other_dir = work / "other"
        other_dir.mkdir()
        before, how = make_report(other_dir, text, rng, out)
        what = f"{how} | {what}"
    else:
        before = clean
    pair = (mutated, before) if side == "before" else (before, mutated)
    fmt = rng.choice(FORMATS)
    argv = ["diff", str(pair[0]), str(pair[1]), "--format", fmt,
            "--state-file", str(work / "no-daemon" / "state.json")]
    if rng.random() < 0.3:
        argv.append("--different-hosts")
    out.reset()
    run = runner(argv, bound_s, work)
    verdict = check(run, out, fmt == "json" and run.rc != 3, NEEDLES, out.touched())
    return [Tried("diff", f"{side}:{fmt}: {what}", argv, run, verdict)]
