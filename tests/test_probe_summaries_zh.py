"""The host and GPU probes speak Chinese: scanned in zh_CN, every ok probe's summary and
every skipped probe's reason differs from the English one and holds Chinese characters, on
recorded GPU hosts, on a recorded host without a GPU, and on this machine."""

from __future__ import annotations

import re

import pytest

from doctor.i18n import Speaking, translated
from doctor.model import Level, ScanOptions
from doctor.scan import scan
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost
from probes.registry import PROBES
from tests.conftest import FIXTURE_HOSTS

MINE = tuple(p for p in PROBES if p.name.startswith(("host.", "gpu.")))
CJK = re.compile(r"[\u4e00-\u9fff]")
# NVSwitch and fabric manager; ACS redirect, NVML P2P statuses and a P2P cache (blockers);
# a GPU lost and a GPU gone; two sockets with engines in containers; no GPU at all
HOSTS = ("h100-sxm-8x-nvswitch", "l40s-8x-acs-redirect", "l40s-8x-vllm-p2p-cache-stale",
         "h100-sxm-8x-gpu-lost", "l40s-2socket-numa-misplaced", "this-vm-epyc-2cpu")


def _texts(host, level: Level, lang: str) -> dict[str, tuple[str, str]]:
    """Probe name → (status, the text a person reads: the summary, else the reason)."""
    with Speaking(lang):
        report = scan(host, ScanOptions(level=level), MINE, [])
    return {p.name: (p.status, p.summary if p.status == "ok" else p.reason or "")
            for p in report.probes}


def _assert_chinese(en: dict[str, tuple[str, str]], zh: dict[str, tuple[str, str]]) -> int:
    checked = 0
    for name, (status, text) in en.items():
        zh_status, zh_text = zh[name]
        if status not in ("ok", "skipped") or zh_status != status or not text:
            continue  # an error's message is the runner's; a live status may change between scans
        assert zh_text != text, (name, status, text)
        assert CJK.search(zh_text), (name, status, zh_text)
        checked += 1
    return checked


@pytest.mark.parametrize("name", HOSTS)
def test_a_recorded_hosts_probes_read_in_chinese(name):
    host = RecordedHost(FIXTURE_HOSTS / name)
    level = Level.parse(host.manifest["host"].get("level", "standard"))
    en = _texts(host, level, "en")
    zh = _texts(RecordedHost(FIXTURE_HOSTS / name), level, "zh_CN")
    assert _assert_chinese(en, zh) >= len(MINE) // 2, (en, zh)


def test_a_gpu_hosts_summaries_name_its_gpus_in_chinese():
    zh = _texts(RecordedHost(FIXTURE_HOSTS / "h100-sxm-8x-nvswitch"), Level.STANDARD, "zh_CN")
    assert zh["gpu.inventory"][0] == "ok" and "张" in zh["gpu.inventory"][1]
    assert "显存" in zh["gpu.memory"][1]
    assert "NVSwitch" in zh["gpu.fabric"][1] and "；" in zh["gpu.fabric"][1]


def test_a_recorded_host_without_a_gpu_says_why_in_chinese():
    zh = _texts(RecordedHost(FIXTURE_HOSTS / "this-vm-epyc-2cpu"), Level.STANDARD, "zh_CN")
    gpu = {name: text for name, (status, text) in zh.items() if name.startswith("gpu.")}
    assert gpu and all(zh[name][0] == "skipped" for name in gpu)
    assert len(set(gpu.values())) == 1  # one reason for the whole family, grouped in the report
    assert "NVIDIA" in next(iter(gpu.values())) and CJK.search(next(iter(gpu.values())))


@pytest.mark.slow
def test_this_machines_probes_read_in_chinese():
    en = _texts(LiveHost(), Level.QUICK, "en")
    zh = _texts(LiveHost(), Level.QUICK, "zh_CN")
    assert _assert_chinese(en, zh) >= 4, (en, zh)


def test_every_probes_description_reads_in_chinese():
    with Speaking("zh_CN"):
        for spec in PROBES:
            assert CJK.search(translated(spec.description)), spec.name
            assert translated(spec.reads), spec.name
    assert all(translated(spec.description) == spec.description for spec in PROBES)  # en
