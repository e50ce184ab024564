"""Behaviour of the measurement kernels on small inputs: stream (memory) and disk_read."""

from __future__ import annotations

import errno
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from probes.helpers import stream_passes as _passes
from probes.helpers import disk_read
from probes.kernels import stream

REPO_ROOT = Path(__file__).resolve().parent.parent
SMALL_ARRAY_BYTES = 8 * 2**20
MIB = 2**20


def _run_module(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


# --- stream -------------------------------------------------------------------------------


def _check_rates(result: dict) -> None:
    for key in ("copy_gbps", "triad_gbps", "copy_best_s", "triad_best_s", "duration_s"):
        assert math.isfinite(result[key]) and result[key] > 0, key
    assert result["valid"] is True
    # STREAM's byte accounting: copy moves 2 arrays, triad 3, per element, in decimal GB.
    elements = result["elements"]
    assert result["array_bytes"] == elements * 8
    assert elements * 16 / result["copy_best_s"] == pytest.approx(result["copy_gbps"] * 1e9)
    assert elements * 24 / result["triad_best_s"] == pytest.approx(result["triad_gbps"] * 1e9)
    json.dumps(result)  # a plain, serialisable dict


def test_stream_numpy_backend_gives_valid_positive_rates():
    result = stream.measure(
        array_bytes=SMALL_ARRAY_BYTES, threads=2, repeats=2, backend="numpy"
    )
    _check_rates(result)
    assert result["backend"] == "numpy"
    assert result["threads"] == 2
    assert result["dtype"] == "float64"
    # One np.add per chunk (q = 1): the 3 passes STREAM counts, not the 5 of s*c then + b.
    assert result["triad_passes"] == 3
    assert result["triad_scalar"] == stream.NUMPY_SCALAR == 1.0
    assert result["repeats"] == 2
    assert isinstance(result["huge_pages"], bool)
    assert result["other_busy_cores"] is None or result["other_busy_cores"] >= 0


def test_stream_numpy_triad_is_right_at_every_chunk_edge():
    # 3 chunks of an odd length: both ends of every chunk are sampled, and the check replays
    # the numpy triad's own q = 1 (with STREAM's 3 these values would not check out).
    elements = 3 * 64 * 1024 + 12345
    result = stream.measure(array_bytes=elements * 8, threads=3, repeats=3, backend="numpy")
    assert result["valid"] is True and result["repeats"] == 3
    assert stream._expected(3, stream.NUMPY_SCALAR) != stream._expected(3, stream.SCALAR)


def test_the_probe_runs_as_many_timed_passes_as_c_stream():
    # C STREAM's best is a best of 10; a best of fewer reads low beside it on a shared host.
    from probes.host import memory_bandwidth

    result = memory_bandwidth._run_kernel(SMALL_ARRAY_BYTES, 2)
    assert result["backend"] == "numpy"
    assert result["repeats"] == memory_bandwidth.MAX_REPEATS == 10
    assert result["valid"] is True


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_stream_time_budget_stops_the_passes_but_keeps_two(backend):
    if backend == "torch":
        pytest.importorskip("torch")
    result = stream.measure(array_bytes=SMALL_ARRAY_BYTES, threads=1, repeats=100,
                            backend=backend, budget_s=1e-6)
    assert result["repeats"] == _passes.MIN_REPEATS
    assert result["valid"] is True  # the check replays exactly the passes that ran
    assert result["timed_s"] < result["duration_s"]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_stream_deadline_cuts_numpys_first_touch_and_the_passes_use_what_was_filled(backend):
    if backend == "torch":
        pytest.importorskip("torch")
    planned = 64 * MIB
    result = stream.measure(array_bytes=planned, threads=2, repeats=100, backend=backend,
                            budget_s=100.0, deadline_s=1e-6)
    assert result["planned_array_bytes"] == planned
    assert result["repeats"] == _passes.MIN_REPEATS  # the deadline stops the passes too
    _check_rates(result)  # valid: the check samples the chunks' filled starts only
    if backend == "numpy":  # one step of TOUCH_STEPS, each thread a slice of its chunk
        assert result["touch_cut"] is True
        assert result["array_bytes"] == planned // _passes.TOUCH_STEPS
    else:  # torch fills in one step (its threads split a slice otherwise than the array)
        assert result["touch_cut"] is False and result["array_bytes"] == planned


def test_stream_a_cut_first_touch_still_fills_the_callers_floor():
    # Arrays under 2x the cache read part cache: the probe asks for that much whatever the time.
    planned = 64 * MIB
    result = stream.measure(array_bytes=planned, threads=2, repeats=2, backend="numpy",
                            deadline_s=1e-6, min_array_bytes=planned // 2)
    assert result["touch_cut"] is True and result["array_bytes"] == planned // 2
    _check_rates(result)


def test_stream_pages_past_a_cut_first_touch_take_no_memory():
    planned = 512 * MIB
    done = _run_module("probes.kernels.stream", "--array-bytes", str(planned), "--threads", "2",
                       "--backend", "numpy", "--deadline-s", "1e-6")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["array_bytes"] == planned // _passes.TOUCH_STEPS
    # 3 x 32 MiB touched of 3 x 512 MiB mapped; VmHWM, the kernel's own peak since its exec
    assert result["peak_rss_bytes"] < 3 * planned // 4


def test_huge_pages_are_not_asked_for_where_a_balloon_reports_free_pages(tmp_path):
    def device(name, kind, features):
        (tmp_path / name).mkdir()
        (tmp_path / name / "device").write_text(kind + "\n")
        (tmp_path / name / "features").write_text(features + "\n")

    device("virtio2", "0x0001", "1100010110111011" + "0" * 48)  # a network device: bit 5 set
    assert not stream._free_pages_reported(str(tmp_path))
    device("virtio0", "0x0005", "0110000000000000" + "0" * 48)  # balloon, no reporting
    assert not stream._free_pages_reported(str(tmp_path))
    (tmp_path / "virtio0" / "features").write_text("0110010000000000" + "0" * 48 + "\n")
    assert stream._free_pages_reported(str(tmp_path))  # VIRTIO_BALLOON_F_REPORTING
    assert not stream._free_pages_reported(str(tmp_path / "absent"))


def test_stream_counts_other_work_on_the_cpus_and_not_its_own():
    spin = subprocess.Popen([sys.executable, "-c", "import time\nt = time.time() + 20\n"
                             "while time.time() < t: pass"])
    try:
        loaded = stream.measure(array_bytes=SMALL_ARRAY_BYTES, threads=1, repeats=100,
                                backend="numpy", budget_s=0.6)
    finally:
        spin.kill()
        spin.wait()
    # A process spinning on one core shows as about one core of other work (other users of
    # a shared machine can only add to it); the measuring process itself is subtracted.
    assert loaded["other_busy_cores"] >= 0.7


def test_stream_torch_backend_gives_valid_positive_rates():
    torch = pytest.importorskip("torch")
    threads_before = torch.get_num_threads()
    result = stream.measure(
        array_bytes=SMALL_ARRAY_BYTES, threads=1, repeats=2, backend="torch"
    )
    _check_rates(result)
    assert result["backend"] == "torch"
    assert result["triad_passes"] == 3
    assert result["triad_scalar"] == stream.SCALAR == 3.0  # torch.add(alpha=) is STREAM's triad
    assert result["simd"] == torch.backends.cpu.get_cpu_capability()
    assert torch.get_num_threads() == threads_before  # the probe leaves torch as it found it


def test_stream_numpy_with_more_threads_than_elements_still_checks_out():
    result = stream.measure(array_bytes=3 * 8, threads=4, repeats=1, backend="numpy")
    assert result["elements"] == 3
    assert result["valid"] is True


@pytest.mark.parametrize(
    "arguments",
    [
        {"backend": "fortran"},
        {"threads": 0},
        {"repeats": 0},
        {"array_bytes": 4},
        {"device": "tpu"},
        {"backend": "numpy", "device": "cuda"},
        {"budget_s": 0},
    ],
)
def test_stream_rejects_bad_arguments(arguments):
    call = {"array_bytes": SMALL_ARRAY_BYTES, "threads": 1, "repeats": 1, "backend": "numpy"}
    call.update(arguments)
    with pytest.raises(ValueError):
        stream.measure(**call)


@pytest.mark.slow
def test_stream_cli_prints_one_json_object():
    done = _run_module(
        "probes.kernels.stream",
        "--array-bytes", str(SMALL_ARRAY_BYTES), "--threads", "2", "--repeats", "2",
        "--backend", "numpy",
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["valid"] is True
    assert result["copy_gbps"] > 0


def _numpy_dispatch() -> list[str]:
    """The SIMD targets this numpy build dispatches and this CPU has, in a fresh process."""
    done = subprocess.run(
        [sys.executable, "-c", "from probes.kernels import stream\n"
         "print(stream._numpy_simd())"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
        env={k: v for k, v in os.environ.items() if k != "NPY_DISABLE_CPU_FEATURES"},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.slow
def test_stream_cli_runs_numpy_at_its_baseline_unless_asked_for_the_widest_loops():
    common = ("--array-bytes", str(SMALL_ARRAY_BYTES), "--threads", "2", "--repeats", "2",
              "--backend", "numpy")
    baseline = _run_module("probes.kernels.stream", *common)
    widest = _run_module("probes.kernels.stream", *common, "--numpy-simd", "widest")
    assert baseline.returncode == 0 and widest.returncode == 0, baseline.stderr + widest.stderr
    # As wide as C STREAM's usual gcc -O3 build: numpy's dispatch targets are off.
    assert json.loads(baseline.stdout)["simd"].split()[0] == "baseline"
    assert json.loads(baseline.stdout)["valid"] is True
    # widest: what this numpy picks here by itself (its dispatch targets, where it has some).
    assert json.loads(widest.stdout)["simd"].split() == _numpy_dispatch()


@pytest.mark.slow
def test_stream_cli_leaves_a_numpy_dispatch_the_user_set_alone():
    env = dict(os.environ, NPY_DISABLE_CPU_FEATURES="")  # set, and empty: numpy's own choice
    done = subprocess.run(
        [sys.executable, "-m", "probes.kernels.stream", "--array-bytes", str(SMALL_ARRAY_BYTES),
         "--threads", "1", "--repeats", "1", "--backend", "numpy"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, env=env,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["simd"].split() == _numpy_dispatch()


def test_stream_cli_bad_backend_exits_1_with_one_line():
    done = _run_module(
        "probes.kernels.stream", "--array-bytes", "1024", "--threads", "1", "--backend", "fortran"
    )
    assert done.returncode == 1
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1
    assert "fortran" in done.stderr


def test_stream_cli_bad_value_exits_1_without_traceback():
    done = _run_module("probes.kernels.stream", "--array-bytes", "1024", "--threads", "0")
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "threads" in done.stderr


# --- disk_read ----------------------------------------------------------------------------


def _write_file(path: Path, size_bytes: int) -> str:
    path.write_bytes(os.urandom(size_bytes))
    return str(path)


def test_disk_read_stops_at_max_bytes_on_a_bigger_file(tmp_path):
    path = _write_file(tmp_path / "weights.bin", 4 * MIB)
    result = disk_read.measure(
        paths=[path], max_bytes=1 * MIB, max_seconds=30, block_bytes=256 * 1024
    )
    assert result["stopped_by"] == "max_bytes"
    assert 0 < result["bytes_read"] <= 1 * MIB
    assert result["method"] in ("o_direct", "fadvise_dontneed")
    assert result["files_read"] == [path]
    assert result["read_mbps"] > 0
    json.dumps(result)


def test_disk_read_unaligned_max_bytes_never_overshoots(tmp_path):
    path = _write_file(tmp_path / "weights.bin", 2 * MIB)
    result = disk_read.measure(paths=[path], max_bytes=MIB + 1000, max_seconds=30)
    assert result["stopped_by"] == "max_bytes"
    assert result["bytes_read"] <= MIB + 1000


def test_disk_read_reads_every_file_to_the_end_under_the_limits(tmp_path):
    first = _write_file(tmp_path / "a.bin", 2 * MIB)
    second = _write_file(tmp_path / "b.bin", 3 * MIB + 100)  # unaligned tail
    result = disk_read.measure(paths=[first, second], max_bytes=64 * MIB, max_seconds=30)
    assert result["stopped_by"] == "end_of_files"
    assert result["files_read"] == [first, second]
    # O_DIRECT stops at the last page boundary; buffered reads take the tail too.
    assert 5 * MIB <= result["bytes_read"] <= 5 * MIB + 100
    assert result["method"] in ("o_direct", "fadvise_dontneed")


def test_disk_read_falls_back_when_o_direct_is_refused(tmp_path, monkeypatch):
    if not hasattr(os, "O_DIRECT"):
        pytest.skip("no O_DIRECT on this platform")
    path = _write_file(tmp_path / "weights.bin", 2 * MIB + 100)
    real_open = os.open

    def open_like_tmpfs(name, flags, *args):
        # What tmpfs (before Linux 6.6) and some FUSE filesystems answer to O_DIRECT.
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), name)
        return real_open(name, flags, *args)

    monkeypatch.setattr(disk_read.os, "open", open_like_tmpfs)
    result = disk_read.measure(paths=[path], max_bytes=64 * MIB, max_seconds=30)
    assert result["method"] == "fadvise_dontneed"
    assert result["bytes_read"] == 2 * MIB + 100  # buffered reads include the tail
    assert result["stopped_by"] == "end_of_files"


def test_disk_read_falls_back_when_o_direct_reads_are_refused(tmp_path, monkeypatch):
    if not hasattr(os, "O_DIRECT"):
        pytest.skip("no O_DIRECT on this platform")
    import fcntl

    path = _write_file(tmp_path / "weights.bin", 2 * MIB + 100)
    real_preadv = os.preadv

    def preadv_like_fuse(fd, buffers, offset):
        # Some FUSE filesystems accept O_DIRECT at open and refuse the read itself.
        if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT:
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(disk_read.os, "preadv", preadv_like_fuse)
    result = disk_read.measure(paths=[path], max_bytes=64 * MIB, max_seconds=30)
    assert result["method"] == "fadvise_dontneed"
    assert result["bytes_read"] == 2 * MIB + 100


def test_disk_read_stopped_by_time_says_so(tmp_path):
    path = _write_file(tmp_path / "weights.bin", 4 * MIB)
    result = disk_read.measure(
        paths=[path], max_bytes=64 * MIB, max_seconds=1e-9, block_bytes=256 * 1024
    )
    # The deadline is checked after each block: one block is read, then time is up.
    assert result["stopped_by"] == "max_seconds"
    assert result["bytes_read"] == 256 * 1024
    assert result["seconds"] > 0 and result["read_mbps"] > 0


def test_disk_read_missing_path_raises_naming_it(tmp_path):
    present = _write_file(tmp_path / "a.bin", MIB)
    missing = str(tmp_path / "not-there.bin")
    with pytest.raises(FileNotFoundError) as raised:
        disk_read.measure(paths=[present, missing], max_bytes=64 * MIB, max_seconds=30)
    assert missing in str(raised.value)


def test_disk_read_directory_raises_naming_it(tmp_path):
    with pytest.raises(IsADirectoryError) as raised:
        disk_read.measure(paths=[str(tmp_path)], max_bytes=MIB, max_seconds=30)
    assert str(tmp_path) in str(raised.value)


def test_disk_read_cli_prints_json_and_reports_errors_in_one_line(tmp_path):
    path = _write_file(tmp_path / "weights.bin", MIB)
    done = _run_module(
        "probes.kernels.disk_read", "--max-bytes", str(MIB), "--max-seconds", "30", path
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["bytes_read"] <= MIB

    missing = str(tmp_path / "not-there.bin")
    done = _run_module(
        "probes.kernels.disk_read", "--max-bytes", str(MIB), "--max-seconds", "30", missing
    )
    assert done.returncode == 1
    assert len(done.stderr.strip().splitlines()) == 1
    assert missing in done.stderr
