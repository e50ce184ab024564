"""Issue 28's two-server scenarios on the real llama-server, run by
tests/test_engine_issue28_live.py inside a network namespace of their own
(``python -m tests.issue28_scenarios SCENARIO TMPDIR``); the last line printed is a JSON
object of what was measured, for the test to judge. Exit 77: skipped (the reason on stderr).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from doctor.model import ScanOptions
from doctor.seam.live import LiveHost
from probes.helpers.engine_targets import active_targets
from tests import llama_server
from tests.conftest import REPO

SCAN_TIMEOUT_S = 300


def _scan(*args: str, config: Path | None = None) -> dict:
    extra = ("--config", str(config)) if config else ()
    result = subprocess.run([sys.executable, "-m", "doctor.commands.cli", "scan", "--format",
                             "json", "--no-progress", *extra, *args],
                            capture_output=True, text=True, timeout=SCAN_TIMEOUT_S, cwd=REPO)
    if not result.stdout or "Traceback" in result.stderr:
        raise RuntimeError(result.stderr[-3000:])
    return json.loads(result.stdout)


def _work(url: str) -> float:
    """Prompt + generated tokens the server has counted since its start (its /metrics)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as answer:
        page = answer.read().decode()
    found = re.findall(r"^llamacpp:(?:prompt_tokens_total|tokens_predicted_total) (\S+)$",
                       page, re.M)
    if len(found) != 2:
        raise RuntimeError(f"no token counters in {url}/metrics: {page[:300]}")
    return sum(float(v) for v in found)


def _probe(report: dict, name: str) -> dict:
    return next(p for p in report["probes"] if p["name"] == name)


def _two(tmp: Path):
    (tmp / "a").mkdir(exist_ok=True)
    (tmp / "b").mkdir(exist_ok=True)
    a = llama_server.start(tmp / "a")
    try:
        b = llama_server.start(tmp / "b")
    except BaseException:
        llama_server.stop(a)
        raise
    return a, b


def _busy(url: str, stop: threading.Event) -> None:
    """Completions to ``url`` back to back until ``stop``: one of four concurrent clients."""
    # short requests: on a busy machine several still finish inside a 2 s scrape window
    body = json.dumps({"prompt": "Tell me about the sea " * 2, "max_tokens": 4,
                       "temperature": 0}).encode()
    for _ in range(10_000):
        if stop.is_set():
            return
        request = urllib.request.Request(f"{url}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310 (loopback)
            answer.read()


DECLARED_SCANS = 3


def replicas(tmp: Path) -> dict:
    """Load on A through two quick scans of A and B: undeclared, then declared replicas."""
    a, b = _two(tmp)
    stop = threading.Event()
    busy = [threading.Thread(target=_busy, args=(a.base_url, stop), daemon=True) for _ in range(4)]
    try:
        for thread in busy:
            thread.start()
        time.sleep(2.0)  # the requests are running
        plain = _scan("--level", "quick", "--endpoint", a.base_url, "--endpoint", b.base_url)
        config = tmp / "llm-doctor.toml"
        config.write_text(f'[scan]\nreplicas = [["{a.base_url}", "{b.base_url}"]]\n')
        # judged on the requests that finished between engine.metrics' two scrapes: on a busy
        # machine none of A's may finish in that window, which is "no work seen", not the
        # grouping under test; a few scans, bounded, until one window holds A's work
        for _ in range(DECLARED_SCANS):
            declared = _scan("--level", "quick", "--endpoint", a.base_url, "--endpoint", b.base_url,
                             config=config)
            if any(group.get("served_max") for group in _probe(declared, "engine.load")["data"]["models"]):
                break
    finally:
        stop.set()  # load until both scans are done, and no longer (a fixed 45 s before)
        for thread in busy:
            thread.join(90)
        llama_server.stop(b)
        llama_server.stop(a)
    return {"a": a.base_url, "b": b.base_url,
            "plain_models": _probe(plain, "engine.load")["data"]["models"],
            "plain_skew": [f["title"] for f in plain["findings"]
                           if f["rule"] == "multi-gpu-load-skew"],
            "declared_models": _probe(declared, "engine.load")["data"]["models"],
            "declared_skew": [f["title"] for f in declared["findings"]
                              if f["rule"] == "multi-gpu-load-skew"]}


def named_only(tmp: Path) -> dict:
    """A standard scan of A alone, and B's counters before and after it."""
    a, b = _two(tmp)
    try:
        a_before, b_before = _work(a.base_url), _work(b.base_url)
        report = _scan("--level", "standard", "--endpoint", a.base_url)
        a_after, b_after = _work(a.base_url), _work(b.base_url)
        every = active_targets(LiveHost(), ScanOptions(endpoints=(a.base_url,),
                                                       requests_to="all"))
        named = active_targets(LiveHost(), ScanOptions(endpoints=(a.base_url,)))
    finally:
        llama_server.stop(b)
        llama_server.stop(a)
    return {"a": a.base_url, "b": b.base_url, "a_before": a_before, "a_after": a_after,
            "b_before": b_before, "b_after": b_after,
            "warmup_status": _probe(report, "engine.warmup")["status"],
            "all_targets": [t.base_url for t in every],
            "named_targets": [t.base_url for t in named]}


SCENARIOS = {"replicas": replicas, "named-only": named_only}


def main() -> None:
    scenario, tmp = sys.argv[1], Path(sys.argv[2])
    try:
        found = SCENARIOS[scenario](tmp)
    except pytest.skip.Exception as exc:
        print(str(exc), file=sys.stderr)
        sys.exit(77)
    print(json.dumps(found))


if __name__ == "__main__":
    main()
