"""The engine probes and the scan runner speak Chinese: recorded engine hosts scanned in
zh_CN give every engine probe that ran a Chinese summary (not the English one), every skip
a Chinese reason, and the runner's own reasons (timeout, error, a need that failed, no
requests) are Chinese too. The English scan of the same host is what test_fixtures checks.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from doctor.i18n import Speaking
from doctor.model import Level, ProbeSpec, RequestCost, ScanOptions, Sent, Skip
from doctor.runner import run_probes
from doctor.scan import scan
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost
from probes.registry import PROBES
from tests.conftest import FIXTURE_HOSTS

CJK = re.compile(r"[\u4e00-\u9fff]")
ENGINE_HOSTS = ("vllm-v1-kv-pressure", "diff-vllm-v1-enforce-eager", "rtx4090-2x-consumer",
                "a100-pcie-gen3x8", "l40s-2socket-container-lost-gpu", "a100-mig-per-slice",
                "h100-pcie-fleet-a", "vllm-docker-tp2-shm-64m", "vllm-docker-v2-oom-killed",
                "rtx5090-2x-phb-tp2")


def _scan(path: Path, lang: str):
    host = RecordedHost(path)
    meta = host.manifest["host"]
    options = ScanOptions(level=Level.FULL, model_dirs=tuple(meta.get("model_dirs", [])))
    with Speaking(lang):
        return {p.name: p for p in scan(host, options, PROBES, []).probes}


@pytest.mark.slow
@pytest.mark.parametrize("name", ENGINE_HOSTS)
def test_an_engine_host_reads_in_chinese(name):
    path = FIXTURE_HOSTS / name
    english, chinese = _scan(path, "en"), _scan(path, "zh_CN")
    assert english["engine.discovery"].status == "ok", "the host must have an engine"
    engine = [n for n in english if n.startswith("engine.")]
    ran = [n for n in engine if english[n].status == "ok"]
    assert len(ran) >= 3
    for probe in engine:
        en, zh = english[probe], chinese[probe]
        assert en.status == zh.status, probe
        if zh.status == "ok":
            assert CJK.search(zh.summary), (probe, zh.summary)
            assert zh.summary != en.summary, (probe, zh.summary)
        else:
            assert CJK.search(zh.reason or ""), (probe, zh.status, zh.reason)
            assert zh.reason != en.reason, (probe, zh.reason)


def test_the_family_skipped_for_one_reason_reads_as_one_in_chinese():
    # no engine: the engine probes skipped, discovery's reason passed down unchanged; the
    # report groups skips by equal text, so the groups must be the same in both languages
    def groups(results):
        by: dict[str, set[str]] = {}
        for name, p in results.items():
            if name.startswith("engine.") and p.status == "skipped":
                by.setdefault(p.reason, set()).add(name)
        return sorted(map(sorted, by.values())), list(by)

    path = FIXTURE_HOSTS / "this-vm-epyc-2cpu"
    (english, _), (chinese, reasons) = groups(_scan(path, "en")), groups(_scan(path, "zh_CN"))
    assert chinese == english and max(map(len, chinese)) >= 10
    assert all(CJK.search(reason) for reason in reasons)


@dataclass(frozen=True, slots=True)
class Value:
    x: int


def _ok(host, options, inputs=None):
    return Value(1)


def _skip(host, options, inputs=None):
    raise Skip("a test reason")


def _hang(host, options, inputs=None):
    time.sleep(30)


def _unreadable(host, options, inputs=None):
    return host.read_text("/nonexistent/proc/file")


def _buggy(host, options, inputs=None):
    return {}["missing"]


def _spec(name, fn, timeout_s=5.0, needs=(), cost=None):
    return ProbeSpec(name, Level.QUICK, "test probe", "nothing", timeout_s, fn, needs=needs,
                     cost=cost)


def test_the_runner_says_its_reasons_in_chinese():
    cost = RequestCost(requests=3, prompt_tokens=30, output_tokens=12, seconds=5.0)
    specs = (_spec("t.hang", _hang, timeout_s=0.3), _spec("t.unreadable", _unreadable),
             _spec("t.buggy", _buggy), _spec("t.after", _ok, needs=("t.hang",)),
             _spec("t.sends", _ok, cost=cost))
    options = ScanOptions(level=Level.QUICK, requests=False)
    with Speaking("zh_CN"):
        results = {r.name: r for r in run_probes(specs, LiveHost(), options)}
    assert results["t.hang"].status == "timeout"
    assert "0.3 s" in results["t.hang"].reason and CJK.search(results["t.hang"].reason)
    assert results["t.unreadable"].status == "error"
    assert results["t.unreadable"].reason == "/nonexistent/proc/file：不存在"
    assert results["t.buggy"].status == "error" and "内部错误" in results["t.buggy"].reason
    assert results["t.after"].status == "skipped" and "超时" in results["t.after"].reason
    assert results["t.sends"].status == "skipped" and "`scan --no-requests`" in results["t.sends"].reason
    with Speaking("en"):
        english = {r.name: r for r in run_probes(specs[:3], LiveHost(), options)}
    assert english["t.unreadable"].reason == "/nonexistent/proc/file: not-found"
    assert english["t.hang"].reason == "no result within 0.3 s"


def test_what_a_probe_sends_is_said_in_chinese():
    cost = RequestCost(requests=15, prompt_tokens=1533, output_tokens=240, seconds=40.0)
    sent = Sent("engine.output", "http://127.0.0.1:8080", 15, 1502, 240, 21.4)
    with Speaking("zh_CN"):
        assert cost.text(2) == "最多 15 个请求，1,533 输入 token + 240 输出 token，≤ 20 s"
        assert sent.text() == ("已向 http://127.0.0.1:8080 发送 15 个请求，1,502 输入 token + "
                               "240 输出 token，耗时 21.4 s")
    assert cost.text(2) == "at most 15 requests, 1,533 prompt + 240 output tokens, ≤ 20 s"
