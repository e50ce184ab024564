"""engine.kv_tiers from pages vLLM's own code wrote: 0.33.0's NixlPromMetrics and offload info
gauge (tests/engine_pages/source/vllm_v1_0.33.0_kv_generated.txt, make_kv_pages.py beside it),
counters moved between two scrapes as make_pages.py moves them; the command line and environ
as /proc gives them (a recorded host's fs/); then the rules on the record."""

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

BASE = "http://127.0.0.1:8000"
RULES = [r for r in builtin_rules() if r.id.startswith(("kv-transfer-", "kv-offload-"))]
NIXL = ["vllm", "serve", "Qwen/Qwen3-8B", "--kv-transfer-config",
        '{"kv_connector": "NixlConnector", "kv_role": "kv_consumer"}']
FAILED = "vllm:nixl_num_failed_transfers_total"


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> RecordedHost:
    """A recorded host whose pid 4242 runs with UCX_TLS=tcp and no PYTHONHASHSEED."""
    root = tmp_path_factory.mktemp("kv-host")
    proc = root / "fs" / "proc" / "4242"
    proc.mkdir(parents=True)
    (root / "host.toml").write_text('[host]\nformat = 2\nhostname = "kv"\nlevel = "standard"\n'
                                    'captured_at = "2026-12-07T04:00:00Z"\nllm_doctor_version = "0.1.0"\n')
    (proc / "environ").write_bytes(b"PATH=/usr/bin\0UCX_TLS=tcp,cuda_copy\0LMCACHE_MAX_LOCAL_CPU_SIZE=20\0")
    return RecordedHost(root)


def pages(failed: float) -> tuple[str, str]:
    first, second = source("vllm_v1_0.33.0_kv_generated.txt"), source("vllm_v1_0.33.0_kv_generated.txt")
    second.add(FAILED, failed).observe("vllm:nixl_xfer_time_seconds", [0.02] * 9 + [0.9])
    return first.text(), second.text()


def record(host, first: str, second: str, argv: list[str], rdma: int | None = 2, pid=4242,
           kind: str = "vllm"):
    m = normalise(kind, f"{BASE}/metrics", parse(first, "1"), parse(second, "2"), 3.0)
    engine = dataclasses.replace(blank(BASE), pid=pid, kind=kind, model="Qwen/Qwen3-8B")
    return K.view(host, engine, m, argv, rdma)


def fired(item) -> list[str]:
    result = ProbeResult("engine.kv_tiers", "ok", 0.0, None, K.KvTiersRecord((item,)))
    found, errors = evaluate(RULES, [result])
    assert errors == []
    return sorted(f.rule for f in found)


def test_failed_transfers_between_scrapes_and_ucx_on_tcp_with_rdma_ports_fire(host):
    item = record(host, *pages(3), NIXL)
    assert (item.kv_connector, item.kv_role) == ("NixlConnector", "kv_consumer")
    assert (item.failed_transfers, item.failed_window, item.transfers) == (3.0, "between scrapes", 10.0)
    assert item.xfer_p99_s is not None and 0.75 < item.xfer_p99_s <= 1.0  # the 0.9 s transfer
    assert (item.ucx_tls, item.ucx_tcp_only, item.rdma_ports_active) == ("tcp,cuda_copy", True, 2)
    assert fired(item) == ["kv-transfer-failing", "kv-transfer-ucx-tcp"]


def test_the_silent_twin_no_new_failure_and_no_rdma_port(host):
    item = record(host, *pages(0), NIXL, rdma=0)
    assert item.failed_transfers == 0 and item.failed_window == "between scrapes"
    assert fired(item) == []


def test_a_nan_counter_is_absent_with_its_reason_and_not_judged(host):
    first, second = pages(0)
    second = second.replace(f'{FAILED}{{engine="0",model_name="Qwen/Qwen3-8B"}} 2.0',
                            f'{FAILED}{{engine="0",model_name="Qwen/Qwen3-8B"}} NaN')
    item = record(host, first, second, NIXL, rdma=None)
    assert item.failed_transfers is None and "NaN" in item.missing[FAILED]
    assert fired(item) == []


def test_the_cpu_tier_smaller_than_the_gpu_tier_fires_from_the_pages():
    # the calm page's GPU tier: 70,560 tokens; the generated offload info: 29,127
    calm = SCENARIOS["vllm-v1-calm"]()
    kv = source("vllm_v1_0.33.0_kv_generated.txt").text()
    item = record(None, calm[0] + kv, calm[1] + kv, ["vllm", "serve", "--kv-offloading-size", "4"],
                  pid=None)
    assert (item.offload_backend, item.cpu_tier_tokens, item.gpu_tier_tokens) == ("native", 29127, 70560)
    assert item.cpu_tier_bytes == 4 << 30 and item.cpu_tier_from == "vllm:kv_offload_config_info"
    assert "no engine process" in item.missing["PYTHONHASHSEED"]
    assert fired(item) == ["kv-offload-tier-small"]
    bigger = kv.replace('cpu_kv_cache_size_tokens="29127"', 'cpu_kv_cache_size_tokens="291270"')
    assert fired(record(None, calm[0] + bigger, calm[1] + bigger, [], pid=None)) == []


def test_lmcache_with_tp_and_no_hash_seed_fires_and_reads_its_size_from_the_environ(host):
    calm = SCENARIOS["vllm-v1-calm"]()
    argv = ["vllm", "serve", "-tp", "4", "--kv-transfer-config.kv_connector", "LMCacheConnectorV1"]
    item = record(host, *calm, argv)
    assert item.lmcache is True and item.pythonhashseed_set is False and item.tensor_parallel == 4
    assert item.cpu_tier_bytes == 20_000_000_000 and item.cpu_tier_from == "LMCACHE_MAX_LOCAL_CPU_SIZE"
    assert fired(item) == ["kv-offload-hashseed-unset"]  # UCX on tcp, but no NIXL on the KV path
    assert fired(record(host, *calm, argv[:3] + ["1"] + argv[4:])) == []  # one rank


def test_sglang_hicache_ratio_and_an_engine_without_kv_tiers():
    page = "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 1\n"
    item = record(None, page, page, ["sglang", "--enable-hierarchical-cache", "--hicache-ratio", "1"],
                  pid=None, kind="sglang")
    assert (item.offload_backend, item.hicache_ratio) == ("hicache", 1.0)
    assert fired(item) == ["kv-offload-tier-small"]
    default = record(None, page, page, ["sglang", "--enable-hierarchical-cache"], pid=None, kind="sglang")
    assert default.hicache_ratio == 2.0 and fired(default) == []
    assert record(None, page, page, ["sglang"], pid=None, kind="sglang") is None


@pytest.mark.parametrize("tls, tcp", [("tcp", True), ("tcp,cuda_copy,cuda_ipc", True), ("rc,tcp", False),
                                      ("^ib", True), ("^cuda_ipc", False), ("all", False), ("", None),
                                      (None, None), ("rc_x,ud_x", False)])
def test_ucx_tls_parsing(tls, tcp):
    assert K.tcp_only(tls) is tcp


@pytest.mark.parametrize("raw", ["{not json", "[" * 5000 + "]" * 5000, '{"kv_connector": {"x": 1}}', "x" * 70000])
def test_a_hostile_kv_transfer_config_is_no_connector(raw):
    assert K.config_key(["vllm", "--kv-transfer-config", raw], "kv_connector") is None


@pytest.mark.parametrize("args", [["--hicache-ratio", "nan"], ["--hicache-ratio", "-1e999"],
                                  ["--hicache-size", "1e300"], ["--hicache-ratio", "1e300"]])
def test_a_hostile_hicache_flag_is_no_figure_and_not_judged(args):
    page = "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 1\n"
    item = record(None, page, page, ["sglang", "--enable-hierarchical-cache", *args], pid=None, kind="sglang")
    assert item.cpu_tier_bytes is None and fired(item) == []
    if args[0] == "--hicache-ratio":  # no ratio; a bad --hicache-size leaves the default ratio
        assert item.hicache_ratio is None


def test_a_huge_offloading_size_is_no_size():
    calm = SCENARIOS["vllm-v1-calm"]()
    item = record(None, *calm, ["vllm", "--kv-offloading-size", "1e300"], pid=None)
    assert item is None  # no tier, no connector, no series: nothing to judge
