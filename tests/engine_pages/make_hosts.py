"""Give the recorded vLLM hosts their engine's pages (http.json, format 2).

The vLLM server of ``healthy-epyc-9654-vllm`` (pid 48213, ``--port 8000 --api-key ***``)
is read by the engine probes as a capture reads it: ``GET /metrics`` (discovery; the
first scrape), ``GET /v1/models`` (401: the engine wants its key, which a capture never
holds), ``GET /metrics`` again (the second scrape). This writes those answers:

* into ``healthy-epyc-9654-vllm`` itself: the calm pages (41 % of the KV cache, nobody
  waiting, no new preemption);
* ``vllm-v1-calm``: a copy of that host with the same calm pages, named for its engine;
* ``vllm-v1-kv-pressure``: a copy whose engine is at 99 % of its KV cache with 12 requests
  waiting and 15 preemptions between the scrapes.

Run after tests/fixtures/build_hosts.py (which rewrites the healthy host without pages):
    python tests/engine_pages/make_hosts.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
HOSTS = HERE.parent / "fixtures" / "hosts"
HEALTHY = HOSTS / "healthy-epyc-9654-vllm"
BASE = "http://127.0.0.1:8000"
UNAUTHORIZED = '{"error":"Unauthorized"}'

EXPECTED = {
    "vllm-v1-calm": '# What `llm-doctor scan --replay <this dir>` must raise at warning or above.\n'
                    'level = "standard"\nfinding = []  # a calm engine: nothing\n',
    "vllm-v1-kv-pressure": '''# What `llm-doctor scan --replay <this dir>` must raise at warning or above.
level = "standard"

[[finding]]
rule = "kv-cache-pressure"
severity = "critical"
evidence = { kv_cache_use = 0.99, requests_waiting = 12.0 }

[[finding]]
rule = "engine-preemption"
severity = "critical"
evidence = { preemptions_in_window = 15.0, preemptions_per_s = 5.0 }
''',
}

README = """# {name}

A copy of `../healthy-epyc-9654-vllm/` (read its README for the machine) whose vLLM server
(pid 48213, `--port 8000 --api-key ***`) answered the engine probes with the pages in
`http/`: {story}

The pages are `tests/engine_pages/{name}/metrics.1.txt` and `metrics.2.txt`: vLLM 0.33.0's
own PrometheusStatLogger output (names, labels, buckets; synthetic values, see
`tests/engine_pages/source/README.md`) with gauges set and counters moved between the two
scrapes by `tests/engine_pages/make_pages.py`. `/v1/models` answered 401: a capture does not
hold the engine's key. Written by `tests/engine_pages/make_hosts.py`.
"""

STORIES = {
    "vllm-v1-calm": "41 % of the KV cache in use, 6 requests running, none waiting, no "
                    "preemption between the scrapes; TTFT p99 under 0.1 s.",
    "vllm-v1-kv-pressure": "99 % of the KV cache in use, 48 requests running and 12 waiting, "
                           "15 preemptions in the 3 s between the scrapes, TTFT p95 of seconds.",
}


def write_pages(host: Path, scenario: str) -> None:
    folder = host / "http"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir()
    entries = []
    answers = [("metrics", (HERE / scenario / "metrics.1.txt").read_text(), 200, "text/plain; version=0.0.4"),
               ("v1_models", UNAUTHORIZED, 401, "application/json"),
               ("metrics", (HERE / scenario / "metrics.2.txt").read_text(), 200, "text/plain; version=0.0.4")]
    for i, (page, body, status, content_type) in enumerate(answers):
        body_file = f"http/{i:02d}-127.0.0.1_8000_{page}.body"
        (host / body_file).write_text(body)
        path = "/metrics" if page == "metrics" else "/v1/models"
        entries.append({"url": f"{BASE}{path}", "status": status, "content_type": content_type,
                        "body_file": body_file, "elapsed_s": 0.004})
    (host / "http.json").write_text(json.dumps(entries, indent=2, sort_keys=True) + "\n")


def main() -> None:
    write_pages(HEALTHY, "vllm-v1-calm")
    for name in ("vllm-v1-calm", "vllm-v1-kv-pressure"):
        target = HOSTS / name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(HEALTHY, target, symlinks=True)
        write_pages(target, name)
        (target / "expected.toml").write_text(EXPECTED[name])
        (target / "README.md").write_text(README.format(name=name, story=STORIES[name]))
        print(f"{target}: written")


if __name__ == "__main__":
    main()
