"""engine.cache: an engine's model and compile caches, where they live, and what its start cost.

On recorded hosts (tests/fixtures/build_cache_hosts.py: a pod whose caches are on an emptyDir
and the container's overlay, the same engine on a volume, that volume full, and an engine
whose environ and mountinfo are refused), on vLLM's own log lines (probes/helpers/
engine_phases.py cites them), and live: a real process started with ``HF_HOME`` on a tmpfs
mounted in its own mount namespace (``unshare -Urm``), read through the live host.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest

from doctor.model import Level, ScanOptions
from doctor.scan import scan
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost
from probes.engine import cache as cache_probe
from probes.engine.cache import hub_id, model_arg
from probes.helpers import cache_dirs as C
from probes.helpers.engine_flags import blank
from probes.helpers.engine_phases import parse
from probes.registry import PROBES
from tests.builtin_rules import builtin_rules
from tests.fixtures import build_cache_hosts as builder

RULE_IDS = ("engine-cache-ephemeral", "engine-cache-disk-full", "hf-offline-unset",
            "engine-compile-cache-missed", "engine-weights-load-slow")
RULES = [r for r in builtin_rules() if r.id in RULE_IDS]
SPECS = tuple(p for p in PROBES if p.name in ("engine.discovery", "engine.cache"))


@pytest.fixture(scope="module")
def scanned(tmp_path_factory):
    """Each recorded host scanned once: name -> (record, [(rule, severity, title)])."""
    root = tmp_path_factory.mktemp("cache-hosts")
    out = {}
    for name in builder.HOSTS:
        report = scan(RecordedHost(builder.build(root, name)),
                      ScanOptions(level=Level.QUICK, requests=False), SPECS, RULES)
        result = {p.name: p for p in report.probes}["engine.cache"]
        assert report.rule_errors == [] and result.status == "ok", (result.reason, report.rule_errors)
        out[name] = (result.record, [(f.rule, f.severity.name, f.title) for f in report.findings])
    return out


@pytest.mark.slow
def test_a_pods_emptydir_and_overlay_caches_are_lost_at_restart_and_the_log_says_what_it_cost(scanned):
    record, findings = scanned["k8s-vllm-emptydir-cache"]
    hub, compiled = record.caches
    assert (hub.name, hub.set_by, hub.path, hub.ephemeral) == ("hf-hub", "HF_HOME", "/cache/hf/hub", "emptyDir")
    assert (compiled.path, compiled.ephemeral, compiled.from_cache) == (
        "/root/.cache/vllm/torch_compile_cache", "container overlay", False)
    (start,) = record.engines
    assert (start.weights_load_s, start.compile_s, start.graph_capture_s) == (18.35, 104.04, 8.0)
    assert (start.model_id, start.model_cached, start.hf_hub_offline) == ("Qwen/Qwen3-8B-FP8", True, False)
    assert sorted((rule, severity) for rule, severity, _ in findings) == [
        ("engine-cache-ephemeral", "WARNING"), ("engine-cache-ephemeral", "WARNING"),
        ("hf-offline-unset", "INFO")]
    assert any("this start paid 104.04 s" in title for _, _, title in findings)


@pytest.mark.slow
def test_caches_on_a_volume_with_hf_hub_offline_and_a_warm_compile_are_silent(scanned):
    record, findings = scanned["vllm-cache-on-volume"]
    assert [c.persistent for c in record.caches] == [True, True]
    assert record.engines[0].compile_from_cache is True and record.engines[0].hf_hub_offline is True
    assert findings == []


@pytest.mark.slow
def test_a_full_volume_is_found_for_both_caches(scanned):
    record, findings = scanned["vllm-cache-disk-full"]
    assert {c.free_bytes for c in record.caches} == {2 << 30}
    assert record.engines[0].hf_hub_offline is True  # TRANSFORMERS_OFFLINE=1
    assert [(rule, severity) for rule, severity, _ in findings] == [
        ("engine-cache-disk-full", "WARNING"), ("engine-cache-disk-full", "WARNING")]


@pytest.mark.slow
def test_a_log_of_two_cold_starts_on_a_kept_cache_is_a_compile_cache_not_reused(scanned):
    record, findings = scanned["vllm-compile-cache-missed"]
    (start,) = record.engines
    assert (start.compile_from_cache, start.previous_compile_from_cache, start.compile_cache_disabled,
            start.weights_gib, start.pid) == (False, False, False, 8.8, builder.PID)
    assert [(rule, severity) for rule, severity, _ in findings] == [("engine-compile-cache-missed", "WARNING")]
    assert "the cache folder changed from /root/.cache/vllm/torch_compile_cache/da3c862604/" in findings[0][2]


@pytest.mark.slow
@pytest.mark.parametrize("name, kind, phases, model_cost", [
    ("sglang-cache-on-volume", "sglang", {"weights_load_s": 12.02, "weights_gib": 8.74,
                                          "graph_capture_s": 35.22, "compile_s": None}, 12.02),
    ("tgi-cache-on-volume", "tgi", {"download_s": 3.72, "weights_from_cache": True, "model_load_s": 37.051,
                                    "warmup_s": 24.351, "weights_load_s": None}, 3.72),
])
def test_sglangs_and_tgis_start_lines_through_the_probe(scanned, name, kind, phases, model_cost):
    record, findings = scanned[name]
    (start,) = record.engines
    assert start.kind == kind and start.log_source == "stdout /var/log/vllm.log"
    assert {field: getattr(start, field) for field in phases} == phases
    # what this start paid for its model cache: SGLang's weights load, TGI's download step
    assert [c.start_cost_s for c in record.caches if c.role == "model"] == [model_cost]
    assert findings == []


@pytest.mark.slow
def test_an_engine_whose_environ_and_mounts_are_refused_is_not_judged(scanned):
    record, findings = scanned["vllm-cache-unreadable"]
    assert all(c.path is None and "path" in c.missing for c in record.caches)
    assert record.engines[0].hf_hub_offline is None
    assert "environ" in record.engines[0].missing["hf_hub_offline"]
    assert findings == []


# vLLM's own phase lines (probes/helpers/engine_phases.py names each one's source)
COLD = ["INFO 06-21 07:19:52 [default_loader.py:267] Loading weights took 18.35 seconds",
        "INFO [gpu_model_runner.py:1801] Model loading took 14.2488 GiB and 5.173644 seconds",
        "INFO [backends.py:215] Compiling a graph for compile range (1, 4096) takes 85.42 s",
        "INFO [monitor.py:34] torch.compile took 104.04 s in total",
        "INFO [gpu_model_runner.py:3480] Graph capturing finished in 8 secs, took 0.31 GiB"]


def test_phases_of_a_cold_start_and_of_a_warm_one_appended_after_it():
    cold = parse(COLD)
    assert (cold.weights_load_s, cold.model_load_s, cold.compile_s, cold.graph_capture_s) == (
        18.35, 5.173644, 104.04, 8.0)
    assert cold.compile_from_cache is False
    warm = parse(COLD + [
        "INFO 02-22 06:35:01 [api_server.py:1896] vLLM API server version 0.11.0",
        "INFO [backends.py:267] Directly load the compiled graph(s) for compile range (1, 2048) "
        "from the cache, took 1.908 s",
        "INFO [monitor.py:34] torch.compile takes 9.27 s in total"])
    assert (warm.compile_s, warm.compile_from_cache, warm.weights_load_s) == (9.27, True, None)


def test_hostile_log_lines_give_no_figure():
    said = parse(["torch.compile took 1e309 s in total", "Loading weights took -3 seconds",
                  "Loading weights took " + "9" * 5000 + " seconds",
                  "Graph capturing finished in NaN secs", "\x1b[2J" * 3000, ""])
    assert (said.compile_s, said.weights_load_s, said.graph_capture_s) == (None, None, None)


MOUNTINFO = """1402 1201 0:812 / / rw - overlay overlay rw,lowerdir=/l
1403 1402 0:50 / /dev/shm rw - tmpfs shm rw
1420 1402 259:4 /var/lib/kubelet/pods/u/volumes/kubernetes.io~empty-dir/hf /cache\\040hf rw - ext4 /dev/sda1 rw
1421 1402 259:2 /srv /root/.cache rw - xfs /dev/sdb1 rw
bad line
"""


@pytest.mark.parametrize("path, kind", [
    ("/cache hf/hub", "emptyDir"), ("/root/.cache/vllm", None), ("/root/.triton/cache", "container overlay"),
    ("/dev/shm/x", "tmpfs"), ("/cache hfx", "container overlay")])
def test_the_mount_that_holds_a_path_and_whether_it_survives(path, kind):
    mount = C.mount_of(C.mounts(MOUNTINFO), path)
    assert mount is not None and C.ephemeral_kind(mount) == kind


@pytest.mark.parametrize("kind, argv, repo", [
    ("vllm", ["vllm", "serve", "Qwen/Qwen3-8B-FP8", "--port", "8000"], "Qwen/Qwen3-8B-FP8"),
    ("sglang", ["python", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B"],
     "meta-llama/Llama-3.1-8B"),
    ("vllm", ["vllm", "serve", "/models/llama-3-8b"], None),
    ("vllm", ["vllm", "serve", "../etc/passwd"], None),
    ("tgi", ["text-generation-launcher", "--model-id", "a--b/c"], None)])
def test_a_hub_id_is_told_from_a_local_path(kind, argv, repo):
    # cwd unreadable on the live host for pid 0: no local folder of that name is found
    assert hub_id(LiveHost(), 0, model_arg(kind, argv)) == repo


@pytest.mark.live
@pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare")
def test_a_real_process_with_hf_home_on_a_tmpfs_in_its_own_mount_namespace(tmp_path):
    """A real process whose HF_HOME is on a tmpfs mounted in its private mount namespace (the
    host's own mount table does not show it): placed on that tmpfs through its /proc entries,
    with the tmpfs's real size from statvfs."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    script = (f"mount -t tmpfs -o size=64m none {mnt} && mkdir {mnt}/hf && touch {mnt}/ready "
              f"&& exec env HF_HOME={mnt}/hf sleep 20")
    try:
        proc = subprocess.Popen(["unshare", "-Urm", "sh", "-c", script], stderr=subprocess.PIPE)
    except OSError as exc:
        pytest.skip(f"unshare: {exc}")
    try:
        for _ in range(100):  # bounded: 5 s
            if proc.poll() is not None:
                pytest.skip(f"no private mount namespace here: {proc.stderr.read().decode()[:200]}")
            if Path(f"/proc/{proc.pid}/root{mnt}/ready").exists():
                break
            time.sleep(0.05)
        host = LiveHost()
        env = C.Env(host, proc.pid)
        path, set_by = C.hub_cache(env, None)
        table, why = C.mount_table(host, proc.pid)
        cache = C.place(host, proc.pid, table, why, "test", "model", "hf-hub", path, set_by)
        assert (cache.path, cache.set_by, cache.fstype, cache.ephemeral) == (
            f"{mnt}/hf/hub", "HF_HOME", "tmpfs", "tmpfs")
        assert cache.exists is False and cache.total_bytes == 64 << 20  # hub/ not made yet
        assert C.mount_of(C.mounts(Path("/proc/self/mountinfo").read_text()), str(mnt)).fstype != "tmpfs"
    finally:
        proc.kill()
        proc.wait(timeout=5)


@pytest.mark.parametrize("kind, argv, eager, compiles", [
    ("vllm", ["vllm", "serve", "m"], None, True),
    ("vllm", ["vllm", "serve", "m", "--enforce-eager"], True, False),
    ("sglang", ["python", "-m", "sglang.launch_server", "--model-path", "m"], None, False),
    ("sglang", ["python", "-m", "sglang.launch_server", "--enable-torch-compile"], None, True),
    ("tgi", ["text-generation-launcher", "--model-id", "m"], None, False)])
def test_only_an_engine_that_compiles_at_start_has_its_compile_caches_judged(kind, argv, eager, compiles):
    engine = replace(blank("http://127.0.0.1:8000"), kind=kind, pid=1, enforce_eager=eager)
    assert cache_probe.compiles(engine, argv) is compiles
