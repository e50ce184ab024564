"""amd.gpu and amd.host (issue 33) on the AMD recorded hosts of
tests/fixtures/build_amd_hosts.py, built from real amd-smi, kernel-log and Ollama outputs
(tests/fixtures/amd/SOURCES.md): what the probes read from them, each AMD cause firing on
its story and silent on the healthy host, and amdgpu's kernel lines found by the pattern
table beside NVIDIA's XID one."""

from __future__ import annotations

import shutil

import pytest

from doctor.inputs import NO_INPUTS
from doctor.model import Level, ScanOptions, Severity
from doctor.scan import scan
from doctor.seam.recorded import RecordedHost
from probes.amd import gpu as amd_gpu
from probes.amd import host as amd_host
from probes.helpers.xid import parse_amdgpu_log, parse_kernel_log
from probes.registry import PROBES
from tests.builtin_rules import builtin_rules
from tests.conftest import FIXTURE_HOSTS
from tests.fixtures.build_amd_hosts import SOURCES

# the AMD rules, and NVIDIA's that read AMD GPUs too (each_also)
AMD_RULES = [r for r in builtin_rules() if r.id.startswith("amd-") or any(p.startswith("amd.") for p in r.each_also)]
CHOSEN = tuple(p for p in PROBES if p.name in ("amd.gpu", "amd.host"))
QUICK = ScanOptions(level=Level.QUICK)


def findings(root) -> list[tuple[str, str]]:
    report = scan(RecordedHost(root), QUICK, CHOSEN, AMD_RULES)
    assert report.rule_errors == []
    assert all(p.status in ("ok", "skipped") for p in report.probes), report.probes
    return sorted((f.rule, f.severity.label) for f in report.findings if f.severity >= Severity.WARNING)


@pytest.mark.parametrize("name,expected", [
    ("amd-mi300-8x", []),
    ("amd-mi300-8x-numa-balancing", [("amd-numa-balancing-on", "warning")]),
    ("amd-mi300-8x-iommu-translated", [("amd-iommu-not-passthrough", "warning")]),
    ("amd-mi300-8x-ras", [("amd-gpu-ras-errors", "critical"), ("amd-kernel-ras-lines", "critical")]),
    ("amd-mi300-8x-xgmi-down", [("amd-xgmi-link-degraded", "critical"),
                                ("amd-xgmi-link-degraded", "warning")]),
    ("amd-rx6750-ollama", [("amd-gfx-target-unsupported", "warning")]),
    ("amd-mi300-8x-container-no-kfd", [("amd-kfd-missing", "warning")]),
    ("amd-mi300-8x-cpx", []),  # -tp 8 on one GPU's eight partitions
    ("amd-mi300-8x-cpx-tp6", [("amd-partition-tp-straddles", "warning")]),
    ("amd-mi300-8x-container-no-dri", [("amd-render-nodes-missing", "warning")]),
    ("amd-mi300-8x-pcie-x8", [("pcie-link-degraded", "critical")]),
    ("amd-mi300-8x-pcie-idle", []),  # the same x8 link read at rest: AMD links narrow when idle
    ("amd-2x-radeon-pcie", [("amd-fine-grain-pcie-unset", "warning")]),
    ("amd-2x-radeon-pcie-fine-grain", []),
    ("this-vm-epyc-2cpu", []),  # no AMD GPU: both probes skipped, nothing raised
])
def test_each_amd_cause_fires_on_its_story_and_nowhere_else(name, expected):
    assert findings(FIXTURE_HOSTS / name) == expected


def test_the_probe_reads_the_real_amd_smi_figures():
    record = amd_gpu.probe(RecordedHost(FIXTURE_HOSTS / "amd-mi300-8x"), QUICK, NO_INPUTS)
    assert record.vendor == "amd" and len(record.gpus) == 8
    gpu = record.gpus[0]
    assert (gpu.bus_id, gpu.name, gpu.gfx_arch) == ("0000:0c:00.0", "MI308X", "gfx942")
    assert (gpu.gen_current, gpu.width_current, gpu.gen_max, gpu.width_max, gpu.replay_count) == (5, 16, 5, 16, 0)
    assert (gpu.slowdown_c, gpu.shutdown_c) == (110, 115)
    assert (gpu.ecc_corrected, gpu.ecc_uncorrected, gpu.ecc_deferred) == (0, 0, 0)
    # what no source gives is absent with its reason, never zero
    assert gpu.temp_c is None and gpu.missing["temp_c"] == "not-found"
    assert gpu.power_w is None and gpu.bad_pages is None
    assert len(record.xgmi_links) == 8 * 7
    assert {link.bit_rate_gbit for link in record.xgmi_links} == {32}


def test_the_host_probe_reads_gfx_targets_numa_and_iommu():
    record = amd_host.probe(RecordedHost(FIXTURE_HOSTS / "amd-mi300-8x"), QUICK, NO_INPUTS)
    assert (record.amd_gpus, record.gfx_targets) == (8, ("gfx942",) * 8)
    assert (record.numa_balancing, record.iommu_mode) == (0, "passthrough")
    assert (record.render_nodes, record.xgmi_peer_links, record.kfd_present) == (8, 8 * 7, True)
    radeon = amd_host.probe(RecordedHost(FIXTURE_HOSTS / "amd-rx6750-ollama"), QUICK, NO_INPUTS)
    assert radeon.gfx_targets == ("gfx1031",) and radeon.iommu_mode == "off"
    assert (radeon.render_nodes, radeon.xgmi_peer_links) == (1, 0)


@pytest.mark.parametrize("version,name", [
    (90402, "gfx942"), (90010, "gfx90a"), (110000, "gfx1100"), (100301, "gfx1031"),
    (120001, "gfx1201"), (0, None)])
def test_kfd_target_versions_read_as_llvm_names(version, name):
    assert amd_host.gfx_name(version) == name


def test_an_ollama_that_never_opened_dev_kfd_is_on_the_cpu(tmp_path):
    """The Radeon host of ollama/ollama#8772 with its Ollama process: HSA_OVERRIDE_GFX_VERSION
    set in the unit, no /dev/kfd among its descriptors."""
    import tomli_w

    from doctor._toml import tomllib

    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "amd-rx6750-ollama", root, symlinks=True)
    proc = root / "fs/proc/20609"
    proc.mkdir(parents=True)
    (proc / "cmdline").write_text("/usr/local/bin/ollama\0serve\0")
    (proc / "comm").write_text("ollama\n")
    (proc / "environ").write_text("HOME=***\0HSA_OVERRIDE_GFX_VERSION=10.3.0\0")
    manifest = tomllib.loads((root / "host.toml").read_text())
    manifest.setdefault("links", {})["/proc/20609/fd"] = {
        "0": "/dev/null", "1": "socket:[4711]", "3": "/usr/share/ollama/.ollama/models/blobs/sha256-6a0746"}
    (root / "host.toml").write_text(tomli_w.dumps(manifest))
    # the ollama user of Ollama's install script, in neither render nor video
    (proc / "status").write_text("Name:\tollama\nUid:\t996\t996\t996\t996\nGid:\t996\t996\t996\t996\nGroups:\t996 \n")
    (root / "fs/etc").mkdir(exist_ok=True)
    (root / "fs/etc/group").write_text("root:x:0:\nvideo:x:44:\nrender:x:992:\nollama:x:996:\n")
    record = amd_host.probe(RecordedHost(root), QUICK, NO_INPUTS)
    (engine,) = record.engines
    assert (engine.engine, engine.gfx_override, engine.holds_kfd) == ("ollama", "10.3.0", False)
    assert (engine.uid, engine.in_gpu_groups, engine.holds_render) == (996, False, False)
    assert findings(root) == [("amd-engine-no-gpu-group", "warning"), ("amd-engine-not-on-gpu", "warning"),
                              ("amd-gfx-target-unsupported", "warning")]
    # in the render group (its installer's `usermod -a -G render,video ollama`): only on the CPU
    (proc / "status").write_text("Name:\tollama\nUid:\t996\t996\t996\t996\nGid:\t996\t996\t996\t996\nGroups:\t44 992 996 \n")
    assert ("amd-engine-no-gpu-group", "warning") not in findings(root)
    assert ("amd-engine-not-on-gpu", "warning") in findings(root)
    # with /dev/kfd and the render node among them, the engine is on the GPU
    manifest["links"]["/proc/20609/fd"].update({"9": "/dev/kfd", "10": "/dev/dri/renderD128"})
    (root / "host.toml").write_text(tomli_w.dumps(manifest))
    assert ("amd-engine-not-on-gpu", "warning") not in findings(root)


@pytest.mark.parametrize("source,expected", [
    ("rocm-legacy-4021-mi300x-dmesg.txt", [("0000:68:00.0", "ras-uncorrectable")]),
    ("rocm-legacy-1886-mi50-dmesg.txt", [("0000:e3:00.0", "ras-uncorrectable"), ("0000:e3:00.0", "gpu-reset")]),
    ("rocm-sdk-builder-141-gfx1103-reset.txt", [("0000:c3:00.0", "gpu-reset")]),
    ("ollama-8772-rx6750-gfx1031.txt", []),  # Ollama's own log: no kernel line
])
def test_amdgpu_kernel_lines_by_pattern_table(source, expected):
    text = (SOURCES / source).read_text()
    assert [(e.bus, e.kind) for e in parse_amdgpu_log(text)] == expected
    assert parse_kernel_log(text) == []  # an amdgpu line is never read as an XID


def test_an_xid_line_is_not_read_as_an_amdgpu_one():
    line = "NVRM: Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus."
    assert parse_amdgpu_log(line) == [] and [e.code for e in parse_kernel_log(line)] == [79]


def test_the_slow_link_is_judged_against_the_fastest():
    report = scan(RecordedHost(FIXTURE_HOSTS / "amd-mi300-8x-xgmi-down"), QUICK, CHOSEN, AMD_RULES)
    slow = [f for f in report.findings if f.rule == "amd-xgmi-link-degraded" and f.severity == Severity.WARNING]
    assert [(f.evidence["gpu"], f.evidence["link"], f.evidence["rate"], f.evidence["fastest"]) for f in slow] \
        == [(5, 3, 16, 32)]


def test_a_capture_where_amdsmi_failed_replays_as_the_missing_library(tmp_path):
    """A host with AMD GPUs and no ROCm library, captured: amdsmi.json holds the failure, and
    the replay says what to install, not "recorded"."""
    import json

    from doctor.model import Skip
    from probes.helpers.amd_common import NO_LIBRARY, amd_count

    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "amd-rx6750-ollama", root, symlinks=True)
    (root / "amdsmi.json").write_text(json.dumps(
        [{"call": "amdsmi_get_processor_handles", "args": [], "error": "library-missing"}]))
    with pytest.raises(Skip) as skipped:
        amd_count(RecordedHost(root))
    # the library's reason first, then why amd-smi's text could not stand in (not recorded)
    assert str(skipped.value).startswith(NO_LIBRARY + "; the amd-smi command gave nothing")
    from doctor.seam import amdsmi

    assert NO_LIBRARY == amdsmi.NO_LIBRARY  # the probes' copy of the seam's sentence


def test_cpx_partitions_are_grouped_by_their_physical_gpu():
    """64 logical GPUs at eight BDFs, the partition in the function digit, the mode answered
    by each GPU's partition 0 only: eight physical GPUs of eight partitions, in CPX."""
    record = amd_gpu.probe(RecordedHost(FIXTURE_HOSTS / "amd-mi300-8x-cpx"), QUICK, NO_INPUTS)
    assert (record.logical_gpus, record.physical_gpus, record.partitions_per_gpu) == (64, 8, 8)
    assert (record.compute_partition, record.partitions_uneven) == ("CPX", False)
    assert [g.physical_id for g in record.gpus[:9]] == ["0000:0c:00"] * 8 + ["0000:22:00"]
    assert record.gpus[1].compute_partition is None and record.gpus[1].missing["compute_partition"] == "not-supported"
    healthy = amd_gpu.probe(RecordedHost(FIXTURE_HOSTS / "amd-mi300-8x"), QUICK, NO_INPUTS)
    assert (healthy.logical_gpus, healthy.physical_gpus, healthy.partitions_per_gpu) == (8, 8, 1)


def test_the_engine_layout_and_visible_gpus_are_read():
    record = amd_host.probe(RecordedHost(FIXTURE_HOSTS / "amd-mi300-8x-cpx-tp6"), QUICK, NO_INPUTS)
    (engine,) = record.engines
    assert (engine.engine, engine.tensor_parallel, engine.pipeline_parallel) == ("vllm", 6, None)
    assert (engine.visible_gpus, engine.visible_from, engine.holds_kfd) == (8, "HIP_VISIBLE_DEVICES", True)


@pytest.mark.parametrize("rows,expected", [
    ([("0000:0c:00.0", "SPX"), ("0000:22:00.0", "SPX")], (2, 2, 1, False, "SPX")),
    ([("0000:0c:00.0", "DPX"), ("0000:0c:00.1", None), ("0000:22:00.0", "SPX")], (3, 2, 2, True, "DPX, SPX")),
    ([("0000:0c:00.0", None), (None, None)], (2, None, None, False, None)),
    ([], (0, None, None, False, None)),
])
def test_partitions_from_bus_ids_and_modes(rows, expected):
    from probes.helpers.amd_partitions import partitions

    got = partitions(rows)
    assert (got.logical_gpus, got.physical_gpus, got.partitions_per_gpu, got.uneven, got.compute_partition) == expected


def test_an_amd_link_is_judged_while_the_gpu_works_against_its_slot():
    busy = amd_gpu.probe(RecordedHost(FIXTURE_HOSTS / "amd-mi300-8x-pcie-x8"), QUICK, NO_INPUTS).gpus[2]
    assert (busy.on_vm, busy.slot_known, busy.slot_width_max, busy.under_load) == (False, True, 16, True)
    assert (busy.gen_loaded, busy.width_loaded, busy.width_short, busy.gen_low_under_load) == (5, 8, True, False)
    assert (busy.ceiling_trained_gbps, busy.ceiling_capable_gbps) == (31.5, 63.01)
    idle = amd_gpu.probe(RecordedHost(FIXTURE_HOSTS / "amd-mi300-8x-pcie-idle"), QUICK, NO_INPUTS).gpus[2]
    assert (idle.width_current, idle.under_load, idle.width_short, idle.width_loaded) == (8, False, False, None)
    # the base VM (hypervisor CPU flag): nothing on it is judged by hand
    vm = amd_gpu.probe(RecordedHost(FIXTURE_HOSTS / "amd-mi300-8x"), QUICK, NO_INPUTS).gpus[2]
    assert vm.on_vm is True and vm.slot_known is False


def test_the_driver_vbios_and_rocm_versions_are_the_real_ones():
    """amdgpu 6.18.3 and IFWI 00154951 / 113-M350-01-1K0-920A from the MI350X's ``amd-smi
    static`` (rocm-systems#2987); ROCm 7.14.0 from TheRock#5475's version file. Where no
    source gives them (the CPX hosts' amdsmi answers, a Radeon host without /opt/rocm) they
    are None with the reason."""
    gpu = amd_gpu.probe(RecordedHost(FIXTURE_HOSTS / "amd-mi300-8x"), QUICK, NO_INPUTS).gpus[0]
    assert (gpu.driver_name, gpu.driver_version) == ("amdgpu", "6.18.3")
    assert (gpu.vbios_version, gpu.vbios_part_number) == ("00154951", "113-M350-01-1K0-920A")
    assert not any(k.startswith(("driver", "vbios")) for k in gpu.missing)
    assert amd_host.probe(RecordedHost(FIXTURE_HOSTS / "amd-mi300-8x"), QUICK, NO_INPUTS).rocm_version == "7.14.0"
    cpx = amd_gpu.probe(RecordedHost(FIXTURE_HOSTS / "amd-mi300-8x-cpx"), QUICK, NO_INPUTS).gpus[0]
    assert cpx.driver_version is None and cpx.missing["driver_version"] == "not-found"
    assert cpx.vbios_part_number is None and cpx.missing["vbios_part_number"] == "not-found"
    radeon = amd_host.probe(RecordedHost(FIXTURE_HOSTS / "amd-rx6750-ollama"), QUICK, NO_INPUTS)
    assert radeon.rocm_version is None and radeon.missing["rocm_version"] == "not-found"


@pytest.fixture(scope="module")
def hostile_versions(tmp_path_factory):
    """The healthy MI300 host with hostile version answers: GPU 0's driver version a
    terminal escape, GPU 1's a 300-character string, GPU 2's VBIOS all N/A (the MI300A of
    amdsmi's README: an APU has no VBIOS), GPU 3's driver a number."""
    import json

    root = tmp_path_factory.mktemp("amd-versions") / "host"
    shutil.copytree(FIXTURE_HOSTS / "amd-mi300-8x", root, symlinks=True)
    calls = json.loads((root / "amdsmi.json").read_text())
    from tests.fixtures.build_amd_hosts import MI300A, vbios_info

    for call in calls:
        gpu = call["args"][0] if call["args"] else None
        if call["call"] == "amdsmi_get_gpu_driver_info" and gpu in (0, 1, 3):
            call["value"]["driver_version"] = {0: "6.18.3\x1b[2J", 1: "6" * 300, 3: 6}[gpu]
        if call["call"] == "amdsmi_get_gpu_vbios_info" and gpu == 2:
            call["value"] = vbios_info(MI300A)
    (root / "amdsmi.json").write_text(json.dumps(calls))
    return root


def test_hostile_or_absent_versions_are_none_with_the_reason(hostile_versions):
    gpus = amd_gpu.probe(RecordedHost(hostile_versions), QUICK, NO_INPUTS).gpus
    assert [g.driver_version for g in gpus[:4]] == [None, None, "6.18.3", None]
    assert gpus[0].missing["driver_version"].startswith("not a version: '6.18.3\\x1b")
    assert len(gpus[1].missing["driver_version"]) < 100
    assert gpus[3].missing["driver_version"] == "wrong type: expected a string, got int"
    assert (gpus[2].vbios_version, gpus[2].missing["vbios_version"]) == (None, "not-supported")
    assert gpus[0].driver_name == "amdgpu" and gpus[4].vbios_version == "00154951"


@pytest.mark.parametrize("files,expected,reason", [
    ({"/opt/rocm/.info/version": "6.2.2-116\n"}, "6.2.2-116", None),
    ({"/opt/rocm/.info/version": "6.3.1\n", "/opt/rocm/core/.info/version": "7.14.0\n"}, "6.3.1", None),
    ({"/opt/rocm/.info/version": "$(reboot)\n"}, None, "/opt/rocm/.info/version: not a version: '$(reboot)'"),
    ({"/opt/rocm/.info/version": "7" * 5000}, None, "/opt/rocm/.info/version: not a version: '" + "7" * 40 + "'"),
])
def test_the_rocm_version_file_is_read_as_hostile_text(tmp_path, files, expected, reason):
    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "amd-rx6750-ollama", root, symlinks=True)
    for path, text in files.items():
        (root / "fs" / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        (root / "fs" / path.lstrip("/")).write_text(text)
    record = amd_host.probe(RecordedHost(root), QUICK, NO_INPUTS)
    assert (record.rocm_version, record.missing.get("rocm_version")) == (expected, reason)


def test_the_versions_are_exported_as_info_series_with_the_vendor():
    from tests.test_exporter_fixtures import _page, _parsed

    report = scan(RecordedHost(FIXTURE_HOSTS / "amd-mi300-8x"), QUICK, CHOSEN, AMD_RULES)
    page = _parsed(_page({r.name: r for r in report.probes}))
    versions = page["llm_doctor_amd_gpu_version_info"]
    assert len(versions) == 8 and all(value == 1 for _, value in versions)
    labels = next(lab for lab, _ in versions if lab["bus_id"] == "0000:0c:00.0")
    assert {k: labels[k] for k in ("vendor", "driver", "driver_version", "vbios_version",
                                   "vbios_part_number")} == {
        "vendor": "amd", "driver": "amdgpu", "driver_version": "6.18.3",
        "vbios_version": "00154951", "vbios_part_number": "113-M350-01-1K0-920A"}
    [(rocm, _)] = page["llm_doctor_amd_host_rocm_info"]
    assert rocm == {"vendor": "amd", "rocm_version": "7.14.0"}
