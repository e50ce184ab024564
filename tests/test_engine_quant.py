"""slow-quant-kernel: engine.quant on recorded vLLM hosts (tests/fixtures/build_offload_hosts.py)
serving Qwen2.5-7B-Instruct-AWQ. ``--quantization awq`` on an A100 forces the generic kernel
and fires; ``awq_marlin``, no flag, or a T4 (sm 7.5, below Marlin's 8.0) stay silent. Marlin's
checkpoint test is vLLM's is_awq_marlin_compatible / is_gptq_marlin_compatible; broken
quantization configs are named, never a crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from doctor.model import Level, ScanOptions
from doctor.scan import scan
from doctor.seam.recorded import RecordedHost, RecordingHost
from probes.engine import quant
from probes.registry import PROBES
from tests.builtin_rules import builtin_rules
from tests.fixtures import build_offload_hosts as builder

RULES = [r for r in builtin_rules() if r.id == "slow-quant-kernel"]
SPECS = tuple(p for p in PROBES if p.name in ("engine.discovery", "engine.quant"))
QUANT_HOSTS = sorted(n for n in builder.HOSTS if "awq" in n)


@pytest.fixture(scope="module")
def hosts(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("quant-hosts")
    for name in QUANT_HOSTS:
        builder.build(root, name)
    return root


def _scan(host):
    report = scan(host, ScanOptions(level=Level.QUICK, requests=False), SPECS, RULES)
    result = {p.name: p for p in report.probes}["engine.quant"]
    assert report.rule_errors == [] and result.status == "ok", (report.rule_errors, result.reason)
    return result.record, report.findings


@pytest.mark.slow
def test_awq_forced_on_an_a100_fires(hosts):
    record, findings = _scan(RecordedHost(hosts / "a100-vllm-awq-forced"))
    (item,) = record.engines
    assert (item.quantization, item.quant_method, item.bits, item.group_size) == ("awq", "awq", 4, 128)
    assert item.marlin_fits is True and item.compute_capability == 8.0
    assert item.config_from == f"{builder.AWQ_MODEL}/config.json"
    (finding,) = findings
    assert finding.title.endswith("--quantization awq forces the generic awq kernel on a GPU "
                                  "of compute capability 8.0 that runs awq_marlin")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["a100-vllm-awq-marlin", "a100-vllm-awq-unflagged",
                                  "t4-vllm-awq-forced"])
def test_the_healthy_partners_are_silent(hosts, name):
    record, findings = _scan(RecordedHost(hosts / name))
    (item,) = record.engines
    assert item.quant_method == "awq" and item.marlin_fits is True
    assert item.compute_capability == (7.5 if name.startswith("t4") else 8.0)
    assert findings == []


class Recapture(RecordingHost):
    def measure(self, name, fn):
        return super().measure(name, lambda: self.live.measure(name, fn))


@pytest.mark.parametrize("name", QUANT_HOSTS)
def test_capture_of_a_quant_host_replays_the_same(hosts, name, tmp_path):
    original, found = _scan(RecordedHost(hosts / name))
    capture = Recapture(RecordedHost(hosts / name), tmp_path / "cap")
    _scan(capture)
    capture.save({"level": "quick"})
    replayed, again = _scan(RecordedHost(tmp_path / "cap"))
    assert replayed == original
    assert [f.rule for f in found] == [f.rule for f in again]


@pytest.mark.parametrize("config, fits", [
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}, True),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": False}, False),
    ({"quant_method": "awq", "bits": 8, "group_size": 128, "zero_point": True}, False),
    ({"quant_method": "awq", "bits": 4, "group_size": 256, "zero_point": True}, False),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": True}, True),
    ({"quant_method": "gptq", "bits": 8, "group_size": -1, "sym": True, "desc_act": False}, True),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": False, "desc_act": False}, False),
    ({"quant_method": "gptq", "bits": 3, "group_size": 128, "sym": True, "desc_act": False}, False),
    ({"quant_method": "gptq", "bits": 4, "sym": True, "desc_act": False}, False),
    ({"quant_method": "fp8"}, None),
])
def test_marlin_takes_what_vllm_converts(config, fits):
    assert quant.marlin_fits(config)[0] is fits


@pytest.mark.slow
@pytest.mark.parametrize("text", [
    "{", "[]", json.dumps({"quantization_config": [1, 2]}),
    json.dumps({"quantization_config": {"quant_method": ["awq"], "bits": "four"}}),
    json.dumps({"quantization_config": {"quant_method": "awq", "bits": 1e308,
                                        "group_size": True, "zero_point": "yes"}}),
    '{"quantization_config": {"quant_method": "gptq", "bits": NaN, "group_size": Infinity}}',
])
def test_a_broken_quantization_config_is_named_never_a_crash(hosts, text, tmp_path):
    import shutil

    root = tmp_path / "host"
    shutil.copytree(hosts / "a100-vllm-awq-forced", root, symlinks=True)
    (root / "fs" / builder.AWQ_MODEL.lstrip("/") / "config.json").write_text(text)
    record, findings = _scan(RecordedHost(root))
    (item,) = record.engines
    assert item.marlin_fits is not True and findings == []
    assert item.marlin_why_not
