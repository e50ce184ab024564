"""engine.frontend and frontend-cpu-bound on recorded hosts (tests/fixtures/build_frontend_hosts.py):
a vLLM API server at 0.98 of a core beside a GPU at 20 % raises it; at 0.15 of a core beside
a GPU at 85 % it stays silent. The probe is handed host.cpu_load's record: one sample a scan."""

from __future__ import annotations

from doctor.inputs import Inputs
from doctor.model import ProbeResult, ScanOptions
from doctor.runner import run_probes
from doctor.rules.evaluate import evaluate
from doctor.seam.recorded import RecordedHost
from probes.engine import frontend
from probes.registry import by_name
from tests.builtin_rules import builtin_rules
from tests.fixtures.build_frontend_hosts import API, build

RULE = next(r for r in builtin_rules() if r.id == "frontend-cpu-bound")


def _judged(tmp_path, name):
    host = RecordedHost(build(tmp_path, name))
    record = frontend.probe(host, ScanOptions())
    findings, errors = evaluate([RULE], [ProbeResult("engine.frontend", "ok", 0.0, None, record)])
    assert errors == []
    return host, record, findings


def test_api_server_pinned_beside_an_idle_gpu(tmp_path):
    _, record, findings = _judged(tmp_path, "h100-vllm-api-server-pinned")
    (engine,) = record.engines
    assert (engine.engine, engine.pid, engine.frontend_cores) == ("vllm", API, 0.98)
    assert engine.rest_cores == 0.31 and engine.gpu_util_max_pct == 20 and engine.gpus == 1
    assert [f.rule for f in findings] == ["frontend-cpu-bound"]
    assert findings[0].title == "vLLM API server (pid 51234) at 0.98 cores, the busiest GPU at 20%, the rest of the engine at 0.31 cores"


def test_calm_front_end_is_silent(tmp_path):
    _, record, findings = _judged(tmp_path, "h100-vllm-frontend-calm")
    assert record.engines[0].frontend_cores == 0.15 and findings == []


def test_one_sample_per_scan(tmp_path):
    """In a scan engine.frontend is handed host.cpu_load's record (its need): one sample, the
    same one; no probe's result is kept on the host for it."""
    host = RecordedHost(build(tmp_path, "h100-vllm-api-server-pinned"))
    calls = []
    real = host.measure

    def counted(name, fn):
        calls.append(name)
        return real(name, fn)

    host.measure = counted  # type: ignore[method-assign]
    specs = by_name()
    load, front = run_probes((specs["host.cpu_load"], specs["engine.frontend"]), host,
                             ScanOptions())
    assert (load.status, front.status) == ("ok", "ok") and calls == ["host.cpu_load"]
    assert front.record == frontend.probe(host, ScanOptions(), Inputs({load.name: load.record}))
    assert calls == ["host.cpu_load"]  # handed the record, it samples nothing itself
    frontend.probe(host, ScanOptions())  # run alone, it takes the sample itself
    assert calls == ["host.cpu_load"] * 2


def test_no_gpu_reading_falls_back_to_the_engine_core(tmp_path):
    root = build(tmp_path, "h100-vllm-api-server-pinned")
    (root / "nvml.json").unlink()
    host = RecordedHost(root)
    record = frontend.probe(host, ScanOptions())
    (engine,) = record.engines
    assert engine.gpu_util_max_pct is None and engine.gpu_util_absent
    findings, errors = evaluate([RULE], [ProbeResult("engine.frontend", "ok", 0.0, None, record)])
    assert errors == [] and [f.rule for f in findings] == ["frontend-cpu-bound"]
    assert "GPU" not in findings[0].title


def test_the_engines_own_gpu_is_judged_not_a_busy_tenants(tmp_path):
    """Another tenant's job at 95 % on GPU 1 does not hide an API server pinned beside its
    own GPU 0 at 20 % (the host's busiest GPU did)."""
    _, record, findings = _judged(tmp_path, "h100x2-vllm-pinned-beside-a-busy-tenant")
    (engine,) = record.engines
    assert (engine.gpu_util_max_pct, engine.gpu_util_scope, engine.gpus) == (20, "engine", 2)
    assert [f.rule for f in findings] == ["frontend-cpu-bound"]
    assert findings[0].evidence["gpu_util_scope"] == "engine"


def test_an_idle_neighbour_gpu_does_not_make_a_busy_engine_look_starved(tmp_path):
    _, record, findings = _judged(tmp_path, "h100x2-vllm-busy-beside-an-idle-gpu")
    (engine,) = record.engines
    assert (engine.gpu_util_max_pct, engine.gpu_util_scope) == (85, "engine")
    assert findings == []


def test_without_nvml_process_lists_every_gpu_is_judged(tmp_path):
    _, record, _ = _judged(tmp_path, "h100-vllm-api-server-pinned")
    assert record.engines[0].gpu_util_scope == "host"
