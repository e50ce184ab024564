"""The fleet families of every vendor (issue 33): an AMD or Ascend fault sets the condition, and
is judged in the family, that the same fault on an NVIDIA host does.

A rule's family is that of the first probe it reads (doctor/daemon/state.py ``family_of``);
the other vendors' probes (amd.*, npu.*) have theirs in doctor/families.py. The guards:
every registered probe has a family, and every cause an AMD or Ascend rule raises is in
``VENDOR_CAUSES`` with the family it must land in and the NVIDIA cause it stands beside, whose
family must be the same. A new backend's probe, or a new AMD/Ascend cause, fails here until
it is given its family.

Then through the real adapter: a daemon beats on the recorded AMD and Ascend hosts
(tests/fixtures/build_amd_hosts.py, build_ascend_hosts.py), and node-problem-detector's plugin
protocol (tests/test_npd.py ``npd_run``) runs ``llm-doctor npd`` on each state, per family.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from doctor.daemon.state import FAMILIES, family_of
from doctor.families import BACKENDS, probe_family
from doctor.fleet import npd
from doctor.saved_scan import typed
from probes.registry import by_name
from tests.builtin_rules import builtin_rules
from tests.conftest import FIXTURE_HOSTS
from tests.fixtures import build_ascend_hosts as ascend
from tests.test_npd import launcher, npd_run

# cause an AMD or Ascend rule raises → (its family, the NVIDIA cause of the same kind of fault)
VENDOR_CAUSES: dict[str, tuple[str, str | None]] = {
    "amd-gpu-ras-errors": ("gpu", "gpu-hardware-errors"),  # ECC, retired pages, amdgpu RAS lines
    "amd-xgmi-link-degraded": ("gpu", "nvlink-domain-unhealthy"),
    "numa-balancing-on": ("gpu", "numa-misplaced"),
    "iommu-not-passthrough": ("gpu", "gpu-p2p-blocked"),
    "amd-gfx-unsupported": ("gpu", "driver-runtime-mismatch"),  # the build has no kernels for it
    "amd-device-files-missing": ("gpu", "gpu-lost-in-container"),
    "amd-partition-layout-mismatch": ("gpu", "mig-mps-misconfigured"),  # CPX/NPS against -tp
    "amd-p2p-fine-grain-off": ("gpu", "gpu-p2p-blocked"),  # HSA_FORCE_FINE_GRAIN_PCIE unset
    "npu-health-not-ok": ("gpu", "gpu-hardware-errors"),
    "gpu-hardware-errors": ("gpu", "gpu-hardware-errors"),  # npu-hbm-ecc-uncorrected
    "gpu-memory-held-by-other-process": ("gpu", "gpu-memory-held-by-other-process"),
    "npu-device-files-missing": ("gpu", "gpu-lost-in-container"),
    "ascend-version-mismatch": ("gpu", "driver-runtime-mismatch"),
    "npu-network-port-down": ("net", "rdma-port-down"),
    "hccl-timeout-low": ("net", None),  # NCCL's timeouts are no rule of ours
    "hccl-interface-wrong": ("net", "nccl-interface-wrong"),
    # checks/gpu.toml's thermal, power and memory rules read amd.gpu too (each_also): gpu
}
RULES = builtin_rules()
VENDOR_RULES = [r for r in RULES if any(p.startswith(("amd.", "npu.")) for p in r.probes)]


def _cause_families(rules) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for rule in rules:
        found.setdefault(rule.cause, set()).add(family_of(rule))
    return found


def test_every_registered_probe_has_a_family():
    assert {name: probe_family(name) for name in by_name() if probe_family(name) is None} == {}
    assert set(BACKENDS.values()) <= set(FAMILIES)
    assert probe_family("tpu.chips") is None  # a new backend is not given "host" silently


def test_every_amd_and_ascend_cause_has_its_family_and_its_nvidia_twins():
    assert VENDOR_RULES, "no AMD or Ascend rule loaded"
    raised = _cause_families(VENDOR_RULES)
    assert set(raised) - set(VENDOR_CAUSES) == set(), "give each new AMD/Ascend cause its family here"
    nvidia = _cause_families([r for r in RULES if r not in VENDOR_RULES])
    for cause, families in raised.items():
        family, twin = VENDOR_CAUSES[cause]
        assert families == {family}, (cause, families)
        if twin is not None:
            assert nvidia[twin] == {family}, (cause, twin, nvidia[twin])


def test_a_probe_of_a_backend_is_judged_in_its_family():
    assert [probe_family(p) for p in ("amd.gpu", "amd.host", "npu.devices", "npu.errors",
                                      "npu.network", "npu.hccl_env", "npu.hccl_log", "gpu.errors",
                                      "net.rdma", "net.nccl_log")] == \
        ["gpu", "gpu", "gpu", "gpu", "net", "net", "net", "gpu", "net", "net"]


# --------------------------------------------------------------------------- through NPD

def _state(tmp: Path, root: Path) -> Path:
    """The state a real daemon writes after beating on the recorded host ``root`` until its
    critical finding shows (a rule's for-window may want a few beats), or three beats."""
    from doctor.commands.setup import load_daemon
    from doctor.daemon.service import Daemon
    from doctor.seam.recorded import RecordedHost

    path = tmp / f"{root.name}.state.json"
    config = tmp / f"{root.name}.toml"
    config.write_text(f'[daemon]\nlevel = "quick"\ninterval = "15s"\nstate_file = "{path}"\n')
    daemon = Daemon(load_daemon(str(config), (), {}), lambda: load_daemon(str(config), (), {}),
                    host=RecordedHost(str(root)))
    try:
        for beat in range(20):  # bounded
            daemon.beat()
            findings = json.loads(path.read_text())["report"]["findings"]
            if any(f.get("severity") == "critical" for f in findings) or beat >= 2:
                break
    finally:
        daemon.dispatcher.close()
    return path


@pytest.fixture(scope="module")
def states(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("families")
    built = tmp / "hosts"
    roots = [FIXTURE_HOSTS / "amd-mi300-8x-ras", FIXTURE_HOSTS / "amd-mi300-8x"]
    roots += [ascend.build(name, built) for name in ("ascend-910b2c-port-down", "ascend-910b2c-healthy")]
    return {root.name: _state(tmp, root) for root in roots}


@pytest.fixture(scope="module")
def binary(tmp_path_factory) -> Path:
    return launcher(tmp_path_factory.mktemp("bin"))


def _config(binary: Path, state_file: Path) -> dict:
    """The config ``llm-doctor npd --config`` writes for NPD."""
    import subprocess

    out = subprocess.run([str(binary), "npd", "--config", "--binary", str(binary),
                          "--state-file", str(state_file)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _answers(binary: Path, state_file: Path) -> dict[str, tuple[str, str]]:
    """family → (NPD's status, the condition's message), each from ``llm-doctor npd --config``'s rule."""
    config = _config(binary, state_file)
    answers = {}
    for rule in config["rules"]:
        status, message, _ = npd_run(rule, config)
        answers[rule["args"][rule["args"].index("--family") + 1]] = (status, message)
    return answers


@pytest.mark.slow
def test_amd_ras_errors_set_the_gpu_condition_as_an_nvidia_xid_does(states, binary):
    answers = _answers(binary, states["amd-mi300-8x-ras"])
    status, message = answers["gpu"]
    assert status == "NonOK" and message.startswith(("amd-gpu-ras-errors critical: ",
                                                     "amd-kernel-ras-lines critical: ")), message
    assert {f: a[0] for f, a in answers.items() if f != "gpu"} == dict.fromkeys(("engine", "host", "net"), "OK")
    healthy = _answers(binary, states["amd-mi300-8x"])
    assert {f: a[0] for f, a in healthy.items()} == dict.fromkeys(npd.BY_NAME, "OK")
    # the AMD probes ran: the GPU family is judged on them, not "no probe ran"
    assert healthy["gpu"][1].startswith("ok gpu: ") and "no probe ran" not in healthy["gpu"][1]


@pytest.mark.slow
def test_an_npu_port_down_sets_the_network_condition_as_an_rdma_port_down_does(states, binary):
    answers = _answers(binary, states["ascend-910b2c-port-down"])
    status, message = answers["net"]
    assert status == "NonOK" and message.startswith("npu-port-down critical: "), message
    assert answers["gpu"][0] == "OK", answers
    # the Ascend hosts are built from npu-smi's and hccn_tool's answers alone: the probes that
    # read /proc have nothing recorded, and their families are unknown, never OK
    assert {answers[f][0] for f in ("engine", "host")} <= {"OK", "Unknown"}, answers
    healthy = _answers(binary, states["ascend-910b2c-healthy"])
    assert healthy["gpu"][0] == "OK" and "no probe ran" not in healthy["gpu"][1], healthy
    # while the plugin answers OK, NPD shows the condition's default message: on an Ascend
    # node it must not speak of GPUs alone
    shown = {c["type"]: c["message"] for c in _config(binary, states["ascend-910b2c-healthy"])["conditions"]}
    assert shown["LlmDoctorGPUProblem"] == "llm-doctor finds no accelerator (GPU, NPU) problem on this node"
    assert healthy["net"][0] == "Unknown" and "npu." not in healthy["net"][1], healthy


@pytest.mark.slow
def test_the_states_families_name_the_vendor_rules_by_their_probes(states):
    data = json.loads(states["ascend-910b2c-port-down"].read_text())
    assert data["families"]["npu-port-down"] == "net" and data["families"]["amd-gpu-ras-errors"] == "gpu"
    assert data["families"]["npu-hbm-ecc-uncorrected"] == "gpu"
    probes = {p.name: p.family for p in typed(data["report"]).probes}
    assert (probes["npu.network"], probes["npu.devices"], probes["amd.gpu"]) == ("net", "gpu", "gpu")
