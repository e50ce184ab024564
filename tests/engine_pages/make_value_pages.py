"""Build the engine pages of issue 16's value cases: queueing with room in the KV cache,
SGLang calm at page size 1, and pages whose every gauge is NaN or infinite.

Each starts from make_pages.py's builders (real pages, counters moved between scrapes);
the edit is the scenario's story:

* ``vllm-v1-queue-at-max-num-seqs``: 64 running, 30 waiting, KV at 0.6, no preemption
  between the scrapes (served with ``--max-num-seqs 64``: the sequence cap binds, not KV);
* ``sglang-calm-page-1``: SGLang (page size 1, its default) with 12 running, none queued;
* ``vllm-v1-nan-gauges``, ``vllm-v1-inf-gauges``, ``sglang-nan-gauges``: the
  kv-pressure / SGLang pages with every gauge sample NaN, or +Inf and -Inf in turn
  (prometheus-client writes both; an engine dividing by a zero count does).

Usage: python tests/engine_pages/make_value_pages.py   (rewrites those folders)
"""

from __future__ import annotations

import re

from tests.engine_pages.make_pages import HERE, SCENARIOS, Page, spread, vllm_v1

TYPE = re.compile(r"^# TYPE (\S+) (\w+)")


def every_gauge(text: str, values: tuple[str, ...]) -> str:
    """The page with each gauge sample's value replaced, cycling through ``values``."""
    lines = text.splitlines()
    gauges = {m.group(1) for line in lines if (m := TYPE.match(line)) and m.group(2) == "gauge"}
    out, i = [], 0
    for line in lines:
        name = re.split(r"[{ ]", line, maxsplit=1)[0]
        if not line.startswith("#") and name in gauges:
            line = f"{line.rpartition(' ')[0]} {values[i % len(values)]}"
            i += 1
        out.append(line)
    return "\n".join(out) + "\n"


def sglang_calm() -> tuple[str, str]:
    first, second = (Page(page) for page in SCENARIOS["sglang"]())
    for page in (first, second):
        page.set("sglang:num_running_reqs", 12).set("sglang:num_queue_reqs", 0)
        page.set("sglang:token_usage", 0.3)
    return first.text(), second.text()


def pages_of(name: str, values: tuple[str, ...]):
    return lambda: tuple(every_gauge(page, values) for page in SCENARIOS[name]())


VALUE_SCENARIOS = {
    "vllm-v1-queue-at-max-num-seqs": lambda: vllm_v1(
        0.6, 30, 64, 0, ttft=spread(0.8, 3.5, 20), itl=spread(0.015, 0.04, 400),
        prompt=spread(900, 1900, 20), generated=spread(120, 480, 20)),
    "sglang-calm-page-1": sglang_calm,
    "vllm-v1-nan-gauges": pages_of("vllm-v1-kv-pressure", ("NaN",)),
    "vllm-v1-inf-gauges": pages_of("vllm-v1-kv-pressure", ("+Inf", "-Inf")),
    "sglang-nan-gauges": pages_of("sglang", ("NaN", "+Inf", "-Inf")),
}


def main() -> None:
    for name, build in VALUE_SCENARIOS.items():
        first, second = build()
        folder = HERE / name
        folder.mkdir(exist_ok=True)
        (folder / "metrics.1.txt").write_text(first)
        (folder / "metrics.2.txt").write_text(second)
        print(f"{folder}: 2 scrapes")


if __name__ == "__main__":
    main()
