"""Throughput at the knee against the bandwidth ceiling of a batch (issue 31, 004 §5.3's third
step): engine.roofline's knee figures from plain values, the saved sweep read as
``llm-doctor load`` writes it, the differential of ``why queue`` placing the knee causes in the
throughput step, and the diff of two scans."""

from __future__ import annotations

import pytest

from doctor.diff.compare import compare
from doctor.diff.model import CHANGED
from doctor.workload import knee
from doctor.why.model import CONFIRMED, NOT_CHECKED, RULED_OUT
from doctor.why.order import THROUGHPUT
from probes.engine.roofline import judge
from probes.helpers.knee_ceiling import SavedKnee, saved_knee_of
from probes.helpers.weight_bytes import Placement, kv_read_bytes
from tests.saved_scans import saved
from tests.test_load_probes import _levels
from tests.test_roofline import GEMMA, H100, LLAMA, _engine, _metrics, _speed
from tests.test_why import differential, row, said

H100_PLACE = Placement("llama-3-8b", 16 * 10**9, 0, 1, "--cpu-offload-gb 0", LLAMA, 2.0, {})


def _knee_record(concurrency: int, tokens_per_s: float, place: Placement = H100_PLACE, **kw):
    # an ITL histogram mean at 1,536 prompt tokens: the context the KV cache is counted at
    metrics = _metrics(itl_mean_s=1 / 150, requests_running=1.0, prompt_tokens_mean=1536.0,
                       generation_tokens_mean=0.0)
    saved_knee = SavedKnee(concurrency, "found", "/s/knee-x.json", tokens_per_s)
    return judge(_engine(**kw), place, H100, None, metrics, knee=saved_knee)


def test_the_knee_is_judged_against_the_weights_read_once_a_step_for_the_whole_batch():
    kv = kv_read_bytes(LLAMA, 1536, 2.0)  # one sequence's KV cache at that context
    record = _knee_record(64, 4000.0)
    steps = 3000e9 / (16 * 10**9 + 64 * kv)  # a step reads the weights once, 64 KV caches
    assert record.kv_read_bytes == kv and record.knee_concurrency == 64
    assert record.knee_ceiling_tokens_per_s == pytest.approx(64 * steps, rel=1e-3)
    assert record.knee_efficiency == pytest.approx(4000.0 / (64 * steps), abs=0.001)
    # the batch ceiling is far above one sequence's: the weights are shared, the KV is not
    assert record.knee_ceiling_tokens_per_s > 20 * record.ceiling_tokens_per_s


def test_split_weights_read_each_part_at_its_memory_in_the_batch_too():
    place = Placement("gemma", 253_113_024, 126_556_512, 1, "-ngl 9", GEMMA, 2.0, {})
    speed = _speed(prompt_tokens=64, output_tokens=48)
    record = judge(_engine("llama.cpp"), place, H100, speed, None,
                   knee=SavedKnee(4, "found", "/s/k.json", 300.0))
    kv = record.kv_read_bytes
    kv_host = round(kv * 0.5)  # llama.cpp: a layer's KV cache lives where the layer does
    step = ((126_556_512 + 4 * (kv - kv_host)) / 3000e9 + (126_556_512 + 4 * kv_host) / 100e9)
    assert record.knee_ceiling_tokens_per_s == pytest.approx(4 / step, rel=1e-3)


@pytest.mark.parametrize("saved_knee, says", [
    (None, "llm-doctor load --endpoint URL"),
    (SavedKnee(None, None, "/s/k.json", None), "llm-doctor load --endpoint URL"),
    (SavedKnee(None, "not-reached", "/s/k.json", None), "not-reached, /s/k.json"),
    (SavedKnee(4, "found", "/s/k.json", None), "no output tokens/s at its knee")])
def test_a_knee_not_measured_says_why_and_what_measures_it(saved_knee, says):
    record = judge(_engine(), H100_PLACE, H100, None, _metrics(itl_mean_s=0.01),
                   knee=saved_knee)
    assert record.knee_efficiency is None
    assert says in str(record.missing["knee_efficiency"])
    assert says in str(record.missing["knee_concurrency"])


def test_without_the_context_the_batch_ceiling_is_not_guessed():
    record = judge(_engine(), H100_PLACE, H100, None, _metrics(itl_mean_s=0.01),
                   knee=SavedKnee(8, "found", "/s/k.json", 400.0))
    assert record.knee_tokens_per_s == 400.0 and record.knee_ceiling_tokens_per_s is None
    assert "each sequence's KV cache" in str(record.missing["knee_ceiling_tokens_per_s"])


def test_the_knee_llm_doctor_load_saved_is_read_back_with_its_throughput(monkeypatch, tmp_path):
    from doctor.seam.live import LiveHost

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    url = "http://127.0.0.1:8000"
    levels = _levels((1, 10, 0.1), (2, 19, 0.1), (4, 19.5, 0.3), (8, 19, 0.6))
    found = knee.find_knee(levels)
    assert found.concurrency == 2
    knee.save_sweep(knee.sweep_json(url, {}, levels, found, "2026-12-07T07:00:00Z"))
    got = saved_knee_of(LiveHost(), url)
    assert got is not None and got.status == "found"
    assert (got.concurrency, got.tokens_per_s) == (2, levels[1].output_tokens_per_s)
    assert saved_knee_of(LiveHost(), "http://127.0.0.1:9999").status is None  # none saved
    assert saved_knee_of(LiveHost(), None) is None


# ------------------------------------------------------------------ why queue, the third step

def _row(**knee_fields) -> dict:
    return {"engine": "vllm at http://127.0.0.1:8000 pid 5120", "kind": "vllm",
            "model": "Meta-Llama-3-8B-Instruct", "memory": "gpu", "placed_from": "--max-num-seqs 8",
            "efficiency": 0.9, "kv_read_bytes": 201326592, "missing": {}, **knee_fields}


def test_why_queue_places_a_knee_below_its_ceiling_in_the_throughput_step():
    diff = differential("queueing-under-load", {"engine.roofline": {"engines": [_row(
        knee_concurrency=8, knee_tokens_per_s=400.0, knee_ceiling_tokens_per_s=1312.8,
        knee_efficiency=0.305)]}})
    below, at = row(diff, "knee-below-bandwidth-ceiling"), row(diff, "knee-at-bandwidth-limit")
    assert below.status == CONFIRMED and below.phase == THROUGHPUT
    assert at.status == RULED_OUT and at.phase == THROUGHPUT
    assert "knee_efficiency = 0.305, needs ≥ 0.6 (min_efficiency)" in said(diff, "knee-at-bandwidth-limit")
    causes = [r.cause for r in diff.rows]
    assert causes.index("ttft-queue-dominated") < causes.index("knee-below-bandwidth-ceiling")


def test_why_queue_says_at_the_limit_when_the_knee_is_the_memory():
    diff = differential("queueing-under-load", {"engine.roofline": {"engines": [_row(
        knee_concurrency=64, knee_tokens_per_s=4490.0, knee_ceiling_tokens_per_s=6412.2,
        knee_efficiency=0.7)]}})
    assert row(diff, "knee-at-bandwidth-limit").status == CONFIRMED
    assert row(diff, "knee-below-bandwidth-ceiling").status == RULED_OUT


def test_why_queue_without_a_saved_knee_says_not_checked_and_how_to_measure_it():
    record = judge(_engine(), H100_PLACE, H100, None, _metrics(itl_mean_s=0.01),
                   knee=SavedKnee(None, None, "/s/k.json", None, "http://127.0.0.1:8000"))
    command = "llm-doctor load --endpoint http://127.0.0.1:8000"
    diff = differential("queueing-under-load", {"engine.roofline": {"engines": [_row(missing={
        "knee_efficiency": record.missing["knee_efficiency"]})]}})
    for cause in ("knee-below-bandwidth-ceiling", "knee-at-bandwidth-limit"):
        assert row(diff, cause).status == NOT_CHECKED
        assert command in said(diff, cause)
        assert row(diff, cause).checks[0].command == command  # the record's, not a level


def _scan(knee_tps: float) -> dict:
    engine = {"engine": "vllm at http://127.0.0.1:8000 pid 1", "kind": "vllm",
              "knee_tokens_per_s": knee_tps, "knee_ceiling_tokens_per_s": 1312.8,
              "knee_efficiency": round(knee_tps / 1312.8, 3)}
    return {"probes": [{"name": "engine.roofline", "data": {"engines": [engine], "not_judged": []}}]}


def test_the_diff_names_the_knee_moving_toward_its_ceiling():
    diff = compare(saved(_scan(400.0)), saved(_scan(1000.0)))
    changed = {f.id for f in diff.facts if f.status == CHANGED}
    at = "engine[vllm@127.0.0.1:8000].roofline"
    assert {f"{at}.knee_tokens_per_s", f"{at}.knee_efficiency"} <= changed


def test_engine_load_without_a_saved_sweep_says_what_measures_its_knee(monkeypatch, tmp_path):
    """past-throughput-knee's knee_concurrency: None with the command, not "has no value"."""
    from doctor.model import ScanOptions
    from doctor.seam.recorded import RecordedHost
    from probes.engine import load as engine_load
    from tests.conftest import FIXTURE_HOSTS

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))  # where no sweep was saved
    record = engine_load.probe(RecordedHost(FIXTURE_HOSTS / "h100-pcie-vllm-at-hbm-limit"),
                               ScanOptions())
    (engine,) = record.engines
    assert engine.knee_concurrency is None and engine.running == 1
    assert ("`llm-doctor load --endpoint http://127.0.0.1:8000`"
            in engine.missing["knee_concurrency"])
    assert "running" not in engine.missing
