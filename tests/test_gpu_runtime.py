"""gpu.runtime (driver-runtime-mismatch): the CUDA runtime an engine loads, forward-compat
libraries, and the GPU architectures in its build, read from real files through LiveHost and
from the recorded hosts of tests/fixtures/build_gpu_runtime_hosts.py; every file the engine
names is hostile input."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import struct
import time
from pathlib import Path

import pytest

from doctor.model import Level, ScanOptions
from doctor.scan import scan
from doctor.seam import nvml
from doctor.seam.host import HostReadError
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost, RecordingHost
from probes.gpu.runtime import datacenter_part, newer
from probes.helpers.cuda_build import (MAX_CONTAINERS, BuildArches, BuildError, build_arches,
                                       runs_on)
from probes.helpers.cuda_loaded import mapped, torch_version
from probes.registry import PROBES
from tests.builtin_rules import builtin_rules
from tests.conftest import FIXTURE_HOSTS
from tests.fixtures.build_gpu_runtime_hosts import (CU126_ARCHES, CU128_ARCHES, CUBIN, PTX,
                                                    fatbin_elf, version_py)
from tests.test_gpu_nvml import fake_pynvml

RULES = builtin_rules()
RUNTIME = [p for p in PROBES if p.name == "gpu.runtime"]
LIB = "usr/local/lib/python3.12/dist-packages/torch/lib/libtorch_cuda.so"


def _runtime(root, probes=PROBES) -> object:
    report = scan(RecordedHost(root), ScanOptions(level=Level.QUICK), probes, RULES)
    result = next(p for p in report.probes if p.name == "gpu.runtime")
    return report, result


# --- real files through LiveHost ---------------------------------------------------------


def test_a_real_elf_and_version_file_read_through_the_live_host(tmp_path):
    torch = tmp_path / "site-packages" / "torch"
    (torch / "lib").mkdir(parents=True)
    (torch / "version.py").write_text(version_py("2.6.0+cu126", "12.6"))
    (torch / "lib" / "libtorch_cuda.so").write_bytes(fatbin_elf(CU126_ARCHES + [(PTX, 90)]))
    arches = build_arches(LiveHost(), str(torch / "lib" / "libtorch_cuda.so"))
    assert (arches.sass, arches.ptx, arches.containers, arches.complete) == ((80, 86, 90), (90,), 3, True)
    assert arches.text() == "sm_80,sm_86,sm_90,compute_90"
    version = torch_version(LiveHost(), str(torch / "version.py"))
    assert (version.version, version.cuda, version.hip) == ("2.6.0+cu126", "12.6", None)


def test_the_installed_torch_version_file_parses_without_importing_torch():
    spec = importlib.util.find_spec("torch")  # finds the package; runs none of it
    if spec is None or spec.origin is None:
        pytest.skip("torch is not installed in this environment")
    path = os.path.join(os.path.dirname(spec.origin), "version.py")
    version = torch_version(LiveHost(), path)
    assert version.version and version.version.split("+")[0].count(".") == 2
    if "+cpu" in version.version:
        assert version.cuda is None


def test_the_live_host_reads_a_range_and_refuses_a_fifo(tmp_path):
    blob = tmp_path / "blob"
    blob.write_bytes(bytes(range(256)))
    assert LiveHost().read_bytes(str(blob), 250, 100) == bytes(range(250, 256))
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(HostReadError, match="not a regular file"):
        LiveHost().read_bytes(str(tmp_path / "fifo"), 0, 16)


def _build_error(host, path) -> str:
    with pytest.raises(BuildError) as caught:
        build_arches(host, path)
    return str(caught.value)


@pytest.mark.parametrize("cut", [0, 10, 63, 64, 900, -700, -64, -1])
def test_a_truncated_library_is_named_truncated(tmp_path, cut):
    data = fatbin_elf(CU128_ARCHES)
    path = tmp_path / "libtorch_cuda.so"
    path.write_bytes(data[:cut] if cut else b"")
    message = _build_error(LiveHost(), str(path))
    assert str(path) in message and ("truncated" in message or "runs past" in message), message


@pytest.mark.timeout(60)
def test_a_symlink_loop_a_directory_and_a_fifo_are_reasons_not_hangs(tmp_path):
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    # each a reason; a hang (a FIFO opened for reading waits for a writer for ever) would
    # meet the test's timeout mark, not a clock of its own
    assert "failed" in _build_error(LiveHost(), str(tmp_path / "a"))
    assert "not a regular file" in _build_error(LiveHost(), str(tmp_path / "fifo"))
    assert "failed" in _build_error(LiveHost(), str(tmp_path / "dir"))


def test_a_4_gib_version_file_is_refused_unread(tmp_path):
    path = tmp_path / "version.py"
    with open(path, "wb") as f:
        f.truncate(4 << 30)  # sparse: no disk, but 4 GiB to anything that reads it whole
    with pytest.raises(HostReadError, match="over 65536: not a torch version file"):
        torch_version(LiveHost(), str(path))


@pytest.mark.parametrize("text,problem", [
    ("import os\nos.system('touch /tmp/pwned')\n", "not a torch version file"),
    ("cuda = '12.8; rm -rf /'\n", "cuda = "),
    ("cuda = 'twelve'\n", "is not a CUDA version"),
])
def test_a_version_file_is_parsed_never_run(tmp_path, text, problem):
    path = tmp_path / "version.py"
    path.write_text(text)
    with pytest.raises(HostReadError, match=problem):
        torch_version(LiveHost(), str(path))
    assert not os.path.exists("/tmp/pwned")


def test_random_corruption_of_the_library_is_a_reason_or_an_answer(tmp_path):
    rng = random.Random(15)
    data = bytearray(fatbin_elf(CU128_ARCHES))
    path = tmp_path / "lib.so"
    deadline = time.monotonic() + 15
    for _ in range(400):
        if time.monotonic() > deadline:
            break
        mutated = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(len(mutated))
            mutated[at:at + 8] = struct.pack("<Q", rng.choice([0, 1, 2**63, 2**64 - 1,
                                                               rng.getrandbits(64)]))
        path.write_bytes(bytes(mutated[:len(data)]))
        try:
            result = build_arches(LiveHost(), str(path))
        except BuildError as exc:
            assert str(path) in str(exc)
        else:
            assert isinstance(result, BuildArches) and result.containers <= MAX_CONTAINERS


def test_a_library_of_many_containers_is_walked_to_the_cap(tmp_path):
    path = tmp_path / "lib.so"
    path.write_bytes(fatbin_elf([(CUBIN, 90)], containers=MAX_CONTAINERS + 40))
    arches = build_arches(LiveHost(), str(path))
    assert (arches.sass, arches.containers, arches.complete) == ((90,), MAX_CONTAINERS, False)


def test_a_library_without_kernels_says_so(tmp_path):
    path = tmp_path / "libc10.so"
    data = bytearray(fatbin_elf([(CUBIN, 90)]))
    at = data.find(b".nv_fatbin")
    data[at:at + 10] = b".rodata\0\0\0"
    path.write_bytes(bytes(data))
    assert "no .nv_fatbin section" in _build_error(LiveHost(), str(path))
    (tmp_path / "text").write_text("#!/bin/sh\n" * 10)
    assert "not an ELF file" in _build_error(LiveHost(), str(tmp_path / "text"))


# --- the compatibility facts ---------------------------------------------------------------


@pytest.mark.parametrize("sass,ptx,cc,ok", [
    ((80,), (), (8, 6), True),  # sm_86 runs sm_80 cubins: same major
    ((86,), (), (8, 0), False),  # not the other way
    ((80, 86, 90), (), (12, 0), False),  # the RTX 5090 under an older wheel
    ((100,), (), (12, 0), False),  # sm_100 cubins do not run on sm_120
    ((80,), (80,), (12, 0), True),  # PTX JIT-compiles for a newer GPU
    ((), (90,), (8, 9), False),  # but not for an older one
    ((120,), (), (12, 0), True),
])
def test_a_kernel_image_exists_for_the_gpu(sass, ptx, cc, ok):
    assert runs_on(BuildArches(sass, ptx, 1, True), *cc) is ok


@pytest.mark.parametrize("runtime,driver,want", [
    ("12.8", 12040, "minor"), ("13.0", 12040, "major"), ("12.4", 12040, None),
    ("11.8", 12040, None), ("12", 12040, None), ("13", 12090, "major"), ("12.8", None, None),
])
def test_a_runtime_newer_than_the_driver(runtime, driver, want):
    assert newer(runtime, driver) == want


@pytest.mark.parametrize("name,datacenter", [
    ("NVIDIA GeForce RTX 5090", False), ("NVIDIA TITAN RTX", False), ("NVIDIA RTX A6000", False),
    ("Quadro RTX 8000", False), ("NVIDIA H100 80GB HBM3", True), ("NVIDIA L40S", True),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", True), (None, None),
])
def test_forward_compatibility_is_for_datacenter_parts(name, datacenter):
    assert datacenter_part(name) is datacenter


def test_the_mapped_libraries_say_the_runtime_and_the_compat_copy():
    maps = "\n".join(f"7f00-7f01 r-xp 00000000 103:02 1 {p}" for p in (
        "/opt/conda/lib/python3.11/site-packages/torch/lib/libtorch_cuda.so",
        "/opt/conda/lib/python3.11/site-packages/torch/lib/libcudart-d0da41ae.so.11.0",
        "/usr/local/cuda/compat/libcuda.so.535.104.05 (deleted)"))
    loaded = mapped(maps + "\nnot a maps line\n\n")
    assert loaded.cudart_version == "11"  # .so.11.0 is the soname of every 11.x
    assert loaded.site_packages == "/opt/conda/lib/python3.11/site-packages"
    assert loaded.libcuda == "/usr/local/cuda/compat/libcuda.so.535.104.05"
    assert loaded.compat is True
    assert mapped("7f-8f r-xp 0 0:0 1 /usr/local/cuda-12.8/lib64/libcudart.so.12.8.90").cudart_version == "12.8"


# --- NVML: the compute capability through the funnel ----------------------------------------


def test_compute_capability_comes_through_the_funnel_as_named_fields():
    nvml._reset_for_tests(fake_pynvml(nvmlDeviceGetCudaComputeCapability=lambda h: (12, 0)))
    try:
        assert nvml.query("nvmlDeviceGetCudaComputeCapability", 0) == {"major": 12, "minor": 0}
    finally:
        nvml._reset_for_tests(None)


# --- the recorded hosts ----------------------------------------------------------------------


def test_the_rtx5090_host_names_the_missing_architecture():
    _, result = _runtime(FIXTURE_HOSTS / "rtx5090-torch-cu126")
    engine = result.record.engines[0]
    assert result.record.gpus[0].compute_capability == "12.0"
    assert engine.build_arches == "sm_80,sm_86,sm_90"
    assert engine.arch_missing_gpus == "GPU0 sm_120 (NVIDIA GeForce RTX 5090)"


def test_a_driver_without_the_compute_capability_call_is_not_supported_and_not_judged(tmp_path):
    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "rtx5090-torch-cu126", root, symlinks=True)
    entries = json.loads((root / "nvml.json").read_text())
    for e in entries:
        if e["call"] == "nvmlDeviceGetCudaComputeCapability":  # a driver before the call
            e.pop("value")
            e["error"] = "not-found"
    (root / "nvml.json").write_text(json.dumps(entries))
    report, result = _runtime(root)
    assert result.record.gpus[0].missing == {"compute_capability": "not-supported"}
    assert not [f for f in report.findings if f.rule == "gpu-arch-not-in-build"]


def test_a_truncated_library_on_a_recorded_host_is_a_reason_not_an_error(tmp_path):
    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "rtx5090-torch-cu126", root, symlinks=True)
    lib = root / "fs" / "proc" / "7310" / "root" / LIB
    lib.write_bytes(lib.read_bytes()[:900])
    report, result = _runtime(root)
    assert result.status == "ok"
    assert "truncated" in result.record.engines[0].missing["build_arches"]
    assert str(root) not in result.record.engines[0].missing["build_arches"]
    assert not [f for f in report.findings if f.rule == "gpu-arch-not-in-build"]


@pytest.mark.slow
def test_torch_found_from_the_interpreter_when_not_mapped(tmp_path):
    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "h100-sxm-8x-torch-cu128", root, symlinks=True)
    maps = root / "fs" / "proc" / "51877" / "maps"
    maps.write_text("".join(line for line in maps.read_text().splitlines(True) if "/torch/" not in line))
    report, result = _runtime(root)
    engine = result.record.engines[0]
    assert (engine.torch_cuda, engine.runtime_cuda) == ("12.8", "12.8")
    assert engine.torch_version_file == "/usr/local/lib/python3.12/dist-packages/torch/version.py"
    assert engine.missing["build_arches"] == "no libtorch_cuda.so mapped"
    assert [f.rule for f in report.findings if f.cause == "driver-runtime-mismatch"] == [
        "cuda-runtime-minor-newer-than-driver"]


def test_unreadable_maps_are_a_reason(tmp_path):
    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "rtx4090-cuda-compat", root, symlinks=True)
    (root / "fs" / "proc" / "8120" / "maps").unlink()
    (root / "fs" / "proc" / "8120" / "maps").symlink_to("maps")  # a loop
    report, result = _runtime(root)
    assert result.status == "ok"
    engine = result.record.engines[0]
    assert engine.missing["maps"] == "failed"
    # torch/version.py is still found from the interpreter; what was mapped is not known
    assert (engine.libcuda, engine.compat, engine.torch_cuda) == (None, False, "12.8")
    assert [f.rule for f in report.findings if f.cause == "driver-runtime-mismatch"] == [
        "cuda-runtime-minor-newer-than-driver"]


@pytest.mark.parametrize("name", ["rtx5090-torch-cu126", "h100-sxm-8x-torch-cu128"])
def test_capture_keeps_only_the_ranges_read_and_replays_the_same_record(name, tmp_path):
    source = RecordedHost(FIXTURE_HOSTS / name)
    options = ScanOptions(level=Level.QUICK)
    original = next(p for p in scan(source, options, RUNTIME, RULES).probes)
    capture = RecordingHost(source, tmp_path / "cap")  # reads the recorded host as live
    scan(capture, options, RUNTIME, RULES)
    capture.save({"level": "quick"})
    replayed = next(p for p in scan(RecordedHost(tmp_path / "cap"), options, RUNTIME, RULES).probes)
    assert (replayed.status, replayed.record) == (original.status, original.record)
    pid = original.record.engines[0].pid
    kept = (tmp_path / "cap" / "fs" / "proc" / str(pid) / "root" / LIB).read_bytes()
    full = (FIXTURE_HOSTS / name / "fs" / "proc" / str(pid) / "root" / LIB).read_bytes()
    assert len(kept) == len(full) and kept != full  # headers kept at their offsets, payloads not


def test_without_an_engine_the_probe_is_skipped_with_the_reason(tmp_path):
    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "l40s-torch-cu124", root, symlinks=True)
    shutil.rmtree(root / "fs" / "proc" / "23110")
    _, result = _runtime(root)
    assert result.status == "skipped" and "no serving engine" in result.reason


@pytest.mark.slow
def test_random_corruption_of_a_recorded_engine_never_sinks_the_probe(tmp_path):
    """maps, torch/version.py and libtorch_cuda.so of the RTX 5090 host, each cut, spliced
    with hostile bytes or replaced: the probe answers ok or skipped, with reasons."""
    rng = random.Random(1515)
    proc = Path("fs") / "proc" / "7310"
    targets = [proc / "maps", proc / "root" / LIB,
               proc / "root" / "usr/local/lib/python3.12/dist-packages/torch/version.py"]
    hostile = [b"\0" * 64, b"\xff" * 64, b"\x7fELF\x02\x01" + b"\xff" * 58, b"\n" * 4096,
               b"cuda = '99.9'\n", b"7f-8f r-xp 0 0:0 1 /../../etc/torch/lib/libtorch_cuda.so\n",
               struct.pack("<IHHQ", 0xBA55ED50, 1, 16, 2**64 - 1)]
    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "rtx5090-torch-cu126", root, symlinks=True)
    deadline = time.monotonic() + 15
    for _ in range(200):
        if time.monotonic() > deadline:
            break
        target = root / rng.choice(targets)
        data = target.read_bytes()
        at = rng.randrange(len(data) + 1)
        target.write_bytes(rng.choice([data[:at], data[:at] + rng.choice(hostile) + data[at:],
                                       rng.choice(hostile)]))
        report, result = _runtime(root, RUNTIME)
        assert result.status in ("ok", "skipped"), (target, result.status, result.reason)
        assert report.rule_errors == []
        target.write_bytes(data)


@pytest.mark.parametrize("text, order, names, want", [
    (None, None, ("A", "B"), None),
    ("1", None, ("A", "A"), (1,)),
    ("1,0", "PCI_BUS_ID", ("A", "B"), (1, 0)),
    ("1", None, ("A", "B"), None),  # fastest-first on two models: CUDA's 1 may be NVML's 0
    ("0,1,x,2", None, ("A", "A", "A"), (0, 1)),  # CUDA stops at the first bad entry
    ("0,5", None, ("A", "A"), (0,)),  # past the last GPU
    ("", None, ("A",), ()),  # every device hidden
    ("GPU-8f3a0c1e-0000", None, ("A",), None),
    ("0,0", None, ("A", "A"), (0,)),
])
def test_cuda_visible_devices_as_nvml_indexes(text, order, names, want):
    from probes.helpers.visible_gpus import parse

    assert parse(text, len(names), order, names).indexes == want


@pytest.mark.parametrize("environ, fires", [
    ("CUDA_VISIBLE_DEVICES=0\0", True),
    ("CUDA_VISIBLE_DEVICES=\0", False),  # it uses no GPU: no kernel image is missing for it
    ("CUDA_VISIBLE_DEVICES=GPU-8f3a0c1e\0", True),  # not mapped: every GPU judged
    ("PATH=/usr/bin\0", True),
])
def test_only_the_gpus_the_engine_may_use_are_judged(tmp_path, environ, fires):
    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "rtx5090-torch-cu126", root, symlinks=True)
    (root / "fs" / "proc" / "7310" / "environ").write_text(environ)
    report, result = _runtime(root)
    assert bool([f for f in report.findings if f.rule == "gpu-arch-not-in-build"]) is fires
    assert result.record.engines[0].visible_gpus
