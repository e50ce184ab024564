"""gpu.peer_to_peer: the ACS parser on config spaces laid out as the PCIe specification has
them, the recorded P2P hosts' records, the engine's environment read one variable at a time, vLLM's
cache read as hostile input, and the functional check's copy on the CPU path."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from doctor.model import Level, ScanOptions
from doctor.redact import redact_environ
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost, RecordingHost, RecordWriter
from probes.gpu import p2p
from probes.helpers import engine_p2p, pcie_acs, process_env
from probes.helpers.engine_p2p import CacheVerdict
from probes.helpers.p2p_blockers import PairFacts, blockers_of
from probes.kernels import p2p_check
from tests.conftest import FIXTURE_HOSTS, REPO
from tests.fixtures.build_gpu_p2p_hosts import ACS_REDIRECT, PLX_8747, bridge_config

QUICK = ScanOptions(level=Level.QUICK)


def _record(name: str, options: ScanOptions = QUICK) -> p2p.P2pRecord:
    return p2p.probe(RecordedHost(FIXTURE_HOSTS / name), options)


# --- ACS in config space ---------------------------------------------------------------

def test_acs_control_is_found_through_the_extended_capability_list():
    control, reason = pcie_acs.acs_control(bridge_config(PLX_8747, ACS_REDIRECT))
    assert (control, reason) == (0x001D, None)
    assert pcie_acs.enabled_bits(control) == ("SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd")


def test_a_bridge_without_acs_and_a_user_without_root_are_said_so_never_guessed():
    assert pcie_acs.acs_control(bridge_config(PLX_8747, None)) == (None, "no ACS capability")
    control, reason = pcie_acs.acs_control(bridge_config(PLX_8747, ACS_REDIRECT, readable=64))
    assert control is None and reason.startswith("ACS not readable without root")


@pytest.mark.parametrize("header", [0xFFFFFFFF, 0x1000_0001, 0x1001_0001])
def test_a_hostile_capability_list_ends(header):
    """All ones (device gone), a next pointer back to itself, a pointer into the header."""
    space = bytearray(4096)
    space[0x100:0x104] = header.to_bytes(4, "little")
    assert pcie_acs.acs_control(bytes(space)) == (None, "no ACS capability")


def test_bridges_between_two_gpus_are_those_below_their_common_ancestor():
    a = ("0000:80:01.0", "0000:81:00.0", "0000:82:08.0", "0000:83:00.0", "0000:84:08.0")
    b = ("0000:80:01.0", "0000:81:00.0", "0000:82:08.0", "0000:83:00.0", "0000:84:10.0")
    assert pcie_acs.between(a, b) == ("0000:84:08.0", "0000:84:10.0")
    device = "/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:00.0"
    assert [bdf for bdf, _ in pcie_acs.bridges_above(device)] == ["0000:00:01.0", "0000:01:00.0"]


# --- the recorded hosts ----------------------------------------------------------------

def test_acs_redirect_host_names_the_switch_ports_and_the_translating_iommu():
    record = _record("l40s-8x-acs-redirect")
    (group,) = record.groups
    assert group.group == "0,1,2,3" and group.engine == "vllm pid 30412"
    pair = next(p for p in group.pairs if (p.a, p.b) == (0, 1))
    assert pair.path == "PIX" and pair.p2p_read == pair.p2p_write == "chipset-not-supported"
    assert pair.acs_redirect == ("0000:04:08.0 SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+; "
                                 "0000:04:10.0 SrcValid+ ReqRedir+ CmpltRedir+ UpstreamFwd+")
    assert pair.iommu_types == "DMA-FQ"
    assert any(b.startswith("ACS ReqRedir+ CmpltRedir+ on the bridges between them with the "
                            "IOMMU translating DMA (DMA-FQ)") for b in pair.blockers)
    assert record.iommu_mode == "translated"
    upstream = next(b for b in record.bridges if b.bdf == "0000:01:00.0")
    assert upstream.acs_control is None and upstream.reason == "no ACS capability"


def test_the_healthy_partner_has_acs_off_passthrough_and_no_blocker():
    record = _record("l40s-8x-acs-off")
    assert record.iommu_mode == "passthrough" and record.iommu_cmdline == "intel_iommu=on iommu=pt"
    assert all(b.acs_control == 0 for b in record.bridges if b.reason is None)
    assert [p.blockers for p in record.groups[0].pairs] == [()] * 6


def test_the_phb_geforce_pair_is_blocked_by_nvml_and_acs_is_unreadable_without_root():
    (group,) = _record("rtx5090-2x-phb-tp2").groups
    (pair,) = group.pairs
    assert pair.path == "PHB" and pair.blockers == (
        "NVML P2P read gpu-not-supported, write gpu-not-supported",)
    assert pair.acs_unread.startswith("ACS not readable without root")


def test_the_engine_told_to_disable_p2p_and_the_stale_cache_are_named():
    (group,) = _record("l40s-8x-nccl-p2p-disabled").groups
    assert group.nccl_p2p_disable == "1"
    assert group.blockers == ("NCCL_P2P_DISABLE=1 in the engine's environment",)
    (group,) = _record("l40s-8x-vllm-p2p-cache-stale").groups
    assert group.cache_file == "/home/vllm/.cache/vllm/gpu_p2p_access_cache_for_0,1,2,3.json"
    assert group.blockers == ("vLLM's cached verdict says no P2P where NVML says ok (vLLM turns "
                              "its custom all-reduce off)",)


def test_nvlink_hosts_and_pairs_across_sockets_raise_no_blocker():
    record = _record("h100-sxm-8x-nvswitch")
    assert all(not p.blockers and p.path == "NV18" for g in record.groups for p in g.pairs)
    across = PairFacts(0, 4, "SYS", False, "chipset-not-supported", "chipset-not-supported", (),
                       None, None, (), "1", None)
    assert blockers_of(across) == ()  # pcie-topology-shared-path's, and P2P is off there anyway


def test_nccl_p2p_level_under_the_path_and_a_cache_saying_yes_where_nvml_says_no():
    facts = PairFacts(0, 2, "PXB", False, "ok", "ok", (), None, None, (), None, "PIX")
    assert blockers_of(facts) == ("NCCL_P2P_LEVEL=PIX in the engine's environment: NCCL uses P2P "
                                  "only up to PIX, this path is PXB",)
    hang = PairFacts(0, 1, "PHB", False, "chipset-not-supported", None, (), None, None,
                     (CacheVerdict(0, 1, True),), None, None)
    assert blockers_of(hang)[-1] == ("vLLM's cached verdict says P2P works where NVML says "
                                     "chipset-not-supported (its custom all-reduce can hang)")


def test_a_functional_check_that_reads_back_wrong_is_a_blocker(tmp_path):
    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "l40s-8x-acs-off", root, symlinks=True)
    measured = {"pairs": [{"a": a, "b": b, "peer_access_ab": True, "peer_access_ba": True,
                           "copy_ok": (a, b) != (0, 1),
                           "error": "byte 0 of 16,777,216 reads 0, wrote 0" if (a, b) == (0, 1) else None}
                          for a in range(4) for b in range(a + 1, 4)]}
    (root / "measurements.json").write_text(json.dumps({"gpu.peer_to_peer.functional": measured}))
    record = p2p.probe(RecordedHost(root), ScanOptions(level=Level.STANDARD))
    pair = next(p for p in record.groups[0].pairs if (p.a, p.b) == (0, 1))
    assert pair.functional.startswith("copy 0->1 differs") and pair.blockers == ("torch: a copy read back differs",)
    assert record.groups[0].blocked_pairs == "0-1 PIX"
    skipped = {"gpu.peer_to_peer.functional": {"skipped": "no CUDA device"}}
    (root / "measurements.json").write_text(json.dumps(skipped))
    record = p2p.probe(RecordedHost(root), ScanOptions(level=Level.STANDARD))
    assert record.functional_source == "skipped: no CUDA device"
    assert record.groups[0].blockers == ()


# --- the engine's environment and vLLM's cache -----------------------------------------

def test_env_value_keeps_the_one_variable_asked_for():
    host = LiveHost()
    got = process_env.env_value(host, os.getpid(), "PATH")
    assert got == process_env.EnvValue(os.environ["PATH"][:256], None)
    assert process_env.env_value(host, os.getpid(), "NO_SUCH_VARIABLE_P2P") == process_env.EnvValue(None, None)
    assert process_env.env_value(host, 2**22 + 12345, "PATH").reason == "not-found"


def test_a_recording_keeps_the_judged_variables_and_masks_the_rest():
    text = "HF_TOKEN=hf_secret\0NCCL_P2P_DISABLE=1\0CUDA_VISIBLE_DEVICES=0,1\0PATH=/usr/bin\0"
    assert redact_environ(text) == "HF_TOKEN=***\0NCCL_P2P_DISABLE=1\0CUDA_VISIBLE_DEVICES=0,1\0PATH=***\0"


def test_an_unreadable_environ_is_a_reason(tmp_path):
    w = RecordWriter(tmp_path)
    w.error("/proc/77/environ", "no-permission")
    w.save({"level": "quick"}, hostname="t", captured_at="2026-12-01T00:00:00Z")
    assert process_env.env_value(RecordedHost(tmp_path), 77, "NCCL_P2P_DISABLE") == \
        process_env.EnvValue(None, "no-permission")


@pytest.mark.parametrize("text, why", [
    ("{", "not JSON"), ("[1, 2]", "a JSON list"), ('{"0->1": "yes"}', "is not"),
    ('{"0->9": true}', "past the 2 visible"), ('{"a": true}', "is not"),
    ("[" * 100_000 + "]" * 100_000, "not JSON")])
def test_vllm_cache_is_read_as_hostile_input(text, why):
    verdicts, reason = engine_p2p.parse_cache(text, (0, 1))
    assert verdicts == () and why in reason


def test_vllm_cache_maps_visible_devices_back_to_nvml_indexes():
    verdicts, reason = engine_p2p.parse_cache('{"0->1": false, "1->0": true}', (4, 6))
    assert reason is None and verdicts == (CacheVerdict(4, 6, False), CacheVerdict(6, 4, True))


# --- the functional check's CPU path ---------------------------------------------------

def test_the_copy_check_compares_what_it_read_back():
    assert p2p_check.check_copy("cpu", "cpu", 1 << 16) == (True, None)
    with pytest.raises(ValueError, match="not two GPU indexes"):
        p2p_check.parse_pairs("0-0")


@pytest.mark.slow
def test_the_kernel_runs_as_a_child_and_says_no_cuda_device_without_one():
    cpu = subprocess.run([sys.executable, "-m", "probes.kernels.p2p_check", "--pairs", "0-1", "--cpu"],
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert cpu.returncode == 0 and json.loads(cpu.stdout)["pairs"][0]["copy_ok"] is True
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: the GPU path runs instead (benchmarks/gpu_probes.py)")
    assert p2p_check.check_pairs([(0, 1)]) == {"skipped": "no CUDA device"}


# --- capture and replay ----------------------------------------------------------------

class _Recapture(RecordingHost):
    """A capture of a recorded host, as `llm-doctor capture` takes one of a live host."""

    def measure(self, name, fn):
        return super().measure(name, lambda: self.live.measure(name, fn))


def test_a_capture_keeps_the_config_bytes_and_only_the_judged_variables(tmp_path):
    source = FIXTURE_HOSTS / "l40s-8x-nccl-p2p-disabled"
    original = p2p.probe(RecordedHost(source), QUICK)
    capture = _Recapture(RecordedHost(source), tmp_path / "cap")
    assert p2p.probe(capture, QUICK) == original
    capture.save({"level": "quick"})
    assert p2p.probe(RecordedHost(tmp_path / "cap"), QUICK) == original
    config = "fs/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0/0000:02:08.0/config"
    assert (tmp_path / "cap" / config).read_bytes() == (source / config).read_bytes()
    environ = (tmp_path / "cap" / "fs/proc/30412/environ").read_text()
    assert "NCCL_P2P_DISABLE=1\0" in environ and "HF_TOKEN=***\0" in environ
