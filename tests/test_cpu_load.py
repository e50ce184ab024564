"""host.cpu_load: the CPU other work leaves each engine, live and from recordings.

The recordings are copies of tests/fixtures/hosts/this-vm-epyc-2cpu with its measurement
edited (the edit is each test's story); the live tests start real processes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from doctor.model import ScanOptions
from doctor.seam.host import MeasurementError
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost
from probes.host import cpu_load
from tests import live_stack

VM = Path(__file__).parent / "fixtures" / "hosts" / "this-vm-epyc-2cpu"


def _replay(tmp_path: Path, edit) -> cpu_load.CpuLoadRecord:
    root = tmp_path / "host"
    shutil.copytree(VM, root, symlinks=True)
    measurements = json.loads((root / "measurements.json").read_text())
    edit(measurements["host.cpu_load"])
    (root / "measurements.json").write_text(json.dumps(measurements))
    return cpu_load.probe(RecordedHost(root), ScanOptions())


def _llama(pid: int, cores: float, **extra) -> dict:
    return {"pid": pid, "comm": "llama-server", "cmdline": "/opt/llama-server -m /m.gguf -t 1",
            "cpu_cores": cores, **extra}


def test_a_recording_from_before_the_engine_figures_derives_them_from_its_top_rows(tmp_path):
    def edit(data):
        data.update(logical_cpus=2, busy_cores=1.9, top=[
            {"pid": 10, "comm": "gzip", "cmdline": "gzip", "cpu_cores": 0.4, "related": False},
            {"pid": 11, "comm": "llm-doctor", "cmdline": "llm-doctor", "cpu_cores": 0.1, "related": True},
            {**_llama(12, 0.5), "related": False}])
        for key in ("engines", "engine_cores", "related_cores", "other_processes"):
            data.pop(key, None)

    record = _replay(tmp_path, edit)
    assert record.other_busy_cores == pytest.approx(1.3)  # 1.9 - the engine's 0.5 - llm-doctor's 0.1
    assert record.other_processes == 1
    (engine,) = record.engines
    assert (engine.engine, engine.pid, engine.compute_threads) == ("llama.cpp", 12, 1)
    assert engine.threads is None and engine.cores_wanted == 1.0  # -t 1 says what it computes with
    assert engine.cores_left == pytest.approx(0.7)
    assert engine.missing == {}


def test_a_figure_the_sample_did_not_keep_says_why(tmp_path):
    """A row without Threads and an engine without -t: cores_wanted is None with its
    reason, which `why` shows instead of "has no value"."""
    def edit(data):
        data["engines"] = [{"pid": 12, "comm": "python3", "cmdline": "python3 -m vllm.entrypoints."
                            "openai.api_server --model /m", "cpu_cores": 0.5}]

    (engine,) = _replay(tmp_path, edit).engines
    assert engine.cores_wanted is None
    assert "thread count was not read" in engine.missing["cores_wanted"]


def test_an_engine_pinned_to_some_cpus_is_judged_by_how_busy_those_are(tmp_path):
    def edit(data):
        data.update(logical_cpus=16, busy_cores=13.0, top=[], engine_cores=1.0, related_cores=0.0,
                    other_processes=30,
                    engines=[_llama(12, 1.0, threads=9, allowed_cpus=4, allowed_busy_cores=0.4)])

    (engine,) = _replay(tmp_path, edit).engines
    assert (engine.usable_cpus, engine.other_busy_cores, engine.cores_left) == (4, 0.4, 3.6)


@pytest.mark.parametrize("engines, message", [
    ("x", "engines = 'x': expected a list"),
    ([7], "engines[0] = 7: expected an object"),
    ([{"pid": 1, "comm": "x", "cmdline": "gzip -9", "cpu_cores": 0.1}], "not a serving engine"),
    ([_llama(1, 0.1, threads=-3)], "engines[0].threads = -3: expected an integer"),
    ([_llama(1, 1e9)], "engines[0].cpu_cores = 1000000000.0: expected a number from 0 to 1e+06"),
])
def test_a_wrong_engine_row_is_a_measurement_error_naming_it(tmp_path, engines, message):
    def edit(data):
        data["engines"] = engines

    with pytest.raises(MeasurementError, match="measurement host.cpu_load: ") as caught:
        _replay(tmp_path, edit)
    assert message in str(caught.value)


def _tree(seconds: float) -> subprocess.Popen:
    """A process tree whose command lines say ``vllm serve``: a parent and one child, as
    vLLM's API server and its EngineCore are."""
    code = ("import subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(%s)', 'vllm', 'serve', '/m'])\n"
            "time.sleep(%s)\nchild.kill()\n") % (seconds, seconds)
    return subprocess.Popen([sys.executable, "-c", code, "vllm", "serve", "/m"], stdin=subprocess.DEVNULL)


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_live_other_work_is_summed_over_every_process_and_an_engine_is_its_tree():
    engine = _tree(20)
    hogs = [live_stack.duty_spinner(f"ldsmall{i}", 20, 0.1, orphan=True) for i in range(6)]
    try:
        time.sleep(1.0)  # the child started, the hogs spinning
        record = cpu_load.probe(LiveHost(), ScanOptions())
    finally:
        for proc in [engine, *hogs]:
            proc.kill()
            proc.wait(10)
    ours = [e for e in record.engines if e.pid == engine.pid]
    assert ours, record.engines
    (vllm,) = ours
    assert vllm.engine == "vllm" and vllm.processes == 2
    assert vllm.threads is not None and vllm.threads >= 2 and vllm.allowed_cpus is not None
    assert vllm.usable_cpus <= record.logical_cpus and vllm.cores_wanted is not None
    assert record.other_processes is not None and record.other_processes >= len(hogs)
    assert record.other_busy_cores is not None and 0 <= record.other_busy_cores <= record.logical_cpus
    assert vllm.cores_left == pytest.approx(vllm.usable_cpus - vllm.other_busy_cores, abs=1e-3)
    assert "cores left" in cpu_load.summary(record)
    assert sys.executable  # the hogs and the tree ran under this interpreter
