"""Rule loading and evaluation: how their time grows with rules and with items.

Prints, for this code:
- the load time of 3,000 rules (three files of 1,000, the most one file may hold) and
  of one file at several sizes, to show it is linear;
- the evaluation time of the built-in cpu-contention rule over a recorded
  ``host.cpu_load.top`` of 1,000 and 5,000 rows, every row firing.

With ``--old REV`` (default: 59c668d, the commit before the rules were hardened) it also
loads that revision's doctor/rules/loader.py and doctor/rules/evaluate.py from git, side by side, and
times them on smaller inputs (they are quadratic: 3,000 rules took minutes). Pass
``--old ''`` to skip them.

Usage: python benchmarks/rules_bench.py [--old REV]
This is a benchmark that prints figures, not a test.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from doctor.rules.evaluate import evaluate  # noqa: E402
from doctor.model import ProbeResult  # noqa: E402
from probes.registry import by_name  # noqa: E402
from doctor.rules.loader import builtin_files, load_file, load_rules  # noqa: E402
from probes.host.cpu_load import CpuLoadRecord, ProcessCpu  # noqa: E402
from probes.host.limits import LimitsRecord  # noqa: E402

RULE = """
[[rule]]
id = "site-fd-{n}"
cause = "fd-limit-low"
symptoms = ["crash-under-concurrency"]
severity = "warning"
probes = ["host.limits"]
each = "host.limits.processes"
when = "item.nofile_soft is not None and item.nofile_soft < params.min"
title = "{{process}} has {{n}}"
remediation = "raise it"
playbook = "fd-limit-low"
[rule.params]
min = 100000
[rule.evidence]
process = "item.comm"
n = "item.nofile_soft"
"""


def rule_file(folder: Path, name: str, first: int, count: int) -> Path:
    path = folder / name
    path.write_text("".join(RULE.format(n=first + i) for i in range(count)))
    return path


def timed(fn, *args) -> float:
    started = time.perf_counter()
    fn(*args)
    return time.perf_counter() - started


def records(rows: int) -> list[ProbeResult]:
    top = tuple(ProcessCpu(pid=1000 + i, comm=f"burn{i}", cmdline=f"burn --worker {i}",
                           cpu_cores=1.0, engine=None, related=False, kernel_thread=False)
                for i in range(rows))
    cpu = CpuLoadRecord(window_s=1.0, logical_cpus=8, busy_cores=7.5, top=top)
    limits = LimitsRecord(processes=(), engine_count=0)
    return [ProbeResult("host.cpu_load", "ok", 0.0, None, cpu),
            ProbeResult("host.limits", "ok", 0.0, None, limits)]


def old_modules(rev: str) -> tuple[types.ModuleType, types.ModuleType] | None:
    """That revision's rules and evaluate modules, loaded beside today's."""
    loaded = []
    for name in ("rules", "evaluate"):
        try:
            source = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:doctor/{name}.py"],
                                    capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError) as exc:
            print(f"old code at {rev}: not available ({exc})")
            return None
        module = types.ModuleType(f"old_{name}")
        sys.modules[module.__name__] = module  # dataclasses look their module up
        current = sys.modules["doctor.rules.loader"]
        if loaded:  # the old evaluate imports FUNCTIONS and Rule from the old rules
            sys.modules["doctor.rules.loader"] = loaded[0]
        try:
            exec(compile(source, f"{rev}:doctor/{name}.py", "exec"), module.__dict__)
        finally:
            sys.modules["doctor.rules.loader"] = current
        loaded.append(module)
    return loaded[0], loaded[1]


def bench_load(folder: Path, old) -> None:
    probes = by_name()
    load_file(rule_file(folder, "warm.toml", 0, 10), probes)  # imports and caches
    files = [rule_file(folder, f"site{k}.toml", k * 1000, 1000) for k in range(3)]
    print(f"load 3,000 rules (3 files of 1,000): {timed(load_rules, files, probes):.2f} s")
    for count in (250, 500, 1000):
        path = rule_file(folder, f"one{count}.toml", 0, count)
        new = timed(load_file, path, probes)
        line = f"load one file of {count:>5} rules: {new:6.2f} s"
        if old:
            line += f"   old code: {timed(old[0].load_file, path, probes):6.2f} s"
        print(line)


def bench_evaluate(old) -> None:
    builtin = {r.id: r for r in load_rules(builtin_files(), by_name())}
    rule = builtin["cpu-contention"]
    old_rule = None
    if old:
        old_rule = {r.id: r for r in old[0].load_rules(builtin_files(), by_name())}["cpu-contention"]
    for rows in (250, 500, 1000, 5000):
        results = records(rows)
        new = timed(evaluate, [rule], results)
        line = f"evaluate cpu-contention over {rows:>5} rows: {new:6.2f} s"
        if old_rule is not None and rows <= 1000:
            line += f"   old code: {timed(old[1].evaluate, [old_rule], results):6.2f} s"
        print(line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default="59c668d", help="git revision of the old code ('' to skip)")
    args = parser.parse_args()
    old = old_modules(args.old) if args.old else None
    with tempfile.TemporaryDirectory() as tmp:
        bench_load(Path(tmp), old)
    bench_evaluate(old)
    return 0


if __name__ == "__main__":
    sys.exit(main())
