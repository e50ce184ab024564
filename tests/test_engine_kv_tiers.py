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
           kind: str = "vllm", link: float | None = None, base: str = BASE):
    m = normalise(kind, f"{base}/metrics", parse(first, "1"), parse(second, "2"), 3.0)
    engine = dataclasses.replace(blank(base), pid=pid, kind=kind, model="Qwen/Qwen3-8B")
    return K.view(host, engine, m, argv, rdma, link)


def fired(item, *others) -> list[str]:
    result = ProbeResult("engine.kv_tiers", "ok", 0.0, None, K.KvTiersRecord((item, *others)))
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


def test_the_cpu_tier_smaller_than_the_gpu_tier_fires_from_the_pages(host):
    # the calm page's GPU tier: 70,560 tokens; the generated offload info: 29,127
    calm = SCENARIOS["vllm-v1-calm"]()
    kv = source("vllm_v1_0.33.0_kv_generated.txt").text()
    item = record(host, calm[0] + kv, calm[1] + kv, ["vllm", "serve", "--kv-offloading-size", "4"],
                  pid=None)
    assert (item.offload_backend, item.cpu_tier_tokens, item.gpu_tier_tokens) == ("native", 29127, 70560)
    assert item.cpu_tier_bytes == 4 << 30 and item.cpu_tier_from == "vllm:kv_offload_config_info"
    assert "no engine process" in item.missing["PYTHONHASHSEED"]
    assert fired(item) == ["kv-offload-tier-small"]
    bigger = kv.replace('cpu_kv_cache_size_tokens="29127"', 'cpu_kv_cache_size_tokens="291270"')
    assert fired(record(host, calm[0] + bigger, calm[1] + bigger, [], pid=None)) == []


def test_lmcache_with_tp_and_no_hash_seed_fires_and_reads_its_size_from_the_environ(host):
    calm = SCENARIOS["vllm-v1-calm"]()
    argv = ["vllm", "serve", "-tp", "4", "--kv-transfer-config.kv_connector", "LMCacheConnectorV1"]
    item = record(host, *calm, argv)
    assert item.lmcache is True and item.pythonhashseed_set is False and item.tensor_parallel == 4
    assert item.cpu_tier_bytes == 20_000_000_000 and item.cpu_tier_from == "LMCACHE_MAX_LOCAL_CPU_SIZE"
    assert fired(item) == ["kv-offload-hashseed-unset"]  # UCX on tcp, but no NIXL on the KV path
    assert fired(record(host, *calm, argv[:3] + ["1"] + argv[4:])) == []  # one rank


def test_sglang_hicache_ratio_and_an_engine_without_kv_tiers(host):
    page = "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 1\n"
    item = record(host, page, page, ["sglang", "--enable-hierarchical-cache", "--hicache-ratio", "1"],
                  pid=None, kind="sglang")
    assert (item.offload_backend, item.hicache_ratio) == ("hicache", 1.0)
    assert fired(item) == ["kv-offload-tier-small"]
    default = record(host, page, page, ["sglang", "--enable-hierarchical-cache"], pid=None, kind="sglang")
    assert default.hicache_ratio == 2.0 and fired(default) == []
    assert record(host, page, page, ["sglang"], pid=None, kind="sglang") is None


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
    item = record(host, page, page, ["sglang", "--enable-hierarchical-cache", *args], pid=None, kind="sglang")
    assert item.cpu_tier_bytes is None and fired(item) == []
    if args[0] == "--hicache-ratio":  # no ratio; a bad --hicache-size leaves the default ratio
        assert item.hicache_ratio is None


def test_a_huge_offloading_size_is_no_size():
    calm = SCENARIOS["vllm-v1-calm"]()
    item = record(host, *calm, ["vllm", "--kv-offloading-size", "1e300"], pid=None)
    assert item is None  # no tier, no connector, no series: nothing to judge


LIMITS = """Limit                     Soft Limit           Hard Limit           Units
Max processes             511432               511432               processes
Max open files            1048576              1048576              files
Max locked memory         {memlock}              {memlock}              bytes
"""


def _proc(root, pid: int, ppid: int, cmdline: bytes, rss_kb: int, capeff: str = "00000000a80425fb",
          memlock: str = "8388608") -> None:
    proc = root / "fs" / "proc" / str(pid)
    proc.mkdir(parents=True)
    (proc / "cmdline").write_bytes(cmdline)
    (proc / "stat").write_text(f"{pid} (python3) S {ppid} {pid} {pid} 0 -1 4194560 0 0 0 0\n")
    (proc / "status").write_text(f"Name:\tpython3\nPid:\t{pid}\nPPid:\t{ppid}\nVmRSS:\t{rss_kb} kB\n"
                                 f"CapEff:\t{capeff}\n")
    (proc / "limits").write_text(LIMITS.format(memlock=memlock))
    (proc / "environ").write_bytes(b"PATH=/usr/bin\0LMCACHE_MAX_LOCAL_CPU_SIZE=40\0")


@pytest.fixture(scope="module")
def roomy(tmp_path_factory) -> RecordedHost:
    """A host with 96 GiB available; pid 5000 serves LMCache with TP 4 (40 GB a worker) and
    holds 12 GiB; its worker 5001 another 2 GiB; memlock 8 MiB, CAP_IPC_LOCK not held (the
    default docker set, 0xa80425fb); pid 6000 runs with CAP_IPC_LOCK and 170 GiB resident."""
    root = tmp_path_factory.mktemp("kv-room")
    (root / "host.toml").write_text('[host]\nformat = 2\nhostname = "kv"\nlevel = "standard"\n'
                                    'captured_at = "2026-12-07T07:00:00Z"\nllm_doctor_version = "0.1.0"\n')
    (root / "fs" / "proc").mkdir(parents=True)
    (root / "fs" / "proc" / "meminfo").write_text(
        "MemTotal:       263921236 kB\nMemFree:        90000000 kB\nMemAvailable:   100663296 kB\n")
    _proc(root, 5000, 1, b"vllm\0serve\0Qwen/Qwen3-8B\0", 12 << 20)
    _proc(root, 5001, 5000, b"python3\0-c\0from multiprocessing.spawn import spawn_main\0", 2 << 20)
    _proc(root, 6000, 1, b"sglang\0", 170 << 20, capeff="00000000a80465fb", memlock="unlimited")
    return RecordedHost(root)


LMCACHE_TP4 = ["vllm", "serve", "-tp", "4", "--kv-transfer-config.kv_connector", "LMCacheConnectorV1"]
HICACHE = ["python3", "-m", "sglang.launch_server", "--enable-hierarchical-cache", "--hicache-size", "64",
           "--hicache-storage-backend", "mooncake"]


def test_a_cpu_tier_the_host_cannot_hold_fires_and_reads_the_engine_and_its_workers(roomy):
    calm = SCENARIOS["vllm-v1-calm"]()
    item = record(roomy, *calm, LMCACHE_TP4, pid=5000)
    assert (item.cpu_tier_bytes, item.cpu_tier_host_bytes) == (40_000_000_000, 160_000_000_000)
    assert item.mem_available_bytes == 96 << 30
    assert item.engine_rss_bytes == 14 << 30  # the server and its spawned worker
    assert (item.memlock_bytes, item.ipc_lock) == (8 << 20, False)
    assert "kv-offload-over-memory" in fired(item)
    # 160 GB less 14 GiB held is 145 GB: above 96 GiB. At TP 2 it is 65 GB: silent.
    two = record(roomy, *calm, LMCACHE_TP4[:3] + ["2"] + LMCACHE_TP4[4:], pid=5000)
    assert two.cpu_tier_host_bytes == 80_000_000_000 and "kv-offload-over-memory" not in fired(two)


def test_a_tier_already_resident_is_not_counted_twice_and_ipc_lock_lifts_memlock(roomy):
    page = "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 1\n"
    item = record(roomy, page, page, HICACHE + ["--tp-size", "2"], pid=6000, kind="sglang")
    assert (item.cpu_tier_host_bytes, item.engine_rss_bytes) == (128_000_000_000, 170 << 30)
    assert item.tier_rdma_registered is True and item.ipc_lock is True
    assert item.memlock_bytes is None and item.missing["memlock_bytes"] == "unlimited"
    assert fired(item) == []


def test_a_mooncake_host_pool_above_memlock_fires(roomy):
    page = "# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs 1\n"
    item = record(roomy, page, page, HICACHE, pid=5000, kind="sglang")
    assert (item.memlock_bytes, item.ipc_lock, item.rdma_ports_active) == (8 << 20, False, 2)
    assert "kv-offload-over-memlock" in fired(item)
    assert "kv-offload-over-memlock" not in fired(record(roomy, page, page, HICACHE, pid=5000,
                                                         kind="sglang", rdma=0))


def test_hostile_proc_files_leave_the_figures_absent_with_a_reason(tmp_path):
    (tmp_path / "host.toml").write_text('[host]\nformat = 2\nhostname = "kv"\nlevel = "standard"\n'
                                        'captured_at = "2026-12-07T07:00:00Z"\nllm_doctor_version = "0.1.0"\n')
    _proc(tmp_path, 5000, 1, b"vllm\0", 1, capeff="zz" * 40, memlock="-5")
    (tmp_path / "fs" / "proc" / "meminfo").write_text("MemTotal: lots\n")
    (tmp_path / "fs" / "proc" / "5000" / "status").write_text("VmRSS:\t-1 kB\nCapEff:\tnothex\n")
    calm = SCENARIOS["vllm-v1-calm"]()
    item = record(RecordedHost(tmp_path), *calm, LMCACHE_TP4, pid=5000)
    assert item.cpu_tier_host_bytes == 160_000_000_000
    assert (item.mem_available_bytes, item.engine_rss_bytes, item.memlock_bytes, item.ipc_lock) == (None,) * 4
    assert all(item.missing[k] for k in ("mem_available_bytes", "engine_rss_bytes", "memlock_bytes", "ipc_lock"))
    assert "kv-offload-over-memory" not in fired(item)


def test_transfers_far_slower_than_the_rdma_port_allows_fire_from_vllms_own_histograms(host):
    # the generated page: 40 transfers of 48 MiB (byte bucket <= 128 MiB, 2**27); the window
    # adds 9 of 20 ms and one of 0.9 s: 1 % took over 0.75 s, against 2.7 ms for 128 MiB at 400 Gb/s
    item = record(host, *pages(0), NIXL, link=(400.0, "net.rdma: mlx5_0/1"))
    assert (item.xfer_p99_floor_s, item.xfer_bytes_max, item.link_gbits) == (0.75, float(128 << 20), 400.0)
    assert item.xfer_line_s == pytest.approx((128 << 20) * 8 / 400e9, abs=1e-6)
    assert item.link_from == "net.rdma: mlx5_0/1" and "kv-transfer-slow" in fired(item)
    first, second = source("vllm_v1_0.33.0_kv_generated.txt"), source("vllm_v1_0.33.0_kv_generated.txt")
    second.observe("vllm:nixl_xfer_time_seconds", [0.02] * 10)
    calm = record(host, first.text(), second.text(), NIXL, link=(400.0, "net.rdma: mlx5_0/1"))
    assert calm.xfer_p99_floor_s == 0.01 and "kv-transfer-slow" not in fired(calm)
    unknown = record(host, *pages(0), NIXL, link=None)
    assert unknown.xfer_line_s is None and "physical interface" in unknown.missing["link_gbits"]
    assert "kv-transfer-slow" not in fired(unknown)


def test_a_prefill_and_a_decode_instance_with_different_kv_dtypes_fire_on_both(host):
    calm = SCENARIOS["vllm-v1-calm"]()
    fp8 = tuple(p.replace('cache_dtype="auto"', 'cache_dtype="fp8"') for p in calm)
    producer = ["vllm", "serve", "--kv-transfer-config", '{"kv_connector": "NixlConnector", "kv_role": "kv_producer"}']
    prefill = record(host, *calm, producer, base="http://127.0.0.1:8100")
    decode = record(host, *fp8, NIXL, base="http://127.0.0.1:8200")
    assert (prefill.cache_dtype, decode.cache_dtype, decode.block_size) == ("auto", "fp8", "16")
    a, b = K.paired([prefill, decode])
    assert a.nixl_differs == "cache_dtype auto ≠ fp8 (http://127.0.0.1:8200/metrics)"
    assert b.nixl_differs == "cache_dtype fp8 ≠ auto (http://127.0.0.1:8100/metrics)"
    assert fired(a, b).count("kv-transfer-config-mismatch") == 2
    # the silent twins: two producers never pair; the same dtype on both agrees
    assert all(e.nixl_differs is None for e in K.paired([prefill, record(host, *fp8, producer)]))
    assert all(e.nixl_differs is None for e in K.paired([prefill, record(host, *calm, NIXL)]))


def test_push_against_pull_and_block_sizes_with_a_host_buffer_differ(host):
    calm = SCENARIOS["vllm-v1-calm"]()
    b32 = tuple(p.replace('block_size="16"', 'block_size="32"') for p in calm)
    push = ["vllm", "serve", "--kv-transfer-config",
            '{"kv_connector": "NixlPushConnector", "kv_role": "kv_producer", "kv_buffer_device": "cpu"}']
    a, b = K.paired([record(host, *b32, push, base="http://127.0.0.1:8100"), record(host, *calm, NIXL)])
    assert a.nixl_differs is not None and "kv_connector push ≠ pull" in a.nixl_differs
    assert "block_size (kv_buffer_device=cpu) 32 ≠ 16" in a.nixl_differs


def _sglang(prompt: float, device: float, host_: float, storage: str = "0") -> str:
    """SGLang's TokenizerMetricsCollector counters as its collector.py names and labels them
    (cached tokens by cache_source: device, host, storage); the values are made up."""
    return ("# TYPE sglang:prompt_tokens_total counter\n"
            f'sglang:prompt_tokens_total{{model_name="Qwen/Qwen3-8B"}} {prompt}\n'
            "# HELP sglang:cached_tokens_total Number of cached prompt tokens by source (device/host/storage).\n"
            "# TYPE sglang:cached_tokens_total counter\n"
            f'sglang:cached_tokens_total{{cache_source="device",model_name="Qwen/Qwen3-8B"}} {device}\n'
            f'sglang:cached_tokens_total{{cache_source="host",model_name="Qwen/Qwen3-8B"}} {host_}\n'
            f'sglang:cached_tokens_total{{cache_source="storage",model_name="Qwen/Qwen3-8B"}} {storage}\n')


def test_sglang_hit_shares_by_tier_are_reported_over_the_window_and_judged_by_no_rule(host):
    argv = ["sglang", "--enable-hierarchical-cache"]
    item = record(host, _sglang(1000, 400, 100), _sglang(11000, 4400, 2100, "NaN"), argv, pid=None,
                  kind="sglang")
    assert item.hit_window == "between scrapes"
    assert item.hit_shares == {"device": 0.4, "host": 0.2}  # storage's NaN: absent, with its reason
    assert "no count" in item.missing["sglang:cached_tokens_total{cache_source='storage'}"]
    assert fired(item) == []
    # the prompts did not move: the shares since start
    still = record(host, _sglang(1000, 400, 100), _sglang(1000, 400, 100), argv, pid=None, kind="sglang")
    assert (still.hit_window, still.hit_shares) == ("since start", {"device": 0.4, "host": 0.1, "storage": 0.0})
    assert "prompt tokens from cache: device 40%, host 10%, storage 0%" in K.summary(K.KvTiersRecord((still,)))


def test_without_an_rdma_port_the_fastest_physical_interface_up_is_the_line(host):
    from doctor.inputs import Inputs
    from probes.helpers.net_interfaces import NAME, Interface, InterfacesRecord

    def nic(name, kind, up, speed):
        return Interface(name, kind, "ether", "up" if up else "down", up, up, up, 1500, speed, (), up, None)
    nics = InterfacesRecord((nic("lo", "loopback", True, None), nic("eno1", "physical", True, 1000),
                             nic("ens1f0", "physical", True, 25000), nic("ens2f0", "physical", False, 100000),
                             nic("docker0", "container-bridge", True, 10000)), (), None)
    assert K._fastest_nic(host, Inputs({NAME: nics})) == (25.0, "net.interfaces: ens1f0")
    assert K._fastest_nic(host, Inputs({NAME: InterfacesRecord((), (), None)})) is None


def test_data_parallel_engines_each_hold_their_own_cpu_tier(host):
    # vLLM's offload info: "Each engine reports its own configuration, not the instance total"
    calm = SCENARIOS["vllm-v1-calm"]()
    kv = source("vllm_v1_0.33.0_kv_generated.txt").text()
    line = next(x for x in kv.splitlines() if x.startswith("vllm:kv_offload_config_info{"))
    two = kv + line.replace('engine="0"', 'engine="1"') + "\n"
    one = record(host, calm[0] + kv, calm[1] + kv, ["vllm", "serve"], pid=None)
    both = record(host, calm[0] + two, calm[1] + two, ["vllm", "serve"], pid=None)
    assert (one.cpu_tier_host_bytes, both.cpu_tier_host_bytes) == (4 << 30, 8 << 30)
