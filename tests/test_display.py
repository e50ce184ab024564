"""Values as people read them (doctor/display.py): a None says why, a zero has no sign, and
titles, evidence and probe summaries all say it the same way."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import pytest

from doctor import display
from doctor.model import ProbeResult
from doctor.rules.evaluate import evaluate
from doctor.rules.loader import RuleError, load_file
from doctor.rules.titles import TemplateError, parse, render
from probes.engine.kv_cache import EngineKV, KVRecord
from probes.host.cpu_load import CpuLoadRecord, ProcessCpu
from probes.host.cpu_load import summary as cpu_load_summary
from probes.engine.kv_cache import summary as kv_summary
from probes.host.sysctl import SysctlRecord
from probes.host.sysctl import summary as sysctl_summary
from probes.registry import by_name


def test_a_none_says_its_reason_in_words_or_a_dash():
    assert display.text(None, "no-permission") == "not read (no permission)"
    assert display.text(None, "not measured at level quick") == "not measured at level quick"
    assert display.text(None) == display.ABSENT == "—"
    assert display.why("") == "—"


@pytest.mark.parametrize("value,spec,shown", [
    (-0.0, "", "0.0"), (-0.001, ".2f", "0.00"), (-0.004, ".0%", "0%"), (-0.0001, ">8.2f", "    0.00"),
    (-1.5, ".1f", "-1.5"), (-0.001, "", "-0.001"), (0.25, ".0%", "25%"), (3, "", "3"),
])
def test_a_number_that_rounds_to_zero_has_no_sign(value, spec, shown):
    assert display.number(value, spec) == shown


def test_lists_and_mappings_show_their_entries_never_none():
    assert display.text([1, None, 2.5]) == "1, —, 2.5"
    assert display.text({"a": None, "b": -0.0}) == "a: —, b: 0.0"
    assert display.text([]) == "none"
    assert display.text(list(range(30))).endswith(", …")


def test_a_field_takes_its_reason_from_the_records_missing():
    @dataclass(frozen=True)
    class Record:
        swappiness: int | None
        missing: dict[str, str] = field(default_factory=dict)

    assert display.field(Record(None, {"swappiness": "no-permission"}), "swappiness") == \
        "not read (no permission)"
    assert display.field(Record(60), "swappiness") == "60"


def test_a_title_field_that_is_none_says_why_and_an_optional_segment_drops_out():
    template = parse("GPU{gpu}: {temp_c} C{?, clocks {mhz} of {max_mhz} MHz}{? ({note})}",
                     ["gpu", "temp_c", "mhz", "max_mhz", "note"])
    assert render(template, {"gpu": 0, "temp_c": 88, "mhz": 1410, "max_mhz": 1980, "note": "x"}) == \
        "GPU0: 88 C, clocks 1410 of 1980 MHz (x)"
    assert render(template, {"gpu": 0, "temp_c": 88, "mhz": 1410, "max_mhz": None}) == "GPU0: 88 C"
    assert render(template, {"gpu": 0, "temp_c": None}, {"temp_c": "not-supported"}) == \
        "GPU0: not supported C"
    assert render(parse("{x:.2f} busy", ["x"]), {"x": -0.0001}) == "0.00 busy"
    assert template.names == ("gpu", "temp_c", "mhz", "max_mhz", "note")


@pytest.mark.parametrize("title,message", [
    ("a {?b {?x}}", "segments do not nest"),
    ("a {?b {x}", "never closed"),
    ("a {?no field}", "names no field"),
    ("a {?{nope}}", "neither an evidence label nor a parameter"),
    ("a {?{x.y}}", "attributes, indexes and conversions"),
])
def test_a_malformed_optional_segment_is_refused_with_why(title, message):
    with pytest.raises(TemplateError, match=message):
        parse(title, ["x"])


def test_literal_braces_and_question_marks_stay_literal():
    assert render(parse("{{?}} {x}?", ["x"]), {"x": 1}) == "{?} 1?"


RULE = '''
[[rule]]
id = "t-slow"
cause = "model-on-slow-disk"
symptoms = ["slow-first-token"]
severity = "warning"
probes = ["host.storage"]
each = "host.storage.paths"
when = "item.rotational"
title = "{path}: {read_mbps} MB/s{?, {weights_gb} GB}"
remediation = "x"
playbook = "model-on-slow-disk"
[rule.evidence]
path = "item.path"
read_mbps = "item.read_mbps"
weights_gb = "round(item.weights_bytes / 1e9, 1) if item.weights_bytes is not None else None"
load_s = "item.weights_bytes / (item.read_mbps * 1e6) if item.read_mbps else None"
fs = "item.fs_type"
'''


def test_a_finding_says_why_each_none_evidence_is_none_from_the_records_missing(tmp_path):
    """The reason reaches the finding (``missing``) and its title, for a plain field and for
    a figure computed from one; a None no record explains has no reason."""
    path = tmp_path / "rule.toml"
    path.write_text(RULE)
    (rule,) = load_file(path, by_name())
    item = {"path": "/m", "rotational": True, "read_mbps": None, "weights_bytes": None,
            "fs_type": None,
            "missing": {"read_mbps": "not measured at level quick", "weights_bytes": "no-permission"}}
    results = [ProbeResult("host.storage", "ok", 0.0, None, {"paths": [item]})]
    (finding,), errors = evaluate([rule], results)
    assert errors == []
    assert finding.title == "/m: not measured at level quick MB/s"
    assert finding.missing == {"read_mbps": "not measured at level quick",
                               "weights_gb": "no-permission", "load_s": "not measured at level quick"}
    assert finding.evidence["fs"] is None and "fs" not in finding.missing


def test_an_unknown_field_inside_a_segment_is_a_rule_error(tmp_path):
    path = tmp_path / "rule.toml"
    path.write_text(RULE.replace("{?, {weights_gb} GB}", "{?, {weights_g} GB}"))
    with pytest.raises(RuleError, match="did you mean 'weights_gb'"):
        load_file(path, by_name())


def _names(record_type) -> list[str]:
    return [f.name for f in fields(record_type)]


def test_summaries_never_print_none_or_a_signed_zero():
    """'-0.00 of 2 cores busy' and 'preemptions/s None' were printed before."""
    load = CpuLoadRecord(window_s=0.5, logical_cpus=2, busy_cores=-0.0004,
                         top=(ProcessCpu(7, "python", "python x", -0.0001, None, False, False),))
    assert cpu_load_summary(load) == "0.00 of 2 cores busy; top: python(7) 0.00"
    kv = EngineKV(**{**dict.fromkeys(_names(EngineKV)), "kind": "vllm", "interval_s": 3.0})
    line = kv_summary(KVRecord(engines=(kv,)))
    assert "None" not in line and "preemptions/s not exported" in line
    sysctl = SysctlRecord(**{**dict.fromkeys(_names(SysctlRecord)),
                             "missing": {"vm_swappiness": "no-permission"}})
    line = sysctl_summary(sysctl)
    assert "None" not in line and "swappiness not read (no permission)" in line


def test_a_value_of_a_hand_written_recording_that_cannot_print_says_so():
    nested: list = []
    inner = nested
    for _ in range(50_000):
        inner.append([])
        inner = inner[0]
    assert display.text(10**5000).startswith("(unprintable int:")
    assert display.text(nested).startswith("(unprintable list:")
    assert display.text(float("-inf"), spec=".2f") == "-∞"  # not a zero: keeps its sign
    assert display.text(float("nan")) == "not a number" and display.text(True) == "yes"
    title = render(parse("{a:.2f} {b}", ["a", "b"]), {"a": 10**400, "b": nested})
    assert title.startswith("1000") and "(unprintable list:" in title


def test_a_count_sent_as_a_float_reads_as_a_whole_number_in_a_title():
    """A gauge's queue length arrives as 7.0: "7 waiting", not "7.0 waiting"; a spec and a
    real fraction are kept as they are."""
    template = parse("{n} waiting, {share} used, {pct:.1f}%", {"n", "share", "pct"})
    assert render(template, {"n": 7.0, "share": 0.25, "pct": 12.0}) == "7 waiting, 0.25 used, 12.0%"
    assert render(template, {"n": 1e300, "share": -0.0, "pct": 1.0}).startswith("1e+300 waiting")
