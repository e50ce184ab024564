"""The load generator's ceiling: streamed requests/s against a trivial local endpoint.

The endpoint (tests/stream_server.py in its own process) answers every request at once with
four SSE events, so what limits the rate is the client. If an engine's knee is near this
figure, the knee measured is the client's, not the engine's.

    .venv/bin/python benchmarks/loadgen_ceiling.py [--seconds 5] [--concurrency 32]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from doctor.workload.levels import level_stats  # noqa: E402
from doctor.workload.loadgen import RequestTarget, Workload, run_level, run_requests  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=4)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen([sys.executable, "-m", "tests.stream_server", "--tokens",
                               str(args.tokens)], stdout=subprocess.PIPE, text=True, env=env,
                              cwd=ROOT)
    try:
        port = int(server.stdout.readline())
        endpoint = RequestTarget(f"http://127.0.0.1:{port}")
        workload = Workload(prompt_tokens=16, output_tokens=args.tokens, timeout_s=10)
        run_requests(endpoint, workload, 4, 200, 1.0)  # connect, warm the server's code paths
        started = time.perf_counter()
        run = run_level(endpoint, workload, args.concurrency, 10**7, args.seconds, cut=True)
        wall = time.perf_counter() - started
    finally:
        server.terminate()
        server.wait(5)
    results = run.results
    stats = level_stats(run)
    print(f"machine: {os.cpu_count()} CPUs; client and server are separate processes")
    print(f"loadgen ceiling: {len(results) / wall:.0f} streamed requests/s "
          f"({stats.requests_per_s:.0f} req/s ok, {stats.output_tokens_per_s:.0f} events/s, "
          f"{args.tokens} events each, concurrency {args.concurrency}, {wall:.1f} s, "
          f"{stats.errors} errors)")
    print(f"  ttft p50/p95/p99 ms: {stats.ttft.p50_ms} / {stats.ttft.p95_ms} / {stats.ttft.p99_ms}")
    print(f"  the client's own event loop: {stats.client_cpu_share:.0%} of a core, woke "
          f"{stats.client_lag_mean_ms} ms late on average ({stats.client_lag_p95_ms} ms p95)"
          + (f"; at this rate it is the limit: {stats.client_late}" if stats.client_late else ""))


if __name__ == "__main__":
    main()
