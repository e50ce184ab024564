"""The engine's version on engine.discovery's record (probes/helpers/engine_version.py): a real
llama-server's /props, recorded vLLM / SGLang / TGI pages served on loopback, hostile
version strings, a capture and its replay, and a diff of an engine upgrade."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from doctor.model import ScanOptions
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost
from probes.engine.discovery import discover
from probes.helpers.engine_version import MAX_CHARS, clean
from tests.conftest import REPO, run_cli
from tests.engine_pages.server import CONFIG
from tests.llama_server import llama_server  # noqa: F401  (the fixture)

PAGES = REPO / "tests" / "engine_pages"
# what each engine serves, as recorded (tests/engine_pages/server.py's CONFIG), with the
# version each states: vLLM's own page, SGLang's and TGI's in their config pages
SCENARIOS = {
    "vllm": ("vllm-v1-calm", {**CONFIG["vllm-v1-calm"], "/version": {"version": "0.11.0"}}),
    "sglang": ("sglang", {"/server_info": {**CONFIG["sglang"]["/server_info"], "version": "0.5.3rc0"}}),
    "tgi": ("tgi", CONFIG["tgi"]),
}


class Engine(ThreadingHTTPServer):
    """One engine on 127.0.0.1: its recorded /metrics and the JSON pages given."""

    daemon_threads = True

    def __init__(self, metrics_from: str, pages: dict[str, object]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.metrics = (PAGES / metrics_from / "metrics.1.txt").read_text()
        self.pages = dict(pages)
        self.asked: list[str] = []
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: Engine

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.server.asked.append(self.path)
        if self.path == "/metrics":
            status, body, kind = 200, self.server.metrics, "text/plain; version=0.0.4"
        elif self.path in self.server.pages:
            page = self.server.pages[self.path]
            status, kind = 200, "application/json"
            body = page if isinstance(page, str) else json.dumps(page)
        else:
            status, body, kind = 404, '{"detail":"Not Found"}', "application/json"
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):  # a page over the reader's bound
            pass


@pytest.fixture
def engine():
    started: list[Engine] = []

    def start(kind: str, **changed: object) -> Engine:
        metrics_from, pages = SCENARIOS[kind]
        server = Engine(metrics_from, {**pages, **changed})
        started.append(server)
        return server
    yield start
    for server in started:
        server.close()


def discovered(url: str, host=None):
    """The engine at ``url`` (the live llama-server of another test may be in the table)."""
    (found,) = [e for e in discover(host or LiveHost(), ScanOptions(endpoints=(url,)))
                if e.base_url == url]
    return found


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "doctor.commands.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("kind, version", [("vllm", "0.11.0"), ("sglang", "0.5.3rc0"), ("tgi", "3.3.6")])
def test_each_engine_states_its_version_on_its_page(engine, kind, version):
    server = engine(kind)
    found = discovered(server.url)
    assert (found.kind, found.version, found.version_reason) == (kind, version, None)
    # vLLM's /version is the one page more; the others state it on a page read already
    assert server.asked.count("/version") == (1 if kind == "vllm" else 0)


@pytest.mark.live
def test_the_real_llama_server_states_its_build(llama_server):  # noqa: F811
    with urllib.request.urlopen(f"{llama_server.base_url}/props", timeout=10) as answer:
        build = json.load(answer)["build_info"]
    found = discovered(llama_server.base_url)
    assert found.kind == "llama.cpp" and found.version == build and build


def test_a_vllm_that_serves_no_version_page_has_none_with_the_reason(engine):
    server = engine("vllm")
    del server.pages["/version"]
    found = discovered(server.url)
    assert found.version is None and found.version_reason == "not served: /version: HTTP 404"


@pytest.mark.parametrize("stated, why", [
    ("9" * 500_000, "version is 500000 characters, longer than a version"),  # huge
    ("9" * 5_000_000, "failed"),  # larger than a page is read (1 MiB): the seam stops it
    ("0.11.0\x1b]0;pwned\x07", "version holds characters no version has"),  # an escape
    ("0.11.0\n--enforce-eager", "version holds characters no version has"),
    ("0.11.0 <script>", "version holds characters no version has"),
    ("", "version is empty"),
    (11, "version is not a string (int)"),
    ({"major": 0}, "version is not a string (dict)"),
])
def test_a_hostile_version_is_not_kept_and_its_reason_quotes_none_of_it(engine, stated, why):
    server = engine("vllm", **{"/version": {"version": stated}})
    found = discovered(server.url)
    assert found.version is None
    assert found.version_reason.startswith("not served: /version: " + why)
    assert len(found.version_reason) < 200 and found.version_reason.isprintable()


def test_a_version_page_that_is_no_json_or_no_object_is_no_version(engine):
    for page in ("<html>502</html>", "[1, 2]", '"0.11.0"'):
        found = discovered(engine("vllm", **{"/version": page}).url)
        assert found.version is None and "/version" in found.version_reason


def test_clean_keeps_real_versions():
    for real in ("0.11.0", "0.6.4.post1", "0.11.1rc2.dev120+g0123abcd", "b6700-1a2b3c4d",
                 "3.3.6-dev0", "v0.5.3", "x" * MAX_CHARS):
        assert clean(real) == (real, None)
    assert clean("x" * (MAX_CHARS + 1))[0] is None


@pytest.mark.slow
def test_a_capture_records_the_version_page_and_its_replay_answers_the_same(engine, tmp_path):
    server = engine("vllm")
    done = cli("capture", str(tmp_path / "cap"), "--level", "quick", "--endpoint", server.url,
               "--no-progress", "--no-requests")
    assert done.returncode in (0, 1, 2), done.stderr
    server.close()  # the replay asks the recording, not the engine
    replayed = discovered(server.url, RecordedHost(tmp_path / "cap"))
    assert (replayed.kind, replayed.version) == ("vllm", "0.11.0")


@pytest.mark.slow
def test_a_diff_of_an_engine_upgrade_shows_the_version_changed(engine, tmp_path):
    server = engine("vllm", **{"/version": {"version": "0.10.2"}})
    sides = []
    for version in ("0.10.2", "0.11.0"):  # upgraded in place: one engine at one address
        server.pages["/version"] = {"version": version}
        out = tmp_path / f"{version}.json"
        # in a process table of its own: a neighbour's busy process, seen in one capture and
        # gone by the next, is a finding cleared (exit 0) that this test is not about
        done = run_cli("scan", "--level", "quick", "--endpoint", server.url, "--no-requests",
                       "--format", "json", "-o", str(out), private_pids=True)
        assert done.returncode in (0, 1, 2), done.stderr
        sides.append(str(out))
    diff = cli("diff", *sides, "--format", "json")
    assert diff.returncode != 3, diff.stdout + diff.stderr
    result = json.loads(diff.stdout)
    fid = f"engine[vllm@127.0.0.1:{server.server_address[1]}].version"
    (fact,) = [f for f in result["facts"] if f["id"] == fid]
    assert (fact["status"], fact["before"], fact["after"]) == ("changed", "0.10.2", "0.11.0")
    assert fid in result["changes"]
    # an upgrade alone is a change at warning (exit 1): it bears on the runtime
    assert diff.returncode == 1, result["line"]
    assert "driver-runtime-mismatch" in fact.get("causes", []), fact
    assert not any("engine's version" in line for line in result["not_recorded"])
    terminal = cli("diff", *sides)
    assert "0.10.2" in terminal.stdout and "0.11.0" in terminal.stdout
