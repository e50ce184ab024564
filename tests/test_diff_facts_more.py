"""The last facts the diff lacked (issue 18): NCCL's version from the engine's mapped libnccl,
the hash of the model's config.json, the engine's full argv. Each is read on a recorded host
edited by the story's change, and the diff of the two saved scans names it."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from doctor.diff.compare import compare
from doctor.diff.facts import NOT_RECORDED, argv_flags
from doctor.diff.model import ADDED, CHANGED, REMOVED, SAME
from doctor.model import Level, ScanOptions
from doctor.scan import scan
from doctor.seam.recorded import RecordedHost, RecordingHost
from probes.helpers.cuda_loaded import mapped
from probes.registry import PROBES
from reports.diff_json import to_dict as diff_dict
from reports.json_report import to_dict
from tests.builtin_rules import builtin_rules
from tests.conftest import FIXTURE_HOSTS
from tests.test_fixtures import replay
from tests.saved_scans import saved

RULES = builtin_rules()
H100 = "h100-sxm-8x-torch-cu128"
H100_PID = 51877
NCCL_LINE = ("7f3a20000000-7f3a22000000 r-xp 00000000 103:02 2100009            "
             "/usr/local/lib/python3.12/dist-packages/nvidia/nccl/lib/libnccl.so.{}\n")


def _host(tmp_path, name: str, label: str):
    root = tmp_path / label
    shutil.copytree(FIXTURE_HOSTS / name, root, symlinks=True)
    return root


def _with_nccl(tmp_path, version: str):
    root = _host(tmp_path, H100, version)
    maps = root / "fs" / "proc" / str(H100_PID) / "maps"
    maps.write_text(maps.read_text() + NCCL_LINE.format(version))
    return root


def _runtime_engine(report) -> object:
    result = next(p for p in report.probes if p.name == "gpu.runtime")
    assert result.status == "ok", result.reason
    return result.record.engines[0]


# --- NCCL's version -----------------------------------------------------------------------

def test_the_mapped_libnccl_gives_its_version_and_a_soname_alone_gives_none():
    line = "7f00-7f01 r-xp 00000000 103:02 1 {}"
    assert mapped(line.format("/opt/nccl/lib/libnccl.so.2.21.5")).nccl == "2.21.5"
    assert mapped(line.format("/usr/lib/x86_64-linux-gnu/libnccl.so.2.23.4 (deleted)")).nccl == "2.23.4"
    assert mapped(line.format("/usr/lib/libnccl.so.2")).nccl is None  # the major only: not a version
    assert mapped(line.format("/usr/lib/libnccl-net.so")).nccl is None  # a plugin, not NCCL
    assert mapped(line.format("/x/libnccl.so.2.21.5.evil")).nccl is None
    assert mapped("").nccl is None


@pytest.mark.slow
def test_gpu_runtime_records_the_nccl_a_recorded_engine_maps(tmp_path):
    engine = _runtime_engine(replay(_with_nccl(tmp_path, "2.21.5")))
    assert engine.nccl == "2.21.5"
    assert _runtime_engine(replay(FIXTURE_HOSTS / H100)).nccl is None  # not mapped: None


@pytest.mark.slow
def test_a_nccl_upgrade_is_a_changed_fact_of_the_engine(tmp_path):
    before = to_dict(replay(_with_nccl(tmp_path, "2.21.5")))
    after = to_dict(replay(_with_nccl(tmp_path, "2.23.4")))
    diff = compare(before, after)
    (fact,) = [f for f in diff.facts if f.id.endswith(".nccl_version")]
    assert fact.id.startswith("engine[")
    assert (fact.status, fact.before, fact.after) == (CHANGED, "2.21.5", "2.23.4")
    assert [f.id for f in diff.facts if f.status == CHANGED] == [fact.id]
    same = compare(before, before)
    assert [f.status for f in same.facts if f.id == fact.id] == [SAME]
    assert not any("NCCL" in line for line in NOT_RECORDED)


# --- the model's config.json hash ---------------------------------------------------------

A100 = "a100-pcie-gen3x8"  # its vLLM serves /models/llama-3-8b-instruct, recorded without config.json
MODEL = "/models/llama-3-8b-instruct"
LLAMA3_8B = {  # meta-llama/Meta-Llama-3-8B-Instruct's config.json, its sizing fields
    "_name_or_path": "meta-llama/Meta-Llama-3-8B-Instruct", "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096, "intermediate_size": 14336, "max_position_embeddings": 8192,
    "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
    "vocab_size": 128256}


def _with_config(tmp_path, label: str, **changed):
    root = _host(tmp_path, A100, label)
    config = root / "fs" / MODEL.lstrip("/") / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({**LLAMA3_8B, **changed}, indent=2) + "\n")
    return root, config


def _capacity(report) -> object:
    result = next(p for p in report.probes if p.name == "engine.capacity")
    assert result.status == "ok", result.reason
    return result.record


@pytest.mark.slow
def test_engine_capacity_keeps_the_hash_of_the_config_it_read(tmp_path):
    root, config = _with_config(tmp_path, "plain")
    record = _capacity(replay(root))
    (engine,) = record.engines
    assert engine.model_path == MODEL
    assert engine.config_sha256 == hashlib.sha256(config.read_bytes()).hexdigest()[:16]


@pytest.mark.slow
def test_a_changed_config_at_the_same_path_is_a_changed_fact(tmp_path):
    before = to_dict(replay(_with_config(tmp_path, "8k")[0]))
    after = to_dict(replay(_with_config(tmp_path, "rope", rope_scaling={
        "factor": 8.0, "rope_type": "llama3"}, max_position_embeddings=131072)[0]))
    diff = compare(before, after)
    fact_id = f"model[{MODEL}].config_hash"
    (fact,) = [f for f in diff.facts if f.id == fact_id]
    assert fact.status == CHANGED and fact.before != fact.after
    assert "kv-cache-pressure" in fact.causes
    assert [f.id for f in diff.facts if f.status == CHANGED] == [fact_id]
    assert [f.status for f in compare(before, before).facts if f.id == fact_id] == [SAME]
    assert not any("config.json" in line for line in NOT_RECORDED)


@pytest.mark.slow
def test_the_config_hash_survives_a_capture_and_its_replay(tmp_path):
    root, _ = _with_config(tmp_path, "source")
    source = RecordedHost(root)
    options = ScanOptions(level=Level.QUICK)
    capacity = [p for p in PROBES if p.name == "engine.capacity"]
    original = next(p for p in scan(source, options, capacity, RULES).probes)
    capture = RecordingHost(source, tmp_path / "cap")
    scan(capture, options, capacity, RULES)
    capture.save({"level": "quick"})
    replayed = next(p for p in scan(RecordedHost(tmp_path / "cap"), options, capacity, RULES).probes)
    assert (replayed.status, replayed.record) == (original.status, original.record)
    assert original.record.engines[0].config_sha256 is not None


# --- the engine's full argv ----------------------------------------------------------------

VLLM_HOST, VLLM_PID = "vllm-v1-calm", 48213
VLLM = "engine[vllm@127.0.0.1:8000]"


def _with_argv(tmp_path, label: str, *extra: str):
    root = _host(tmp_path, VLLM_HOST, label)
    cmdline = root / "fs" / "proc" / str(VLLM_PID) / "cmdline"
    args = cmdline.read_bytes().rstrip(b"\0").split(b"\0")
    args = args[:args.index(b"--api-key")]  # the key is given below, in the clear
    cmdline.write_bytes(b"\0".join(args + [a.encode() for a in extra]) + b"\0")
    return root


@pytest.mark.slow
def test_every_flag_of_the_argv_is_a_fact_and_a_changed_key_is_never_shown(tmp_path):
    before = to_dict(replay(_with_argv(tmp_path, "before", "--swap-space", "4", "--enable-prefix-caching",
                                       "--api-key", "sk-before-0123456789")))
    after = to_dict(replay(_with_argv(tmp_path, "after", "--swap-space=16", "--disable-log-requests",
                                      "--api-key", "sk-after-9876543210")))
    diff = compare(before, after)
    moved = {f.id: f for f in diff.facts if f.status in (CHANGED, ADDED, REMOVED)}
    assert {k: (f.status, f.before, f.after) for k, f in moved.items()} == {
        f"{VLLM}.argv.--swap-space": (CHANGED, "4", "16"),
        f"{VLLM}.argv.--enable-prefix-caching": (REMOVED, True, None),
        f"{VLLM}.argv.--disable-log-requests": (ADDED, None, True)}
    assert moved[f"{VLLM}.argv.--disable-log-requests"].note == "+ --disable-log-requests"
    (key,) = [f for f in diff.facts if f.id == f"{VLLM}.argv.--api-key"]
    assert (key.kind, key.before, key.after) == ("secret", None, None)
    text = json.dumps(diff_dict(diff))
    assert "sk-before" not in text and "sk-after" not in text and "0123456789" not in text
    # the flags engine.discovery judges stay their own facts, not twice
    assert not any(f.id.endswith(("argv.--model", "argv.--max-num-seqs")) for f in diff.facts)
    assert {f.id for f in diff.facts if f.id.startswith(f"{VLLM}.argv.")} >= {
        f"{VLLM}.argv.program", f"{VLLM}.argv.-m", f"{VLLM}.argv.--port"}
    assert NOT_RECORDED == ()


def test_argv_flags_reads_values_switches_repeats_and_negative_numbers():
    assert argv_flags(["/usr/bin/python3", "-m", "sglang.launch_server", "--tp", "2", "--x=a=b",
                       "--seed", "-1", "--cuda-graph", "--lora", "a", "--lora", "b", "extra"]) == {
        "program": "/usr/bin/python3", "-m": "sglang.launch_server", "--tp": "2", "--x": "a=b",
        "--seed": "-1", "--cuda-graph": True, "--lora": "a,b", "args": "extra"}
    assert argv_flags([]) == {}


def test_an_added_custom_all_reduce_off_bears_on_p2p():
    def saved_argv(*args: str) -> dict:
        return {"probes": [{"name": "engine.discovery", "status": "ok", "data": {
            "engines": [{"pid": 7, "kind": "vllm", "base_url": "http://127.0.0.1:8000"}],
            "argv": [{"pid": 7, "argv": ["vllm", "serve", "/m", *args], "reason": None}]}}]}
    diff = compare(saved(saved_argv()), saved(saved_argv("--disable-custom-all-reduce")))
    (first,) = diff.changes
    assert (first.id, first.status, first.direction) == (
        f"{VLLM}.argv.--disable-custom-all-reduce", ADDED, "worse")
    assert first.causes == ("gpu-p2p-blocked",) and first.note == "+ --disable-custom-all-reduce"


def test_the_argv_is_kept_masked_in_the_record_and_replays_the_same(tmp_path):
    root = _with_argv(tmp_path, "source", "--api-key", "sk-secret-0123456789", "--served-model-name", "a b")
    source = RecordedHost(root)
    options = ScanOptions(level=Level.QUICK)
    discovery = [p for p in PROBES if p.name == "engine.discovery"]
    original = next(p for p in scan(source, options, discovery, RULES).probes)
    (command,) = original.record.argv
    assert command.pid == VLLM_PID and command.reason is None
    assert command.argv[-4:] == ("--api-key", "***", "--served-model-name", "a b")
    capture = RecordingHost(source, tmp_path / "cap")
    scan(capture, options, discovery, RULES)
    capture.save({"level": "quick"})
    replayed = next(p for p in scan(RecordedHost(tmp_path / "cap"), options, discovery, RULES).probes)
    assert (replayed.status, replayed.record) == (original.status, original.record)
    assert b"sk-secret" not in b"".join(p.read_bytes() for p in (tmp_path / "cap").rglob("*") if p.is_file())
