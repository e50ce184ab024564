"""``llm-doctor diff`` on AMD and Huawei Ascend hosts (issue 33): the facts NVIDIA's GPUs give
(doctor/diff/facts.py) read from amd.gpu/amd.host and the npu.* records
(doctor/diff/accel_facts.py), the vendor in each id.

The pairs are recorded hosts built from real outputs and a story host that changes one thing
(tests/fixtures/build_amd_hosts.py, tests/fixtures/build_ascend_hosts.py), plus one overlay made
here: the Ascend base with a firmware its driver's range does not cover. Each diff names the
change first, nothing else moves, and the cause it bears on is named. A story host is named
otherwise than its base, so the after side takes the base's hostname: one host, changed.
"""

from __future__ import annotations

import copy
import functools
import json
import shutil
from pathlib import Path

import jsonschema
import pytest

from doctor.diff.compare import compare
from doctor.diff.model import ADDED, CHANGED, NO_CHANGE, REGRESSION, REMOVED
from reports.diff_json import to_dict as diff_dict
from reports.json_report import to_dict
from tests.conftest import FIXTURE_HOSTS, REPO
from tests.fixtures import build_ascend_hosts as ascend
from tests.test_fixtures import replay

SCHEMA = json.loads((REPO / "docs" / "diff-schema.json").read_text())
AMD_BASE = "amd-mi300-8x"
NPU_BASE = "ascend-910b2c-healthy"
FIRMWARE = "ascend-910b2c-firmware-7.3"  # the overlay made here
GPU3, GPU5 = "amd.gpu[0000:5c:00.0]", "amd.gpu[0000:af:00.0]"


@pytest.fixture(scope="module")
def npu_hosts(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("ascend-diff")
    for name in (NPU_BASE, "ascend-cann-newer-than-driver", "ascend-910b2c-port-down",
                 "ascend-910b2c-hbm-ecc", "ascend-910b2c-health-warning"):
        ascend.build(name, dest)
    # a firmware upgrade alone: 7.3 is past the 23.0.7 driver's compatible_version_fw [7.0.0, 7.1.99]
    shutil.copytree(dest / NPU_BASE, dest / FIRMWARE)
    info = dest / FIRMWARE / "fs" / ascend.FIRMWARE_INFO.lstrip("/")
    text = info.read_text()
    assert "Version=7.1.0.11.220\n" in text
    info.write_text(text.replace("Version=7.1.0.11.220\n", "Version=7.3.0.1.231\n", 1))
    return dest


@functools.cache
def _saved(path: str) -> str:
    return json.dumps(to_dict(replay(Path(path))))


def saved(path: Path, hostname: str | None = None) -> dict:
    data = json.loads(_saved(str(path)))
    if hostname:
        data["host"]["hostname"] = hostname
    return data


def moved(diff) -> set[str]:
    return {f.id for f in diff.facts if f.status in (CHANGED, ADDED, REMOVED)}


def _diff(root: Path, base: str, story: str):
    before = saved(root / base)
    return compare(before, saved(root / story, before["host"]["hostname"]), (base, story))


AMD_STORIES = [  # (story host, the first change, every fact that moves, its cause)
    ("amd-mi300-8x-ras", f"{GPU3}.ecc_uncorrected", {f"{GPU3}.ecc_uncorrected"}, "amd-gpu-ras-errors"),
    ("amd-mi300-8x-xgmi-down", f"{GPU5}.xgmi[3].bit_rate_gbit",
     {f"{GPU5}.xgmi[3].bit_rate_gbit", f"{GPU5}.xgmi_links_down"}, "amd-xgmi-link-degraded"),
    ("amd-mi300-8x-numa-balancing", "amd.host.numa_balancing", {"amd.host.numa_balancing"},
     "numa-balancing-on"),
    ("amd-mi300-8x-iommu-translated", "amd.host.iommu_mode",
     {"amd.host.iommu_mode", "amd.host.iommu_cmdline"}, "iommu-not-passthrough"),
    ("amd-mi300-8x-container-no-kfd", "amd.host.kfd_present", {"amd.host.kfd_present"},
     "amd-device-files-missing"),
]


@pytest.mark.parametrize("story,first,allowed,cause", AMD_STORIES, ids=[s[0] for s in AMD_STORIES])
def test_an_amd_story_is_its_one_change_and_bears_on_its_cause(story, first, allowed, cause):
    diff = _diff(FIXTURE_HOSTS, AMD_BASE, story)
    assert diff.verdict == REGRESSION and diff.exit_code == 2, diff.line
    assert diff.changes[0].id == first and diff.line.startswith(first)
    assert moved(diff) <= allowed and first in moved(diff)
    assert cause in diff.changes[0].causes and diff.changes[0].direction == "worse"
    assert all(f.family == "gpu" for f in diff.changes)
    # AMD's versions are recorded now: the diff is silent about nothing it could compare
    assert diff.missing_facts == ()


def test_an_amd_gpu_reads_as_nvidias_facts_under_its_bus_id():
    diff = _diff(FIXTURE_HOSTS, AMD_BASE, "amd-mi300-8x-ras")
    facts = {f.id: f for f in diff.facts}
    gpu = "amd.gpu[0000:0c:00.0]"
    assert (facts[f"{gpu}.name"].before, facts[f"{gpu}.gfx_arch"].before) == ("MI308X", "gfx942")
    assert (facts[f"{gpu}.pcie.gen_max"].before, facts[f"{gpu}.pcie.width"].before) == (5, 16)
    assert facts[f"{gpu}.xgmi[0].bit_rate_gbit"].before == 32
    assert facts["amd.host.gfx_targets"].before == ",".join(["gfx942"] * 8)
    assert facts["amd.driver.version"].before == "6.18.3"  # one host-wide fact
    assert facts[f"{gpu}.vbios.version"].before == "00154951"
    assert facts["amd.host.rocm_version"].before == "7.14.0"
    assert not any(f.startswith("gpu[") or f.startswith("npu") for f in facts)


NPU_STORIES = [
    ("ascend-cann-newer-than-driver", "npu.cann[toolkit].fits_driver",
     {"npu.cann[toolkit].fits_driver", "npu.cann[toolkit].version", "npu.cann[toolkit].innerversion",
      "npu.driver.innerversion"}, "ascend-version-mismatch", "gpu"),
    (FIRMWARE, "npu.firmware.fits_driver", {"npu.firmware.fits_driver", "npu.firmware.version"},
     "ascend-version-mismatch", "gpu"),
    ("ascend-910b2c-port-down", "npu.port[1].link", {"npu.port[1].link", "npu.port[1].net_health"},
     "npu-network-port-down", "net"),
    ("ascend-910b2c-hbm-ecc", "npu[1-0].ecc_uncorrected_aggregate",
     {"npu[1-0].ecc_uncorrected_aggregate", "npu[1-0].isolated_pages_uncorrected"},
     "gpu-hardware-errors", "gpu"),
    ("ascend-910b2c-health-warning", "npu[1-0].health", {"npu[1-0].health"}, "npu-health-not-ok", "gpu"),
]


@pytest.mark.parametrize("story,first,allowed,cause,family", NPU_STORIES, ids=[s[0] for s in NPU_STORIES])
def test_an_ascend_story_is_its_one_change_and_bears_on_its_cause(npu_hosts, story, first, allowed,
                                                                  cause, family):
    diff = _diff(npu_hosts, NPU_BASE, story)
    assert diff.verdict == REGRESSION and diff.exit_code == 2, diff.line
    assert diff.changes[0].id == first
    assert moved(diff) == allowed
    assert cause in diff.changes[0].causes and diff.changes[0].family == family
    assert diff.missing_facts == ()
    jsonschema.validate(diff_dict(diff), SCHEMA)  # the net family included


def test_the_firmware_overlay_shows_both_versions_and_raises_its_finding(npu_hosts):
    diff = _diff(npu_hosts, NPU_BASE, FIRMWARE)
    facts = {f.id: f for f in diff.facts}
    assert (facts["npu.firmware.version"].before, facts["npu.firmware.version"].after) == \
        ("7.1.0.11.220", "7.3.0.1.231")
    assert facts["npu.driver.version"].before == facts["npu.driver.version"].after == "23.0.7"
    assert facts["npu.cann[toolkit].version"].after == "7.0.T10"
    assert [(d.rule, d.state) for d in diff.findings if d.state != "unchanged"] == \
        [("npu-firmware-outside-driver-range", "raised")]


def test_ascend_chips_ports_and_versions_are_facts(npu_hosts):
    facts = {f.id: f for f in _diff(npu_hosts, NPU_BASE, "ascend-910b2c-port-down").facts}
    assert (facts["npu[0-0].name"].before, facts["npu[0-0].memory_total_mib"].before) == ("910B2C", 65536)
    assert facts["npu[0-0].bus_id"].before == "0000:5A:00.0" and facts["npu[0-0].health"].before == "OK"
    assert facts["npu[0-0].memory.other_processes"].before == 1  # python3.8, no engine seen
    assert facts["npu.smi.version"].before == "23.0.2.1"
    assert facts["npu.port[0].address"].before == "10.10.0.10"
    assert facts["npu.device_file[/dev/davinci_manager].present"].before is True


@pytest.mark.slow  # two full NVIDIA replays: about half a second
def test_an_nvidia_diff_has_no_other_vendors_facts_or_notes():
    base, story = "l40s-8x-acs-off", "diff-l40s-8x-gpu0-x8"
    diff = compare(saved(FIXTURE_HOSTS / base), saved(FIXTURE_HOSTS / story), (base, story))
    assert not any(f.id.startswith(("amd.", "npu")) for f in diff.facts)
    assert diff.missing_facts == ()
    assert diff.changes[0].id.startswith("gpu[GPU-") and diff.changes[0].id.endswith(".pcie.width")


def test_a_hostile_bus_id_cannot_forge_another_facts_id():
    before = saved(FIXTURE_HOSTS / AMD_BASE)
    after = copy.deepcopy(before)
    gpus = next(p for p in after["probes"] if p["name"] == "amd.gpu")["data"]["gpus"]
    gpus[0]["bus_id"] = "x].power_limit_w[" + "y" * 200
    diff = compare(before, after, ("before", "after"))
    forged = [f.id for f in diff.facts if f.id.startswith("amd.gpu[x")]
    assert forged and all(f.count("[") == f.count("]") for f in forged)
    assert all(len(f) < 120 for f in forged)


def test_every_amd_and_ascend_fact_and_note_speaks_chinese(npu_hosts):
    from doctor.i18n import Speaking
    from tests.test_diff_zh import english_runs

    with Speaking("zh_CN"):
        diffs = [_diff(FIXTURE_HOSTS, AMD_BASE, "amd-mi300-8x-xgmi-down"),
                 _diff(npu_hosts, NPU_BASE, "ascend-910b2c-port-down")]
    labels = {f.label for d in diffs for f in d.facts if f.id.startswith(("amd.", "npu"))}
    labels |= set(diffs[0].missing_facts)
    assert labels and [text for text in labels if english_runs(text)] == []
    assert any("昇腾" in text for text in labels) and any("xGMI 链路" in text for text in labels)


# npu.hccl_env on a real captured vLLM (PID 30412), its variables planted as tests/test_npu_probes.py does
HCCL_BASE, HCCL_PID = FIXTURE_HOSTS / "l40s-8x-nccl-p2p-disabled", 30412


def _with_hccl(root: Path, env: dict[str, str]) -> dict:
    shutil.copytree(HCCL_BASE, root, symlinks=True)
    (root / f"fs/proc/{HCCL_PID}/environ").write_bytes(
        b"\0".join(f"{k}={v}".encode() for k, v in {"PATH": "/usr/bin", **env}.items()) + b"\0")
    return to_dict(replay(root))


@pytest.mark.slow  # two full replays of an 8-GPU host
def test_an_engines_hccl_timeout_lowered_and_interface_set_are_its_changes(tmp_path):
    before = _with_hccl(tmp_path / "before", {"HCCL_CONNECT_TIMEOUT": "600", "HCCL_EXEC_TIMEOUT": "1800"})
    after = _with_hccl(tmp_path / "after", {"HCCL_CONNECT_TIMEOUT": "60", "HCCL_EXEC_TIMEOUT": "1800",
                                            "HCCL_SOCKET_IFNAME": "eth9"})
    diff = compare(before, after, ("before", "after"))
    at = "engine[vllm@127.0.0.1:8000].hccl."
    assert diff.verdict == REGRESSION and diff.line.startswith(f"{at}HCCL_CONNECT_TIMEOUT: 600 -> 60")
    first = diff.changes[0]
    assert (first.causes, first.direction, first.family) == (("hccl-timeout-low",), "worse", "net")
    assert first.note == "- HCCL_CONNECT_TIMEOUT=600; + HCCL_CONNECT_TIMEOUT=60"
    assert moved(diff) == {f"{at}HCCL_CONNECT_TIMEOUT", f"{at}HCCL_SOCKET_IFNAME"}
    added = next(f for f in diff.changes if f.id == f"{at}HCCL_SOCKET_IFNAME")
    assert (added.status, added.note, added.causes) == (ADDED, "+ HCCL_SOCKET_IFNAME=eth9",
                                                         ("hccl-interface-wrong",))
    assert ("hccl-connect-timeout-low", "raised") in [(d.rule, d.state) for d in diff.findings]
    jsonschema.validate(diff_dict(diff), SCHEMA)


def _overlay(root: Path, driver: str | None = None, rocm: str | None = None) -> dict:
    """The healthy MI300 host with every GPU's amdgpu driver version, or its ROCm release
    file, replaced."""
    shutil.copytree(FIXTURE_HOSTS / AMD_BASE, root, symlinks=True)
    if driver is not None:
        calls = json.loads((root / "amdsmi.json").read_text())
        for call in calls:
            if call["call"] == "amdsmi_get_gpu_driver_info":
                call["value"]["driver_version"] = driver
        (root / "amdsmi.json").write_text(json.dumps(calls))
    if rocm is not None:
        (root / "fs/opt/rocm/core/.info/version").write_text(rocm + "\n")
    data = to_dict(replay(root))
    data["host"]["hostname"] = AMD_BASE
    return data


@pytest.fixture(scope="module")
def amd_versions(tmp_path_factory) -> dict[str, dict]:
    from tests.fixtures.build_amd_hosts import MI300A, driver_info

    root = tmp_path_factory.mktemp("amd-versions")
    # amdgpu 6.9.0-rc5+: the DRIVER section of the MI300A in amdsmi's README (a real output);
    # ROCm 6.2.2: the release amd-smi prints in that README's banner
    return {"base": saved(FIXTURE_HOSTS / AMD_BASE),
            "driver": _overlay(root / "driver", driver=driver_info(MI300A)["driver_version"]),
            "rocm": _overlay(root / "rocm", rocm="6.2.2")}


def test_an_amd_driver_change_is_one_host_wide_change_and_bears_on_no_cause(amd_versions):
    diff = compare(amd_versions["base"], amd_versions["driver"], (AMD_BASE, "driver"))
    assert moved(diff) == {"amd.driver.version"}
    change = diff.changes[0]
    assert (change.before, change.after) == ("6.18.3", "6.9.0-rc5+")
    assert (change.causes, change.direction) == ((), "")
    assert diff.verdict == NO_CHANGE and diff.exit_code == 0 and "amd.driver.version" in diff.line
    jsonschema.validate(diff_dict(diff), SCHEMA)


def test_a_rocm_release_change_bears_on_the_gfx_support_cause(amd_versions):
    diff = compare(amd_versions["base"], amd_versions["rocm"], (AMD_BASE, "rocm"))
    assert moved(diff) == {"amd.host.rocm_version"}
    change = diff.changes[0]
    assert (change.before, change.after, change.causes) == ("7.14.0", "6.2.2", ("amd-gfx-unsupported",))
    assert diff.verdict == NO_CHANGE and diff.exit_code == 1  # bears on a cause, no good way known
