"""The daemon's server under hundreds of idle connections: scrapes, latency, threads, memory.

Starts ``llm-doctor daemon`` (level quick, interval 1 s) on loopback and, for ``--seconds``,
holds ``--connections`` idle TCP connections to it: each opened and never sent a byte; once a
second, those the daemon has closed (its header timeout, its connection limit) are opened
again, as an insistent client would. Meanwhile one client scrapes /metrics every second.
Printed: scrapes ok and failed, p50/p99 scrape latency, the daemon's threads and resident
memory before, during (the most) and after, and how many idle connections it closed.

``--address-space 2G`` puts the daemon under that RLIMIT_AS once it serves (issue 12: about
110 idle connections under 2 GB stopped the thread-per-connection server from starting the
threads its probes and scrapes needed). ``--repo DIR`` runs another checkout's daemon, for a
before/after comparison. Everything is bounded: each connect and scrape has a timeout, every
connection is closed at the end and the daemon is stopped.

Usage: python benchmarks/daemon_connections.py [--connections 400] [--seconds 30]
       [--address-space 2G] [--repo DIR]
This is a benchmark that prints figures, not a test.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import live_stack as stack  # noqa: E402

CONFIG = '[daemon]\nlevel = "quick"\ninterval = "1s"\n'


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].isalpha() else int(text)


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1 << 12) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def _open(host: str, port: int) -> socket.socket | None:
    try:
        sock = socket.create_connection((host, port), timeout=2)
    except OSError:
        return None
    sock.setblocking(False)
    return sock


def _scrape_ms(url: str) -> float | None:
    t0 = time.perf_counter()
    try:
        page = stack.get(url, timeout_s=5)
    except OSError:
        return None
    return (time.perf_counter() - t0) * 1000 if "llm_doctor_build_info" in page else None


def run(connections: int, seconds: float, address_space: str | None, repo: Path) -> int:
    folder = Path(tempfile.mkdtemp(prefix="llm-doctor-conns-"))
    daemon, address = stack.daemon(folder, CONFIG, repo=repo)
    host, port = address.rsplit(":", 1)
    url = f"http://{address}/metrics"
    pid = daemon.popen.pid
    held: list[socket.socket | None] = []
    try:
        stack.wait_for("the first evaluation", lambda: "llm_doctor_probe_success" in
                       stack.get(url), 30)
        if address_space:
            resource.prlimit(pid, resource.RLIMIT_AS, (_size(address_space), resource.RLIM_INFINITY))
        before = stack.status(pid)
        latencies: list[float] = []
        failed = reopened = refused = 0
        during: list[dict[str, int]] = []
        held = [_open(host, int(port)) for _ in range(connections)]
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            tick = time.monotonic()
            took = _scrape_ms(url)
            if took is None:
                failed += 1
            else:
                latencies.append(took)
            during.append(stack.status(pid))
            for i, sock in enumerate(held):  # the closed ones come back, once a second
                if sock is None or _closed(sock):
                    if sock is not None:
                        sock.close()
                        reopened += 1
                    held[i] = _open(host, int(port))
                    refused += held[i] is None
            time.sleep(max(0.0, 1.0 - (time.monotonic() - tick)))
        for sock in held:
            if sock is not None:
                sock.close()
        held = []
        time.sleep(3)
        after = stack.status(pid)
        alive = daemon.popen.poll() is None
        log = daemon.log()
    finally:
        for sock in held:
            if sock is not None:
                sock.close()
        daemon.stop()
        shutil.rmtree(folder, ignore_errors=True)
    limit = f", RLIMIT_AS {address_space}" if address_space else ""
    print(f"daemon under {connections} idle connections for {seconds:g} s{limit} ({repo}):")
    p99 = statistics.quantiles(latencies, n=100)[98] if len(latencies) >= 2 else float("nan")
    p50 = statistics.median(latencies) if latencies else float("nan")
    print(f"  scrapes: {len(latencies)} ok, {failed} failed; p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    print(f"  idle connections closed by the daemon and opened again: {reopened}; "
          f"connects refused: {refused}")
    most = {k: max(d.get(k, 0) for d in during) for k in ("Threads", "VmRSS")} if during else {}
    for name, found in (("before", before), ("during (most)", most), ("after", after)):
        print(f"  {name:<14} threads {found.get('Threads', 0):4d}   RSS "
              f"{found.get('VmRSS', 0) / 1024:6.1f} MiB")
    failures = log.count("can't start new thread") + log.count("beat failed")
    print(f"  daemon alive at the end: {alive}; log lines about failed threads or beats: {failures}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=400)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--address-space", default=None, help="e.g. 2G: RLIMIT_AS of the daemon")
    parser.add_argument("--repo", type=Path, default=stack.REPO,
                        help="the checkout whose daemon runs (default: this one)")
    args = parser.parse_args()
    return run(args.connections, args.seconds, args.address_space, args.repo)


if __name__ == "__main__":
    sys.exit(main())
