"""A rule's ``each_also`` (docs/rules.md): the rules about facts, not vendors, read another
vendor's records of the same facts (issue 33). A field the other record lacks is an error
when the file loads; on a host where only the other vendor's probe ran, the rule walks its
items and the names of its own probe are absent, never a rule error; NVIDIA hosts see the
rule as before."""

from __future__ import annotations

import textwrap

import pytest

from doctor.model import ProbeResult
from doctor.rules.evaluate import evaluate
from doctor.rules.loader import RuleError, load_file
from probes.registry import by_name
from tests.builtin_rules import builtin_rules

RULE = """
[[rule]]
id = "hot"
cause = "gpu-thermal-throttling"
symptoms = ["slowdown"]
severity = "warning"
probes = ["gpu.thermal_power"]
each = "gpu.thermal_power.gpus"
{also}
when = "{when}"
title = "GPU{{gpu}} hot"
remediation = "cool it"
playbook = "gpu-thermal-throttling"
[rule.evidence]
gpu = "item.index"
"""


def load(tmp_path, also='each_also = ["amd.gpu.gpus"]', when="item.margin_c is not None and item.margin_c < 5"):
    path = tmp_path / "rules.toml"
    path.write_text(textwrap.dedent(RULE.format(also=also, when=when)))
    return load_file(path, by_name())


def test_a_field_the_other_vendor_lacks_is_an_error_when_the_file_loads(tmp_path):
    load(tmp_path)  # margin_c is in both records
    # a field gpu.thermal_power has and amd.gpu does not: named, with the path
    with pytest.raises(RuleError) as err:
        load(tmp_path, when="item.reasons_mask is not None")
    assert "each_also" in str(err.value) and "reasons_mask" in str(err.value)


@pytest.mark.parametrize("also,said", [
    ('each_also = ["amd.gpuz.gpus"]', "no probe 'amd.gpuz'"),
    ('each_also = ["amd.gpu"]', "paths '<probe>.<field>'"),
    ('each_also = "amd.gpu.gpus"', "'each_also' must be a non-empty array of strings"),
])
def test_a_wrong_path_is_named(tmp_path, also, said):
    with pytest.raises(RuleError) as err:
        load(tmp_path, also=also)
    assert said in str(err.value)


def _result(name: str, record: dict) -> ProbeResult:
    return ProbeResult(name, "ok", 0.0, None, record)


def test_items_come_from_the_probes_that_ran():
    (rule,) = [r for r in builtin_rules() if r.id == "gpu-memory-held-by-other-process"]
    amd = _result("amd.gpu", {"vendor": "amd", "gpus": [], "xgmi_links": [], "processes": [
        {"gpu": 0, "pid": 5150, "name": "python3", "engine": None, "used_mib": 40960,
         "is_llm_doctor": False, "mps_server": False, "vendor": "amd"}]})
    nvidia = _result("gpu.memory", {"gpus": [{"index": 0, "total_mib": 81559}], "engine_count": 1,
                                     "processes": [{"gpu": 0, "pid": 77, "name": "jupyter", "engine": None,
                                                    "used_mib": 2048, "is_llm_doctor": False,
                                                    "mps_server": False}]})
    found, errors = evaluate([rule], [amd])
    assert errors == [] and [f.key for f in found] == ["GPU0 python3"]
    # gpu.memory did not run: its figures are absent, with no rule error
    assert found[0].evidence["engines_on_host"] is None and found[0].evidence["gpu_total_mib"] is None
    found, errors = evaluate([rule], [nvidia])
    assert errors == [] and [f.key for f in found] == ["GPU0 jupyter"]
    assert found[0].evidence["gpu_total_mib"] == 81559
    found, errors = evaluate([rule], [nvidia, amd])  # a host with both vendors' GPUs
    assert errors == [] and sorted(f.key for f in found) == ["GPU0 jupyter", "GPU0 python3"]
    found, errors = evaluate([rule], [])
    assert (found, errors) == ([], [])


# the tool an operator reads each vendor's devices with, by the probe whose records a rule reads
VENDOR_TOOLS = {"amd.gpu": "amd-smi", "npu.devices": "npu-smi"}


@pytest.mark.parametrize("lang", ["en", "zh_CN"])
def test_a_rule_that_reads_another_vendors_records_names_that_vendors_tool(lang):
    # the remediation named nvidia-smi alone, so an AMD host was told to set its power cap
    # with `nvidia-smi -pl` and an Ascend host to list its HBM holders with nvidia-smi
    told = {}
    for rule in builtin_rules():
        text = rule.remediation_in(lang)
        if rule.each_also and "nvidia-smi" in text:
            for path in rule.each_also:
                tool = VENDOR_TOOLS[path.rsplit(".", 1)[0]]
                if tool not in text:
                    told.setdefault(rule.id, []).append(tool)
    assert told == {}
    assert {r.id for r in builtin_rules() if r.each_also} >= {"gpu-power-capped", "gpu-memory-held-by-other-process"}
