"""Issue 15's GPU platform causes beyond their recorded hosts: the NVML funnel's fabric call,
and faults planted in copies of the recorded hosts, one edit per story (a lost GPU whose bus
cannot be inferred, a container's view of the host's GPUs, a driver without the fabric call,
a fabric manager a container cannot see, a compute mode set by hand)."""

from __future__ import annotations

import json
import shutil

import pytest
import pynvml as real_pynvml

from doctor._toml import tomllib
from doctor.model import Level, ScanOptions, Severity
from doctor.scan import scan
from doctor.seam import nvml
from doctor.seam.host import HostReadError
from doctor.seam.recorded import RecordedHost
from probes.registry import PROBES
from tests.builtin_rules import builtin_rules
from tests.conftest import FIXTURE_HOSTS
from tests.test_gpu_nvml import fake_pynvml, raiser

RULES = builtin_rules()
DGX = "h100-sxm-8x-nvswitch"


# --- the funnel: nvmlDeviceGetGpuFabricInfoV fills a structure the caller passes ---------


def _fill(state, status=0):
    def fill(handle, ref):
        info = ref._obj  # ctypes.byref(structure)
        assert info.__class__.__name__.startswith("c_nvmlGpuFabricInfo")
        info.state, info.status, info.cliqueId = state, status, 7
        return 0
    return fill


@pytest.fixture
def use():
    def install(**functions):
        classes = {n: getattr(real_pynvml, n) for n in (
            "c_nvmlGpuFabricInfo_t", "c_nvmlGpuFabricInfoV_t", "nvmlGpuFabricInfo_v2")}
        fake = fake_pynvml(**classes, **functions)
        nvml._reset_for_tests(fake)
        return fake
    yield install
    nvml._reset_for_tests(None)


def test_fabric_info_v_fills_a_versioned_structure(use):
    seen = {}

    def fill(handle, ref):
        seen["version"] = ref._obj.version
        return _fill(3)(handle, ref)
    use(nvmlDeviceGetGpuFabricInfoV=fill)
    info = nvml.query("nvmlDeviceGetGpuFabricInfoV", 0)
    assert seen["version"] == real_pynvml.nvmlGpuFabricInfo_v2
    assert (info["state"], info["status"], info["cliqueId"]) == (3, 0, 7)
    assert len(info["clusterUuid"]) == 16 and "healthMask" in info


def test_fabric_info_falls_back_to_the_first_call_on_r535(use):
    use(nvmlDeviceGetGpuFabricInfoV=raiser(13),  # NVML_ERROR_FUNCTION_NOT_FOUND
        nvmlDeviceGetGpuFabricInfo=_fill(1))
    info = nvml.query("nvmlDeviceGetGpuFabricInfoV", 0)
    assert info["state"] == 1 and "version" not in info


def test_fabric_info_on_a_binding_without_it_is_not_found_not_a_crash(use):
    use()  # neither function, as bindings before R525 have
    with pytest.raises(HostReadError) as err:
        nvml.query("nvmlDeviceGetGpuFabricInfoV", 0)
    assert err.value.reason.value == "not-found"


# --- planted copies of the recorded hosts --------------------------------------------------


def copy_of(tmp_path, name):
    root = tmp_path / name
    shutil.copytree(FIXTURE_HOSTS / name, root, symlinks=True)
    return root


def edit_nvml(root, edit):
    entries = json.loads((root / "nvml.json").read_text())
    (root / "nvml.json").write_text(json.dumps([e for e in map(edit, entries) if e]))


def edit_manifest(root, edit):
    import tomli_w

    manifest = tomllib.loads((root / "host.toml").read_text())
    edit(manifest)
    (root / "host.toml").write_text(tomli_w.dumps(manifest))


def scan_of(root):
    report = scan(RecordedHost(root), ScanOptions(level=Level.QUICK), PROBES, RULES)
    assert report.rule_errors == []
    assert all(p.status in ("ok", "skipped") for p in report.probes), \
        [(p.name, p.reason) for p in report.probes if p.status not in ("ok", "skipped")]
    found = sorted((f.rule, f.severity.label, f.key) for f in report.findings
                   if f.severity >= Severity.WARNING)
    return found, {p.name: p for p in report.probes}, report


def test_two_lost_gpus_are_each_critical_and_no_bus_is_guessed(tmp_path):
    root = copy_of(tmp_path, DGX)
    edit_nvml(root, lambda e: {"call": e["call"], "args": e["args"], "error": "device-lost"}
              if e["args"][:1] in ([2], [6]) and e["call"] != "nvmlDeviceGetCount" else e)
    found, probes, report = scan_of(root)
    assert [(r, s) for r, s, _ in found] == [("gpu-hardware-errors", "critical")] * 2
    errors = probes["gpu.errors"].record
    assert [g.index for g in errors.gpus if g.lost] == [2, 6]
    # two GPUs lost, two NVIDIA GPUs no answering GPU claims: which is which is unknown
    assert errors.gpus[2].bus_id is None and errors.gpus[2].bus_id_inferred is None
    assert errors.absent == ()  # both are still in NVML's count


@pytest.mark.slow
def test_a_container_given_four_of_eight_gpus_sees_none_absent(tmp_path):
    """sysfs shows the host's eight GPUs in a container; the driver's list, its own four."""
    root = copy_of(tmp_path, DGX)
    gone = ["0000:9a:00.0", "0000:ab:00.0", "0000:ba:00.0", "0000:db:00.0"]
    for bdf in gone:
        shutil.rmtree(root / "fs/proc/driver/nvidia/gpus" / bdf)
    edit_nvml(root, lambda e: {**e, "value": 4} if e["call"] == "nvmlDeviceGetCount" else
              (None if any(isinstance(a, int) and a >= 4 for a in e["args"][:2]) else e))
    found, probes, _ = scan_of(root)
    errors = probes["gpu.errors"].record
    assert errors.pci_gpus == 8 and errors.absent == () and errors.absent_reason is None
    assert not [f for f in found if f[0] == "gpu-fallen-off-the-bus"]


def test_without_the_drivers_gpu_list_absence_is_not_judged_and_says_why(tmp_path):
    root = copy_of(tmp_path, "h100-sxm-8x-gpu-gone")
    shutil.rmtree(root / "fs/proc/driver")
    edit_manifest(root, lambda m: m.get("commands", []).clear())  # no dmesg either
    found, probes, _ = scan_of(root)
    errors = probes["gpu.errors"].record
    assert errors.absent == ()
    assert errors.absent_reason == "/proc/driver/nvidia/gpus: not-found"
    assert found == []


@pytest.mark.slow
def test_fabric_on_a_driver_without_the_call_is_not_supported_and_the_manager_judged(tmp_path):
    root = copy_of(tmp_path, DGX)
    edit_nvml(root, lambda e: None if e["call"] == "nvmlDeviceGetGpuFabricInfoV" else e)
    found, probes, _ = scan_of(root)
    fabric = probes["gpu.fabric"].record
    assert fabric.gpus[0].state is None
    assert fabric.gpus[0].missing["state"] == "not-supported"
    assert fabric.manager_running is True and found == []
    # the same driver, the manager stopped: the manager alone says the fabric is down
    (root / "fs/proc/2871/cmdline").unlink()
    (root / "fs/proc/2871/comm").unlink()
    (root / "fs/proc/2871").rmdir()
    found, probes, report = scan_of(root)
    assert [(r, s) for r, s, _ in found] == [("nvswitch-fabric-down", "critical")]
    assert report.findings[0].evidence["problem"] == "nv-fabricmanager not running"
    assert "CUDA error 802: system not yet initialized" in report.findings[0].title


def test_in_a_container_the_manager_is_not_judged_but_the_fabric_state_is(tmp_path):
    root = copy_of(tmp_path, "h100-sxm-8x-fabric-down")
    (root / "fs/proc/1/comm").write_text("python3\n")
    found, probes, report = scan_of(root)
    fabric = probes["gpu.fabric"].record
    assert fabric.manager_running is None and "pid 1 is python3" in fabric.manager_reason
    assert [(r, s) for r, s, _ in found] == [("nvswitch-fabric-down", "critical")]
    assert "not running" not in report.findings[0].evidence["problem"]


def test_fabric_host_known_from_nvml_when_the_pci_bus_cannot_be_read(tmp_path):
    root = copy_of(tmp_path, DGX)
    edit_manifest(root, lambda m: m.get("links", {}).pop("/sys/bus/pci/devices"))
    found, probes, _ = scan_of(root)
    fabric = probes["gpu.fabric"].record
    assert fabric.nvswitches == 0
    assert fabric.nvswitch_source.startswith("NVML: GPU 0,1,2,3,4,5,6,7 report a fabric state")
    assert found == []


@pytest.mark.parametrize("name,why", [
    ("l40s-mps-exclusive", "no NVSwitch on the PCI bus"),
    ("h100-thermal-88c", "the PCI bus was not read (/sys/bus/pci/devices: not-found)"),
])
def test_fabric_is_skipped_without_nvswitch_and_says_why(name, why):
    report = scan(RecordedHost(FIXTURE_HOSTS / name), ScanOptions(level=Level.QUICK), PROBES, RULES)
    fabric = next(p for p in report.probes if p.name == "gpu.fabric")
    assert fabric.status == "skipped" and why in fabric.reason


@pytest.mark.slow
def test_exclusive_process_set_by_hand_on_one_gpu_is_a_warning_for_that_gpu(tmp_path):
    root = copy_of(tmp_path, DGX)
    edit_nvml(root, lambda e: {**e, "value": 3}
              if (e["call"], e["args"]) == ("nvmlDeviceGetComputeMode", [3]) else e)
    found, _, report = scan_of(root)
    assert found == [("mig-mps-misconfigured", "warning", "GPU3")]
    assert report.findings[0].evidence["compute_mode"] == "exclusive-process"


def test_mig_engines_are_found_in_their_gpu_instances():
    report = scan(RecordedHost(FIXTURE_HOSTS / "a100-mig-per-slice"), ScanOptions(level=Level.QUICK),
                  PROBES, RULES)
    sharing = next(p for p in report.probes if p.name == "gpu.sharing").record
    assert sharing.gpus[0].mig_enabled and sharing.gpus[0].on_mig_instance
    assert [(e.pid, e.tensor_parallel, e.gpus) for e in sharing.engines] == [
        (6120, 1, (0,)), (6188, 1, (0,))]
    assert sharing.mps_daemons == ()


def test_the_mps_server_is_found_holding_the_gpu():
    report = scan(RecordedHost(FIXTURE_HOSTS / "l40s-mps-exclusive"), ScanOptions(level=Level.QUICK),
                  PROBES, RULES)
    probes = {p.name: p.record for p in report.probes}
    assert probes["gpu.sharing"].gpus[0].mps_server
    assert probes["gpu.sharing"].gpus[0].compute_mode == "exclusive-process"
    assert [p.mps_server for p in probes["gpu.memory"].processes] == [True]


HOSTILE_TARGETS = ["../../../../../../../etc", "/sys/devices/../../etc/x", "", "..",
                   "../../../devices/pci0000:17/0000:17:01.0/missing", "a" * 5000]
HOSTILE_VALUES = ["", "0x", "0x10de0x10de", "-0x10de", "0x" + "f" * 400, "\x00", "10de\n"]


@pytest.mark.slow
@pytest.mark.parametrize("case", range(len(HOSTILE_TARGETS) + len(HOSTILE_VALUES)))
def test_a_hostile_pci_listing_never_sinks_the_gpu_probes(tmp_path, case):
    root = copy_of(tmp_path, DGX)
    if case < len(HOSTILE_TARGETS):
        target = HOSTILE_TARGETS[case]
        edit_manifest(root, lambda m: m["links"]["/sys/bus/pci/devices"].update(
            {"0000:05:00.0": target, "../../etc": target, "0000:18:00.0": target}))
    else:
        value = HOSTILE_VALUES[case - len(HOSTILE_TARGETS)]
        for name in ("vendor", "class"):
            for path in (root / "fs/sys/devices").rglob(name):
                path.write_text(value)
                break
        (root / "fs/proc/driver/nvidia/gpus/not-a-bus-id").mkdir()
        (root / "fs/proc/driver/nvidia/gpus/not-a-bus-id/information").write_text("x")
    found, probes, _ = scan_of(root)
    assert probes["gpu.errors"].status == "ok" and probes["gpu.fabric"].status == "ok"
    # a GPU that only a broken sysfs entry hides is not called absent; nothing fires
    assert found == []


@pytest.mark.slow
def test_a_lost_gpu_beside_one_that_hides_its_bus_gets_no_guessed_bus(tmp_path):
    """GPU 5 is lost and GPU 2's PCI info is refused; XID 79 names bus 3A, GPU 2's: the one
    logged bus may be either GPU's, so neither is given it."""
    root = copy_of(tmp_path, DGX)
    edit_nvml(root, lambda e: {"call": e["call"], "args": e["args"], "error": "device-lost"}
              if e["args"][:1] == [5] and e["call"] != "nvmlDeviceGetCount" else
              ({"call": e["call"], "args": e["args"], "error": "no-permission"}
               if (e["call"], e["args"]) == ("nvmlDeviceGetPciInfo", [2]) else e))
    (root / "commands").mkdir(exist_ok=True)
    (root / "commands/90-dmesg.out").write_text(
        "[86318.119042] NVRM: Xid (PCI:0000:3a:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.\n")
    edit_manifest(root, lambda m: m.setdefault("commands", []).append(
        {"argv": ["dmesg"], "rc": 0, "stdout_file": "commands/90-dmesg.out", "stderr": ""}))
    found, probes, _ = scan_of(root)
    errors = probes["gpu.errors"].record
    assert errors.gpus[5].lost and errors.gpus[5].bus_id is None
    assert errors.gpus[5].bus_id_inferred is None and errors.gpus[5].xids == ()
    assert [(r, s) for r, s, _ in found] == [("gpu-hardware-errors", "critical")]
