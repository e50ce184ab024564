"""Issue 28, items 1-5 and the GPU polish of 16: recorded hosts built from real
``nvidia-smi -q -x`` dumps (tests/fixtures/nvidia_smi/, PROVENANCE.md there), where the rules
misfired, and their firing twins, each made by editing one real answer or adding the slot.

The converter is checked against the XML itself: what the probes read from a converted host
is what nvidia-smi printed (memory included: nvidia-smi's "used" is the versioned call's)."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from doctor.model import Level, ScanOptions, Severity
from doctor.scan import scan
from doctor.seam.recorded import RecordedHost
from probes.gpu import memory as gpu_memory
from probes.gpu import pcie as gpu_pcie
from probes.gpu import thermal_power as gpu_thermal
from probes.helpers.virtualization import detect
from probes.registry import PROBES
from tests.builtin_rules import builtin_rules
from tests.conftest import FIXTURE_HOSTS
from tests.fixtures.build_real_gpu_hosts import DUMPS, HOSTS
from tests.fixtures.convert_nvidia_smi_xml import convert
from tests.gpu_host import gpu_host

RULES = builtin_rules()
QUICK = ScanOptions(level=Level.QUICK)


def findings(root: Path) -> list[tuple[str, str, str]]:
    report = scan(RecordedHost(root), QUICK, PROBES, RULES)
    assert report.rule_errors == []
    return sorted((f.rule, f.severity.label, f.title) for f in report.findings
                  if f.severity >= Severity.WARNING)


def copy_of(name: str, tmp_path: Path) -> Path:
    root = tmp_path / name
    shutil.copytree(FIXTURE_HOSTS / name, root, symlinks=True)
    return root


def edit_nvml(root: Path, edits: dict[tuple[str, tuple], object]) -> None:
    """Replace (or add) answers of nvml.json: {(call, args): value}."""
    entries = json.loads((root / "nvml.json").read_text())
    for entry in entries:
        key = (entry["call"], tuple(entry["args"]))
        if key in edits:
            entry.pop("error", None)
            entry["value"] = edits.pop(key)
    entries += [{"call": c, "args": list(a), "value": v} for (c, a), v in edits.items()]
    (root / "nvml.json").write_text(json.dumps(entries))


# -- the converter against the XML ---------------------------------------------------------

def _mib(gpu: ET.Element, path: str) -> int:
    return int(re.match(r"\d+", gpu.findtext(path, "")).group())


@pytest.mark.parametrize("dump", sorted(p.name for p in DUMPS.glob("*.xml")))
def test_converted_readings_are_the_xml_values(dump, tmp_path):
    """Every GPU of every dump: memory as nvidia-smi prints it (used without the reservation),
    temperature, power, clocks and link width, read back through the probes."""
    convert(DUMPS / dump, tmp_path / "host", "x")
    host = RecordedHost(tmp_path / "host")
    xml_gpus = ET.parse(DUMPS / dump).getroot().findall("gpu")
    mem = gpu_memory.probe(host, QUICK).gpus
    thermal = gpu_thermal.probe(host, QUICK).gpus
    links = gpu_pcie.probe(host, QUICK).gpus
    assert len(mem) == len(thermal) == len(links) == len(xml_gpus)
    for g, m, th, link in zip(xml_gpus, mem, thermal, links):
        assert (m.total_mib, m.used_mib, m.free_mib, m.reserved_mib) == (
            _mib(g, "fb_memory_usage/total"), _mib(g, "fb_memory_usage/used"),
            _mib(g, "fb_memory_usage/free"), _mib(g, "fb_memory_usage/reserved"))
        assert m.memory_source == "v2"
        assert th.temp_c == _mib(g, "temperature/gpu_temp")
        assert th.sm_clock_mhz == _mib(g, "clocks/sm_clock")
        assert th.power_limit_w == pytest.approx(float(re.match(r"[\d.]+", g.findtext(
            "power_readings/enforced_power_limit") or g.findtext(
            "gpu_power_readings/current_power_limit")).group()))
        assert link.width_current == _mib(g, "pci/pci_gpu_link_info/link_widths/current_link_width")
        tlimit = g.findtext("temperature/gpu_temp_tlimit")
        if g.findtext("temperature/gpu_temp_slow_threshold") is None and tlimit:
            assert th.margin_c == _mib(g, "temperature/gpu_temp_tlimit")


def test_the_recorded_real_hosts_are_what_the_builder_writes(tmp_path):
    """tests/fixtures/hosts/<name>/nvml.json is the converter's answer sheet for its dump."""
    from tests.fixtures.convert_nvidia_smi_xml import Answers, gpu_side, read_dump

    for name, (dump, *_rest) in HOSTS.items():
        answers = Answers()
        gpu_side(read_dump(DUMPS / dump), answers)
        assert json.loads((FIXTURE_HOSTS / name / "nvml.json").read_text()) == answers.entries, name


# -- item 1: a power-cap bit on an idle card ------------------------------------------------

def test_idle_rtx3090_with_the_power_cap_bit_is_not_power_throttled():
    # before: gpu-power-throttling "clocks held by power (sw_power_cap): 210 of 2100 MHz at 35.1 of 350 W"
    assert findings(FIXTURE_HOSTS / "rtx3090-idle-p8-power-cap") == []


def test_the_same_rtx3090_busy_is_power_throttled_and_says_what_showed_work(tmp_path):
    root = copy_of("rtx3090-idle-p8-power-cap", tmp_path)
    edit_nvml(root, {("nvmlDeviceGetUtilizationRates", (0,)): {"gpu": 97, "memory": 60},
                     ("nvmlDeviceGetClockInfo", (0, 1)): 1395})
    report = scan(RecordedHost(root), QUICK, PROBES, RULES)
    [finding] = [f for f in report.findings if f.severity >= Severity.WARNING]
    assert (finding.rule, finding.severity.label) == ("gpu-power-throttling", "warning")
    assert finding.evidence["work_seen"] == "gpu-busy" and finding.evidence["util_gpu_pct"] == 97
    assert "GPU busy 97%" in finding.title


def test_the_same_rtx3090_at_its_power_limit_is_power_throttled(tmp_path):
    root = copy_of("rtx3090-idle-p8-power-cap", tmp_path)
    edit_nvml(root, {("nvmlDeviceGetPowerUsage", (0,)): 347_500,
                     ("nvmlDeviceGetClockInfo", (0, 1)): 1395})
    [(rule, severity, title)] = findings(root)
    assert (rule, severity) == ("gpu-power-throttling", "warning")
    assert "power-at-limit" in title


# -- item 2: no slot to see, a virtual machine -------------------------------------------------

@pytest.mark.parametrize("name", ["t4-aws-passthrough-x8", "a10g-aws-passthrough-x8"])
def test_passthrough_gpu_at_x8_on_a_vm_is_not_a_degraded_link(name):
    # before: pcie-link-degraded critical ("Reseat the card") on a cloud VM
    found = findings(FIXTURE_HOSTS / name)
    assert [f[0] for f in found] == ["gpu-persistence-mode-off"]
    link = gpu_pcie.probe(RecordedHost(FIXTURE_HOSTS / name), QUICK).gpus[0]
    assert link.on_vm is True and link.slot_known is False and not link.width_short
    assert "root bus" in str(link.missing["slot_width_max"])


def test_consumer_x8_x8_without_a_visible_slot_is_not_judged():
    # before: pcie-link-degraded critical on both RTX 2070s of a board that splits x8/x8
    assert findings(FIXTURE_HOSTS / "rtx2070-2x-reserved") == []
    summary = gpu_pcie.summary(gpu_pcie.probe(RecordedHost(FIXTURE_HOSTS / "rtx2070-2x-reserved"), QUICK))
    assert "slot width unknown" in summary


def _slot_x16(root: Path) -> None:
    """Both 2070s below x16 Gen3 root ports, as sysfs shows a bare-metal slot."""
    host = (root / "host.toml").read_text()
    host += '\n[links."/sys/bus/pci/devices"]\n' + "".join(
        f'"0000:{b}:00.0" = "../../../devices/pci0000:00/0000:00:0{n}.0/0000:{b}:00.0"\n'
        for n, b in ((1, "01"), (3, "02")))
    (root / "host.toml").write_text(host)
    for n in (1, 3):
        port = root / f"fs/sys/bus/pci/devices/0000:00:0{n}.0"
        port.mkdir(parents=True)
        (port / "max_link_speed").write_text("8.0 GT/s PCIe\n")
        (port / "max_link_width").write_text("16\n")


def test_x8_below_a_visible_x16_slot_on_bare_metal_is_critical(tmp_path):
    root = copy_of("rtx2070-2x-reserved", tmp_path)
    assert "/sys/bus/pci/devices" not in (root / "host.toml").read_text()
    _slot_x16(root)
    found = findings(root)
    assert [(r, s) for r, s, _ in found] == [("pcie-link-degraded", "critical")] * 2


def test_the_same_slots_on_a_virtual_machine_are_not_judged(tmp_path):
    root = copy_of("rtx2070-2x-reserved", tmp_path)
    _slot_x16(root)
    cpuinfo = root / "fs/proc/cpuinfo"
    cpuinfo.write_text(cpuinfo.read_text().replace("flags\t\t: ", "flags\t\t: hypervisor "))
    assert findings(root) == []


def test_vm_detection_reads_dmi_and_hypervisor(tmp_path):
    assert detect(gpu_host([], files={"/sys/class/dmi/id/sys_vendor": "QEMU\n",
                                      "/sys/class/dmi/id/product_name": "Standard PC (Q35 + ICH9, 2009)\n"})
                  ).signals == ("dmi QEMU",)
    assert detect(gpu_host([], files={"/sys/hypervisor/type": "xen\n"})).virtual_machine is True
    metal = detect(gpu_host([], files={"/sys/class/dmi/id/sys_vendor": "Amazon EC2\n",
                                       "/sys/class/dmi/id/product_name": "g4dn.metal\n",
                                       "/proc/cpuinfo": "processor\t: 0\nflags\t\t: fpu sse2\n"}))
    assert metal.virtual_machine is False and metal.signals == ()
    assert detect(gpu_host([])).virtual_machine is None  # nothing readable: unknown


def test_vm_detection_on_this_machine_matches_its_cpu_flag():
    from doctor.seam.live import LiveHost

    flags = next((line.split(":", 1)[1].split() for line in
                  Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), [])
    result = detect(LiveHost())
    assert ("cpu flag hypervisor" in result.signals) == ("hypervisor" in flags)
    if "hypervisor" in flags:
        assert result.virtual_machine is True


# -- item 3: the idle generation is not the one in use --------------------------------------

def test_idle_link_title_says_idle_and_what_the_link_can_reach(tmp_path):
    # before: "GPU0: PCIe link runs at Gen1 x8 of Gen3 x16 (2 of 15.76 GB/s per direction)"
    root = copy_of("rtx2070-2x-reserved", tmp_path)
    _slot_x16(root)
    titles = [title for _, _, title in findings(root)]
    assert titles[0] == ("GPU0: PCIe link x8 of Gen3 x16, read idle at Gen1: it can reach "
                         "15.76 GB/s per direction, 0 replays")
    assert all("Gen1 x8" not in t and "2 of" not in t for t in titles)


# -- item 4: memory as nvidia-smi counts it ---------------------------------------------------

def test_memory_used_is_nvidia_smis_with_the_reservation_apart():
    # before: 406 MiB "used" on an idle RTX 2070 (v1 counts the reservation), nvidia-smi says 1
    gpus = gpu_memory.probe(RecordedHost(FIXTURE_HOSTS / "rtx2070-2x-reserved"), QUICK).gpus
    assert [(g.used_mib, g.reserved_mib, g.memory_source) for g in gpus] == [(1, 406, "v2")] * 2


def test_a_driver_without_the_v2_call_falls_back_and_says_so(tmp_path):
    root = copy_of("rtx2070-2x-reserved", tmp_path)
    entries = [e for e in json.loads((root / "nvml.json").read_text())
               if e["call"] != "nvmlDeviceGetMemoryInfo_v2"]
    (root / "nvml.json").write_text(json.dumps(entries))
    g = gpu_memory.probe(RecordedHost(root), QUICK).gpus[0]
    assert (g.used_mib, g.reserved_mib, g.memory_source) == (406, None, "v1")  # total - free
    assert g.missing["reserved_mib"] == "not-found"


# -- item 5: the margin of boards with no slowdown threshold ---------------------------------

@pytest.mark.parametrize("name,margin,target", [("rtx4000-sff-ada-tlimit", 49, 88),
                                                ("rtx-pro-6000-blackwell-tlimit", 68, None)])
def test_boards_without_a_slowdown_threshold_have_nvmls_margin(name, margin, target):
    g = gpu_thermal.probe(RecordedHost(FIXTURE_HOSTS / name), QUICK).gpus[0]
    assert g.slowdown_c is None and g.missing["slowdown_c"] == "not-supported"
    assert (g.margin_c, g.margin_source, g.target_c) == (margin, "nvml-margin", target)


def test_the_ada_three_degrees_from_slowdown_runs_hot(tmp_path):
    root = copy_of("rtx4000-sff-ada-tlimit", tmp_path)
    edit_nvml(root, {("nvmlDeviceGetMarginTemperature", (0,)): 3,
                     ("nvmlDeviceGetTemperature", (0, 0)): 84})
    [(rule, severity, title)] = findings(root)
    assert (rule, severity) == ("gpu-thermal-throttling", "warning")
    assert title.startswith("GPU0 runs hot: 84 °C, 3 °C below its slowdown threshold, target 88 °C")


# -- item 16: the thermal title past the threshold ----------------------------------------

def test_past_the_slowdown_threshold_the_title_says_above_it():
    # before: "-1 C from its slowdown threshold (87 C)"
    [(rule, severity, title)] = findings(FIXTURE_HOSTS / "h100-thermal-88c")
    assert (rule, severity) == ("gpu-thermal-throttling", "critical")
    assert "88 °C, 1 °C above its slowdown threshold (87 °C)" in title


def test_runtime_summary_says_why_the_runtime_is_unknown():
    from probes.gpu import runtime as gpu_runtime

    record = gpu_runtime.probe(RecordedHost(FIXTURE_HOSTS / "h100-thermal-88c"), QUICK)
    text = gpu_runtime.summary(record)
    assert "runtime ?" not in text and "runtime unknown (not found)" in text


def test_a_slot_not_seen_is_said_in_the_title(tmp_path):
    """The A10G's real link answers, on bare metal, read during a copy at Gen3: the finding
    is the generation, and the title says the width was not judged."""
    from doctor.model import ProbeResult
    from doctor.rules.evaluate import evaluate

    root = copy_of("a10g-aws-passthrough-x8", tmp_path)
    edit_nvml(root, {("nvmlDeviceGetVirtualizationMode", (0,)): 0})
    host = RecordedHost(root)
    link = gpu_pcie.read_link(host, 0, {"gen_max_seen": 3, "width_min_seen": 8, "copy_gbps": 6.4},
                              host_vm=False)
    assert not link.slot_known and link.gen_low_under_load and not link.width_short
    rule = next(r for r in RULES if r.id == "pcie-link-degraded")
    record = gpu_pcie.PcieRecord(gpus=(link,), load_reason=None)
    found, errors = evaluate([rule], [ProbeResult("gpu.pcie", "ok", 0.0, None, record)])
    assert errors == [] and [f.severity.label for f in found] == ["warning"]
    assert found[0].title == ("GPU0: PCIe link at Gen3 x8 of Gen4 x16 under load (7.88 of 31.5 GB/s "
                              "per direction), 0 replays; slot width unknown (the GPU's own is x16): "
                              "width not judged")


def test_the_converter_refuses_a_bad_dump_in_one_line(tmp_path, capsys):
    from tests.fixtures.convert_nvidia_smi_xml import main

    bad = tmp_path / "bad.xml"
    for text in ("<nvidia_smi_log><gpu>", "<html></html>"):
        bad.write_text(text)
        assert main([str(bad), str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(f"{bad}: cannot convert:")
    assert not (tmp_path / "out").exists()


def test_host_cpu_says_the_host_is_a_virtual_machine(tmp_path):
    from probes.host import cpu as host_cpu

    root = copy_of("t4-aws-passthrough-x8", tmp_path)
    record = host_cpu.probe(RecordedHost(root), QUICK)
    assert record.virtual_machine is True and record.vm_signals == ("cpu flag hypervisor",)
    assert host_cpu.summary(record).endswith("; virtual machine (cpu flag hypervisor)")
    bare = host_cpu.probe(RecordedHost(FIXTURE_HOSTS / "rtx3090-idle-p8-power-cap"), QUICK)
    assert bare.virtual_machine is False and bare.vm_signals == ()


def test_a_busy_rtx3080_is_seen_at_work_and_nothing_holds_it():
    g = gpu_thermal.probe(RecordedHost(FIXTURE_HOSTS / "rtx3080-busy-p2"), QUICK).gpus[0]
    assert (g.util_gpu_pct, g.work_seen, g.reasons) == (65, "gpu-busy", ())
