"""The gpu.* probes against NVML answers of real machine types (tests/fixtures/gpu_machines.py)."""

from __future__ import annotations

import pytest

from doctor.seam.host import CommandOutput
from doctor.model import Level, ScanOptions, Skip
from probes.gpu import (
    errors as gpu_errors,
    inventory as gpu_inventory,
    memory as gpu_memory,
    pcie as gpu_pcie,
    thermal_power as gpu_thermal_power,
    topology as gpu_topology,
)
from tests.fixtures.gpu_machines import gpu, nvml_entries
from tests.gpu_host import gpu_host, process_files

QUICK = ScanOptions(level=Level.QUICK)
STANDARD = ScanOptions(level=Level.STANDARD)
PROBES = (gpu_inventory, gpu_pcie, gpu_topology, gpu_thermal_power, gpu_memory, gpu_errors)


@pytest.mark.parametrize("module", PROBES, ids=lambda m: m.__name__)
def test_no_driver_skips_with_what_is_missing(module):
    with pytest.raises(Skip) as caught:
        module.probe(gpu_host(None), STANDARD)
    assert str(caught.value).startswith("NVIDIA driver not loaded")


@pytest.mark.parametrize("module", PROBES, ids=lambda m: m.__name__)
def test_zero_gpus_skips(module):
    with pytest.raises(Skip, match="sees no NVIDIA GPU"):
        module.probe(gpu_host([{"call": "nvmlDeviceGetCount", "args": [], "value": 0}]), QUICK)


def test_inventory_reads_model_memory_persistence_and_mig():
    host = gpu_host(nvml_entries({"gpus": [gpu("h100-sxm"), gpu("h100-sxm", persistence=0)]}))
    record = gpu_inventory.probe(host, QUICK)
    assert record.gpu_count == 2 and record.driver_version == "550.54.15"
    assert record.cuda_driver_version == "12.4"
    first, second = record.gpus
    assert first.name == "NVIDIA H100 80GB HBM3" and first.memory_total_mib == 81559
    assert first.bus_id == "00000000:18:00.0" and first.uuid.startswith("GPU-")
    assert first.persistence_mode is True and second.persistence_mode is False
    assert first.mig_enabled is False and first.missing == {}
    assert "2x NVIDIA H100 80GB HBM3" in gpu_inventory.summary(record)


def test_inventory_consumer_card_has_no_mig_and_says_why():
    record = gpu_inventory.probe(gpu_host(nvml_entries({"gpus": [gpu("rtx4090")]})), QUICK)
    assert record.gpus[0].mig_enabled is None
    assert record.gpus[0].missing["mig_enabled"] == "not-supported"


def test_pcie_idle_gen1_is_not_degraded_and_width_short_is():
    machine = {"gpus": [gpu("a100-pcie-80gb"), gpu("a100-pcie-80gb", gen=1, width=8)]}
    host = gpu_host(nvml_entries(machine), measurements={
        "gpu.pcie.load.0": {"gen_max_seen": 4, "width_min_seen": 16, "samples": 9},
        "gpu.pcie.load.1": {"gen_max_seen": 3, "width_min_seen": 8, "samples": 9}},
        # each GPU below its own root port: a slot there to bound the width
        links={f"/sys/bus/pci/devices/0000:{b}:00.0": f"../../../devices/pci0000:00/0000:00:0{n}.0/0000:{b}:00.0"
               for n, b in ((1, "18"), (2, "28"))})
    good, bad = gpu_pcie.probe(host, STANDARD).gpus
    assert good.gen_current == 1 and good.under_load and good.gen_loaded == 4
    assert not good.width_short and not good.gen_low_under_load
    assert good.ceiling_capable_gbps == good.ceiling_trained_gbps == 31.5
    assert bad.width_short and bad.gen_low_under_load
    assert bad.ceiling_trained_gbps == 7.88 and bad.ceiling_capable_gbps == 31.5


def test_pcie_at_quick_leaves_generation_unjudged():
    record = gpu_pcie.probe(gpu_host(nvml_entries({"gpus": [gpu("l40s")]})), QUICK)
    link = record.gpus[0]
    assert not link.under_load and not link.gen_low_under_load and not link.width_short
    assert "at rest" in record.load_reason


def test_pcie_gen4_card_in_gen3_slot_is_slot_limited():
    host = gpu_host(nvml_entries({"gpus": [gpu("rtx4090", gen_max=3)]}))
    assert gpu_pcie.probe(host, QUICK).gpus[0].slot_limited


def test_topology_l40s_two_sockets_from_real_matrix():
    from pathlib import Path

    from tests.fixtures.gpu_machines import topo_from_matrix

    text = Path("/work/shared/reference/topo/l40s_4gpu_2socket_node_sys.txt")
    topo = topo_from_matrix(text.read_text()) if text.exists() else {
        (0, 1): "NODE", (2, 3): "NODE", (0, 2): "SYS", (0, 3): "SYS", (1, 2): "SYS", (1, 3): "SYS"}
    machine = {"gpus": [gpu("l40s", numa=i // 2, cpus="0-95,192-287" if i < 2 else "96-191,288-383")
                        for i in range(4)], "topo": topo}
    record = gpu_topology.probe(gpu_host(nvml_entries(machine)), QUICK)
    assert record.talk_group == (0, 1, 2, 3) and "no engine" in record.talk_group_source
    levels = {(p.a, p.b): p.level for p in record.pairs}
    assert levels[(0, 1)] == "NODE" and levels[(0, 2)] == "SYS"
    assert [p.crosses_sockets for p in record.pairs].count(True) == 4
    assert record.gpus[2].numa_node == 1 and record.gpus[2].cpu_affinity == "96-191,288-383"
    assert record.gpus[0].nvlinks_up is None
    assert not any(p.nvlink for p in record.pairs)


def test_topology_nvswitch_and_engine_tp_group():
    machine = {"gpus": [gpu("h100-sxm") for _ in range(4)]}
    cmdline = "python3 -m vllm.entrypoints.openai.api_server --model /m --tensor-parallel-size 2"
    files = process_files({900: ("python3", cmdline)})
    record = gpu_topology.probe(gpu_host(nvml_entries(machine), files=files), QUICK)
    assert record.talk_group == (0, 1)
    assert all(p.nvlink for p in record.pairs) and record.gpus[0].nvlinks_up == 18
    assert [(p.a, p.b) for p in record.pairs if p.must_talk] == [(0, 1)]


def test_topology_consumer_pix_without_p2p_shares_the_root_port():
    machine = {"gpus": [gpu("rtx4090"), gpu("rtx4090")], "topo": {(0, 1): "PIX"},
               "p2p": {(0, 1): "GNS"}}
    pair = gpu_topology.probe(gpu_host(nvml_entries(machine)), QUICK).pairs[0]
    assert pair.p2p_read == "gpu-not-supported" and pair.shared_root_port


def test_thermal_hw_slowdown_at_88c_is_thermal_not_power():
    host = gpu_host(nvml_entries({"gpus": [gpu("h100-pcie", temp=88, reasons=0x48, sm=1095)]}))
    g = gpu_thermal_power.probe(host, QUICK).gpus[0]
    assert g.thermal_slowdown and not g.power_brake and not g.power_capped_by_limit
    assert g.reasons == ("hw_slowdown", "hw_thermal_slowdown") and g.margin_c == -1


def test_power_brake_is_power_not_thermal():
    host = gpu_host(nvml_entries({"gpus": [gpu("h100-sxm", reasons=0x88)]}))
    g = gpu_thermal_power.probe(host, QUICK).gpus[0]
    assert g.power_brake and not g.thermal_slowdown


def test_power_limit_below_default():
    host = gpu_host(nvml_entries({"gpus": [gpu("a100-pcie-80gb", limit=200_000, reasons=0x4)]}))
    g = gpu_thermal_power.probe(host, QUICK).gpus[0]
    assert g.limit_below_default and g.power_capped_by_limit
    assert g.power_limit_w == 200.0 and g.power_default_limit_w == 300.0


def test_memory_marks_processes_that_are_not_the_engine():
    machine = {"gpus": [gpu("a100-pcie-80gb", memory_used=62 * 1024 ** 3,
                            processes=[(900, 40 * 1024 ** 3), (4242, 20 * 1024 ** 3),
                                       (77, 2 * 1024 ** 3)])]}
    files = process_files({900: ("python3", "vllm serve /models/llama"),
                           4242: ("python3", "python3 -m ipykernel_launcher -f k.json")})
    record = gpu_memory.probe(gpu_host(nvml_entries(machine), files=files), QUICK)
    by_pid = {p.pid: p for p in record.processes}
    assert by_pid[900].engine == "vllm" and by_pid[4242].engine is None
    assert by_pid[77].name == "not visible"
    g = record.gpus[0]
    assert g.used_by_engines_mib == 40 * 1024 and g.used_by_others_mib == 22 * 1024
    assert record.engine_count == 1


XID_LOG = ("[  812.345678] NVRM: Xid (PCI:0000:28:00): 64, pid=2210, name=python3, "
           "Row Remapper Error: failed to record\n"
           "[  815.002001] NVRM: Xid (PCI:0000:28:00): 79, pid='<unknown>', name=<unknown>, "
           "GPU has fallen off the bus.\n")


def test_errors_row_remap_failure_and_xid_79_from_dmesg():
    remap = {"corrected": 0, "uncorrected": 3, "pending": 0, "failure": 1}
    machine = {"gpus": [gpu("a100-sxm-80gb"), gpu("a100-sxm-80gb", remapped=remap)]}
    host = gpu_host(nvml_entries(machine),
                   commands={("dmesg",): CommandOutput(("dmesg",), 0, XID_LOG, "")})
    record = gpu_errors.probe(host, QUICK)
    ok, bad = record.gpus
    assert record.xid_source == "dmesg"
    assert ok.xids == () and not ok.remap_failed
    assert bad.remap_failed and bad.hardware_xids == (64, 79)
    assert "fallen off the bus" in bad.xids[1].meaning.lower()


def test_errors_falls_back_to_kern_log_and_says_when_neither_reads():
    machine = {"gpus": [gpu("a100-sxm-80gb")]}
    refused = CommandOutput(("dmesg",), 1, "", "dmesg: read kernel buffer failed: Operation not permitted")
    host = gpu_host(nvml_entries(machine), commands={("dmesg",): refused},
                   files={"/var/log/kern.log": XID_LOG.replace("28:00", "18:00")})
    record = gpu_errors.probe(host, QUICK)
    assert record.xid_source == "/var/log/kern.log" and record.gpus[0].hardware_xids == (64, 79)
    record = gpu_errors.probe(gpu_host(nvml_entries(machine), commands={("dmesg",): refused}), QUICK)
    assert "run as root" in record.xid_source and record.gpus[0].xids == ()


def test_consumer_card_without_ecc_has_none_not_zero():
    g = gpu_errors.probe(gpu_host(nvml_entries({"gpus": [gpu("rtx4090")]})), QUICK).gpus[0]
    assert g.ecc_enabled is None and g.ecc_uncorrected_volatile is None
    assert g.missing["ecc_enabled"] == "not-supported"


def _bandwidth_measure(d2d: float, h2d: float, gen: int, width: int) -> dict:
    def fig(gbps):
        return {"gbps": gbps, "median_s": 0.01, "repeats": 10, "bytes": 1}
    return {"device": "cuda:0", "bytes": 268435456, "d2d": fig(d2d), "h2d_pinned": fig(h2d),
            "link_during_h2d": {"gen": gen, "width": width}, "d2h_pinned": fig(h2d * 1.05),
            "h2d_pageable": fig(h2d / 2), "d2h_pageable": fig(h2d / 2)}


def test_bandwidth_ratios_against_ceilings():
    from probes.gpu import bandwidth as gpu_bandwidth

    machine = {"gpus": [gpu("h100-sxm", cpus="0-55,112-167")]}
    host = gpu_host(nvml_entries(machine), measurements={
        "gpu.bandwidth.0": _bandwidth_measure(2850.0, 53.1, 5, 16),
        "gpu.first_use": {"first_s": 2.4, "warm_s": 0.00004}})
    record = gpu_bandwidth.probe(host, STANDARD)
    g = record.gpus[0]
    assert g.d2d_ceiling_gbps == 3352.3 and g.d2d_ratio == 0.85
    assert g.link_ceiling_trained_gbps == g.link_ceiling_capable_gbps == 63.01
    assert g.h2d_ratio_trained == 0.843 and g.cpus == "0-55,112-167"
    assert record.first_use_s == 2.4 and record.errors == {}
    assert "2850/3352.3 GB/s" in gpu_bandwidth.summary(record)


def test_bandwidth_failed_measurement_is_kept_as_its_reason():
    from probes.gpu import bandwidth as gpu_bandwidth

    host = gpu_host(nvml_entries({"gpus": [gpu("l40s")]}),
                    measurements={"gpu.bandwidth.0": {"error": "torch sees no CUDA device"}})
    record = gpu_bandwidth.probe(host, STANDARD)
    assert record.gpus[0].d2d_gbps is None and record.gpus[0].d2d_ceiling_gbps == 864.1
    assert "gpu.bandwidth.0" in record.errors and "gpu.first_use" in record.errors


def test_b200_bus_width_is_corrected():
    from probes.gpu.bandwidth import memory_ceiling_gbps

    gbps, source = memory_ceiling_gbps("NVIDIA B200", 3996, 8192)
    assert gbps == pytest.approx(7672.3) and "corrected" in source


def test_kv_alloc_models_each_engine_setting():
    from probes.gpu import kv_alloc as gpu_kv_alloc

    files = process_files({
        900: ("python3", "vllm serve /models/llama --block-size 8"),
        901: ("llama-server", "/usr/local/bin/llama-server -m /m.gguf -c 32768 -np 4"),
    })
    record = gpu_kv_alloc.probe(gpu_host(nvml_entries({"gpus": [gpu("a100-pcie-80gb")]}),
                                         files=files), QUICK)
    by_pid = {e.pid: e for e in record.engines}
    assert by_pid[900].scheme == "paged" and by_pid[900].block_tokens == 8
    assert by_pid[900].waste_fraction < 0.05
    assert by_pid[901].scheme == "contiguous" and by_pid[901].reserve_tokens == 8192
    assert by_pid[901].waste_fraction > 0.8
    assert [s.block_tokens for s in record.scenarios] == [8, 16, 32]
    assert "level quick" in record.allocator_reason


def test_thermal_level_full_takes_the_load_worst_moment():
    load = {"seconds": 30.0, "size": 8192, "gpus": [
        {"samples": 60, "temp_c_max": 86, "sm_clock_mhz_min": 1350, "power_w_max": 699.5,
         "reasons_mask_any": 0x4, "tflops": 610.2}]}
    host = gpu_host(nvml_entries({"gpus": [gpu("h100-sxm")]}),
                    measurements={"gpu.thermal_power.load": load})
    g = gpu_thermal_power.probe(host, ScanOptions(level=Level.FULL)).gpus[0]
    assert g.under_load and g.temp_c == 86 and g.sm_clock_mhz == 1350 and g.power_w == 699.5
    assert g.power_capped_by_limit and not g.idle and g.margin_c == 3
    at_rest = gpu_thermal_power.probe(host, STANDARD)
    assert not at_rest.gpus[0].under_load and "level full" in at_rest.load_reason


def test_errors_at_standard_add_xid_events_nvml_raised_during_the_scan():
    machine = {"gpus": [gpu("a100-sxm-80gb"), gpu("a100-sxm-80gb")]}
    host = gpu_host(nvml_entries(machine), measurements={
        "gpu.errors.xid_watch": {"seconds": 2.0, "events": [{"gpu": 1, "xid": 79}, {"gpu": 9, "xid": 1}]}})
    record = gpu_errors.probe(host, STANDARD)
    assert record.xid_watch_s == 2.0 and record.xid_watch_reason is None
    assert record.gpus[1].hardware_xids == (79,) and record.gpus[0].xids == ()
    assert "from NVML" in record.gpus[1].xids[0].line
    quick = gpu_errors.probe(host, QUICK)
    assert quick.xid_watch_s is None and "level quick" in quick.xid_watch_reason


def _slot(bus: str, port: str, speed: str, width: int) -> tuple[dict, dict]:
    links = {f"/sys/bus/pci/devices/{bus}": f"../../../devices/pci0000:00/{port}/{bus}"}
    files = {f"/sys/bus/pci/devices/{port}/max_link_speed": f"{speed}\n",
             f"/sys/bus/pci/devices/{port}/max_link_width": f"{width}\n"}
    return links, files


def test_pcie_x8_slot_is_slot_limited_not_degraded():
    links, files = _slot("0000:18:00.0", "0000:00:01.1", "16.0 GT/s PCIe", 8)
    host = gpu_host(nvml_entries({"gpus": [gpu("rtx4090", width=8)]}), files=files, links=links)
    link = gpu_pcie.probe(host, QUICK).gpus[0]
    assert link.slot_gen_max == 4 and link.slot_width_max == 8
    assert link.slot_limited and not link.width_short
    assert link.ceiling_capable_gbps == 15.75


def test_pcie_x16_slot_trained_x8_is_short():
    links, files = _slot("0000:18:00.0", "0000:00:01.1", "16 GT/s", 16)
    host = gpu_host(nvml_entries({"gpus": [gpu("rtx4090", width=8)]}), files=files, links=links)
    link = gpu_pcie.probe(host, QUICK).gpus[0]
    assert link.slot_width_max == 16 and link.width_short and not link.slot_limited


def test_pcie_without_sysfs_says_why_the_slot_is_unknown():
    link = gpu_pcie.probe(gpu_host(nvml_entries({"gpus": [gpu("l40s")]})), QUICK).gpus[0]
    assert link.slot_width_max is None and link.missing["slot_gen_max"] == "not-found"


@pytest.mark.parametrize("name,mhz,bits,gbps", [
    ("NVIDIA H100 80GB HBM3", 2619, 5120, 3352.3),   # gpu-facts: 3.35 TB/s
    ("NVIDIA A100 80GB PCIe", 1512, 5120, 1935.4),   # 1.935 TB/s
    ("NVIDIA GeForce RTX 4090", 10501, 384, 1008.1),  # 1008 GB/s
])
def test_memory_ceilings_match_the_datasheets(name, mhz, bits, gbps):
    from probes.gpu.bandwidth import memory_ceiling_gbps

    assert memory_ceiling_gbps(name, mhz, bits)[0] == gbps


@pytest.mark.parametrize("gen,width,gbps", [(3, 16, 15.76), (4, 16, 31.5), (5, 16, 63.01), (1, 16, 4.0)])
def test_pcie_ceilings_per_direction(gen, width, gbps):
    assert gpu_pcie.link_ceiling_gbps(gen, width) == gbps


def test_topology_groups_come_from_nvml_process_list_and_parent_pids():
    """Two engines on one 8-GPU host: vLLM TP 4 whose workers (children of pid 900) hold
    GPUs 4-7, SGLang TP 2 holding GPUs 0-1 itself. Only pairs inside a group must talk."""
    workers = {4: 901, 5: 902, 6: 903, 7: 904}
    machine = {"gpus": [gpu("h100-sxm", processes=[(workers[i], 70_000)] if i in workers else
                            [(950, 70_000)] if i < 2 else []) for i in range(8)]}
    files = process_files({
        900: ("python3", "python3 -m vllm.entrypoints.openai.api_server --model /m -tp 4"),
        950: ("python3", "python3 -m sglang.launch_server --model-path /m --tp-size 2"),
        **{pid: ("python3", "python3 -c from multiprocessing.spawn import spawn_main")
           for pid in workers.values()}})
    for pid in workers.values():  # comm with a space and a parenthesis, as /proc/*/stat allows
        files[f"/proc/{pid}/stat"] = f"{pid} (VllmWorker (rank)) S 900 900 1 0 -1\n"
    record = gpu_topology.probe(gpu_host(nvml_entries(machine), files=files), QUICK)
    talking = {(p.a, p.b) for p in record.pairs if p.must_talk}
    assert talking == {(0, 1)} | {(a, b) for a in range(4, 8) for b in range(a + 1, 8)}
    assert record.talk_group == (0, 1, 4, 5, 6, 7)
    assert "pid 900 tensor parallel 4 on GPUs 4,5,6,7 (NVML's process list)" in \
        record.talk_group_source
    assert "pid 950 tensor parallel 2 on GPUs 0,1" in record.talk_group_source


def test_topology_engine_not_in_nvml_list_assumes_the_first_gpus_and_says_so():
    machine = {"gpus": [gpu("h100-sxm", processes=[(31337, 1000)]) for _ in range(4)]}
    cmdline = "python3 -m vllm.entrypoints.openai.api_server --model /m --tensor-parallel-size 2"
    files = process_files({900: ("python3", cmdline)})
    files["/proc/31337/stat"] = "31337 (other) S 1 1 1 0 -1\n"
    record = gpu_topology.probe(gpu_host(nvml_entries(machine), files=files), QUICK)
    assert record.talk_group == (0, 1)
    assert "GPUs 0-1 assumed (NVML lists none of its processes)" in record.talk_group_source
