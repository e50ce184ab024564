"""The last facts the diff lacked (issue 18): NCCL's version from the engine's mapped libnccl,
the hash of the model's config.json, the engine's full argv. Each is read on a recorded host
edited by the story's change, and the diff of the two saved scans names it."""

from __future__ import annotations

import hashlib
import json
import shutil

from doctor.diff.compare import compare
from doctor.diff.facts import NOT_RECORDED
from doctor.diff.model import CHANGED, SAME
from doctor.model import Level, ScanOptions
from doctor.rules.loader import builtin_files, load_rules
from doctor.scan import scan
from doctor.seam.recorded import RecordedHost, RecordingHost
from probes.helpers.cuda_loaded import mapped
from probes.registry import PROBES, by_name
from reports.json_report import to_dict
from tests.conftest import FIXTURE_HOSTS
from tests.test_fixtures import replay

RULES = load_rules(builtin_files(), by_name())
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


def test_gpu_runtime_records_the_nccl_a_recorded_engine_maps(tmp_path):
    engine = _runtime_engine(replay(_with_nccl(tmp_path, "2.21.5")))
    assert engine.nccl == "2.21.5"
    assert _runtime_engine(replay(FIXTURE_HOSTS / H100)).nccl is None  # not mapped: None


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


def test_engine_capacity_keeps_the_hash_of_the_config_it_read(tmp_path):
    root, config = _with_config(tmp_path, "plain")
    record = _capacity(replay(root))
    (engine,) = record.engines
    assert engine.model_path == MODEL
    assert engine.config_sha256 == hashlib.sha256(config.read_bytes()).hexdigest()[:16]


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
