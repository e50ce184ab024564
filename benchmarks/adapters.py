"""The fleet adapters from a fresh state file: median and worst wall time over N runs.

A scheduler gives an adapter seconds (node-problem-detector kills its plugin at 5 s, slurmd its
HealthCheckProgram at 60 s), and the aim is under 1 s. This writes a fresh state the way the
daemon does (real beats on a recorded host, tests/fixtures/hosts/h100-sxm-8x-gpu-lost: a GPU
problem, so the answer has a finding to name), then runs each adapter as a scheduler would:
a new process each time, through an ``llm-doctor`` console script as pip writes one
(pyproject's [project.scripts], imports included), and checks every run's exit code.

Default adapters: ``llm-doctor npd --family gpu`` and, where the command exists,
``llm-doctor slurm-healthcheck --dry-run``; ``--full-cli`` adds ``python -m
doctor.commands.cli npd`` (the whole command line loaded) for comparison.

Usage: PYTHONPATH=. python benchmarks/adapters.py [--runs 100] [--adapter "npd --family host"]
This is a benchmark that prints figures, not a test.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from doctor.commands.setup import load_daemon  # noqa: E402 (after the checkout is on the path)
from doctor.daemon.service import Daemon  # noqa: E402
from doctor.seam.recorded import RecordedHost  # noqa: E402
from tests.fixtures.build_all_hosts import ensure_built  # noqa: E402

HOST = REPO / "tests" / "fixtures" / "hosts" / "h100-sxm-8x-gpu-lost"
INTERVAL_S = 600  # the state stays fresh (three intervals) for the whole run


def machine() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (f"{platform.node()}: {model}, {os.cpu_count()} CPUs, load {load}; "
            f"Python {platform.python_version()}")


def write_state(folder: Path) -> Path:
    """A state written by real daemon beats on the recorded host."""
    path = folder / "state.json"
    config = folder / "llm-doctor.toml"
    config.write_text(f'[daemon]\nlevel = "quick"\ninterval = "{INTERVAL_S}s"\n'
                      f'state_file = "{path}"\n')
    daemon = Daemon(load_daemon(str(config), (), {}), lambda: load_daemon(str(config), (), {}),
                    host=RecordedHost(str(HOST)))
    try:
        for _ in range(20):  # bounded: until host.cpu has reported, then one beat more
            daemon.beat()
            if "host.cpu" in daemon.latest:
                break
        daemon.beat()
    finally:
        daemon.dispatcher.close()
    return path


def launcher(folder: Path) -> Path:
    path = folder / "llm-doctor"
    path.write_text(f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(REPO)!r})\n"
                    "from doctor.commands.entry import main\nsys.exit(main())\n")
    path.chmod(0o755)
    return path


def exists(argv: list[str], command: str) -> bool:
    out = subprocess.run([*argv, command, "--help"], capture_output=True, timeout=60)
    return out.returncode == 0


def time_runs(argv: list[str], runs: int) -> tuple[list[float], set[int], str]:
    walls, codes, line = [], set(), ""
    for _ in range(runs):
        start = time.perf_counter()
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        walls.append(time.perf_counter() - start)
        codes.add(out.returncode)
        line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else out.stderr.strip()
    return walls, codes, line


def main() -> int:
    ensure_built()  # the recorded test hosts, from their sources
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--adapter", action="append", default=[], metavar="ARGS",
                        help="an adapter's arguments after 'llm-doctor' (repeatable)")
    parser.add_argument("--full-cli", action="store_true",
                        help="also time 'python -m doctor.commands.cli npd --family gpu'")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        state = write_state(folder)
        script = [str(launcher(folder))]
        adapters = [shlex.split(a) for a in args.adapter] or [["npd", "--family", "gpu"]]
        if not args.adapter and exists(script, "slurm-healthcheck"):
            adapters.append(["slurm-healthcheck", "--dry-run"])
        runs = [(f"llm-doctor {shlex.join(a)}", [*script, *a, "--state-file", str(state)])
                for a in adapters]
        if args.full_cli:
            runs.append(("python -m doctor.commands.cli npd --family gpu",
                         [sys.executable, "-m", "doctor.commands.cli", "npd", "--family", "gpu",
                          "--state-file", str(state)]))
        print(f"machine: {machine()}")
        print(f"state: {HOST.name}, fresh (interval {INTERVAL_S} s); {args.runs} runs each")
        for name, argv in runs:
            time_runs(argv, 1)  # warm the page cache for the interpreter and packages
            walls, codes, line = time_runs(argv, args.runs)
            print(f"  {name}")
            print(f"    median {statistics.median(walls) * 1000:.0f} ms, max "
                  f"{max(walls) * 1000:.0f} ms (aim < 1000 ms); exit {sorted(codes)}")
            print(f"    {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
