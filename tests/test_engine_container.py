"""engine.container on recorded hosts (tests/fixtures/build_container_hosts.py): the v2 and
v1 readers give the figures the kernel files hold, a capture replays the same record, the
hosts rebuild byte for byte, and broken files or measurements are named, never a crash."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest

from doctor.model import Level, ScanOptions
from doctor.scan import scan
from doctor.seam.recorded import RecordedHost, RecordingHost
from probes.engine import container
from probes.helpers import cgroups, mounts
from probes.registry import PROBES
from tests.builtin_rules import builtin_rules
from tests.conftest import FIXTURE_HOSTS
from tests.fixtures import build_container_hosts as builder

RULES = builtin_rules()
HOSTS = sorted(builder.BUILDERS)
PID = builder.PID
V2_DIR = f"/sys/fs/cgroup/system.slice/docker-{builder.CONTAINER}.scope"
V1_CPU = f"/sys/fs/cgroup/cpu,cpuacct/docker/{builder.CONTAINER}"


def _record(root: Path) -> container.ContainerRecord:
    return container.probe(RecordedHost(root), ScanOptions())


def _one(root: Path) -> container.EngineContainer:
    (item,) = _record(root).engines
    return item


def test_the_v2_reader_on_a_throttled_container():
    item = _one(FIXTURE_HOSTS / "vllm-docker-v2-cpu-throttled")
    assert (item.cgroup_version, item.cpu_quota_cpus, item.cpu_quota_dir) == (2, 0.5, V2_DIR)
    assert (item.periods_in_window, item.throttled_in_window, item.throttled_share) == (10, 9, 0.9)
    assert item.nr_throttled_total == 4_812_330 and item.throttled_s_total == 4_812_330 * 0.041
    assert (item.threads, item.runnable_threads) == (62, 3)
    assert item.memory_limit_bytes is None and item.memory_reason.startswith("no memory limit")
    assert item.shm_bytes == 16 << 30 and item.shm_source == f"statvfs /proc/{PID}/root/dev/shm"


def test_the_v1_reader_on_a_container_with_a_quota():
    item = _one(FIXTURE_HOSTS / "vllm-docker-v1-cpu-quota")
    assert (item.cgroup_version, item.cpu_quota_cpus, item.cpu_quota_dir) == (1, 2.0, V1_CPU)
    assert item.throttled_s_total == pytest.approx(1_204_551 * 0.041)
    assert item.throttled_share == 0.4
    assert item.memory_limit_bytes is None  # v1's "unlimited" is no limit
    assert item.cgroup == f"/docker/{builder.CONTAINER}"


def test_the_v1_reader_on_a_calm_container():
    item = _one(FIXTURE_HOSTS / "vllm-docker-v1-calm")
    assert (item.memory_limit_bytes, item.oom_kills, item.failcnt) == (128 << 30, 0, 0)
    assert item.rss_bytes == 31 << 30 and item.margin_share == pytest.approx(97 / 128, abs=1e-4)


def test_oom_kills_from_memory_events_and_the_kernel_log():
    item = _one(FIXTURE_HOSTS / "vllm-docker-v2-oom-killed")
    assert (item.memory_limit_bytes, item.oom_kills, item.kernel_oom_kills) == (48 << 30, 3, 3)
    assert item.memory_usage_bytes == 47 << 30 and item.margin_bytes == 8 << 30


def test_shm_from_mountinfo_when_the_stat_is_refused():
    item = _one(FIXTURE_HOSTS / "vllm-docker-tp2-shm-64m")
    assert (item.shm_bytes, item.tensor_parallel, item.multi_process) == (64 << 20, 2, True)
    assert item.shm_source == f"/proc/{PID}/mountinfo size="


def test_an_engine_outside_any_container_is_judged_on_nothing():
    item = _one(FIXTURE_HOSTS / "healthy-epyc-9654-vllm")
    assert item.cpu_quota_cpus is None and item.memory_limit_bytes is None
    assert item.shm_bytes is None and "not-found" in (item.shm_reason or "")
    # each None with its reason, which `why` shows for the rules it leaves not judged
    assert set(item.missing) == {"cpu_quota_cpus", "memory_limit_bytes", "shm_bytes"}
    assert "not-found" in item.missing["shm_bytes"]


def test_a_limit_none_set_says_so_and_why_shows_it_with_no_command():
    item = _one(FIXTURE_HOSTS / "vllm-docker-v1-cpu-quota")
    assert item.memory_limit_bytes is None  # v1's "unlimited"
    assert item.missing["memory_limit_bytes"].startswith("no memory limit on")
    assert "cpu_quota_cpus" not in item.missing  # 0.5 CPUs: set
    from doctor.commands.why import command_args, differential
    diff = differential("crash", str(FIXTURE_HOSTS / "vllm-docker-v1-cpu-quota"), None, None, (),
                        command_args((), (), True, None, False))
    (check,) = next(r for r in diff.rows if r.cause == "memory-cgroup-oom").checks
    from doctor.i18n.text import render as say
    # read and found unset: the cause is ruled out on it, not left "not measured"
    assert item.unset == ("memory_limit_bytes",)
    assert "memory_limit_bytes: none set (no memory limit on" in say(check.items[0].parts[0])
    assert check.status == "ruled-out" and check.command is None


class Recapture(RecordingHost):
    def measure(self, name, fn):
        return super().measure(name, lambda: self.live.measure(name, fn))


@pytest.mark.parametrize("name", HOSTS)
def test_capture_of_a_container_host_replays_the_same(name, tmp_path):
    options = ScanOptions(level=Level.STANDARD)
    specs = tuple(p for p in PROBES if p.name in ("engine.discovery", "engine.container"))
    original = scan(RecordedHost(FIXTURE_HOSTS / name), options, specs, RULES)
    capture = Recapture(RecordedHost(FIXTURE_HOSTS / name), tmp_path / "cap")
    scan(capture, options, specs, RULES)
    capture.save({"level": "standard"})
    replayed = scan(RecordedHost(tmp_path / "cap"), options, specs, RULES)
    records = [{p.name: p.record for p in r.probes} for r in (original, replayed)]
    assert records[0]["engine.container"] == records[1]["engine.container"]
    assert [(f.rule, f.severity) for f in original.findings] == \
        [(f.rule, f.severity) for f in replayed.findings]


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and p.name not in ("host.toml", "measurements.json")}


@pytest.mark.slow
@pytest.mark.parametrize("name", HOSTS)
def test_rebuilding_a_container_host_gives_the_committed_tree(name, tmp_path):
    builder.write_host(name, tmp_path)
    assert _files(tmp_path / name) == _files(FIXTURE_HOSTS / name)
    for data in ("measurements.json",):
        assert json.loads((tmp_path / name / data).read_text()) == \
            json.loads((FIXTURE_HOSTS / name / data).read_text())


def _planted(tmp_path: Path, name: str, path: str, text: str) -> Path:
    root = tmp_path / name
    shutil.copytree(FIXTURE_HOSTS / name, root, symlinks=True)
    target = root / "fs" / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        os.chmod(target, 0o644)
    target.write_text(text)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("path, text", [
    (f"{V2_DIR}/cpu.max", "fifty 100000\n"),
    (f"{V2_DIR}/cpu.max", "50000\n"),
    (f"{V2_DIR}/cpu.stat", "nr_throttled -3\n"),
    (f"{V2_DIR}/cpu.stat", "nr_throttled 99999999999999999999\n"),
    (f"/proc/{PID}/cgroup", "garbage\n"),
])
def test_a_broken_cpu_file_is_named_in_the_item(tmp_path, path, text):
    item = _one(_planted(tmp_path, "vllm-docker-v2-cpu-throttled", path, text))
    assert item.cpu_quota_cpus is None and item.cpu_reason and path in item.cpu_reason


@pytest.mark.slow
@pytest.mark.parametrize("path, text", [
    (f"{V2_DIR}/memory.max", "lots\n"),
    (f"{V2_DIR}/memory.events", "oom_kill\n"),
])
def test_a_broken_memory_file_is_named_in_the_item(tmp_path, path, text):
    item = _one(_planted(tmp_path, "vllm-docker-v2-oom-killed", path, text))
    assert item.memory_limit_bytes is None and path in (item.memory_reason or "")


@pytest.mark.slow
@pytest.mark.parametrize("value", [{"periods": "ten", "throttled": 1}, {"periods": True, "throttled": 1},
                                   {"periods": 10, "throttled": 1.5e19}, [], "x",
                                   {"periods": 10, "throttled": -1}, {"periods": 10, "throttled": 11},
                                   {"error": "sampling failed"}])
def test_a_broken_sample_is_a_reason_not_a_crash(tmp_path, value):
    root = tmp_path / "h"
    shutil.copytree(FIXTURE_HOSTS / "vllm-docker-v2-cpu-throttled", root, symlinks=True)
    measurements = json.loads((root / "measurements.json").read_text())
    measurements[f"engine.container.cpu_sample:{V2_DIR}"] = value
    (root / "measurements.json").write_text(json.dumps(measurements))
    item = _one(root)
    assert item.cpu_quota_cpus == 0.5 and item.throttled_share is None
    assert item.cpu_reason and item.cpu_reason.startswith("throttling not sampled")


def test_parsers():
    assert cgroups.parse_proc_cgroup("p", "4:cpu,cpuacct:/a\n0::/b\n1:name=systemd:/c\n") == \
        {"cpu": "/a", "cpuacct": "/a", "": "/b", "systemd": "/c"}
    text = ("30 24 0:27 /docker/x /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
            "31 24 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n")
    assert cgroups.parse_mounts("m", text) == {"": ("/sys/fs/cgroup", "/docker/x"),
                                               "cpu": ("/sys/fs/cgroup/cpu,cpuacct", "/"),
                                               "cpuacct": ("/sys/fs/cgroup/cpu,cpuacct", "/")}
    shm = "5 4 0:9 / /dev/shm rw - tmpfs shm rw,size=65536k,inode64\n"
    assert mounts.shm_mount(shm) == ("tmpfs", 64 << 20)
    assert mounts.shm_mount(shm.replace("size=65536k,", "")) == ("tmpfs", None)
    assert mounts.shm_mount("5 4 0:9 / /dev/shm\\040x rw - tmpfs shm rw,size=1g\n") is None
    kills = cgroups.parse_kills(
        "oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),oom_memcg=/a,task_memcg=/a/b,task=x,pid=7,uid=0\n"
        "Memory cgroup out of memory: Killed process 7 (x) total-vm:1kB\n"
        "Memory cgroup out of memory: Kill process 9 (y) score 1 or sacrifice child\n")
    assert kills == [cgroups.KernelKill(7, ("/a", "/a/b")), cgroups.KernelKill(9, ())]


GARBAGE = ["", "x", "-1", "1 2 3", "\x00\x01", "9" * 30, "max", "nr_throttled x\n", "0::\n",
           "a:b:c\n", "size=99999999999999999999g", "²", "\n\n\n", "nr_periods 5\nnr_throttled 9\n"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vllm-docker-v2-oom-killed", "vllm-docker-v1-cpu-quota"])
def test_every_file_the_probe_reads_may_be_garbage(tmp_path, name):
    """Container files replaced by garbage (40 pairs of a fixed seed, every file at least
    once): a record of the one engine, never an exception."""
    root = tmp_path / name
    shutil.copytree(FIXTURE_HOSTS / name, root, symlinks=True)
    fs = root / "fs"
    targets = sorted(p for p in fs.rglob("*") if p.is_file() and (
        "cgroup" in str(p.relative_to(fs)) or p.name in ("status", "mountinfo")))
    assert len(targets) >= 8
    rng = random.Random(16)
    pairs = [(t, rng.choice(GARBAGE)) for t in targets]
    pairs += [(rng.choice(targets), rng.choice(GARBAGE)) for _ in range(40 - len(pairs))]
    for target, text in pairs:
        original = target.read_bytes()
        target.write_text(text)
        record = _record(root)
        assert len(record.engines) == 1, (target, text)
        container.summary(record)
        target.write_bytes(original)
