"""What a scan sends the real llama.cpp llama-server (tests/llama_server.py): the requests
and tokens its warm-up and output sampling sent, by the client's count and by the engine's
own counters, stay within what the probes declare."""

from __future__ import annotations

import pytest

from doctor.model import ScanOptions
from doctor.runner import run_probes
from doctor.seam.live import LiveHost
from probes.helpers.promtext import parse
from probes.registry import PROBES, by_name
from tests.llama_server import private_llama_server  # noqa: F401  (the fixture)
from tests.stream_server import only_named_endpoints

pytestmark = [pytest.mark.live, pytest.mark.timeout(300)]
COSTLY = ("engine.warmup", "engine.output")


def _counters(base_url: str) -> tuple[float, float]:
    """(prompt tokens processed, tokens generated) as the engine's /metrics counts them."""
    answer = LiveHost().http_get(f"{base_url}/metrics", 5.0, 8 << 20)
    page = parse(answer.body, base_url)
    return (page.total("llamacpp:prompt_tokens_total") or 0.0,
            page.total("llamacpp:tokens_predicted_total") or 0.0)


def test_what_a_scan_sends_llama_server_stays_within_the_declared_cost(
        private_llama_server, monkeypatch):  # noqa: F811
    # A server of its own: its counters then count this scan's requests and nothing else's
    # (another test's requests to the session's shared server broke the count).
    llama_server = private_llama_server
    only_named_endpoints(monkeypatch)  # only this server: others on the machine are not ours
    lines: list[str] = []
    options = ScanOptions(endpoints=(llama_server.base_url,), announce=lines.append)
    chosen = tuple(s for s in PROBES if s.name in ("engine.discovery", *COSTLY))
    prompt_before, generated_before = _counters(llama_server.base_url)
    results = {r.name: r for r in run_probes(chosen, LiveHost(), options)}
    prompt_after, generated_after = _counters(llama_server.base_url)
    costs = [by_name()[name].cost for name in COSTLY]
    for name, cost in zip(COSTLY, costs):
        assert results[name].status == "ok", results[name].reason
        (sent,) = results[name].record.sent()
        assert 0 < sent.requests <= cost.requests
        assert 0 < sent.prompt_tokens <= cost.prompt_tokens  # the engine's usage.prompt_tokens
        assert 0 < sent.output_tokens <= cost.output_tokens
        assert sent.seconds <= cost.seconds + 1.0  # the last answer ends by the deadline
    # the engine's own counters agree: nothing else was sent
    assert 0 < prompt_after - prompt_before <= sum(c.prompt_tokens for c in costs)
    assert 0 < generated_after - generated_before <= sum(c.output_tokens for c in costs)
    assert [line.split(" will send ")[0] for line in lines] == list(COSTLY)
