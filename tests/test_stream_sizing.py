"""STREAM's array size for host.memory_bandwidth: 4x the cache the threads reach, within a
memory budget, and the note where the budget made them smaller (probes/helpers/stream_sizing.py).

Cache trees are the recorded hosts' sysfs files (tests/fixtures/hosts), read as the probe
reads them; the 480 MiB VM and the Genoa-X are those recordings with the L3 size the
issue's hosts reported (491520K on a 2-vCPU Intel VM; 98304K a CCD on an EPYC 9684X, 12
CCDs of 8 cores, the same tree as the 9654's).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from doctor.model import ScanOptions
from doctor.seam.recorded import RecordedHost
from probes.helpers import stream_sizing
from probes.host import memory_bandwidth
from probes.helpers.stream_sizing import (MEMORY_CAP, MIN_ARRAY_BYTES, TOUCH_BYTES_PER_THREAD,
                                       parse_cache_tree, reach, size_arrays)
from tests.conftest import FIXTURE_HOSTS

REPO_ROOT = Path(__file__).resolve().parent.parent
MIB, GIB = 2**20, 2**30
CPU = "fs/sys/devices/system/cpu"


def recorded_tree(host: str, l3: str | None = None) -> dict[str, str]:
    """A recorded host's cache files as parse_cache_tree takes them; ``l3`` replaces the L3 size."""
    root = FIXTURE_HOSTS / host / CPU
    files = {}
    for path in sorted(root.glob("cpu*/cache/index*/*")):
        key = str(path.relative_to(root))
        text = path.read_text().strip()
        if l3 is not None and key.endswith("/size") and (path.parent / "level").read_text().strip() == "3":
            text = l3
        files[key] = text
    return files


def sized(tree: dict[str, str], available: int | None, threads: int, virtual: bool,
          cpus: frozenset[int] | None = None):
    found = reach(parse_cache_tree(tree), cpus, virtual)
    return found, size_arrays(found.cache_bytes, available, threads)


def test_a_vm_advertising_its_hosts_480_mib_l3_is_sized_by_what_two_vcpus_reach():
    # Before: max(4 x 480 MiB, 256 MiB) = 1,920 MiB an array, 5.6 GiB in all.
    tree = recorded_tree("this-vm-epyc-2cpu", l3="491520K")
    found, sizing = sized(tree, available=30 * GIB, threads=2, virtual=True)
    assert found.advertised_bytes == 480 * MIB
    assert found.cache_bytes == 2 * 48 * MIB and found.vm_bounded
    assert sizing.rule_array_bytes == 4 * 96 * MIB
    # 2 threads: 1 GiB for the three arrays, the least of the three limits
    assert (sizing.budget_bytes, sizing.budget_basis) == (2 * TOUCH_BYTES_PER_THREAD, "threads")
    assert 3 * sizing.array_bytes <= sizing.budget_bytes
    assert sizing.array_bytes < sizing.rule_array_bytes and sizing.under_rule
    # The same tree on bare metal is the hardware's: counted whole.
    metal, _ = sized(tree, available=30 * GIB, threads=2, virtual=False)
    assert metal.cache_bytes == 480 * MIB and not metal.vm_bounded


def test_the_real_32_mib_l3_of_this_vm_is_counted_as_it_is():
    found, sizing = sized(recorded_tree("this-vm-epyc-2cpu"), 22 * GIB, 2, virtual=True)
    assert found.cache_bytes == 32 * MIB and not found.vm_bounded  # 16 MiB a vCPU: plausible
    assert sizing.rule_array_bytes == 128 * MIB
    assert sizing.array_bytes == MIN_ARRAY_BYTES and not sizing.under_rule


def test_genoa_x_counts_the_ccds_the_threads_run_on_and_the_cap_binds():
    tree = recorded_tree("healthy-epyc-9654-vllm", l3="98304K")
    found, sizing = sized(tree, available=700 * GIB, threads=96, virtual=False)
    assert found.cache_bytes == 12 * 96 * MIB  # 1.1 GiB: 12 distinct CCDs, not 192 CPUs' worth
    assert (sizing.budget_bytes, sizing.budget_basis) == (MEMORY_CAP, "cap")
    assert 3 * sizing.array_bytes + stream_sizing.KERNEL_OWN_BYTES <= MEMORY_CAP
    assert sizing.array_bytes > 1300 * MIB
    assert sizing.under_rule and sizing.rule_array_bytes == 4 * 1152 * MIB
    # Pinned to one CCD (cpus 0-7 and their SMT siblings): that CCD's 96 MiB only.
    ccd = frozenset([*range(8), *range(96, 104)])
    one, pinned = sized(tree, available=700 * GIB, threads=8, virtual=False, cpus=ccd)
    assert one.cache_bytes == 96 * MIB
    assert pinned.array_bytes == 384 * MIB and not pinned.under_rule


def test_a_small_host_is_held_to_an_eighth_of_memavailable():
    tree = recorded_tree("this-vm-epyc-2cpu")
    _, sizing = sized(tree, available=4 * GIB, threads=2, virtual=True)
    assert (sizing.budget_bytes, sizing.budget_basis) == (512 * MIB, "available")
    # under the 256 MiB floor, and still 4x the 32 MiB L3
    assert 3 * sizing.array_bytes + stream_sizing.KERNEL_OWN_BYTES == pytest.approx(512 * MIB, abs=24)
    assert sizing.array_bytes >= sizing.rule_array_bytes
    assert not sizing.under_rule
    _, tiny = sized(tree, available=512 * MIB, threads=2, virtual=True)
    assert tiny.budget_bytes == 64 * MIB and 3 * tiny.array_bytes <= 64 * MIB
    assert tiny.under_rule  # 21 MiB arrays cannot be 4x a 32 MiB L3


def test_no_cache_tree_and_no_memavailable_give_the_floor_within_the_cap():
    found, sizing = sized({}, available=None, threads=2, virtual=True)
    assert found.cache_bytes is None and sizing.rule_array_bytes is None
    assert sizing.array_bytes == MIN_ARRAY_BYTES and not sizing.under_rule
    assert sizing.budget_basis == "threads"


def test_hostile_cache_files_are_skipped_not_raised():
    tree = {
        "cpu0/cache/index0/level": "1", "cpu0/cache/index0/type": "Instruction",
        "cpu0/cache/index0/size": "9999999K", "cpu0/cache/index0/shared_cpu_list": "0",
        "cpu0/cache/index3/level": "3", "cpu0/cache/index3/size": "-5K",
        "cpu0/cache/index3/shared_cpu_list": "0-1",
        "cpu1/cache/index3/level": "x", "cpu1/cache/index3/size": "32768K",
        "cpu1/cache/index3/shared_cpu_list": "0-1",
        "cpu1/cache/index2/level": "2", "cpu1/cache/index2/size": "1024K",
        "cpu1/cache/index2/shared_cpu_list": "1-0",  # not a cpulist
        "cpu0/cache/index2/level": "2", "cpu0/cache/index2/size": "1024K",
        "cpu0/cache/index2/shared_cpu_list": "0",
    }
    assert parse_cache_tree(tree) == (stream_sizing.CacheInstance(2, MIB, frozenset({0})),)


def _replay_host(tmp_path: Path, l3: str) -> RecordedHost:
    copy = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "this-vm-epyc-2cpu", copy, symlinks=True)
    for size in (copy / CPU).glob("cpu*/cache/index3/size"):
        size.write_text(l3 + "\n")
    return RecordedHost(copy)


def test_the_record_carries_the_sizes_and_the_summary_says_when_arrays_were_under_the_rule(
        tmp_path):
    # The recording's kernel ran 256 MiB arrays; with the 480 MiB VM's L3 the rule is 384.
    record = memory_bandwidth.probe(_replay_host(tmp_path, "491520K"), ScanOptions())
    assert record.array_bytes == 256 * MIB
    assert (record.cache_bytes, record.cache_advertised_bytes) == (96 * MIB, 480 * MIB)
    assert record.vm_cache_bounded and record.rule_array_bytes == 384 * MIB
    assert (record.memory_budget_bytes, record.budget_basis) == (GIB, "threads")
    assert record.under_rule is True and record.touch_cut is None  # recorded before it was kept
    line = memory_bandwidth.summary(record)
    assert ("arrays of 256 MiB, under STREAM's rule of 4x the cache the threads reach (384 MiB "
            "= 4 x 96 MiB, a VM's 480 MiB counted at most 48 MiB a vCPU): the recorded run's "
            "size; part of the figure may be cache bandwidth") in line
    # A run of today's kernel says what bound its arrays: here, 512 MiB a thread.
    copy = tmp_path / "host" / "measurements.json"
    measured = json.loads(copy.read_text())
    measured["host.memory_bandwidth.stream"].update(touch_cut=False,
                                                    planned_array_bytes=256 * MIB)
    copy.write_text(json.dumps(measured))
    line = memory_bandwidth.summary(memory_bandwidth.probe(RecordedHost(tmp_path / "host"),
                                                           ScanOptions()))
    assert "4 x 96 MiB, a VM's 480 MiB counted at most 48 MiB a vCPU): the memory budget, " \
           "1024 MiB for 3 arrays at 512 MiB a thread;" in line
    measured["host.memory_bandwidth.stream"].update(touch_cut=True)
    copy.write_text(json.dumps(measured))
    line = memory_bandwidth.summary(memory_bandwidth.probe(RecordedHost(tmp_path / "host"),
                                                           ScanOptions()))
    assert "the first touch was cut short at half the probe's time (a busy host)" in line
    # The recording's own 32 MiB L3: the arrays were 2x the rule, and no note.
    record = memory_bandwidth.probe(_replay_host(tmp_path / "b", "32768K"), ScanOptions())
    assert record.under_rule is False and record.rule_array_bytes == 128 * MIB
    assert "STREAM's rule" not in memory_bandwidth.summary(record)


# The probe run as a scan runs it, on this machine, with MemAvailable read as argv[1] KiB.
# The kernel child's peak is its VmHWM (/proc/<pid>/status), which the kernel reads of itself
# at its end: getrusage's ru_maxrss of a child also holds the peak of whatever spawned it.
PROBE_IN_A_CHILD = """
import json, re, sys
from doctor.model import ScanOptions
from doctor.seam.live import LiveHost
from probes.host import memory_bandwidth

class SmallHost(LiveHost):
    kept = {}

    def measure(self, name, fn):
        self.kept[name] = super().measure(name, fn)
        return self.kept[name]

    def read_text(self, path):
        text = super().read_text(path)
        if path == "/proc/meminfo":
            text = re.sub(r"MemAvailable: +\\d+", "MemAvailable: " + sys.argv[1], text)
        return text

host = SmallHost()
record = memory_bandwidth.probe(host, ScanOptions())
kernel = host.kept["host.memory_bandwidth.stream"]
bare = memory_bandwidth._run_kernel(8192, record.threads)  # the interpreter and numpy alone
print(json.dumps(dict(array_bytes=record.array_bytes, budget=record.memory_budget_bytes,
                      rule=record.rule_array_bytes, under_rule=record.under_rule,
                      peak=kernel["peak_rss_bytes"], bare_peak=bare["peak_rss_bytes"])))
"""


@pytest.mark.slow
def test_the_kernel_child_never_takes_more_memory_than_the_budget():
    # MemAvailable 1 GiB: the budget is 128 MiB for the three arrays. The code before this
    # took three arrays in half of MemAvailable: 170 MiB each, a peak of 541 MiB here.
    done = subprocess.run([sys.executable, "-c", PROBE_IN_A_CHILD, str(GIB // 1024)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert found["budget"] == 128 * MIB and 3 * found["array_bytes"] <= found["budget"]
    arrays_peak = found["peak"] - found["bare_peak"]
    assert arrays_peak <= found["budget"]
    # and the arrays were really touched (a kernel that allocated nothing would pass above)
    assert arrays_peak >= 0.9 * 3 * found["array_bytes"]
    assert found["under_rule"] == (found["rule"] is not None and found["array_bytes"] < found["rule"])


@pytest.mark.parametrize("text,expected", [("Cpus_allowed_list:\t0-3,8\n", {0, 1, 2, 3, 8}),
                                           ("Cpus_allowed_list:\tnonsense\n", None),
                                           ("Name:\tx\n", None)])
def test_the_cpus_the_threads_may_run_on_come_from_the_scans_own_status(tmp_path, text, expected):
    copy = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "this-vm-epyc-2cpu", copy, symlinks=True)
    (copy / "fs/proc/self").mkdir(parents=True, exist_ok=True)
    (copy / "fs/proc/self/status").write_text(text)
    found = stream_sizing.allowed_cpus(RecordedHost(copy))
    assert found == (None if expected is None else frozenset(expected))


def test_summary_of_a_recording_from_before_the_sizes_were_kept_has_no_note():
    record = memory_bandwidth.probe(RecordedHost(FIXTURE_HOSTS / "epyc-9354-6of12-channels"),
                                    ScanOptions())
    assert record.rule_array_bytes == 4 * 8 * 32 * MIB and record.under_rule is False
    assert not re.search(r"STREAM's rule", memory_bandwidth.summary(record))


def test_a_cut_first_touch_keeps_2x_the_cache_but_never_more_than_half_the_arrays():
    assert memory_bandwidth.cut_floor(32 * MIB, 256 * MIB) == 64 * MIB
    assert memory_bandwidth.cut_floor(480 * MIB, 340 * MIB) == 170 * MIB
    assert memory_bandwidth.cut_floor(None, 256 * MIB) == 0
