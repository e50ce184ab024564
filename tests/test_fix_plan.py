"""Fix plans from recorded hosts with planted faults: the steps, files and argv diffs, exactly."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import jsonschema
import pytest

from doctor.commands.fix import _scan
from doctor.fix.model import Kind, Risk
from doctor.fix.plan import build_plan, to_dict
from doctor.fix.catalogue import BUILDERS, NO_STEP
from doctor.vocabulary import CAUSES
from tests.saved_scans import saved
from tests.conftest import FIXTURE_HOSTS, REPO

NOW = datetime(2026, 12, 1, 19, 41, 0, tzinfo=timezone.utc)
SCHEMA = json.loads((REPO / "docs" / "fix-plan-schema.json").read_text())


def _plan(host: str):
    report, rule_probes = _scan(str(FIXTURE_HOSTS / host), None, None, None)
    return build_plan(saved(report), f"replay {host}", rule_probes, NOW)


def _header(rule: str, key: str, title: str) -> str:
    key = f" ({key})" if key else ""
    return (f"# Written by llm-doctor fix on 2026-12-01 for the finding {rule}{key}:\n# {title}\n"
            "# 'llm-doctor fix --revert PLAN' removes it and restores what it replaced.\n")


def test_every_cause_has_a_step_or_says_why_not():
    both = sorted(set(BUILDERS) & set(NO_STEP))
    neither = sorted(set(CAUSES) - set(BUILDERS) - set(NO_STEP))
    stale = sorted((set(BUILDERS) | set(NO_STEP)) - set(CAUSES))
    assert (both, neither, stale) == ([], [], [])
    assert all(why.strip() for why in NO_STEP.values())


def test_systemd_host_plan_steps_files_and_flag_diffs():
    plan = _plan("fix-epyc-9654-vllm-systemd")
    jsonschema.validate(to_dict(plan), SCHEMA)
    assert plan.id == "20261201T194100Z-" + plan.id.rsplit("-", 1)[1]
    assert [(s.id, s.kind, s.risk) for s in plan.steps] == [
        ("01-fd-limit-low", Kind.FILE, Risk.RESTARTS_ENGINE),
        ("02-gpu-memory-no-headroom", Kind.ENGINE_FLAG, Risk.RESTARTS_ENGINE),
        ("03-cuda-graphs-disabled", Kind.ENGINE_FLAG, Risk.RESTARTS_ENGINE),
        ("04-network-backlog-small", Kind.FILE, Risk.NONE),
        ("05-swap-swappiness-high", Kind.FILE, Risk.NONE)]
    limit, headroom, graphs, backlog, swap = plan.steps
    assert [(f.path, f.content) for f in limit.files] == [(
        "/etc/systemd/system/vllm.service.d/llm-doctor.conf",
        _header("fd-limit-low", "engine vllm /models/llama-3-8b-instruct", "python3 pid 48213: open-files limit 1024 is below 16384")
        + "[Service]\nLimitNOFILE=1048576\n")]
    assert [c.argv for c in limit.commands] == [("systemctl", "daemon-reload")]  # links are present
    assert limit.restart_to_take and limit.finding == "fd-limit-low engine vllm /models/llama-3-8b-instruct"
    assert (headroom.flags.remove, headroom.flags.add) == (
        ("--gpu-memory-utilization", "0.98"), ("--gpu-memory-utilization", "0.90"))
    assert (graphs.flags.remove, graphs.flags.add) == (("--enforce-eager",), ())
    assert graphs.flags.where.startswith("ExecStart= of vllm.service")
    assert not (headroom.files or headroom.live or headroom.commands)  # shown, never applied
    assert [(f.path, f.content) for f in backlog.files] == [(
        "/etc/sysctl.d/60-llm-doctor-network-backlog-small.conf",
        _header("network-backlog-small", "", "Listen backlog is small: somaxconn 128, tcp_max_syn_backlog "
                "512 (want somaxconn >= 1024, tcp_max_syn_backlog >= 1024)")
        + "net.core.somaxconn = 4096\nnet.ipv4.tcp_max_syn_backlog = 4096\n")]
    assert [(v.path, v.seen, v.new) for v in backlog.live] == [
        ("/proc/sys/net/core/somaxconn", "128", "4096"),
        ("/proc/sys/net/ipv4/tcp_max_syn_backlog", "512", "4096")]
    assert [(v.name, v.seen, v.new) for v in swap.live] == [("vm.swappiness", "60", "1")]
    assert swap.files[0].content.endswith("\nvm.swappiness = 1\n")
    assert backlog.probes == ("host.sysctl",) and "host.limits" in plan.probes


def test_governor_host_writes_every_cpu_live():
    plan = _plan("xeon-gold-6338-2socket-powersave")
    governor = plan.steps[0]
    assert (governor.id, governor.kind, governor.risk) == ("01-cpu-powersave-governor", Kind.LIVE, Risk.NONE)
    assert len(governor.live) == 256  # 128 CPUs: the governor and the energy preference
    assert governor.live[:2] == (
        type(governor.live[0])("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
                               "cpu0 scaling_governor", "powersave", "performance"),
        type(governor.live[0])("/sys/devices/system/cpu/cpu0/cpufreq/energy_performance_preference",
                               "cpu0 energy_performance_preference", "balance_power", "performance"))
    assert plan.steps[1].id == "02-network-socket-buffers-default"
    assert [(v.name, v.new) for v in plan.steps[1].live] == [
        ("net.core.rmem_max", "16777216"), ("net.core.wmem_max", "16777216")]


def test_persistence_off_is_nvidia_smi_with_its_undo():
    step, = _plan("rtx4090-2x-consumer").steps
    assert (step.kind, [(c.argv, c.undo) for c in step.commands]) == (
        Kind.LIVE, [(("nvidia-smi", "-i", "0,1", "-pm", "1"), ("nvidia-smi", "-i", "0,1", "-pm", "0"))])


def test_power_cap_restores_the_default_limit():
    finding = {"rule": "gpu-power-capped", "cause": "gpu-power-capped", "key": "",
               "title": "GPU1: power limit set to 250 W", "severity": "warning",
               "evidence": {"gpu": 1, "power_limit_w": 250.0, "power_default_limit_w": 350.0}}
    plan = build_plan(saved({"host": {"hostname": "h"}, "probes": [], "findings": [finding]}), "x", {}, NOW)
    step, = plan.steps
    assert [(c.argv, c.undo) for c in step.commands] == [
        (("nvidia-smi", "-i", "1", "-pl", "350"), ("nvidia-smi", "-i", "1", "-pl", "250"))]


def test_missing_dev_char_links_come_before_a_daemon_reload():
    report, rule_probes = _scan(str(FIXTURE_HOSTS / "l40s-2socket-no-dev-char"), None, None, None)
    report["findings"].append({
        "rule": "fd-limit-low", "cause": "fd-limit-low", "key": "engine vllm", "title": "t",
        "severity": "warning", "evidence": {"process": "python3 pid 4242", "role": "engine"}})
    report["probes"] = [p for p in report["probes"] if p["name"] != "engine.container"] + [
        {"name": "engine.container", "status": "ok", "data": {
            "engines": [{"pid": 4242, "cgroup": "/system.slice/vllm.service"}]}}]
    plan = build_plan(saved(report), "x", rule_probes, NOW)
    links, limit = plan.steps
    assert links.rule == "gpu-dev-char-links-missing"
    assert links.files[0].path == "/etc/udev/rules.d/71-llm-doctor-nvidia-dev-char.rules"
    assert [c.argv for c in limit.commands] == [
        ("nvidia-ctk", "system", "create-dev-char-symlinks", "--create-all"), ("systemctl", "daemon-reload")]


@pytest.mark.slow
@pytest.mark.parametrize("host, rule", [("l40s-8x-acs-redirect", "gpu-p2p-blocked"),
                                        ("a100-pcie-gen3x8", "pcie-link-degraded")])
def test_bios_kernel_and_hands_on_causes_are_checklists(host, rule):
    step = next(s for s in _plan(host).steps if s.rule == rule)
    assert step.kind == Kind.MANUAL and step.manual
    assert not (step.files or step.live or step.commands)


@pytest.mark.slow
def test_findings_without_a_step_say_why():
    plan = _plan("vllm-v1-kv-pressure")
    assert plan.steps == ()
    assert sorted(n.rule for n in plan.no_steps) == ["engine-preemption", "kv-cache-pressure",
                                                     "ttft-queue-dominated"]
    assert all(n.why for n in plan.no_steps)


@pytest.mark.slow
def test_rebuilding_the_fix_host_gives_the_committed_tree(tmp_path):
    from tests.fixtures.build_fix_hosts import BUILDERS as HOSTS, write_host

    for name in HOSTS:
        write_host(name, tmp_path)
        built = {p.relative_to(tmp_path / name): p.read_bytes()
                 for p in (tmp_path / name).rglob("*") if p.is_file()}
        committed = {p.relative_to(FIXTURE_HOSTS / name): p.read_bytes()
                     for p in (FIXTURE_HOSTS / name).rglob("*") if p.is_file()}
        assert built == committed, f"{name}: re-run tests/fixtures/build_fix_hosts.py"


def test_hands_on_steps_are_never_planned_for_a_virtual_machine():
    """A reseat, a slot or a DIMM cannot be changed from inside a VM (issue 28 item 2): the
    plan says why there is no step instead of a checklist nobody can carry out."""
    from doctor.fix.plan import build_plan

    finding = {"rule": "pcie-link-degraded", "cause": "pcie-link-degraded", "key": "0",
               "severity": "warning", "title": "t", "evidence": {"gpu": 0, "on_vm": False}}
    report = {"host": {"hostname": "h"}, "findings": [finding],
              "probes": [{"name": "host.cpu", "status": "ok", "data": {"virtual_machine": False}}]}
    metal = build_plan(saved(report), "saved scan x", {})
    assert [s.kind.value for s in metal.steps] == ["manual"] and "reseat" in metal.steps[0].manual[0]
    report["probes"][0]["data"]["virtual_machine"] = True
    vm = build_plan(saved(report), "saved scan x", {})
    assert not vm.steps and "virtual machine" in vm.no_steps[0].why
    finding["evidence"]["on_vm"] = True
    report["probes"][0]["data"]["virtual_machine"] = None
    assert not build_plan(saved(report), "saved scan x", {}).steps


def test_numa_balancing_on_an_amd_host_is_a_sysctl_step():
    plan = _plan("amd-mi300-8x-numa-balancing")
    (step,) = [s for s in plan.steps if s.cause == "numa-balancing-on"]
    (written,) = step.files
    assert written.path == "/etc/sysctl.d/60-llm-doctor-numa-balancing-on.conf"
    assert written.content.endswith("kernel.numa_balancing = 0\n")
    assert [(w.path, w.seen, w.new) for w in step.live] == [("/proc/sys/kernel/numa_balancing", "1", "0")]


def test_iommu_passthrough_is_a_checklist_never_applied():
    plan = _plan("amd-mi300-8x-iommu-translated")
    (step,) = [s for s in plan.steps if s.cause == "iommu-not-passthrough"]
    assert step.kind == Kind.MANUAL and step.risk == Risk.NEEDS_REBOOT
    assert not step.files and not step.commands and not step.live
    assert any("iommu=pt" in item for item in step.manual)


def test_power_cap_on_an_amd_host_is_amd_smi():
    finding = {"rule": "gpu-power-capped", "cause": "gpu-power-capped", "key": "",
               "title": "GPU1: power limit set to 500 W", "severity": "warning",
               "evidence": {"gpu": 1, "power_limit_w": 500.0, "power_default_limit_w": 750.0}}
    amd = {"name": "amd.gpu", "status": "ok", "data": {"gpus": [{"index": 1}]}}
    plan = build_plan(saved({"host": {"hostname": "h"}, "probes": [amd], "findings": [finding]}), "x", {}, NOW)
    step, = plan.steps
    assert [(c.argv, c.undo) for c in step.commands] == [
        (("amd-smi", "set", "-g", "1", "--power-cap", "750"), ("amd-smi", "set", "-g", "1", "--power-cap", "500"))]


def test_the_fabric_manager_is_started_only_where_it_is_this_hosts_to_run():
    """nvswitch-fabric-down on a GB200 compute tray (no NVSwitch on its PCI bus: gpu.fabric
    leaves the manager unjudged) gets no step: the tray runs no fabric manager, and
    `systemctl enable --now nvidia-fabricmanager` there would start nothing useful."""
    finding = {"rule": "nvswitch-fabric-down", "cause": "nvswitch-fabric-down", "key": "",
               "severity": "critical", "title": "t", "evidence": {"problem": "GPU0 in-progress"}}
    fabric = {"nvswitches": 4, "manager_running": False}
    report = {"host": {"hostname": "h"}, "findings": [finding],
              "probes": [{"name": "gpu.fabric", "status": "ok", "data": fabric}]}
    hgx = build_plan(saved(report), "saved scan x", {})
    assert [s.kind.value for s in hgx.steps] == ["manual"] and "nvidia-fabricmanager" in hgx.steps[0].manual[0]
    fabric.update(nvswitches=0, manager_running=None)
    tray = build_plan(saved(report), "saved scan x", {})
    assert not tray.steps and "switch trays" in tray.no_steps[0].why
