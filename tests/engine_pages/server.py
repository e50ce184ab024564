"""A local engine impostor: recorded /metrics pages whose counters move, and hostile ones.

Serves on 127.0.0.1 at an ephemeral port, one folder per scenario:

* ``/<scenario>/metrics``: the scenario's ``metrics.1.txt`` on the first request, then
  ``metrics.2.txt`` (the counters moved, as between two scrapes of a real engine);
* ``/<scenario>/v1/models``, ``/info``, ``/server_info``, ``/props``: the JSON in CONFIG;
* hostile endpoints, each under its own prefix: ``/garbage`` (an HTML error page),
  ``/truncated`` (a page cut mid-sample), ``/huge`` (50 MB), ``/drip`` (a byte every
  0.5 s), ``/silent`` (accepts, never answers), ``/needs-key`` (401 without the key).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
API_KEY = "sk-test-0123456789abcdef"
SGLANG_KEY = "sk-sglang-secret-fedcba9876543210"
CONFIG = {
    "vllm-v1-kv-pressure": {"/v1/models": {"object": "list", "data": [{
        "id": "Qwen/Qwen3-8B", "object": "model", "owned_by": "vllm", "root": "/models/qwen3-8b",
        "max_model_len": 32768}]}},
    "vllm-v1-calm": {"/v1/models": {"object": "list", "data": [{
        "id": "Qwen/Qwen3-8B", "object": "model", "owned_by": "vllm", "root": "/models/qwen3-8b",
        "max_model_len": 4096}]}},
    # SGLang's /server_info carries the key itself: llm-doctor must keep only "it is set".
    "sglang": {"/server_info": {"model_path": "/models/llama-3.1-8b-instruct", "tp_size": 1,
                                "mem_fraction_static": 0.88, "max_running_requests": 256,
                                "chunked_prefill_size": 8192, "context_length": 131072,
                                "page_size": 1, "kv_cache_dtype": "auto", "api_key": SGLANG_KEY,
                                "disable_cuda_graph": False, "max_total_num_tokens": 411136}},
    "tgi": {"/info": {"model_id": "meta-llama/Llama-3.1-8B-Instruct", "model_dtype": "torch.bfloat16",
                      "max_concurrent_requests": 128, "max_input_tokens": 4095,
                      "max_total_tokens": 4096, "max_batch_prefill_tokens": 4096,
                      "version": "3.3.6"}},
}
TRUNCATED = (HERE / "vllm-v1-calm" / "metrics.1.txt").read_text()[:4000].rsplit("{", 1)[0] + '{engine="0",mod'


class _Handler(BaseHTTPRequestHandler):
    server: "EngineServer"

    def log_message(self, *args) -> None:  # quiet
        pass

    def _send(self, status: int, body: str, content_type: str = "text/plain; version=0.0.4") -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.server.requests.append((self.path, self.headers.get("Authorization")))
        scenario, _, rest = self.path.lstrip("/").partition("/")
        rest = "/" + rest
        hostile = getattr(self, f"_hostile_{scenario.replace('-', '_')}", None)
        if hostile:
            hostile(rest)
        elif rest == "/metrics" and (HERE / scenario / "metrics.1.txt").is_file():
            count = self.server.scrapes[scenario] = self.server.scrapes.get(scenario, 0) + 1
            self._send(200, (HERE / scenario / f"metrics.{min(count, 2)}.txt").read_text())
        elif rest in CONFIG.get(scenario, {}):
            self._send(200, json.dumps(CONFIG[scenario][rest]), "application/json")
        else:
            self._send(404, '{"detail":"Not Found"}', "application/json")

    def _hostile_garbage(self, rest: str) -> None:
        self._send(502, "<html><body><h1>502 Bad Gateway</h1></body></html>", "text/html") \
            if rest != "/metrics" else self._send(200, "<html><body>nginx</body></html>", "text/html")

    def _hostile_truncated(self, rest: str) -> None:
        self._send(200, TRUNCATED)

    def _hostile_huge(self, rest: str) -> None:
        line = b"vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 1.0\n"
        total = 50 * 1024 * 1024
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(total // len(line) * len(line)))
        self.end_headers()
        try:
            for _ in range(total // len(line) // 1024):
                self.wfile.write(line * 1024)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _hostile_drip(self, rest: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        try:
            for byte in b"vllm:num_requests_running 1.0\n" * 100:
                if self.server.stopping.wait(0.5):
                    return
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _hostile_silent(self, rest: str) -> None:
        self.server.stopping.wait(60)

    def _hostile_needs_key(self, rest: str) -> None:
        if self.headers.get("Authorization") != f"Bearer {API_KEY}":
            self._send(401, '{"error":"Unauthorized"}', "application/json")
        elif rest == "/metrics":
            self._send(200, (HERE / "vllm-v1-calm" / "metrics.2.txt").read_text())
        else:
            self._send(200, json.dumps(CONFIG["vllm-v1-calm"]["/v1/models"]), "application/json")


class EngineServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.scrapes: dict[str, int] = {}
        self.requests: list[tuple[str, str | None]] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> "EngineServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()
        time.sleep(0)
