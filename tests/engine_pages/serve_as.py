"""An engine impostor that is a real process: serves one scenario's pages on loopback
under the command line of the engine it plays, so that engine.discovery finds it in the
process table with its listening socket and reads its flags, as it does a real engine.

Usage: python tests/engine_pages/serve_as.py SCENARIO PORT -- vllm serve /models/qwen3-8b
       --port PORT --max-num-seqs 64   (everything after ``--`` is only its disguise)

``/metrics`` answers the scenario's ``metrics.1.txt``, then ``metrics.2.txt``;
``/v1/models`` and ``/server_info`` the JSON of tests/engine_pages/server.py's CONFIG for
the scenario named in ``CONFIG_OF`` (else vllm-v1-kv-pressure's /v1/models). It ends on
SIGTERM, or after 300 s whatever happens (a test that dies leaves no server behind long).
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

HERE = Path(__file__).resolve().parent
LIFETIME_S = 300.0
SGLANG_INFO = {"model_path": "/models/llama-3.1-8b-instruct", "tp_size": 1,
               "mem_fraction_static": 0.88, "max_running_requests": 256,
               "chunked_prefill_size": 8192, "context_length": 131072, "page_size": 1,
               "kv_cache_dtype": "auto", "disable_cuda_graph": False,
               "max_total_num_tokens": 411136}
MODELS = {"object": "list", "data": [{"id": "Qwen/Qwen3-8B", "object": "model", "owned_by": "vllm",
                                      "root": "/models/qwen3-8b", "max_model_len": 4096}]}


def main(argv: list[str]) -> None:
    scenario, port = argv[0], int(argv[1])
    pages = [(HERE / scenario / f"metrics.{i}.txt").read_bytes() for i in (1, 2)]
    json_pages = {"/v1/models": MODELS}
    if scenario.startswith("sglang"):
        json_pages = {"/server_info": SGLANG_INFO, "/get_server_info": SGLANG_INFO}
    scrapes = [0]

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = self.path.split("?")[0]
            if path == "/metrics":
                body, kind = pages[min(scrapes[0], 1)], "text/plain; version=0.0.4"
                scrapes[0] += 1
            elif path in json_pages:
                body, kind = json.dumps(json_pages[path]).encode(), "application/json"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    threading.Timer(LIFETIME_S, server.shutdown).start()
    print("listening", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
