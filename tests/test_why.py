"""``llm-doctor why``: records in, the differential out (confirmed, ruled out, not checked),
the symptom words, a rule added by the config, and one run of the real command on a
recorded host. The recorded hosts are scanned once for the module."""

from __future__ import annotations

import json

import pytest

from doctor.commands.setup import ScanCannotRun, load_setup, open_host, scan_options
from doctor.commands.why import symptom_of
from doctor.config import Config
from doctor.i18n import Speaking
from doctor.model import Level, ProbeResult, no_requests
from doctor.rules.evaluate import evaluate
from doctor.scan import scan
from doctor.why.differential import build, candidates, probes_needed
from doctor.why.model import CONFIRMED, NOT_CHECKED, RULED_OUT, Differential
from doctor.why.order import PHASE_ORDER, phase_of
from doctor.why.words import Ambiguous, resolve
from probes.registry import by_name
from reports import why_html, why_json, why_markdown, why_text
from tests.builtin_rules import builtin_rules
from tests.conftest import FIXTURE_HOSTS, run_cli
from tests.test_rule_cases import results_for

RULES = builtin_rules()
SPECS = by_name()


def differential(symptom: str, records: dict, level: Level = Level.STANDARD,
                 requests: bool = True, extra: list[ProbeResult] = (), rules=None,
                 config: Config | None = None) -> Differential:
    """Records in (partial, as tests/rule_cases), the differential out."""
    chosen = candidates(symptom, rules or RULES)
    results = results_for(records) + list(extra)
    findings, errors = evaluate(chosen, results, config)
    return build(symptom, chosen, results, findings, SPECS, level, requests, config,
                 rule_errors=errors)


def row(diff: Differential, cause: str):
    return next(r for r in diff.rows if r.cause == cause)


def rule_check(diff: Differential, rule: str):
    """The check of one rule, under whichever cause row holds it."""
    return next(c for r in diff.rows for c in r.checks if c.rule == rule)


def said(diff: Differential, cause: str) -> str:
    return why_text.render(Differential(diff.symptom, diff.level, diff.requests,
                                        (row(diff, cause),)))


# ------------------------------------------------------------------ records in, rows out

HOT_GPU = {"index": 0, "temp_c": 88, "slowdown_c": 87, "margin_c": -1, "thermal_slowdown": True,
           "reasons": ["hw_slowdown", "hw_thermal_slowdown"]}
COOL_GPU = {"index": 1, "temp_c": 62, "slowdown_c": 87, "margin_c": 25, "thermal_slowdown": False,
            "reasons": []}


def test_slowdown_from_records_confirms_rules_out_and_leaves_unchecked():
    diff = differential("slowdown", {"gpu.thermal_power": {"gpus": [COOL_GPU]},
                                     "host.memory": {"swap_used_mib": 6144,
                                                     "swap_total_mib": 16384}},
                        level=Level.QUICK)
    assert row(diff, "swap-active").status == CONFIRMED
    thermal = row(diff, "gpu-thermal-throttling")
    assert thermal.status == RULED_OUT
    text = said(diff, "gpu-thermal-throttling")
    # made from the rule's own expression and the item's values, not written per rule
    assert "GPU 1: thermal_slowdown = false, needs true; margin_c = 25, needs ≤ 5 (min_margin_c)" in text
    bandwidth = row(diff, "gpu-memory-bandwidth-low")
    assert bandwidth.status == NOT_CHECKED
    assert bandwidth.checks[0].command == "llm-doctor why slowdown --level standard"
    assert "gpu.bandwidth runs at level standard; this run was at level quick" in said(
        diff, "gpu-memory-bandwidth-low")
    # a probe that did not run for its own reason says it, with no command
    gone = row(diff, "gpu-hardware-errors").checks[0]
    assert gone.status == NOT_CHECKED and gone.command is None and "gpu.errors" in str(gone.why)
    assert why_text.render(diff).splitlines()[1].startswith("most likely: swap-active (critical)")
    assert diff.exit_code() == 2


def test_the_same_gpu_hot_is_confirmed_and_a_threshold_override_moves_the_ruling():
    diff = differential("slowdown", {"gpu.thermal_power": {"gpus": [HOT_GPU, COOL_GPU]}})
    assert row(diff, "gpu-thermal-throttling").status == CONFIRMED
    loose = Config(rules={"gpu-thermal-throttling": {"min_margin_c": 30}})
    diff = differential("slowdown", {"gpu.thermal_power": {"gpus": [COOL_GPU]}}, config=loose)
    assert row(diff, "gpu-thermal-throttling").status == CONFIRMED  # 25 ≤ 30: the config's
    off = Config(rules={"gpu-thermal-throttling": {"enabled": False}})
    diff = differential("slowdown", {"gpu.thermal_power": {"gpus": [HOT_GPU]}}, config=off)
    assert row(diff, "gpu-thermal-throttling").status == NOT_CHECKED


def test_a_value_not_measured_is_not_checked_with_the_records_reason():
    gpu = {"index": 0, "d2d_ratio": None, "missing": {"d2d_ratio": "not measured at level quick"}}
    diff = differential("memory-bandwidth-bound", {"gpu.bandwidth": {"gpus": [gpu]}})
    found = row(diff, "gpu-memory-bandwidth-low")
    assert found.status == NOT_CHECKED
    assert "d2d_ratio: not measured (not measured at level quick)" in said(
        diff, "gpu-memory-bandwidth-low")
    assert found.checks[0].command == "llm-doctor why memory-bandwidth-bound --level full"
    # the command is the one the record's reason quotes; none where no run would measure it
    quoted = {**gpu, "missing": {"d2d_ratio": "not measured: `llm-doctor bench --gpu` measures it"}}
    diff = differential("memory-bandwidth-bound", {"gpu.bandwidth": {"gpus": [quoted]}})
    assert row(diff, "gpu-memory-bandwidth-low").checks[0].command == "llm-doctor bench --gpu"
    option = {**gpu, "missing": {"d2d_ratio": "engine.speed sends no request (`--busy-ok` to)"}}
    diff = differential("memory-bandwidth-bound", {"gpu.bandwidth": {"gpus": [option]}})
    assert (row(diff, "gpu-memory-bandwidth-low").checks[0].command
            == "llm-doctor why memory-bandwidth-bound --busy-ok")
    none = {**gpu, "missing": {"d2d_ratio": "the recording holds no copy of it"}}
    diff = differential("memory-bandwidth-bound", {"gpu.bandwidth": {"gpus": [none]}})
    assert row(diff, "gpu-memory-bandwidth-low").checks[0].command is None
    # a None the record gives no reason for is not judged either: the condition cannot tell
    diff = differential("memory-bandwidth-bound", {"gpu.bandwidth": {"gpus": [{"index": 0}]}})
    assert row(diff, "gpu-memory-bandwidth-low").status == NOT_CHECKED
    assert "d2d_ratio has no value" in said(diff, "gpu-memory-bandwidth-low")
    assert row(diff, "gpu-memory-bandwidth-low").checks[0].command.endswith("--level full")
    # an `or` with one part measured and false rules out what it covers, naming the rest
    gpu = {"index": 2, "thermal_slowdown": False, "reasons": []}
    diff = differential("memory-bandwidth-bound", {"gpu.thermal_power": {"gpus": [gpu]}})
    assert row(diff, "gpu-thermal-throttling").status == RULED_OUT
    assert ("GPU 2: thermal_slowdown = false, needs true; margin_c has no value"
            in said(diff, "gpu-thermal-throttling"))


def test_a_limit_read_and_not_set_rules_the_cause_out_where_a_failed_read_does_not():
    """None is two things: a quota or limit the probe read and found unset ("nothing caps
    it": the cause is ruled out), and a figure it could not read (not checked). The record
    says which by listing the field in ``unset``; the rules themselves judge neither."""
    no_quota = {"engine": "vllm pid 7", "kind": "vllm", "identity": "vllm :8000", "cgroup": "/",
                "cpu_quota_cpus": None, "unset": ["cpu_quota_cpus"],
                "missing": {"cpu_quota_cpus": "no CPU quota on the engine's cgroup or above it"}}
    diff = differential("slowdown", {"engine.container": {"engines": [no_quota]}})
    assert rule_check(diff, "cpu-quota-throttled").status == RULED_OUT
    assert ("cpu_quota_cpus: none set (no CPU quota on the engine's cgroup or above it)"
            in said(diff, "cpu-quota-throttled"))
    unread = {**no_quota, "unset": [], "missing": {"cpu_quota_cpus": "/proc/7/cgroup: permission denied"}}
    diff = differential("slowdown", {"engine.container": {"engines": [unread]}})
    assert rule_check(diff, "cpu-quota-throttled").status == NOT_CHECKED
    # a scan saved before ``unset`` existed reads as before: not checked
    old = {k: v for k, v in no_quota.items() if k != "unset"}
    diff = differential("slowdown", {"engine.container": {"engines": [old]}})
    assert rule_check(diff, "cpu-quota-throttled").status == NOT_CHECKED
    unlimited = {"pid": 7, "comm": "python3", "engine": "vllm", "role": "engine", "nproc_soft": None,
                 "unset": ["nproc_soft"], "missing": {"nproc_soft": "unlimited (/proc/7/limits)"}}
    diff = differential("crash-under-concurrency",
                        {"host.limits": {"processes": [unlimited], "engine_count": 1}})
    assert rule_check(diff, "process-limit-low").status == RULED_OUT
    assert "nproc_soft: none set (unlimited (/proc/7/limits))" in said(diff, "process-limit-low")


def test_startup_oom_from_records():
    memory = {"engine_count": 1, "gpus": [{"index": 0, "total_mib": 81920, "used_mib": 80000}],
              "processes": [{"gpu": 0, "pid": 4242, "name": "python3", "used_mib": 20480,
                             "is_llm_doctor": False}]}
    diff = differential("startup-oom", {"gpu.memory": memory})
    assert row(diff, "gpu-memory-held-by-other-process").status == CONFIRMED
    assert "fix: " in said(diff, "gpu-memory-held-by-other-process")
    small = dict(memory, processes=[dict(memory["processes"][0], used_mib=300)])
    # an NVIDIA host: the cause's other rules (on other vendors' records) have nothing to
    # read (their probes skipped); they do not decide the row, which the NVIDIA rule rules
    # out (before: "not checked")
    no_ascend = ProbeResult("npu.devices", "skipped", 0.0, reason="no Ascend driver: npu-smi not found")
    diff = differential("startup-oom", {"gpu.memory": small}, extra=[no_ascend])
    assert row(diff, "gpu-memory-held-by-other-process").status == RULED_OUT
    assert "used_mib = 300, needs ≥" in said(diff, "gpu-memory-held-by-other-process")
    # the same with the NVIDIA probe skipped too: nothing judged it, so not checked
    no_nvidia = ProbeResult("gpu.memory", "skipped", 0.0, reason="NVIDIA driver not loaded")
    diff = differential("startup-oom", {}, extra=[no_ascend, no_nvidia])
    assert row(diff, "gpu-memory-held-by-other-process").status == NOT_CHECKED
    # every cause a rule ties to the row has a row, in domain.md's order
    causes = [r.cause for r in diff.rows]
    assert set(causes) == {r.cause for r in candidates("startup-oom", RULES)}
    assert all(r.phase is None for r in diff.rows)


def test_no_requests_leaves_the_engine_request_causes_not_checked_in_diagnosis_order():
    skipped = ProbeResult("engine.warmup", "skipped", 0.0, no_requests())
    diff = differential("slow-first-token", {}, requests=False, extra=[skipped])
    warm = row(diff, "engine-not-warmed-up")
    assert warm.status == NOT_CHECKED
    assert warm.checks[0].command == "llm-doctor why slow-first-token"
    assert "(--no-requests)" in said(diff, "engine-not-warmed-up")
    ranks = [PHASE_ORDER.index(r.phase) if r.phase else 9 for r in diff.rows]
    assert ranks == sorted(ranks) and ranks[0] == 0  # the first token is examined first


def test_a_rule_added_to_a_symptom_through_the_config_appears(tmp_path):
    extra = tmp_path / "site.toml"
    extra.write_text('''[[rule]]
id = "site-swap-garbles"
cause = "swap-active"
symptoms = ["garbled-output"]
severity = "warning"
probes = ["host.memory"]
when = "host.memory.swap_used_mib > params.most"
title = "swap {used}"
remediation = "Turn swap off."
playbook = "swap-active"
[rule.params]
most = 100
[rule.evidence]
used = "host.memory.swap_used_mib"
''')
    config = tmp_path / "llm-doctor.toml"
    config.write_text(f'[scan]\nrule_files = ["{extra}"]\n')
    rules, loaded = load_setup(str(config))
    diff = differential("garbled-output", {"host.memory": {"swap_used_mib": 12}}, rules=rules,
                        config=loaded)
    assert row(diff, "swap-active").status == RULED_OUT
    assert "host.memory.swap_used_mib = 12, needs > 100 (most)" in said(diff, "swap-active")
    assert "swap-active" not in [r.cause for r in differential("garbled-output", {}).rows]


# ------------------------------------------------------------------------ the words

@pytest.mark.parametrize("word, symptom", [
    ("slowdown", "slowdown"), ("首个token延迟过高", "slow-first-token"), ("越跑越慢", "slowdown"),
    ("启动时OOM", "startup-oom"), ("并发一高就排队", "queueing-under-load"), ("oom", "startup-oom"),
    ("queue", "queueing-under-load"), ("slow", "slowdown"), ("First token too slow",
                                                             "slow-first-token"),
    ("Slow_First token", "slow-first-token"), ("多卡性能还不如单卡", "multi-gpu-slower-than-one"),
])
def test_symptom_words_resolve(word, symptom):
    assert resolve(word) == symptom


def test_an_ambiguous_or_unknown_word_lists_the_choices():
    with pytest.raises(Ambiguous) as found:
        resolve("latency")
    assert set(found.value.choices) == {"slow-first-token", "slowdown", "queueing-under-load"}
    assert not found.value.unknown
    with pytest.raises(ScanCannotRun, match="slowdown .Inference suddenly slower"):
        symptom_of("latency")
    with pytest.raises(ScanCannotRun, match="names no symptom row"):
        symptom_of("purple")


# -------------------------------------------------------------------- recorded hosts

def _replayed(name: str, symptom: str) -> Differential:
    rules, config = load_setup(None)
    chosen = candidates(symptom, rules)
    host = open_host(str(FIXTURE_HOSTS / name))
    options = scan_options(config, None, host=host, no_requests=True)
    report = scan(host, options, tuple(SPECS[n] for n in probes_needed(chosen, SPECS)), chosen,
                  config)
    return build(symptom, chosen, report.probes, report.findings, SPECS, options.level,
                 options.requests, config)


@pytest.fixture(scope="module")
def hosts() -> dict[str, Differential]:
    return {"thermal": _replayed("h100-thermal-88c", "slowdown"),
            "healthy": _replayed("healthy-epyc-9654-vllm", "slow-first-token"),
            "held": _replayed("gpu-20gb-held-by-other", "startup-oom")}


def test_recorded_hosts(hosts):
    thermal = hosts["thermal"]
    assert row(thermal, "gpu-thermal-throttling").status == CONFIRMED
    assert row(thermal, "gpu-power-throttling").status == RULED_OUT
    assert row(thermal, "gpu-memory-bandwidth-low").status == NOT_CHECKED  # captured at quick
    healthy = hosts["healthy"]
    assert not healthy.likely
    assert row(healthy, "model-on-slow-disk").status == RULED_OUT
    assert "read_mbps = 2496, needs < 250 (min_read_mbps)" in said(healthy, "model-on-slow-disk")
    assert row(healthy, "engine-not-warmed-up").status == NOT_CHECKED
    assert row(hosts["held"], "gpu-memory-held-by-other-process").status == CONFIRMED


def test_every_format_and_both_languages(hosts):
    diff = hosts["thermal"]
    data = json.loads(why_json.render(diff))
    assert data["exit_code"] == 2 and data["symptom"] == "slowdown"
    assert {c["cause"]: c["status"] for c in data["causes"]}["gpu-thermal-throttling"] == CONFIRMED
    assert "| `gpu-thermal-throttling` |" in why_markdown.render(diff)
    page = why_html.render(diff)
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    with Speaking("zh_CN"):
        text = why_text.render(diff)
    assert "推理速度突然变慢" in text and "最可能" in text and "已排除" in text


@pytest.mark.slow  # two interpreter starts, ~3 s
def test_the_command_on_a_recorded_host():
    done = run_cli("why", "越跑越慢", "--replay", str(FIXTURE_HOSTS / "h100-thermal-88c"),
                   "--format", "json")
    assert done.returncode == 2, done.stderr
    data = json.loads(done.stdout)
    statuses = {c["cause"]: c["status"] for c in data["causes"]}
    assert statuses["gpu-thermal-throttling"] == CONFIRMED
    assert "candidate cause(s)" in done.stderr  # the plan, said before the probes ran
    wrong = run_cli("scan", "--symptom", "latency", "--replay",
                    str(FIXTURE_HOSTS / "h100-thermal-88c"))
    assert wrong.returncode == 3 and "slow-first-token" in wrong.stderr


def test_a_long_item_list_is_explained_in_part_and_counted():
    processes = [{"pid": pid, "comm": "python3", "role": "engine", "engine": "vllm",
                  "nofile_soft": 1048576, "nofile_hard": 1048576, "nproc_soft": 96364,
                  "nproc_hard": 96364} for pid in range(1, 302)]
    diff = differential("crash-under-concurrency",
                        {"host.limits": {"engine_count": 301, "processes": processes}})
    check = next(c for c in row(diff, "fd-limit-low").checks if c.rule == "fd-limit-low")
    assert check.status == RULED_OUT
    assert len(check.items) == 4 and check.more_items == 297
    assert "… and 297 more item(s)" in said(diff, "fd-limit-low")


def test_host_text_is_shown_never_obeyed(hosts):
    diff = hosts["held"]
    hostile = Differential(diff.symptom, diff.level, diff.requests, diff.rows,
                           host={"hostname": "<script>alert(1)</script>\x1b[2J"})
    page = why_html.render(hostile)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "\x1b" not in why_text.render(hostile) and "\x1b" not in why_markdown.render(hostile)


@pytest.mark.parametrize("cause, phase", [
    ("engine-not-warmed-up", "first-token"), ("gpu-thermal-throttling", "decode"),
    ("too-few-slots", "throughput"),
    # causes no table lists yet (a new rule family's) are placed by the words in their ids
    ("ttft-queue-dominated", "first-token"), ("decode-at-bandwidth-limit", "decode"),
    ("decode-below-ceiling", "decode"), ("site-batch-starved", "throughput"),
    ("rdma-link-errors", None),
])
def test_the_diagnosis_phase_of_a_cause(cause, phase):
    assert phase_of("slowdown", cause) == phase
    assert phase_of("startup-oom", cause) is None  # the articles' order is for latency


def test_figures_the_host_probe_could_not_read_say_why_and_offer_no_level():
    """host.memory_bandwidth's DIMM figures on a VM without dmidecode: the record's reason,
    not "has no value", and no `--level full` (no level reads what is not installed)."""
    from doctor.commands.why import command_args
    from doctor.commands.why import differential as why_of
    from doctor.i18n.text import render as say

    diff = why_of("slowdown", str(FIXTURE_HOSTS / "this-vm-epyc-2cpu"), None, None,
                  (), command_args((), (), True, None, False))
    checks = {c.rule: c for r in diff.rows for c in r.checks}
    low = checks["host-memory-dimms-downclocked"]
    assert low.status == NOT_CHECKED and low.command is None
    assert "dimm_configured_mts: not measured (dmidecode is not installed" in say(low.items[0].parts[0])


def test_a_rule_with_another_vendors_items_is_judged_on_them_when_its_own_probe_skipped():
    # an AMD-only host: gpu.memory skipped (no NVIDIA driver), amd.gpu ran; the foreign-process
    # rule reads amd.gpu's processes through each_also (before: "not checked: gpu.memory skipped")
    rule = next(r for r in RULES if r.id == "gpu-memory-held-by-other-process")
    assert "amd.gpu" in rule.also_probes
    from doctor.why.differential import probes_needed
    assert "amd.gpu" in probes_needed([rule], SPECS)
    no_nvidia = ProbeResult("gpu.memory", "skipped", 0.0, reason="NVIDIA driver not loaded")
    proc = {"gpu": 0, "pid": 77, "name": "jupyter", "used_mib": 300, "engine": None,
            "is_llm_doctor": False, "mps_server": False}
    diff = differential("startup-oom", {"amd.gpu": {"gpus": [], "processes": [proc]}},
                        extra=[no_nvidia], rules=[rule])
    assert row(diff, "gpu-memory-held-by-other-process").status == RULED_OUT
    assert "used_mib = 300, needs ≥" in said(diff, "gpu-memory-held-by-other-process")
    big = dict(proc, used_mib=20480)
    diff = differential("startup-oom", {"amd.gpu": {"gpus": [], "processes": [big]}},
                        extra=[no_nvidia], rules=[rule])
    assert row(diff, "gpu-memory-held-by-other-process").status == CONFIRMED
