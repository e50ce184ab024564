"""Recorded vLLM hosts with their engine's pages (http.json, recorded-host format 2).

The vLLM server of ``healthy-epyc-9654-vllm`` (pid 48213, ``--port 8000 --api-key ***``)
is read by the engine probes as a capture reads it: ``GET /metrics`` (discovery; the
first scrape), ``GET /v1/models`` (401: the engine wants its key, which a capture never
holds), ``GET /metrics`` again (the second scrape, 3 s later). This writes copies of that
host with those answers:

* ``vllm-v1-calm``: 41 % of the KV cache, nobody waiting, no new preemption;
* ``vllm-v1-kv-pressure``: 99 % of the KV cache, 12 requests waiting and 15 preemptions
  between the scrapes;
* ``vllm-v1-stalled``: 8 requests running at both scrapes and no counter moved (engine-stalled);
* ``vllm-v1-spec-lora-thrash``: the calm pages with ngram speculation keeping few drafts and
  LoRA adapters waiting at ``max_lora`` (engine.features).

``page_answers(scenario)`` gives the same answers to a fixture builder (for the healthy
host itself, say). tests/fixtures/build_all_hosts.py builds the two hosts at test time
(they are not kept in git); by hand, after tests/fixtures/build_hosts.py:
    python tests/engine_pages/make_hosts.py
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from doctor.seam.host import HttpResponse
from doctor.seam.read_kinds import slug

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

[[finding]]
rule = "ttft-queue-dominated"
severity = "warning"
evidence = { queue_s = 2.05, queue_share = 0.547, ttft_s = 3.75 }
''',
    "vllm-v1-spec-lora-thrash": '''# What `llm-doctor scan --replay <this dir>` must raise at warning or above.
level = "standard"

[[finding]]
rule = "spec-decode-low-acceptance"
severity = "warning"
evidence = { k = 4, k_from = "the page's per-position series", accept_length = 1.25, acceptance_rate = 0.062 }

[[finding]]
rule = "lora-adapter-thrash"
severity = "warning"
evidence = { max_lora = 2, running = 2, waiting = 2, adapters = "chat,qa" }
''',
}

EXPECTED["vllm-v1-kv-nixl-offload"] = '''# What `llm-doctor scan --replay <this dir>` must raise at warning or above.
level = "standard"

[[finding]]
rule = "kv-transfer-failing"
severity = "critical"
evidence = { failed = 2.0, transfers = 20.0, connector = "NixlConnector", role = "kv_both" }

[[finding]]
rule = "kv-offload-tier-small"
severity = "warning"
evidence = { cpu_tokens = 29127, gpu_tokens = 70560, backend = "native" }
'''
EXPECTED["vllm-v1-stalled"] = '''# What `llm-doctor scan --replay <this dir>` must raise at warning or above.
level = "standard"

[[finding]]
# a warning: the recording holds no device figure, and on idle or unread devices vLLM's
# stale gauges after aborted requests (vllm#29928) read the same; critical needs a device at work
rule = "engine-stalled"
severity = "warning"
evidence = { requests_running = 8, requests_running_before = 8, tokens_in_window = 0.0, requests_in_window = 0.0, requests_waiting = 7 }

# the page's histograms since start (no request finished in the window): its queue wait
[[finding]]
rule = "ttft-queue-dominated"
severity = "warning"
'''
# the engine's command line and environment where a scenario needs its own (NUL-separated)
KV_ARGS = ("--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}',
           "--kv-offloading-size", "4")
PROCESS = {"vllm-v1-kv-nixl-offload": (KV_ARGS, ("PATH=/usr/local/bin:/usr/bin", "UCX_TLS=tcp,cuda_copy"))}

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
    "vllm-v1-spec-lora-thrash": "the calm engine's pages with vLLM 0.33.0's own speculative-"
                                "decoding and LoRA families (k=4 positions): 600 drafts between "
                                "the scrapes kept 150 tokens (1.25 tokens a step), and both "
                                "`max_lora=2` slots were taken at both scrapes while 'chat' and "
                                "then 'qa' waited.",
    "vllm-v1-kv-nixl-offload": "the calm engine started as one instance of a NIXL prefill/decode "
                               "pair with a 4 GiB CPU offload tier (`--kv-transfer-config "
                               "'{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}' "
                               "--kv-offloading-size 4`, `UCX_TLS=tcp,cuda_copy` on a host with no "
                               "RDMA port); vLLM 0.33.0's own NIXL and offload families: 2 of 20 "
                               "transfers failed between the scrapes, and the CPU tier holds 29,127 "
                               "tokens against the GPU's 70,560.",
    "vllm-v1-stalled": "8 requests running at both scrapes, 3 s apart, and not one counter moved "
                       "between them (no prompt or generated token, no finished request) while "
                       "the queue grew from 5 to 7: a wedged engine that still serves its pages. "
                       "The pair is one real page (vLLM 0.33.0's own) scraped twice, only its "
                       "gauges set. The host has no GPU driver: the accelerators' busy figure "
                       "is not read, and the finding says so.",
}


def page_answers(scenario: str) -> list[tuple[str, HttpResponse]]:
    """(url, answer) in the order the engine probes ask, for RecordWriter.http."""
    text = "text/plain; version=0.0.4"
    return [
        (f"{BASE}/metrics", HttpResponse(f"{BASE}/metrics", 200, text,
                                         (HERE / scenario / "metrics.1.txt").read_text(), 0.004)),
        (f"{BASE}/v1/models", HttpResponse(f"{BASE}/v1/models", 401, "application/json",
                                           UNAUTHORIZED, 0.001)),
        (f"{BASE}/metrics", HttpResponse(f"{BASE}/metrics", 200, text,
                                         (HERE / scenario / "metrics.2.txt").read_text(), 0.004)),
    ]


def write_pages(host: Path, scenario: str) -> None:
    """http.json and http/ as RecordWriter lays them out (docs/recorded-host.md)."""
    folder = host / "http"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir()
    entries = []
    for i, (url, answer) in enumerate(page_answers(scenario)):
        body_file = f"http/{i:02d}-{slug(url.split('//', 1)[-1])}.body"
        (host / body_file).write_text(answer.body)
        entries.append({"url": url, "status": answer.status, "content_type": answer.content_type,
                        "body_file": body_file, "elapsed_s": answer.elapsed_s})
    (host / "http.json").write_text(json.dumps(entries, indent=2, sort_keys=True) + "\n")


def write_host(name: str, hosts: Path = HOSTS) -> Path:
    """``hosts/<name>``: a copy of ``hosts/healthy-epyc-9654-vllm`` answering with ``name``'s pages."""
    target = hosts / name
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(hosts / HEALTHY.name, target, symlinks=True)
    write_pages(target, name)
    if name in PROCESS:
        args, environ = PROCESS[name]
        proc = target / "fs" / "proc" / "48213"
        cmdline = (proc / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        (proc / "cmdline").write_bytes(b"\0".join(cmdline + [a.encode() for a in args]) + b"\0")
        (proc / "environ").write_bytes(b"\0".join(e.encode() for e in environ) + b"\0")
    # the capture timed its two scrapes 3 s apart (engine.metrics records the interval)
    measurements = json.loads((target / "measurements.json").read_text())
    measurements[f"engine.metrics interval {BASE}/metrics"] = {"interval_s": 3.0}
    (target / "measurements.json").write_text(json.dumps(measurements, indent=2, sort_keys=True) + "\n")
    (target / "expected.toml").write_text(EXPECTED[name])
    (target / "README.md").write_text(README.format(name=name, story=STORIES[name]))
    return target


def main() -> None:
    for name in STORIES:
        print(f"{write_host(name)}: written")

if __name__ == "__main__":
    main()
