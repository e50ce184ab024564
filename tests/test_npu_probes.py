"""The Huawei Ascend probes (issue 33) on recorded hosts built from real outputs.

tests/fixtures/build_ascend_hosts.py builds each story once per module from the verbatim
npu-smi tables, hccn_tool answers and version files of tests/fixtures/ascend/sources
(SOURCES.md names each one's origin); a scan of the npu.* probes with the built-in rules must
raise the story's finding and nothing else, and stay silent on the healthy one. The HCCL
variables are planted in the environment of a real captured vLLM (l40s-8x-nccl-p2p-disabled),
as tests/test_net_nccl_env.py plants NCCL's.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from doctor.inputs import Inputs
from doctor.model import Level, ScanOptions, Severity
from doctor.scan import scan
from doctor.seam.recorded import RecordedHost
from probes.helpers.net_interfaces import Address, Interface, InterfacesRecord
from probes.helpers.npu_smi import TableError, parse_info, parse_kv
from probes.npu import hccl_env
from probes.registry import by_name
from tests.builtin_rules import builtin_rules
from tests.fixtures import build_ascend_hosts as ascend

SOURCES = ascend.SOURCES
NPU_PROBES = ["npu.devices", "npu.network", "npu.device_files", "npu.versions", "npu.errors"]
# the Ascend rules, and the vendor-neutral ones that read npu records too (each_also)
RULES = [r for r in builtin_rules() if any(p.startswith("npu.") for p in r.probes + r.also_probes)]


@pytest.fixture(scope="module")
def hosts(tmp_path_factory) -> Path:
    dest = tmp_path_factory.mktemp("ascend")
    for name in ascend.STORIES:
        ascend.build(name, dest)
    return dest


def _scan(root: Path):
    specs = [by_name()[n] for n in NPU_PROBES]
    report = scan(RecordedHost(root), ScanOptions(level=Level.QUICK), specs, RULES)
    assert report.rule_errors == []
    found = sorted((f.rule, f.key, f.severity.label) for f in report.findings
                   if f.severity >= Severity.WARNING)
    return {p.name: p for p in report.probes}, found


# each real table: chips (npu, chip, phy, name, health, bus, temp, power, aicore, HBM or DDR
# used/total), processes (npu, chip, pid, name, MB)
def test_the_910b2c_table_of_npu_smi_23():
    table = parse_info((SOURCES / "npu-smi-info-910b2c-23.0.2.1.txt").read_text())
    assert table.smi_version == "23.0.2.1" and table.problems == ()
    first = table.chips[0]
    assert (first.npu_id, first.chip_id, first.phy_id, first.name, first.health, first.bus_id) == \
        (0, 0, None, "910B2C", "OK", "0000:5A:00.0")
    assert first.values["Temp(C)"] == 51.0 and first.values["Power(W)"] == 88.6
    assert first.values["HBM-Usage(MB)"] == (20701.0, 65536.0)
    assert [(p.npu_id, p.chip_id, p.pid, p.name, p.memory_mib) for p in table.processes] == \
        [(0, 0, 124528, "python3.8", 17400)]


def test_eight_910b3_of_one_real_host():
    table = parse_info((SOURCES / "ms-swift-valle-npu-smi-info-910b3-8x-24.1.rc1.txt").read_text())
    assert table.smi_version == "24.1.rc1.b030" and table.problems == () and table.processes == ()
    assert [c.bus_id for c in table.chips][::3] == ["0000:C1:00.0", "0000:82:00.0", "0000:41:00.0"]
    assert {c.values["HBM-Usage(MB)"][1] for c in table.chips} == {65536.0}  # type: ignore[index]


def test_a_table_cut_after_a_chips_first_row_says_so():
    text = (SOURCES / "ms-swift-valle-npu-smi-info-910b3-8x-24.1.rc1.txt").read_text()
    table = parse_info("\n".join(text.splitlines()[:-2]))  # NPU 7's second row gone
    assert len(table.chips) == 7 and table.problems[0].startswith("7     910B3 | OK | 98.2")


def test_the_a3_table_with_phy_ids_and_a_dash_for_power():
    table = parse_info((SOURCES / "npu-smi-info-ascend910-phyid-25.2.0.txt").read_text())
    assert [(c.npu_id, c.chip_id, c.phy_id) for c in table.chips] == [(0, 0, 0), (0, 1, 1), (1, 0, 2), (1, 1, 3)]
    assert [c.values["Power(W)"] for c in table.chips] == [162.8, None, 167.1, None]
    assert table.chips[3].values["HBM-Usage(MB)"] == (10568.0, 65536.0)  # "10568/ 65536"
    assert [(p.npu_id, p.chip_id, p.pid) for p in table.processes] == [(1, 1, 990711)]


def test_the_310b4_soc_in_alarm_without_bus_or_hbm():
    table = parse_info((SOURCES / "npu-smi-info-310b4-alarm-23.0.0.txt").read_text())
    chip = table.chips[0]
    assert (chip.health, chip.bus_id, chip.phy_id, chip.name) == ("Alarm", None, 0, "310B4")
    assert "HBM-Usage(MB)" not in chip.values and chip.values["Memory-Usage(MB)"] == (3628.0, 15609.0)


def test_huaweis_warning_table_with_its_elisions_and_misaligned_cell():
    table = parse_info((SOURCES / "mindcluster-doc-npu-smi-info-warning-23.0.5.txt").read_text())
    assert [(c.npu_id, c.health) for c in table.chips] == [(0, "Warning"), (7, "OK")]
    assert table.problems == ()  # the "..." rows are outside the table


def test_an_empty_answer_or_another_tool_is_one_error_line_not_a_traceback():
    for text in ("", "Error: no such device\n", "+---+\n| a | b |\n+---+\n"):
        with pytest.raises(TableError, match="no chip table"):
            parse_info(text)


def test_the_health_view_is_key_value():
    text = (SOURCES / "mindcluster-doc-collecting-logs-1085-1200.txt").read_text()
    assert parse_kv(text)["Health Status"] == "OK"


@pytest.mark.parametrize("story, expected", [
    ("ascend-910b2c-healthy", []),
    ("ascend-a3-phyid", []),
    ("ascend-910b2c-hbm-ecc", [("npu-hbm-ecc-uncorrected", "NPU1 chip 0", "critical")]),
    ("ascend-910b3-8x-valle", []),
    ("ascend-910b2c-health-warning", [("npu-health-not-ok", "NPU1 chip 0", "warning")]),
    ("ascend-910b4-warning-doc", [("npu-health-not-ok", "NPU0 chip 0", "warning")]),
    ("ascend-310b4-alarm", [("npu-health-not-ok", "NPU0 chip 0", "critical")]),
    ("ascend-910b2c-port-down", [("npu-port-down", "NPU port 1", "critical")]),
    ("ascend-910b2c-notebook-holds-hbm",
     [("gpu-memory-held-by-other-process", "GPU0 python3.8", "warning")]),
    ("ascend-910b2c-vllm-holds-hbm", []),
    ("ascend-910b2c-net-socket-failed", [("npu-port-down", "NPU port 0", "warning")]),
    ("ascend-910b2c-devmm-missing", [("npu-device-node-missing", "/dev/devmm_svm", "critical"),
                                     ("npu-device-node-missing", "/dev/hisi_hdc", "critical")]),
    ("ascend-cann-newer-than-driver", [
        ("cann-driver-incompatible",
         "/usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info", "warning")]),
])
def test_each_story_raises_its_finding_and_nothing_else(hosts, story, expected):
    probes, found = _scan(hosts / story)
    assert found == expected
    assert probes["npu.versions"].status == "ok"


def test_the_records_carry_the_nvidia_names_and_the_vendor(hosts):
    probes, _ = _scan(hosts / "ascend-910b2c-healthy")
    chip = probes["npu.devices"].record.chips[0]
    assert (chip.vendor, chip.index, chip.temp_c, chip.power_w, chip.memory_used_mib,
            chip.memory_total_mib, chip.memory_kind) == ("huawei", 0, 51, 88.6, 20701, 65536, "HBM")
    errors = probes["npu.errors"].record.chips
    assert [(e.npu_id, e.ecc_uncorrected_volatile, e.isolated_pages_uncorrected) for e in errors] == [
        (0, 0, 0), (1, 0, 0)]
    process = probes["npu.devices"].record.processes[0]
    assert (process.index, process.pid, process.used_mib) == (0, 124528, 17400)
    ports = probes["npu.network"].record.ports
    assert [(p.device, p.link, p.net_health, p.address) for p in ports] == [
        (0, "UP", "Success", "10.10.0.10"), (1, "UP", "Success", "10.10.0.11")]


def test_the_topology_of_the_8_x_910b3_host(hosts):
    specs = [by_name()["npu.topology"]]
    report = scan(RecordedHost(hosts / "ascend-910b3-8x-valle"), ScanOptions(level=Level.QUICK), specs, [])
    record = report.probes[0].record
    assert len(record.pairs) == 28 and {p.link for p in record.pairs} == {"HCCS"}
    assert [(a.npu, a.cpus) for a in record.affinity][::2] == [
        (0, "144-167"), (2, "96-119"), (4, "0-23"), (6, "48-71")]
    assert record.problems == ()


def test_a_host_without_npu_smi_skips_with_the_reason(hosts):
    probes, _ = _scan(hosts / "ascend-910b2c-devmm-missing")
    assert probes["npu.devices"].status == "skipped"
    assert probes["npu.devices"].reason == "no Ascend driver: npu-smi not found"
    assert probes["npu.network"].reason == "no Ascend driver: npu-smi not found"


def test_a_host_without_anything_of_ascend_shows_one_reason_for_every_npu_probe():
    # an NVIDIA host: before, device_files and versions each said what they had looked for,
    # and a newcomer's scan showed three rows of Ascend for a machine that has none
    from tests.conftest import FIXTURE_HOSTS
    probes, found = _scan(FIXTURE_HOSTS / "healthy-epyc-9654-vllm")
    reasons = {name: probes[name].reason for name in probes if name != "npu.hccl_env"}
    assert set(reasons.values()) == {"no Ascend driver: npu-smi not found"}, reasons
    assert found == []


def test_an_soc_without_hccn_tool_skips_the_ports(hosts):
    probes, _ = _scan(hosts / "ascend-310b4-alarm")
    assert probes["npu.network"].status == "skipped"
    assert probes["npu.network"].reason.startswith("hccn_tool not found")


@pytest.mark.parametrize("stdout, rc, said", [
    ("Error: no such device\n", 0, "no chip table"),
    ("", 0, "no chip table"),  # mind-cluster's kg_parse capture: `npu-smi info` answered nothing
    ("", 255, "npu-smi info exited 255"),
])
def test_a_hostile_or_failing_npu_smi_is_one_error_line(hosts, tmp_path, stdout, rc, said):
    root = tmp_path / "host"
    shutil.copytree(hosts / "ascend-910b2c-healthy", root)
    (root / "commands/00-npu-smi_info.out").write_text(stdout)
    if rc:
        text = (root / "host.toml").read_text()
        (root / "host.toml").write_text(text.replace("rc = 0\n", f"rc = {rc}\n", 1))
    probes, _ = _scan(root)
    result = probes["npu.devices"]
    assert result.status == "error" and said in result.reason and "\n" not in result.reason


def test_a_chip_not_ok_whose_health_view_is_missing_still_reports(hosts, tmp_path):
    root = tmp_path / "host"
    shutil.copytree(hosts / "ascend-910b2c-healthy", root)
    table = root / "commands/00-npu-smi_info.out"
    table.write_text(table.read_text().replace("| 1     910B2C              | OK     ",
                                               "| 1     910B2C              | Warning"))
    probes, found = _scan(root)  # no `npu-smi info -t health` answer in this recording
    chip = probes["npu.devices"].record.chips[1]
    assert (chip.health, chip.health_error_code, chip.missing) == (
        "Warning", None, {"health_error_code": "not-found"})
    assert found == [("npu-health-not-ok", "NPU1 chip 0", "warning")]


# npu.hccl_env on a real captured vLLM (PID 30412 of l40s-8x-nccl-p2p-disabled)
BASE = Path(__file__).parent / "fixtures" / "hosts" / "l40s-8x-nccl-p2p-disabled"
PID = 30412


def nic(name, up=True, address="10.10.1.5"):
    addrs = (Address(address, "ipv4", 24, True, None),) if address else ()
    return Interface(name, "physical", "ether", "up" if up else "down", up, up, up, 1500, 100000,
                     addrs, up and bool(addrs), None if up else "down")


INPUTS = Inputs({"net.interfaces": InterfacesRecord(
    (nic("enp189s0f0"), nic("enp189s0f1", up=False, address="10.10.2.5")), ("enp189s0f0",),
    "ip -j -d addr show")})


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    dest = tmp_path_factory.mktemp("hccl") / "host"
    shutil.copytree(BASE, dest, symlinks=True)
    return dest


def plant(root, env):
    (root / f"fs/proc/{PID}/environ").write_bytes(
        b"\0".join(f"{k}={v}".encode() for k, v in {"PATH": "/usr/bin", **env}.items()) + b"\0")
    return hccl_env.probe(RecordedHost(root), ScanOptions(), INPUTS)


@pytest.mark.parametrize("env, timeouts, problems", [
    ({"HCCL_CONNECT_TIMEOUT": "60", "HCCL_EXEC_TIMEOUT": "120"}, (60, 120, ()), {}),
    ({"HCCL_CONNECT_TIMEOUT": "1200s"}, (None, None, ("HCCL_CONNECT_TIMEOUT",)), {}),
    ({"HCCL_SOCKET_IFNAME": "eth0"}, (None, None, ()), {"HCCL_SOCKET_IFNAME": "no-match"}),
    ({"HCCL_SOCKET_IFNAME": "=enp189s0f1"}, (None, None, ()), {"HCCL_SOCKET_IFNAME": "down"}),
    ({"HCCL_SOCKET_IFNAME": "enp"}, (None, None, ()), {"HCCL_SOCKET_IFNAME": None}),
    ({"HCCL_IF_IP": "10.9.9.9"}, (None, None, ()), {"HCCL_IF_IP": "not-local"}),
    ({"HCCL_IF_IP": "10.10.1.5"}, (None, None, ()), {"HCCL_IF_IP": None}),
])
def test_an_engines_hccl_variables_against_the_host(vllm, env, timeouts, problems):
    record = plant(vllm, env)
    engine = record.engines[0]
    assert (engine.connect_timeout_s, engine.exec_timeout_s, engine.not_numbers) == timeouts
    assert {c.variable: c.problem for c in record.checks} == problems


def test_an_engine_without_hccl_variables_is_not_judged(vllm):
    from doctor.model import Skip

    with pytest.raises(Skip, match="no engine sets an HCCL variable"):
        plant(vllm, {"NCCL_SOCKET_IFNAME": "enp"})


def test_mindie_backend_is_an_engine_and_only_visible_pids_join_the_gpu_rule():
    """MindIE's backend (its comm as npu-smi prints it on a 310P3, youyve/nputop) is no process
    llm-doctor's discovery knows: npu.devices names it an engine, as the Ascend rule's
    engine_names did before the vendor-neutral rule read npu records."""
    from probes.helpers.npu_smi import ProcessRow
    from probes.helpers.processes import Process
    from probes.npu.devices import _process

    row = ProcessRow(1, 0, 3277562, "mindie_llm_back", 14513)
    seen = Process(pid=3277562, comm="mindie_llm_back", cmdline="mindie_llm_back", engine=None)
    assert (_process(row, 1, seen).engine, _process(row, 1, seen).gpu) == ("mindie", 1)
    assert _process(row, 1, None).engine is None and not _process(row, 1, None).visible
