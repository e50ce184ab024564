"""engine.stacks: py-spy on real Python processes, one that logs heavily and one that does not."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from doctor.rules.evaluate import evaluate
from doctor.seam.host import CommandOutput
from doctor.seam.live import LiveHost
from doctor.model import ProbeResult, ScanOptions
from doctor.seam.recorded import RecordedHost, RecordWriter
from probes.engine import stacks as engine_stacks
from tests.builtin_rules import builtin_rules

RULE = [r for r in builtin_rules() if r.id == "verbose-logging"]

# A process titled like a vLLM server (so discovery treats it as a Python engine), listening
# on loopback, whose worker thread formats and writes a log record in a loop, as an engine
# with per-request INFO logging does under load.
LOGGER = """
import logging, socket, threading, time
logging.basicConfig(filename="/dev/null", level=logging.DEBUG,
                    format="%(asctime)s %(levelname)s %(name)s %(message)s")
log = logging.getLogger("vllm.entrypoints.logger")
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
def serve():
    while True:
        log.info("Received request %s: prompt=%r, params=%r", 1, "x" * 200, {"t": 0.7})
threading.Thread(target=serve, daemon=True).start()
time.sleep(60)
"""
QUIET = """
import time
def work():
    total = 0
    for i in range(10**9):
        total += i * i
work()
"""


def _spawn(code: str) -> subprocess.Popen:
    process = subprocess.Popen([sys.executable, "-c", code, "vllm.entrypoints.openai.api_server"],
                               stdin=subprocess.DEVNULL)
    time.sleep(1.0)  # the interpreter is up and the loop runs
    return process


@pytest.fixture
def logger():
    process = _spawn(LOGGER)
    yield process
    process.kill()
    process.wait(5)


@pytest.mark.slow
def test_a_process_that_logs_heavily_is_found_and_judged(logger):
    """The whole path: process table, listening socket, py-spy dumps, the rule."""
    record = engine_stacks.probe(LiveHost(), ScanOptions())
    (sampled,) = [p for p in record.processes if p.pid == logger.pid]
    assert sampled.error is None and sampled.dumps >= 15
    assert sampled.logging_share >= 0.5, sampled.top_frames
    assert any("logging" in frame for frame in sampled.top_frames)
    findings, errors = evaluate(RULE, [ProbeResult("engine.stacks", "ok", 4.0, None, record)])
    assert errors == [] and [f.evidence["pid"] for f in findings] == [logger.pid]


@pytest.mark.slow
def test_a_process_that_does_not_log_stays_silent():
    process = _spawn(QUIET)
    try:
        data = engine_stacks.sample(LiveHost(), process.pid, samples=8, interval_s=0.1)
    finally:
        process.kill()
        process.wait(5)
    assert data["error"] is None and data["samples"] >= 6
    assert data["logging_share"] == 0.0 and data["gil_wait_share"] == 0.0
    assert "work" in data["top_frames"][0]


def test_ptrace_refused_says_how_to_grant_it(tmp_path):
    """As py-spy answers in a container without CAP_SYS_PTRACE."""
    argv = [engine_stacks.py_spy(), "dump", "--pid", "4242", "--json"]
    writer = RecordWriter(tmp_path)
    writer.command(argv, CommandOutput(tuple(argv), 1, "",
                                       "Error: Permission Denied (os error 13)\n"))
    writer.save({"level": "standard"})
    data = engine_stacks.sample(RecordedHost(tmp_path), 4242, samples=3, interval_s=0.0)
    assert data["dumps"] == 0 and data["samples"] == 0
    assert "ptrace_scope" in data["error"] and "SYS_PTRACE" in data["error"]


def test_classify_counts_gil_waits():
    frames = [{"name": "step", "filename": "/x/scheduler.py", "short_filename": "scheduler.py",
               "line": 1}]
    tok = [{"name": "encode", "filename": "/site/transformers/tokenization_utils_fast.py",
            "short_filename": "tokenization_utils_fast.py", "line": 9}]
    dump = [{"active": True, "owns_gil": True, "frames": frames},
            {"active": True, "owns_gil": False, "frames": tok},
            {"active": False, "owns_gil": False, "frames": frames}]
    shares = engine_stacks.classify([dump, dump])
    assert shares["samples"] == 4
    assert shares["gil_wait_share"] == 0.5 and shares["tokenisation_share"] == 0.5
    assert shares["logging_share"] == 0.0


def test_classify_counts_structured_output_backends():
    def thread(path: str) -> dict:
        return {"active": True, "owns_gil": False,
                "frames": [{"name": "f", "filename": path, "short_filename": path.rsplit("/", 1)[-1],
                            "line": 1}]}
    dump = [thread("/site-packages/xgrammar/compiler.py"),
            thread("/site-packages/vllm/v1/structured_output/backend_outlines.py"),
            thread("/site-packages/sglang/srt/constrained/xgrammar_backend.py"),
            thread("/site-packages/vllm/v1/core/sched/scheduler.py")]
    assert engine_stacks.classify([dump])["grammar_share"] == 0.75


def test_a_share_not_sampled_says_why_for_the_rules_that_read_it():
    """A recorded host whose py-spy was missing: every share None with that reason, and an
    idle engine's with its own; `why` shows them instead of "has no value"."""
    from tests.conftest import FIXTURE_HOSTS
    record = engine_stacks.probe(RecordedHost(FIXTURE_HOSTS / "h100-pcie-vllm-at-hbm-limit"),
                                 ScanOptions())
    (process,) = record.processes
    assert process.logging_share is None
    assert set(process.missing) == set(engine_stacks.SHARES)
    assert "py-spy is not installed" in process.missing["logging_share"]
    idle = engine_stacks._missing({"error": None, "samples": 0, "logging_share": None})
    assert "the engine was idle" in idle["logging_share"]
    assert engine_stacks._missing({"error": None, **dict.fromkeys(engine_stacks.SHARES, 0.0)}) == {}
