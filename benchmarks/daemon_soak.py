"""Soak the daemon: a 1 s interval, a probe that hangs, an engine page that vanishes and
returns, and a CPU hog planted and removed again and again.

Runs ``llm-doctor daemon`` as a child process with two extra probes added to its registry
(a probe that never returns; an engine probe reading a vLLM-style /metrics page served by
this script, which takes the page away and brings it back every ``--flap`` seconds), a CPU
hog on for 40 s and off for 40 s (cpu-contention with ``for`` = 3s), alerts sent to a
webhook here, and a scrape every second. Prints: resident memory at the start (after the
warm-up) and the end, thread counts, failed scrapes, and for each alert that resolved, how
long after its hog stopped.

Aims (issue 8): RSS growth under 5 MB, thread count flat, no failed scrape, every alert
resolved within two intervals (2 s at this interval; plus one evaluation's CPU sample).

Usage: python benchmarks/daemon_soak.py [--minutes 60] [--warmup 60]
This is a benchmark that prints figures, not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import live_stack as stack  # noqa: E402

LAUNCHER = '''
import sys, threading
from dataclasses import dataclass
from doctor.seam.host import HostReadError
from doctor.model import Level, ProbeSpec
import doctor.daemon.service as service
from doctor.daemon import catalog
from doctor.daemon.catalog.rows import Table, gauge, unexported

@dataclass(frozen=True, slots=True)
class EnginePage:
    url: str
    kv_cache_usage_ratio: float
    requests_running: int

def hang(host, options):
    threading.Event().wait()  # never returns: the daemon must not stack these

def engine(host, options) -> EnginePage:
    url = "{page}"
    page = host.http_get(url, timeout_s=2.0)
    if page.status != 200:
        raise HostReadError(url, "failed", f"HTTP {{page.status}}")
    values = dict(line.rsplit(" ", 1) for line in page.body.splitlines() if line and line[0] != "#")
    return EnginePage(url, float(values["vllm:gpu_cache_usage_perc"]),
                      int(float(values["vllm:num_requests_running"])))

service.PROBES = service.PROBES + (
    ProbeSpec("soak.hang", Level.QUICK, "a probe that hangs", "nothing", 2.0, hang),
    ProbeSpec("engine.soak", Level.QUICK, "a vLLM-style page that comes and goes", "{page}",
              3.0, engine),
)
# the engine page's record on /metrics and in the history, as a built-in probe's would be
catalog.TABLES["engine.soak"] = Table("engine.soak", (
    gauge("kv_cache_usage_ratio", "engine_soak_kv_cache_usage_ratio", "KV-cache use of the page"),
    gauge("requests_running", "engine_soak_requests_running", "Running requests of the page"),
    unexported("url", "the page's URL"),
))
from doctor.commands.cli import main
sys.argv = ["llm-doctor"] + sys.argv[1:]
main()
'''

CONFIG = """
[rules.cpu-contention]
min_cpu_cores = 0.3
[daemon]
level = "quick"
interval = "1s"
resolve_after = 2
[daemon.for]
cpu-contention = "3s"
"""


class State:
    page_up = True
    hook: list[tuple[float, dict]] = []


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        if not State.page_up:
            self.send_response(503)
            self.end_headers()
            return
        body = (b"# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc 0.42\n"
                b"vllm:num_requests_running 3\n")
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        State.hook.append((time.time(), body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def proc_status(pid: int) -> tuple[float, int]:
    """(VmRSS MiB, Threads) from /proc/<pid>/status."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["Threads"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--warmup", type=float, default=60, help="seconds before the baseline")
    parser.add_argument("--flap", type=float, default=30, help="engine page up/down period (s)")
    parser.add_argument("--hog", type=float, default=40, help="hog on/off period (s)")
    args = parser.parse_args()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    folder = Path(tempfile.mkdtemp(prefix="llm-doctor-soak-"))
    launcher = folder / "launch.py"
    launcher.write_text(LAUNCHER.format(page=base + "/engine/metrics"))
    (folder / "llm-doctor.toml").write_text(CONFIG)
    argv = [sys.executable, str(launcher), "daemon", "--listen", "127.0.0.1:0", "--config",
            str(folder / "llm-doctor.toml"), "--webhook", base + "/hook",
            "--report-dir", str(folder / "reports")]
    daemon = stack.Proc("daemon", argv, folder, env={"PYTHONPATH": str(stack.REPO)})
    import re

    address = stack.wait_for("the daemon", lambda: (re.search(
        r"serving metrics on http://([\d.]+:\d+)", daemon.log()) or [None, None])[1], 60)
    pid = daemon.popen.pid
    start = time.monotonic()
    end = start + args.minutes * 60
    baseline = None
    samples, scrape_ms, failed, hog_stops = [], [], 0, []
    unexported = 0  # scrapes on which a record's field was not exported
    hog = None
    next_hog = start + 10
    next_flap = start + args.flap
    try:
        while time.monotonic() < end:
            now = time.monotonic()
            if now >= next_flap:
                State.page_up = not State.page_up
                next_flap = now + args.flap
            if now >= next_hog:
                if hog is None:
                    hog = stack.spinner(args.hog + 5)
                else:
                    hog.kill()
                    hog.wait(5)
                    hog_stops.append((time.time(), hog.pid))
                    hog = None
                next_hog = now + args.hog
            t0 = time.perf_counter()
            try:
                page = stack.get(f"http://{address}/metrics", timeout_s=5)
                scrape_ms.append((time.perf_counter() - t0) * 1000)
                if "llm_doctor_probe_success" not in page:
                    failed += 1
                unexported += "llm_doctor_exporter_unexported_values{" in page
            except OSError:
                failed += 1
            rss, threads = proc_status(pid)
            samples.append((now - start, rss, threads))
            if baseline is None and now - start >= args.warmup:
                baseline = (rss, threads)
            time.sleep(max(0.0, 1.0 - (time.perf_counter() - t0)))
    finally:
        if hog is not None:
            hog.kill()
            hog_stops.append((time.time(), hog.pid))
        time.sleep(5)
        final_rss, final_threads = proc_status(pid)
        code = daemon.stop()
        server.shutdown()

    resolved = {}
    fired = 0
    for at, body in State.hook:
        for alert in body["alerts"]:
            key = alert["labels"].get("key", "")
            if body["status"] == "firing":
                fired += 1
            else:
                resolved.setdefault(key, []).append(at)
    latencies = []
    unresolved = []
    quiet = 0  # hogs whose alert was not firing when they stopped (never fired, or cleared
    # earlier because the loaded machine gave them less than min_cpu_cores)
    for stopped_at, hog_pid in hog_stops:
        names = (str(hog_pid), f"python3 pid {hog_pid}", f"python pid {hog_pid}")
        events = sorted((at, body["status"]) for at, body in State.hook for a in body["alerts"]
                        if a["labels"].get("key", "") in names)
        before = [status for at, status in events if at < stopped_at]
        if not before or before[-1] != "firing":
            quiet += 1
            continue
        after = [at for at, status in events if at >= stopped_at and status == "resolved"]
        if after:
            latencies.append(after[0] - stopped_at)
        else:
            unresolved.append(hog_pid)
    threads_seen = [t for _, _, t in samples]
    baseline = baseline or (samples[0][1], samples[0][2])
    print(f"soak: {args.minutes:g} min at a 1 s interval (hung probe, engine page flapping every "
          f"{args.flap:g} s, CPU hog on/off every {args.hog:g} s); daemon exit code {code}")
    print(f"  RSS: {baseline[0]:.1f} MiB after {args.warmup:g} s warm-up -> {final_rss:.1f} MiB "
          f"at the end (growth {final_rss - baseline[0]:+.1f} MiB; max {max(s[1] for s in samples):.1f})")
    marks = [s for s in samples if s[0] >= args.warmup]
    step = max(1, len(marks) // 6)
    print("  RSS over time: " + ", ".join(f"{t / 60:.0f} min {r:.1f}" for t, r, _ in
                                         marks[::step] + marks[-1:]))
    # Threads swing within a beat (one per probe call while the beat's probes run, one per
    # scrape being served); flat means each window's range is the same, not a constant.
    windows = [marks[i:i + step] for i in range(0, len(marks), step)]
    print("  threads per window (min-max): " + ", ".join(
        f"{w[0][0] / 60:.0f}-{w[-1][0] / 60:.0f} min {min(t for *_, t in w)}-"
        f"{max(t for *_, t in w)}" for w in windows if w))
    print(f"  threads: {baseline[1]} after warm-up, min {min(threads_seen)}, max "
          f"{max(threads_seen)}, at the end {final_threads}")
    print(f"  scrapes: {len(scrape_ms)} ok, {failed} failed, {unexported} with values the "
          f"exporter could not export; p50 "
          f"{statistics.median(scrape_ms):.1f} ms, p99 "
          f"{statistics.quantiles(scrape_ms, n=100)[98]:.1f} ms")
    ours = sum(1 for _, body in State.hook for a in body["alerts"] if body["status"] == "firing"
               and any(a["labels"].get("key", "").split(" ")[-1] == str(p) for _, p in hog_stops))
    print(f"  alerts: {fired} fired (webhook; {ours} for the planted hogs, the rest for other "
          f"processes busy on this shared machine); hog stops {len(hog_stops)}: firing at the stop "
          f"{len(latencies) + len(unresolved)}, of which resolved {len(latencies)}, not resolved "
          f"{len(unresolved)}; not firing at the stop {quiet}")
    if latencies:
        print(f"  resolution latency: median {statistics.median(latencies):.1f} s, max "
              f"{max(latencies):.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
