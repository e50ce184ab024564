"""Live: the real llama-server (tests/llama_server.py) in cgroups of the tests' own, and a
Python process that looks like vLLM at TP 2 in a mount namespace of its own with a 64 MiB
/dev/shm: engine.container reads them and the rules name the cause (issue 16).

The cgroups: the v2 hierarchy where it offers the controller (the test's cgroup then sits
under its root, whose ``cgroup.subtree_control`` must enable it), else the controller's v1
hierarchy (under this process's own cgroup there, inside whatever limits the machine
already gives this process). Without root, or with no writable hierarchy, each test skips
with the reason. Every cgroup is removed at the end, its processes killed and moved out
first, whether the test passed or not; load is bounded in requests and seconds.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from doctor.model import ProbeResult, ScanOptions
from doctor.rules.evaluate import evaluate
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost, RecordingHost
from doctor.workload.loadgen import RequestTarget, Workload, run_requests
from probes.engine import container
from probes.helpers.cgroups import parse_mounts, parse_proc_cgroup
from tests import llama_server as llama
from tests.builtin_rules import builtin_rules

pytestmark = pytest.mark.live

RULES = {r.id: r for r in builtin_rules()}

RMDIR_TRIES = 50  # 5 s: a killed process leaves its cgroup when it is reaped


@dataclass(frozen=True)
class Sandbox:
    version: int
    directory: Path  # the test's cgroup
    parent: Path  # where its processes go back before it is removed

    @property
    def procs(self) -> Path:
        return self.directory / "cgroup.procs"

    def prefix(self) -> tuple[str, ...]:
        """A command prefix that moves itself into the cgroup, then execs the command."""
        return ("sh", "-c", f'echo $$ > {self.procs} && exec "$@"', "sh")

    def write(self, name: str, value: str) -> None:
        (self.directory / name).write_text(value)


def _hierarchy(controller: str) -> tuple[int, Path, Path] | tuple[None, str, None]:
    mounts = parse_mounts("/proc/self/mountinfo", Path("/proc/self/mountinfo").read_text())
    own = parse_proc_cgroup("/proc/self/cgroup", Path("/proc/self/cgroup").read_text())
    if "" in mounts:
        root = Path(mounts[""][0])
        offered = (root / "cgroup.controllers").read_text().split() if (root / "cgroup.controllers").exists() else []
        if controller in offered:
            control = root / "cgroup.subtree_control"
            try:
                if controller not in control.read_text().split():
                    control.write_text(f"+{controller}")
                return 2, root, root
            except OSError as exc:
                why = f"cgroup v2 at {root} offers {controller} but cannot enable it for a child ({exc.strerror})"
                if controller not in mounts:
                    return None, why, None
    if controller in mounts and controller in own:
        top, shown = mounts[controller]
        path = own[controller]
        inside = path[len(shown):] if shown != "/" and path.startswith(shown) else path
        parent = Path(top + inside.rstrip("/"))
        return 1, parent, parent
    return None, f"no cgroup hierarchy with the {controller} controller is mounted", None


@contextlib.contextmanager
def make(controller: str, name: str) -> Iterator[Sandbox]:
    """A fresh cgroup for ``controller``; its processes are killed and it is removed at the end."""
    if os.geteuid() != 0:
        pytest.skip("making a cgroup needs root")
    version, where, parent = _hierarchy(controller)
    if version is None or not isinstance(where, Path) or parent is None:
        pytest.skip(str(where))
    directory = where / f"{name}-{os.getpid()}"
    try:
        directory.mkdir()
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup in {where}: {exc.strerror}")
    sandbox = Sandbox(version, directory, parent)
    try:
        yield sandbox
    finally:
        remove(sandbox)


def remove(sandbox: Sandbox) -> None:
    """Kill what is left in the cgroup, move it out, remove the cgroup (bounded in time)."""
    for _ in range(RMDIR_TRIES):
        try:
            pids = [int(p) for p in sandbox.procs.read_text().split()]
        except OSError:
            pids = []
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
            with contextlib.suppress(OSError):
                (sandbox.parent / "cgroup.procs").write_text(str(pid))
        try:
            sandbox.directory.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{sandbox.directory}: still busy after {RMDIR_TRIES / 10:g} s")


def _item(pid: int, capture: Path | None = None) -> container.EngineContainer:
    """The probe's item for ``pid``, live; with ``capture``, read through a recording into
    that directory, whose replay must give the same record."""
    if capture is None:
        record = container.probe(LiveHost(), ScanOptions())
    else:
        recording = RecordingHost(LiveHost(), capture)
        record = container.probe(recording, ScanOptions())
        recording.save({"level": "quick"})
        assert container.probe(RecordedHost(capture), ScanOptions()) == record
    found = [e for e in record.engines if pid in e.pids]
    assert found, [e.engine for e in record.engines]
    return found[0]


def _findings(rule: str, item: container.EngineContainer):
    record = container.ContainerRecord((item,), "test")
    findings, errors = evaluate([RULES[rule]], [ProbeResult("engine.container", "ok", 1.0, None, record)])
    assert errors == []
    return findings


@contextlib.contextmanager
def _server(tmp_path: Path, sandbox: Sandbox) -> Iterator[llama.LlamaServer]:
    server = llama.start(tmp_path, prefix=sandbox.prefix())
    try:
        yield server
    finally:
        llama.stop(server)


@pytest.mark.timeout(300)
def test_llama_server_under_half_a_core_of_quota_is_throttled(tmp_path):
    with make("cpu", "llm-doctor-quota") as sandbox:
        if sandbox.version == 2:
            sandbox.write("cpu.max", "50000 100000")
        else:
            sandbox.write("cpu.cfs_period_us", "100000")
            sandbox.write("cpu.cfs_quota_us", "50000")
        with _server(tmp_path, sandbox) as server:
            load: list = []
            stop = threading.Event()

            def send() -> None:  # four streams in rounds of 8 requests, for 60 s at most
                deadline = time.monotonic() + 60
                while not stop.is_set() and time.monotonic() < deadline:
                    load.extend(run_requests(RequestTarget(server.base_url),
                                             Workload(32, 48, timeout_s=30), 4, 8, 10))

            sender = threading.Thread(target=send, daemon=True)
            sender.start()
            try:
                time.sleep(3.0)  # the four slots busy
                item = _item(server.pid, tmp_path / "capture")
            finally:
                stop.set()
                sender.join(90)
    print(f"quota {item.cpu_quota_cpus} CPUs (v{item.cgroup_version}): throttled "
          f"{item.throttled_in_window} of {item.periods_in_window} periods in {item.window_s} s "
          f"(share {item.throttled_share}), {item.throttled_s_in_window} s throttled; "
          f"{item.runnable_threads} of {item.threads} threads runnable; {item.nr_throttled_total} "
          f"periods ({item.throttled_s_total} s) throttled since the cgroup was made; "
          f"{sum(1 for r in load if r.error is None)} of {len(load)} requests answered")
    assert item.cpu_quota_cpus == 0.5
    # the cgroup is the test's own: every period it counts throttled is this server's (its
    # start loads the model on one thread at full speed). In the window itself the quota binds
    # only when the machine gives the server more than half a core: on a loaded 2-CPU machine
    # it may get less, and then the runnable threads above the quota say it.
    assert item.nr_throttled_total and item.nr_throttled_total > 0
    assert (item.throttled_in_window or 0) > 0 or (item.runnable_threads or 0) > 0.5
    (finding,) = _findings("cpu-quota-throttled", item)
    assert finding.evidence["quota_cpus"] == 0.5
    assert f"pid {server.pid}" in finding.evidence["engine"]


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"/proc/{pid}/status has no VmRSS")


@pytest.mark.timeout(300)
def test_llama_server_with_a_memory_limit_just_above_its_resident_memory(tmp_path):
    with make("memory", "llm-doctor-memory") as sandbox:
        with _server(tmp_path, sandbox) as server:
            rss = _rss(server.pid)
            limit_file = "memory.max" if sandbox.version == 2 else "memory.limit_in_bytes"
            for factor in (1.05, 1.07, 1.09):  # the page cache above RSS must be reclaimable
                limit = int(_rss(server.pid) * factor) // 4096 * 4096
                try:
                    sandbox.write(limit_file, str(limit))
                    break
                except OSError:
                    continue
            else:
                pytest.fail(f"the kernel refused every limit near the resident {rss} bytes")
            item = _item(server.pid, tmp_path / "capture")
            alive = server.process.poll() is None
    print(f"memory limit {item.memory_limit_bytes} bytes (v{sandbox.version}), resident "
          f"{item.rss_bytes}: margin {item.margin_bytes} bytes ({item.margin_share:.1%}), "
          f"usage {item.memory_usage_bytes}, OOM kills {item.oom_kills}, failcnt {item.failcnt}")
    assert alive, "llama-server was killed before the scan"
    assert item.memory_limit_bytes == limit
    assert item.oom_kills in (0, None)  # before the kill
    assert item.margin_share is not None and item.margin_share < 0.10
    (finding,) = _findings("memory-cgroup-oom", item)
    assert finding.severity.label in ("warning", "critical")
    assert f"pid {server.pid}" in finding.evidence["engine"]


def _namespaces_work() -> str | None:
    if os.geteuid() != 0:
        return "needs root to mount a tmpfs in a mount namespace"
    if not shutil.which("unshare"):
        return "needs unshare (util-linux)"
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "true"],
                          capture_output=True, timeout=10)
    return None if done.returncode == 0 else f"unshare -m failed: {done.stderr.decode()[:200]}"


@pytest.mark.timeout(120)
def test_a_vllm_at_tp_2_in_its_own_mount_namespace_with_64_mib_of_shm(tmp_path):
    why = _namespaces_work()
    if why:
        pytest.skip(why)
    # a real Python process with vLLM's command line: `python -m vllm.entrypoints.openai.api_server`
    package = tmp_path / "vllm" / "entrypoints" / "openai"
    package.mkdir(parents=True)
    for folder in (tmp_path / "vllm", tmp_path / "vllm" / "entrypoints", package):
        (folder / "__init__.py").write_text("")
    (package / "api_server.py").write_text("import time\ntime.sleep(90)\n")
    shell = ("mount -t tmpfs -o size=64m tmpfs /dev/shm && exec \"$0\" -m "
             "vllm.entrypoints.openai.api_server --model /models/llama-3-8b "
             "--tensor-parallel-size 2 --port 8000")
    process = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", shell,
                                sys.executable], cwd=tmp_path,
                               env={**os.environ, "PYTHONPATH": str(tmp_path)})
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes()
            if b"vllm.entrypoints" in cmdline:
                break
            assert process.poll() is None, "the fake engine exited"
            time.sleep(0.1)
        item = _item(process.pid, tmp_path / "capture")
        host_shm = os.statvfs("/dev/shm")
    finally:
        process.kill()
        process.wait(10)
    print(f"{item.engine}: /dev/shm {item.shm_bytes} bytes ({item.shm_source}); the host's is "
          f"{host_shm.f_blocks * host_shm.f_frsize} bytes")
    assert item.shm_bytes == 64 << 20 and item.tensor_parallel == 2 and item.multi_process
    (finding,) = _findings("shm-too-small", item)
    assert finding.severity.label == "critical"
    assert finding.evidence["engine"] == f"vllm pid {process.pid}"
    assert finding.evidence["shm_mib"] == 64
    assert f"pid {process.pid}" in finding.title and "64 MiB" in finding.title
