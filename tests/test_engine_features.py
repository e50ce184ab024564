"""engine.features from pages the engines' own code wrote: vLLM 0.33.0's SpecDecodingProm and
LoRA gauge (tests/engine_pages/source/vllm_v1_0.33.0_features_generated.txt, make_feature_pages.py
beside it), SGLang 0.5.23's families by name (sglang/srt/observability/metrics_collector.py);
counters moved between two scrapes as make_pages.py moves them; then the rules on the record."""

from __future__ import annotations

import dataclasses
import math

import pytest

from doctor.inputs import NO_INPUTS
from doctor.model import ProbeResult, ScanOptions, Skip
from doctor.rules.evaluate import evaluate
from probes.engine import features as F
from probes.helpers.engine_argv import EngineArgv
from probes.helpers.engine_discovery import DiscoveryRecord
from probes.helpers.engine_flags import blank
from probes.helpers.engine_normalise import normalise
from probes.helpers.engine_scrape import MetricsRecord
from probes.helpers.promtext import parse
from tests.builtin_rules import builtin_rules
from tests.engine_pages.make_pages import Page, source

BASE = "http://127.0.0.1:8000"
ENGINE = dataclasses.replace(blank(BASE), pid=4242, kind="vllm", model="Qwen/Qwen3-8B")
RULES = {r.id: r for r in builtin_rules()
         if r.id in ("spec-decode-low-acceptance", "lora-adapter-thrash",
                     "structured-output-bottleneck")}
NGRAM_K4 = ["vllm", "serve", "Qwen/Qwen3-8B", "--speculative-config",
            '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4}']
SPEC = "vllm:spec_decode_num_"
LORA = "vllm:lora_requests_info"
LORA_HEAD = f"# HELP {LORA} Running stats on lora requests.\n# TYPE {LORA} gauge\n"


def vllm_pages(drafts: int, accepted_per_pos: list[int], lora_second: str = "") -> tuple[str, str]:
    """The generated page, then the same with ``drafts`` more drafts of 4 tokens, each
    position accepted as many times as given, and (optionally) a newer LoRA series."""
    first = source("vllm_v1_0.33.0_features_generated.txt")
    second = source("vllm_v1_0.33.0_features_generated.txt")
    second.add(SPEC + "drafts_total", drafts).add(SPEC + "draft_tokens_total", 4 * drafts)
    second.add(SPEC + "accepted_tokens_total", sum(accepted_per_pos))
    for pos, n in enumerate(accepted_per_pos):
        second.add(SPEC + "accepted_tokens_per_pos_total", n, position=str(pos))
    if lora_second:
        second.append(lora_second)
    return first.text(), second.text()


def record(first: str, second: str, argv: list[str], kind: str = "vllm", base: str = BASE):
    m = normalise(kind, f"{base}/metrics", parse(first, "1"), parse(second, "2"), 3.0)
    engine = dataclasses.replace(ENGINE, kind=kind, base_url=base)
    return F.view(engine, m, argv)


def findings(item) -> list:
    result = ProbeResult("engine.features", "ok", 0.0, None, F.FeaturesRecord((item,)))
    found, errors = evaluate(list(RULES.values()), [result])
    assert errors == []
    return found


def test_vllm_ngram_k4_keeping_few_drafts_fires_with_k_from_its_json_argument():
    # 400 drafts of 4 tokens in the window: position 0 kept 120 times, then 30, 6, 0
    item = record(*vllm_pages(400, [120, 30, 6, 0]), NGRAM_K4)
    assert (item.spec_k, item.spec_k_from, item.spec_method) == (4, "--speculative-config", "ngram")
    assert item.spec_window == "between scrapes" and item.spec_drafts == 400
    assert item.spec_accept_length == pytest.approx(1 + 156 / 400)
    assert item.spec_acceptance_rate == pytest.approx(156 / 400 / 4, abs=1e-3)
    assert item.spec_accepted_per_pos == (0.3, 0.075, 0.015, 0.0)
    [finding] = findings(item)
    assert finding.rule == "spec-decode-low-acceptance" and finding.severity.label == "warning"


def test_a_drafter_that_fits_is_silent_and_k_comes_from_the_page_without_argv():
    item = record(*vllm_pages(400, [360, 300, 240, 180]), [])
    assert (item.spec_k, item.spec_k_from) == (4, "the page's per-position series")
    assert item.spec_accept_length == pytest.approx(3.7)
    assert findings(item) == []


def test_no_traffic_reads_the_totals_since_start():
    first, _ = vllm_pages(0, [])
    item = record(first, first, ["vllm", "serve", "--speculative-config.num_speculative_tokens", "4"])
    assert item.spec_window == "since start" and item.spec_drafts == 5  # the page's own totals
    assert item.spec_accept_length == pytest.approx(3.0)  # 1 + 10 / 5


def test_lora_adapter_waiting_at_max_loras_fires_and_the_older_series_is_ignored():
    # the generated page's newest series: sql,summarise running of max 2, chat waiting;
    # the second scrape adds a newer one, still at the cap with chat and qa waiting
    newer = f'{LORA}{{max_lora="2",running_lora_adapters="summarise,sql",waiting_lora_adapters="chat,qa,sql"}} 1.8e9'
    item = record(*vllm_pages(0, [], newer), [])
    assert (item.lora_max, item.lora_running, item.lora_waiting_outside) == (2, 2, 2)
    assert item.lora_waiting_adapters == "chat,qa" and item.lora_live is True
    assert item.lora_waiting_outside_before == 1
    [finding] = findings(item)
    assert finding.rule == "lora-adapter-thrash"


def test_lora_state_not_updated_between_the_scrapes_is_not_judged():
    item = record(*vllm_pages(0, []), [])
    assert item.lora_live is False and item.lora_waiting_outside == 1
    assert [f.rule for f in findings(item)] == []


def sglang_page(queue: float, timeouts: float, so: float, requests: float) -> str:
    """SGLang 0.5.23's families by name and type (metrics_collector.py lines 376, 511,
    895-936, 1953); labels as its docs page: model_name."""
    label = '{model_name="meta-llama/Llama-3.1-8B-Instruct"}'
    return "\n".join([
        "# TYPE sglang:num_running_reqs gauge", f"sglang:num_running_reqs{label} 8",
        "# TYPE sglang:num_queue_reqs gauge", f"sglang:num_queue_reqs{label} 20",
        "# TYPE sglang:num_grammar_queue_reqs gauge", f"sglang:num_grammar_queue_reqs{label} {queue}",
        "# TYPE sglang:spec_accept_length gauge", f"sglang:spec_accept_length{label} 1.3",
        "# TYPE sglang:num_so_requests counter", f"sglang:num_so_requests_total{label} {so}",
        "# TYPE sglang:num_requests counter", f"sglang:num_requests_total{label} {requests}",
        "# TYPE sglang:num_grammar_timeout counter",
        f"sglang:num_grammar_timeout_total{label} {timeouts}", ""])


def test_sglang_grammar_queue_at_both_scrapes_fires_with_its_share_and_backend():
    argv = ["python", "-m", "sglang.launch_server", "--grammar-backend", "outlines",
            "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3"]
    item = record(sglang_page(9, 0, 100, 200), sglang_page(12, 0, 140, 250), argv,
                  kind="sglang", base="http://127.0.0.1:30000")
    assert (item.grammar_queue, item.grammar_queue_before, item.grammar_timeouts) == (12, 9, 0)
    assert item.so_share == 0.8 and item.so_backend == "outlines"  # 40 of 50 in the window
    assert (item.spec_k, item.spec_accept_length) == (3, 1.3)  # the gauge: 0.1 of 3 steps
    assert sorted(f.rule for f in findings(item)) == ["spec-decode-low-acceptance",
                                                      "structured-output-bottleneck"]
    calm = record(sglang_page(0, 2, 100, 200), sglang_page(0, 2, 140, 250), [],
                  kind="sglang", base="http://127.0.0.1:30000")
    assert calm.grammar_timeouts == 0 and [f.rule for f in findings(calm)] == []


HOSTILE = [
    ("NaN drafts", lambda p: p.set(SPEC + "drafts_total", math.nan)),
    ("negative accepted", lambda p: p.set(SPEC + "accepted_tokens_total", -5)),
    ("huge accepted", lambda p: p.set(SPEC + "accepted_tokens_total", 1e300)),
    ("a position that is no number", lambda p: p.append(
        f'{SPEC}accepted_tokens_per_pos_total{{engine="0",model_name="m",position="x"}} 1')),
    ("LoRA without labels", lambda p: p.append(LORA_HEAD + f"{LORA} 1.9e9")),
    ("LoRA max_lora no count", lambda p: p.append(
        LORA_HEAD + f'{LORA}{{max_lora="nan",running_lora_adapters="a",waiting_lora_adapters="b"}} 1.9e9')),
    ("LoRA NaN time", lambda p: p.set(LORA, math.nan)),
]


@pytest.mark.parametrize("name,spoil", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_values_are_absent_or_unjudged_never_an_error(name, spoil):
    page = source("vllm_v1_0.33.0_features_generated.txt")
    spoil(page)
    text = page.text()
    item = record(text, text, NGRAM_K4)
    assert item is not None
    assert item.spec_acceptance_rate is None or 0 <= item.spec_acceptance_rate <= 1
    assert all(0 <= s <= 1 for s in item.spec_accepted_per_pos)
    findings(item)  # evaluates without an error (asserted inside)


def test_a_page_without_feature_series_gives_no_item_and_the_probe_skips():
    plain = Page(source("vllm_v1_0.33.0_generated.txt").text()).text()
    m = normalise("vllm", f"{BASE}/metrics", parse(plain, "1"), parse(plain, "2"), 3.0)
    assert m.features is None and F.view(ENGINE, m, []) is None
    inputs = NO_INPUTS.adding("engine.discovery", DiscoveryRecord((ENGINE,), 1)) \
                      .adding("engine.metrics", MetricsRecord((m,), ()))
    with pytest.raises(Skip):
        F.probe(None, ScanOptions(), inputs)  # type: ignore[arg-type]  # no host read


def test_the_probe_takes_the_command_line_engine_discovery_read():
    m = normalise("vllm", f"{BASE}/metrics", *(parse(t, "p") for t in vllm_pages(400, [120, 30, 6, 0])), 3.0)
    discovery = DiscoveryRecord((ENGINE,), 1, argv=(EngineArgv(4242, tuple(NGRAM_K4), None),))
    inputs = NO_INPUTS.adding("engine.discovery", discovery) \
                      .adding("engine.metrics", MetricsRecord((m,), ()))
    [item] = F.probe(None, ScanOptions(), inputs).engines  # type: ignore[arg-type]
    assert (item.spec_k_from, item.spec_method, item.model) == ("--speculative-config", "ngram",
                                                                "Qwen/Qwen3-8B")


@pytest.mark.parametrize("argv", [
    ["--speculative-config", "[" * 5000 + "]" * 5000],  # nesting past Python's recursion
    ["--speculative-config", '{"num_speculative_tokens": 1e999}'],
    ["--speculative-config", '{"num_speculative_tokens": 500}'],
    ["--speculative-config", "not json"],
    ["--speculative-num-steps", "-3"],
])
def test_hostile_speculative_flags_are_no_k(argv):
    method, k, k_from = F.spec_config("vllm", argv, None)
    assert k is None and k_from is None
    assert F.spec_config("sglang", argv, None)[1] is None
