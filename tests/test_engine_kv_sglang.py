"""engine.kv_tiers from pages SGLang's and LMCache's own definitions wrote: SGLang 0.5.23's
PD-disaggregation transfer families (SchedulerMetricsCollector) and LMCache 0.5.6's lookup
counters (PrometheusLogger), tests/engine_pages/source/sglang_0.5.23_kv_generated.txt and
lmcache_0.5.6_generated.txt (make_sglang_kv_pages.py beside them); counters moved between two
scrapes as make_pages.py moves them, the environ as /proc gives it; then the rules."""

from __future__ import annotations

import dataclasses

import pytest

from doctor.model import ProbeResult
from doctor.rules.evaluate import evaluate
from doctor.seam.recorded import RecordedHost
from probes.engine import kv_tiers as K
from probes.helpers.engine_flags import blank
from probes.helpers.engine_normalise import normalise
from probes.helpers.promtext import parse
from tests.builtin_rules import builtin_rules
from tests.engine_pages.make_pages import SCENARIOS, source

RULES = [r for r in builtin_rules() if r.id.startswith(("kv-transfer-", "kv-offload-"))]
SGL = "sglang_0.5.23_kv_generated.txt"
FAILED = "sglang:num_transfer_failed_reqs_total"
PREFILL = ["python3", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-8B",
           "--disaggregation-mode", "prefill", "--disaggregation-ib-device", "mlx5_0"]
LMCACHE = ["vllm", "serve", "Qwen/Qwen3-8B", "-tp", "2", "--kv-transfer-config",
           '{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}']
LINK = (400.0, "net.rdma: mlx5_0/1")


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> RecordedHost:
    """pid 4242: no PYTHONHASHSEED, LMCache's default hash; 4343: sha256_cbor; 4444 and 4545:
    Mooncake told to use TCP."""
    root = tmp_path_factory.mktemp("kv-sglang-host")
    (root / "host.toml").write_text('[host]\nformat = 2\nhostname = "kv"\nlevel = "standard"\n'
                                    'captured_at = "2026-12-07T04:00:00Z"\nllm_doctor_version = "0.1.0"\n')
    for pid, env in ((4242, b"PATH=/usr/bin\0"),
                     (4343, b"PATH=/usr/bin\0LMCACHE_PRE_CACHING_HASH_ALGORITHM=sha256_cbor\0"),
                     (4444, b"PATH=/usr/bin\0MC_FORCE_TCP=1\0"), (4545, b"MOONCAKE_PROTOCOL=TCP\0")):
        (root / "fs" / "proc" / str(pid)).mkdir(parents=True)
        (root / "fs" / "proc" / str(pid) / "environ").write_bytes(env)
    return RecordedHost(root)


def record(host, first: str, second: str, argv: list[str], kind: str, pid: int | None = None,
           link=LINK) -> K.EngineKvTiers | None:
    m = normalise(kind, "http://127.0.0.1:30000/metrics", parse(first, "1"), parse(second, "2"), 3.0)
    engine = dataclasses.replace(blank("http://127.0.0.1:30000"), pid=pid, kind=kind, model="Qwen/Qwen3-8B")
    return K.view(host, engine, m, argv, 2, link)


def fired(item) -> list[str]:
    found, errors = evaluate(RULES, [ProbeResult("engine.kv_tiers", "ok", 0.0, None, K.KvTiersRecord((item,)))])
    assert errors == []
    return sorted(f.rule for f in found)


def sglang_pages(failed: float, *, first_has_counter: bool = True) -> tuple[str, str]:
    """The SGLang page, a prefill instance; 10 transfers of 48 MiB between the scrapes, one of
    them 900 ms (as the polled latency records it)."""
    calm = SCENARIOS["sglang"]()
    first, second = source(SGL), source(SGL)
    second.add(FAILED, failed).observe("sglang:kv_transfer_latency_ms", [20.0] * 9 + [900.0])
    second.observe("sglang:kv_transfer_total_mb", [48.0] * 10)
    text = first.text() if first_has_counter else "\n".join(
        line for line in first.text().splitlines() if not line.startswith(FAILED + "{")) + "\n"
    return calm[0] + text, calm[1] + second.text()


def test_sglang_transfers_failing_between_the_scrapes_fire_and_its_polled_time_is_not_judged(host):
    item = record(host, *sglang_pages(2), PREFILL, "sglang")
    assert item is not None
    assert (item.kv_connector, item.kv_role, item.nixl) == ("mooncake", "prefill", False)
    assert (item.failed_transfers, item.failed_window, item.transfers) == (2.0, "between scrapes", 10.0)
    # ms and MiB read as seconds and bytes: 1 % over 500 ms; no transfer above 50 MiB
    assert (item.xfer_p99_floor_s, item.xfer_bytes_max, item.xfer_polled) == (0.5, float(50 << 20), True)
    assert item.xfer_line_s == pytest.approx((50 << 20) * 8 / 400e9, abs=1e-6)
    assert fired(item) == ["kv-transfer-failing"]  # not kv-transfer-slow: the time is polled


def test_the_silent_twin_and_a_first_failure_on_a_page_that_had_no_sample_yet(host):
    calm = record(host, *sglang_pages(0), PREFILL, "sglang")
    assert calm is not None and calm.failed_transfers == 0 and fired(calm) == []
    # SGLang's labelled counter has no sample until the first failure: that one is new
    first = record(host, *sglang_pages(0, first_has_counter=False), PREFILL, "sglang")
    assert first is not None and (first.failed_transfers, first.failed_window) == (1.0, "between scrapes")
    assert fired(first) == ["kv-transfer-failing"]


def test_a_nan_failure_counter_is_absent_with_its_reason_and_the_backend_flag_is_read(host):
    first, second = sglang_pages(0)
    second = second.replace(f'{FAILED}{{model_name="Qwen/Qwen3-8B"}} 1.0', f'{FAILED}{{model_name="Qwen/Qwen3-8B"}} NaN')
    nixl = [*PREFILL[:-2], "--disaggregation-transfer-backend", "nixl"]
    item = record(host, first, second, nixl, "sglang")
    assert item is not None and item.failed_transfers is None and "NaN" in item.missing[FAILED]
    assert (item.kv_connector, item.nixl) == ("nixl", False)  # vLLM's NIXL pairing rules not applied
    assert fired(item) == []
    # an SGLang instance serving both phases (--disaggregation-mode null, the default) transfers nothing
    assert record(host, *SCENARIOS["sglang"](), ["python3", "-m", "sglang.launch_server"], "sglang") is None


def lm_pages(looked: float, hits: float) -> tuple[str, str]:
    calm = SCENARIOS["vllm-v1-calm"]()
    first, second = source("lmcache_0.5.6_generated.txt"), source("lmcache_0.5.6_generated.txt")
    second.add("lmcache:num_lookup_tokens_total", looked).add("lmcache:num_lookup_hits_total", hits)
    return calm[0] + first.text(), calm[1] + second.text()


def test_lmcache_finding_nothing_with_tp_and_no_hash_seed_is_the_hashseed_findings_evidence(host):
    item = record(host, *lm_pages(8192, 0), LMCACHE, "vllm", pid=4242)
    assert item is not None and (item.lm_hit_share, item.lm_lookup_tokens, item.lm_window) == (
        0.0, 8192.0, "between scrapes")
    assert (item.tensor_parallel, item.pythonhashseed_set, item.lm_builtin_hash) == (2, False, True)
    found, _ = evaluate(RULES, [ProbeResult("engine.kv_tiers", "ok", 0.0, None, K.KvTiersRecord((item,)))])
    (finding,) = [f for f in found if f.rule == "kv-offload-hashseed-unset"]
    assert "it found 0% of 8192 looked-up tokens" in finding.title
    # the lookups did not move: the share since start (1,024 of 4,096 on the generated page)
    still = record(host, *lm_pages(0, 0), LMCACHE, "vllm", pid=4242)
    assert still is not None and (still.lm_hit_share, still.lm_window) == (0.25, "since start")


def test_a_seed_independent_hash_silences_it_and_hostile_lookup_counts_are_absent(host):
    sha = record(host, *lm_pages(8192, 0), LMCACHE, "vllm", pid=4343)
    assert sha is not None and sha.lm_builtin_hash is False and "kv-offload-hashseed-unset" not in fired(sha)
    # more hits than tokens looked up: no share, with its reason; the config alone still judged
    odd = record(host, *lm_pages(10, 500), LMCACHE, "vllm", pid=4242)
    assert odd is not None and odd.lm_hit_share is None
    assert "no count" in odd.missing["lmcache:num_lookup_hits_total"]
    assert "kv-offload-hashseed-unset" in fired(odd)


def test_the_summary_names_lmcaches_hit_share(host):
    item = record(host, *lm_pages(8192, 2048), LMCACHE, "vllm", pid=4242)
    assert "LMCache found 25% of 8192 looked-up tokens (between scrapes)" in K.summary(K.KvTiersRecord((item,)))


def test_the_committed_sglang_pd_scenario_is_its_builders_output_and_fires(host):
    from tests.engine_pages.make_pages import HERE
    folder = HERE / "sglang-pd-transfer-failing"
    pages = tuple((folder / f"metrics.{i}.txt").read_text() for i in (1, 2))
    assert pages == SCENARIOS["sglang-pd-transfer-failing"]()
    item = record(host, *pages, PREFILL, "sglang")
    assert item is not None and (item.failed_transfers, item.transfers) == (2.0, 10.0)
    assert fired(item) == ["kv-transfer-failing"]


def test_an_engine_without_lmcache_has_no_lmcache_hash_figure(host):
    item = record(host, *SCENARIOS["sglang-pd-transfer-failing"](), PREFILL, "sglang", pid=4242)
    assert item is not None and item.pythonhashseed_set is False and item.lm_builtin_hash is None


def test_mooncake_told_to_use_tcp_on_a_host_with_rdma_ports_fires(host):
    pages = SCENARIOS["sglang"]()
    forced = record(host, *pages, PREFILL, "sglang", pid=4444)
    assert forced is not None and forced.mooncake_tcp == "MC_FORCE_TCP=1"
    found, _ = evaluate(RULES, [ProbeResult("engine.kv_tiers", "ok", 0.0, None, K.KvTiersRecord((forced,)))])
    (finding,) = [f for f in found if f.rule == "kv-transfer-ucx-tcp"]
    assert finding.title.startswith("http://127.0.0.1:30000/metrics: MC_FORCE_TCP=1 keeps KV transfers on TCP")
    protocol = record(host, *pages, PREFILL, "sglang", pid=4545)
    assert protocol is not None and protocol.mooncake_tcp == "MOONCAKE_PROTOCOL=tcp"
    # the silent twins: RDMA as configured; the NIXL backend (UCX_TLS is its switch)
    assert record(host, *pages, PREFILL, "sglang", pid=4242).mooncake_tcp is None
    nixl = [*PREFILL, "--disaggregation-transfer-backend", "nixl"]
    assert record(host, *pages, nixl, "sglang", pid=4444).mooncake_tcp is None
