"""gpu.devices beyond its recorded hosts: planted copies (a v1 device cgroup that lost the
GPU, an engine whose GPUs NVML does not list, /dev/char unreadable), the parsers on hostile
text, and a live engine-like process in a mount namespace of its own whose /dev is a tmpfs
without /dev/nvidia0."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from doctor._toml import tomllib
from doctor.model import Level, ScanOptions, Severity
from doctor.scan import scan
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost
from probes.gpu import devices
from probes.helpers.processes import engine_processes
from probes.registry import PROBES
from tests.builtin_rules import builtin_rules
from tests.conftest import FIXTURE_HOSTS

RULES = builtin_rules()
OK = "l40s-2socket-containers-ok"
SCOPE = "system.slice/docker-3f9c2b7e41d0a8c5.scope"


def copy_of(tmp_path, name):
    root = tmp_path / name
    shutil.copytree(FIXTURE_HOSTS / name, root, symlinks=True)
    return root


def findings(root):
    report = scan(RecordedHost(root), ScanOptions(level=Level.QUICK), PROBES, RULES)
    assert report.rule_errors == []
    probe = {p.name: p for p in report.probes}["gpu.devices"]
    assert probe.status == "ok", probe.reason
    return sorted((f.rule, f.severity.label, f.key) for f in report.findings
                  if f.severity >= Severity.WARNING), probe.record, report


@pytest.mark.slow
def test_a_v1_device_cgroup_that_dropped_the_gpu_is_critical(tmp_path):
    """After a daemon-reload under systemd's cgroup driver the container's devices.list
    keeps the ordinary devices and loses the NVIDIA ones; its /dev still has the nodes."""
    root = copy_of(tmp_path, OK)
    listing = root / "fs/sys/fs/cgroup/devices" / SCOPE / "devices.list"
    kept = [line for line in listing.read_text().splitlines()
            if not line.startswith(("c 195:", "c 508:"))]
    listing.write_text("\n".join(kept) + "\n")
    found, record, report = findings(root)
    assert found == [("gpu-lost-in-container", "critical", "vllm")]
    engine = next(e for e in record.engines if e.pid == 23110)
    assert engine.nodes_missing == () and engine.cgroup_version == 1
    assert engine.cgroup_denied == ("nvidiactl (c 195:255)", "nvidia-uvm (c 508:0)",
                                    "nvidia0 (c 195:0)")
    (finding,) = [f for f in report.findings if f.rule == "gpu-lost-in-container"]
    assert "Failed to initialize NVML: Unknown Error" in finding.title


@pytest.mark.slow
def test_a_cgroup_allowing_every_device_is_not_a_loss(tmp_path):
    root = copy_of(tmp_path, OK)
    (root / "fs/sys/fs/cgroup/devices" / SCOPE / "devices.list").write_text("a *:* rwm\n")
    found, record, _ = findings(root)
    assert found == []
    assert all(not e.lost for e in record.engines)


def edit_manifest(root, edit):
    import tomli_w

    manifest = tomllib.loads((root / "host.toml").read_text())
    edit(manifest)
    (root / "host.toml").write_text(tomli_w.dumps(manifest))


def gone(*names):
    def edit(manifest):
        for name in names:
            path = f"/proc/23110/root/dev/{name}"
            manifest["paths"].pop(path, None)
            manifest["errors"][path] = "not-found"
    return edit


@pytest.mark.slow
def test_gpus_not_listed_by_nvml_any_one_gpu_node_is_enough(tmp_path):
    """NVML lists no process (an engine in another pid namespace): the engine's GPUs are
    unknown, so nvidia0 gone beside nvidia1 present (and allowed) is not a loss; both gone
    is."""
    root = copy_of(tmp_path, OK)
    (root / "fs/sys/fs/cgroup/devices" / SCOPE / "devices.list").write_text(
        "c 1:3 rwm\nc 195:* rwm\nc 508:* rwm\n")
    nvml = root / "nvml.json"
    nvml.write_text(nvml.read_text().replace('"pid": 23110', '"pid": 99999'))
    stat = {"device": "0:412", "is_dir": False, "fs_total_bytes": 67108864,
            "fs_free_bytes": 67108864}
    edit_manifest(root, lambda m: m["paths"].update({"/proc/23110/root/dev/nvidia1": stat}))
    edit_manifest(root, gone("nvidia0"))
    found, record, _ = findings(root)
    engine = next(e for e in record.engines if e.pid == 23110)
    assert engine.gpus == () and engine.nodes_missing == () and not engine.lost
    assert [f for f in found if f[0] == "gpu-lost-in-container"] == []  # (pid 99999 holds GPU0: gpu.memory's)
    edit_manifest(root, gone("nvidia1"))
    found, record, _ = findings(root)
    engine = next(e for e in record.engines if e.pid == 23110)
    assert engine.nodes_missing == ("nvidia0", "nvidia1") and engine.lost
    assert [f for f in found if f[0] == "gpu-lost-in-container"] == [
        ("gpu-lost-in-container", "critical", "vllm")]


@pytest.mark.slow
def test_dev_char_unreadable_is_not_judged_and_says_why(tmp_path):
    root = copy_of(tmp_path, "l40s-2socket-no-dev-char")
    edit_manifest(root, lambda m: m["links"].pop("/dev/char"))
    found, record, _ = findings(root)
    assert record.char_links_missing is None
    assert record.missing["char_links_missing"] == "not-found"
    assert found == []


@pytest.mark.parametrize("text", [
    "", "garbage", "x" * 100_000, "12:devices\n", "0::\n" * 10_000, ":::::\n",
    "8:devices:/../../../../etc\n", "\0\0\0",
])
def test_hostile_cgroup_files_give_a_version_or_a_note(text):
    class Host:
        def read_text(self, path):
            return text
    version, path, note = devices._cgroup(Host(), 1)
    assert version in (1, 2, None)
    assert (note is None) == (version == 1)


@pytest.mark.parametrize("listing,allowed", [
    ("c 195:* rwm", True), ("c 195:0 rw", True), ("c 195:0 r", False), ("b 195:0 rwm", False),
    ("a *:* rwm", True), ("c 1:3 rwm", False), ("c *:0 rw", True), ("c 195:00 rw", False),
])
def test_device_rules(listing, allowed):
    rules = [m.groups() for m in [devices._DEVICE_RULE.match(listing)] if m]
    assert devices._allows(rules, 195, 0) is allowed


# --- live: a process in a mount namespace of its own, /dev a tmpfs without nvidia0 -------

def _can_unshare_mount() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                              capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _can_unshare_mount(), reason="needs root and unshare --mount")
def _execed(pid: int) -> bool:
    """The shell has run its script (the tmpfs and nvidiactl are there) and exec'd python: its
    own argv already reads "vllm serve", so the probe can see it before either is done."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().split(b"\0")[0] == sys.executable.encode()
    except OSError:
        return False


def test_live_engine_in_its_own_mount_namespace_without_nvidia0():
    """A python process whose argv reads as vLLM's, in a mount namespace of its own with a
    tmpfs over /dev holding nvidiactl (c 195 255) but no nvidia0: the probe's namespace and
    node reading finds it in a container with nvidia0 gone; nvidia0 made there through
    /proc/<pid>/root/dev, the loss is gone. No GPU here: NVML's side (GPU 0, minor 0) is
    given, the namespace and the nodes are this machine's."""
    script = ("mount -t tmpfs -o size=1m,mode=755 tmpfs /dev && "
              "mknod -m 666 /dev/nvidiactl c 195 255 && "
              f"exec {sys.executable} -c 'import time; time.sleep(60)' vllm serve /models/qwen")
    existed = os.path.exists("/dev/nvidia0")
    child = subprocess.Popen(["unshare", "--mount", "--propagation", "private", "--",
                              "sh", "-c", script], start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        host = LiveHost()
        deadline = time.monotonic() + 15
        proc = None
        while time.monotonic() < deadline and proc is None:
            host.new_scan()
            proc = next((p for p in engine_processes(host) if p.pid == child.pid
                         and _execed(child.pid)), None)
            if proc is None:
                assert child.poll() is None, child.stderr.read().decode()  # type: ignore[union-attr]
                time.sleep(0.1)
        assert proc is not None and proc.engine == "vllm"
        host_ns = {devices._ns(host, 1), devices._ns(host, "self")} - {None}
        seen = devices._engine(host, proc, host_ns, (0,), {0: 0}, None)
        assert seen.in_container is True and seen.mount_ns not in host_ns
        assert seen.nodes_missing == ("nvidia0",) and seen.lost
        assert seen.cgroup_version in (1, 2)
        if seen.cgroup_version == 2:
            assert seen.cgroup_note == devices.CGROUP_V2
        os.mknod(f"/proc/{child.pid}/root/dev/nvidia0", 0o20666, os.makedev(195, 0))
        again = devices._engine(host, proc, host_ns, (0,), {0: 0}, None)
        assert again.nodes_missing == () and not again.lost
        assert os.path.exists("/dev/nvidia0") == existed  # the host's /dev untouched
    finally:
        try:
            os.killpg(child.pid, 9)
        except ProcessLookupError:
            pass
        child.wait(timeout=10)
        assert child.stderr is not None
        child.stderr.close()
