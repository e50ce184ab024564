"""The daemon's cost at its default settings, next to prometheus-node-exporter's.

Starts ``llm-doctor daemon`` (default interval 15 s, level standard: the micro-kernels run
once at start, then every 6 h) and ``prometheus-node-exporter`` on loopback, scrapes both
every 15 s as Prometheus would, and prints for each over ``--minutes`` after a warm-up:
CPU (user+system of the process and its children, from /proc/<pid>/stat, as % of one core),
resident memory (VmRSS, mean and max), and scrape latency p50/p99 (the periodic scrapes plus
a burst of ``--burst`` back-to-back scrapes at the end).

Aims (issue 8): under 1% of a core, under 80 MB, p99 scrape under 50 ms.

Usage: python benchmarks/daemon_resources.py [--minutes 10] [--warmup 60]
This is a benchmark that prints figures, not a test.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import live_stack as stack  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime + cutime + cstime of ``pid`` (fields 14-17 of /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / TICKS


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def scrape_ms(url: str) -> float:
    t0 = time.perf_counter()
    stack.get(url, timeout_s=10)
    return (time.perf_counter() - t0) * 1000


def report(name: str, cpu: float, wall: float, rss: list[float], lat: list[float]) -> None:
    p99 = statistics.quantiles(lat, n=100)[98] if len(lat) >= 2 else lat[0]
    print(f"  {name:<14} CPU {100 * cpu / wall:5.2f}% of a core   RSS mean {statistics.mean(rss):5.1f} "
          f"MiB, max {max(rss):5.1f} MiB   scrape p50 {statistics.median(lat):5.1f} ms, "
          f"p99 {p99:5.1f} ms ({len(lat)} scrapes)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=60)
    parser.add_argument("--burst", type=int, default=200)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="llm-doctor-bench-"))
    node_bin = shutil.which("prometheus-node-exporter")
    if not node_bin:
        sys.exit("prometheus-node-exporter is not installed (apt-get install prometheus-node-exporter)")
    daemon, address = stack.daemon(folder, "")
    port = stack.free_port()
    node = stack.Proc("node-exporter", [node_bin, f"--web.listen-address=127.0.0.1:{port}"], folder)
    targets = {"llm-doctor": (daemon.popen.pid, f"http://{address}/metrics"),
               "node-exporter": (node.popen.pid, f"http://127.0.0.1:{port}/metrics")}
    try:
        stack.wait_for("node exporter", lambda: stack.get(targets["node-exporter"][1]), 30)
        time.sleep(args.warmup)
        start = {n: cpu_seconds(pid) for n, (pid, _) in targets.items()}
        t0 = time.monotonic()
        rss: dict[str, list[float]] = {n: [] for n in targets}
        lat: dict[str, list[float]] = {n: [] for n in targets}
        while time.monotonic() - t0 < args.minutes * 60:
            for n, (pid, url) in targets.items():
                lat[n].append(scrape_ms(url))
                rss[n].append(rss_mib(pid))
            time.sleep(15)
        wall = time.monotonic() - t0
        used = {n: cpu_seconds(pid) - start[n] for n, (pid, _) in targets.items()}
        for n, (_, url) in targets.items():
            lat[n] += [scrape_ms(url) for _ in range(args.burst)]
        series = len(re.findall(r"^llm_doctor", stack.get(targets["llm-doctor"][1]), re.M))
        print(f"daemon resources over {args.minutes:g} min after a {args.warmup:g} s warm-up "
              f"({os.cpu_count()} CPUs; {series} llm_doctor series per scrape)")
        for n in targets:
            report(n, used[n], wall, rss[n], lat[n])
    finally:
        node.stop()
        daemon.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
