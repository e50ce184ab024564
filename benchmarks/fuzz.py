"""Fuzz campaign: at least 10,000 generated inputs against llm-doctor, and the counts.

Inputs (tests/fuzz_inputs.py): mutated recorded hosts (host.toml, measurements.json, fs/
files and command outputs made wrong: types, nesting, huge integers, non-UTF-8, truncation,
FIFOs, links out of the directory and to themselves; each with an engine whose command line
holds ``--api-key FUZZSECRET…`` and whose environ holds ``FUZZ_TOKEN=…``), rule files
(wrong types, unbalanced ``{`` in titles, expressions built to exhaust time or memory,
3,000-rule files, FIFOs) and config files (wrong types, FIFOs, /dev/zero).

Each input runs through ``doctor.commands.cli.main`` in a fork of this process (warm, killable at
the bound); one in 50 in a new interpreter, as a user runs it. Printed per kind: inputs
tried, exit codes, tracebacks, hangs past the bound, reads outside the recorded host
(access times of planted files), planted secrets or environment values in any output,
probes failing with an internal error, and invalid JSON reports.

Usage: PYTHONPATH=. python benchmarks/fuzz.py [--inputs 10000] [--seed 1] [--bound 20]
       [--kinds host,rules,config,...] [--examples 3]
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import fuzz_runs as fuzz  # noqa: E402
from tests.fixtures.build_all_hosts import ensure_built  # noqa: E402

PROBLEMS = ("traceback", "hang", "read-outside", "found-outside", "found-secret", "found-token",
            "found-environment", "internal-error", "invalid-json", "harness-error",
            "rule-error", "none-in-title")
# Each kind's share of the inputs (tests/fuzz_runs.py TRIERS makes and checks them), and
# the seconds one run of it may take before it counts as a hang (default: --bound).
SHARES = {"host": 0.5, "rules": 0.3, "config": 0.2, "plan": 0.1, "daemon": 0.1, "endpoint": 0.2,
          "report": 0.2,
          "engine-pages": 0.2,
          "npd": 0.1,
          "diff": 0.2,
          "textfile": 0.2,
          "state": 0.1,
          "fix-script": 0.1,
          "fix-apply": 0.1,
          "fix-revert": 0.1}
# A rule or config file is checked in milliseconds; one that takes seconds is already wrong.
FILE_BOUND_S = 5.0
BOUNDS = {"rules": FILE_BOUND_S, "config": FILE_BOUND_S, "plan": FILE_BOUND_S,
          "report": 10.0,  # report: a page in ~0.3 s
          "npd": 5.0,
          "state": 10.0,  # two runs: npd and slurm-healthcheck --dry-run
          "fix-script": 20.0, "fix-apply": 20.0, "fix-revert": 10.0,
          "diff": 10.0}


def _worker(job: tuple[int, int, float, list[str], float]) -> dict:
    total, seed, bound_s, kinds, max_s = job
    return campaign(total, seed, bound_s, kinds, max_s)


def merged(results: list[dict]) -> dict:
    """The sum of the workers' counts (each worker draws its own inputs from its own seed)."""
    out: dict = {"counts": collections.defaultdict(collections.Counter),
                 "exits": collections.defaultdict(collections.Counter),
                 "examples": collections.defaultdict(list),
                 "seconds": max(r["seconds"] for r in results)}
    for r in results:
        for key in ("counts", "exits"):
            for kind, counter in r[key].items():
                out[key][kind].update(counter)
        for key, found in r["examples"].items():
            out["examples"][key].extend(found)
    return out


def campaign(total: int, seed: int, bound_s: float, kinds: list[str],
             max_s: float = float("inf")) -> dict:
    """``total`` inputs (fewer if ``max_s`` runs out first), counted by kind and problem."""
    rng = random.Random(seed)
    weights = [SHARES[k] for k in kinds]
    counts: dict[str, collections.Counter] = {k: collections.Counter() for k in kinds}
    exits: dict[str, collections.Counter] = {k: collections.Counter() for k in kinds}
    examples: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="llm-doctor-fuzz-") as tmp:
        base = Path(tmp)
        out = fuzz.make_outside(base, rng)
        fuzz.warm_up()
        for n in range(total):
            if time.perf_counter() - started > max_s:
                break
            kind = rng.choices(kinds, weights)[0]
            bound = min(bound_s, BOUNDS.get(kind, bound_s))
            runner = fuzz.run_subprocess if n % 50 == 49 else fuzz.run_forked
            try:
                tries = fuzz.try_one(kind, base, rng, out, n, bound, runner)
            except Exception as exc:  # the harness's own failure: count it, go on  # noqa: BLE001
                counts[kind]["harness-error"] += 1
                frame = traceback.extract_tb(exc.__traceback__)[-1]  # where, to track it down
                examples[(kind, "harness-error")].append(
                    f"{type(exc).__name__}: {str(exc)[:120]} at {Path(frame.filename).name}:"
                    f"{frame.lineno} (input {n}, seed {seed})")
                continue
            for tried in tries:
                counts[kind]["runs"] += 1
                counts[kind]["subprocess"] += runner is fuzz.run_subprocess
                exits[kind]["hang" if tried.run.rc is None else str(tried.run.rc)] += 1
                for problem in tried.verdict.problems:
                    counts[kind][problem] += 1
                    if len(examples[(kind, problem)]) < 5:
                        examples[(kind, problem)].append(
                            f"{tried.mutation[:90]} {tried.run.uncaught[:90]}".strip())
            counts[kind]["inputs"] += 1
            if (n + 1) % 500 == 0:
                print(f"  {n + 1} inputs, {time.perf_counter() - started:.0f} s", file=sys.stderr)
    return {"counts": counts, "exits": exits, "examples": examples,
            "seconds": time.perf_counter() - started}


def report(result: dict, kinds: list[str], n_examples: int) -> None:
    counts, exits = result["counts"], result["exits"]
    print(f"fuzz campaign: {sum(c['inputs'] for c in counts.values())} inputs, "
          f"{sum(c['runs'] for c in counts.values())} runs in {result['seconds']:.0f} s")
    # a kind may count problems of its own (a command injected, a write outside the root,
    # a stale state read fresh): each gets a column too
    own = sorted({p for k in kinds for p in counts[k]} - set(PROBLEMS) - {"inputs", "runs", "subprocess"})
    problems = [*PROBLEMS, *own]
    header = ["kind", "inputs", "runs", *problems]
    rows = [[k, counts[k]["inputs"], counts[k]["runs"], *(counts[k][p] for p in problems)]
            for k in kinds]
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(v).rjust(w) for v, w in zip(row, widths)))
    for k in kinds:
        codes = ", ".join(f"{code}: {n}" for code, n in sorted(exits[k].items()))
        print(f"exit codes, {k}: {codes} (subprocess runs: {counts[k]['subprocess']})")
    for (kind, problem), found in sorted(result["examples"].items()):
        print(f"{kind} {problem}:")
        for line in found[:n_examples]:
            print(f"    {line}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--bound", type=float, default=20.0,
                        help="seconds a run may take before it counts as a hang")
    parser.add_argument("--kinds", default=",".join(SHARES))
    parser.add_argument("--examples", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1, help="campaigns run side by side")
    parser.add_argument("--max-seconds", type=float, default=float("inf"),
                        help="stop starting inputs after this long; the counts say how many ran")
    args = parser.parse_args(argv)
    ensure_built()  # the recorded test hosts the inputs are copied from
    kinds = [k for k in args.kinds.split(",") if k in SHARES]
    jobs = [(args.inputs // args.workers + (i < args.inputs % args.workers),
             args.seed * 1000 + i, args.bound, kinds, args.max_seconds)
            for i in range(args.workers)]
    if args.workers == 1:
        results = [_worker(jobs[0])]
    else:
        import multiprocessing

        with multiprocessing.get_context("fork").Pool(args.workers) as pool:
            results = pool.map(_worker, jobs)
    report(merged(results), kinds, args.examples)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
