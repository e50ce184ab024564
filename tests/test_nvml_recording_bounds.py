"""A recorded host's nvml.json as someone else may have edited it: every entry of the wrong
shape is a recorded-host error naming nvml.json and the entry (exit 3), never a crash of
the scan; a device count larger than the devices recorded is a clear error of the GPU
probes, answered at once (a count of 1000 took 73 s and wrote a 210 MB report; 2**62 never
ended). The JSON files of a recording hold no number a real host cannot give."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from doctor.model import Level, ScanOptions
from doctor.seam.recorded import RecordedHost, RecordedHostError
from doctor.seam.recorded_store import MAX_GPUS
from probes.registry import PROBES
from doctor.rules.loader import builtin_files, load_rules
from doctor.scan import scan
from reports.json_report import render
from tests.conftest import FIXTURE_HOSTS

SOURCE = FIXTURE_HOSTS / "rtx4090-2x-consumer"  # two GPUs
RULES = load_rules(builtin_files(), {p.name: p for p in PROBES})


def _copy(tmp_path: Path, edit) -> Path:
    root = tmp_path / "host"
    shutil.copytree(SOURCE, root, symlinks=True)
    entries = json.loads((root / "nvml.json").read_text())
    edited = edit(entries)
    (root / "nvml.json").write_text(edited if isinstance(edited, str) else json.dumps(entries, indent=1))
    return root


def _set(index: int, key: str, value):
    def edit(entries):
        entries[index][key] = value
    return edit


SHAPES = [  # (what is wrong, edit, what the message says)
    ("args a list of lists", _set(3, "args", [[0]]), "entry #4 (nvmlDeviceGetName) args: expected a list of integers"),
    ("args an object", _set(3, "args", {"a": 1}), "entry #4 (nvmlDeviceGetName) args: expected a list"),
    ("args a number", _set(3, "args", 5), "entry #4 (nvmlDeviceGetName) args: expected a list"),
    ("args nested", _set(3, "args", [[[0]], 1]), "entry #4 (nvmlDeviceGetName) args: expected a list"),
    ("args null", _set(3, "args", None), "entry #4 (nvmlDeviceGetName) args: expected a list"),
    ("args a boolean", _set(3, "args", [True]), "entry #4 (nvmlDeviceGetName) args: expected a list"),
    ("args a float", _set(3, "args", [0.5]), "entry #4 (nvmlDeviceGetName) args: expected a list"),
    ("call a number", _set(3, "call", 5), "entry #4 call: expected the name of an NVML call, got 5"),
    ("call a list", _set(3, "call", ["nvmlDeviceGetName"]), "entry #4 call: expected the name"),
    ("call empty", _set(3, "call", ""), "entry #4 call: expected the name"),
    ("call null", _set(3, "call", None), "entry #4 call: expected the name"),
    ("no args", lambda e: e[3].pop("args"), "entry #4: expected a 'args' field"),
    ("an entry a list", lambda e: e.__setitem__(3, ["nvmlDeviceGetName", [0]]), "entry #4: expected a table"),
    ("an error not a reason", _set(3, "error", "exploded"), "entry #4 error: expected a read-failure reason"),
    ("a top-level object", lambda e: '{"call": "nvmlDeviceGetCount"}', "top level: expected a JSON list"),
]


@pytest.mark.parametrize("what, edit, message", SHAPES, ids=[s[0] for s in SHAPES])
def test_an_entry_of_the_wrong_shape_names_nvml_json_and_the_entry(tmp_path, what, edit, message):
    root = _copy(tmp_path, edit)
    with pytest.raises(RecordedHostError) as err:
        RecordedHost(root)
    assert str(err.value).startswith(f"{root / 'nvml.json'}: ") and message in str(err.value)


NUMBERS = [  # a number no NVML call, kernel file or measurement gives
    ("args a huge integer", _set(3, "args", [10**30]), "the integer 100000000000… (31 digits) does not fit"),
    ("a value of 400 digits", _set(5, "value", 10**400), "the integer 100000000000… (401 digits)"),
    ("a nested huge value", _set(5, "value", {"busId": "x", "bus": -(2**64)}), "does not fit in 64 bits"),
    ("a value of 5000 digits", lambda e: json.dumps(e).replace('"value": 2', '"value": 2' + "0" * 5000, 1),
     "(5001 digits) does not fit in 64 bits"),
    ("1e999", lambda e: json.dumps(e).replace('"value": 2', '"value": 1e999', 1), "1e999 is beyond a float's range"),
]


@pytest.mark.parametrize("what, edit, message", NUMBERS, ids=[s[0] for s in NUMBERS])
def test_a_number_past_64_bits_or_infinite_names_the_file_and_line(tmp_path, what, edit, message):
    root = _copy(tmp_path, edit)
    with pytest.raises(RecordedHostError) as err:
        RecordedHost(root)
    assert re.match(re.escape(f"{root / 'nvml.json'}:") + r"\d+: ", str(err.value))
    assert message in str(err.value)


def test_a_huge_value_is_found_on_its_line(tmp_path):
    root = _copy(tmp_path, _set(5, "value", 10**400))
    line = next(n for n, text in enumerate((root / "nvml.json").read_text().splitlines(), 1)
                if "0" * 400 in text)
    with pytest.raises(RecordedHostError, match=re.escape(f"nvml.json:{line}: the integer")):
        RecordedHost(root)


def test_measurements_json_is_read_with_the_same_numbers(tmp_path):
    root = tmp_path / "host"
    shutil.copytree(SOURCE, root, symlinks=True)
    (root / "measurements.json").write_text('{\n"gpu.first_use": {"first_s": 1e400}\n}\n')
    with pytest.raises(RecordedHostError, match=r"measurements.json:2: 1e400 is beyond"):
        RecordedHost(root)


@pytest.mark.slow
def test_wrong_shapes_through_the_command_line_exit_3(tmp_path, cli):
    root = _copy(tmp_path, _set(3, "args", {"a": 1}))
    result = cli("scan", "--replay", str(root), "--level", "quick", "--no-progress")
    assert result.returncode == 3, result.stderr
    assert "nvml.json: entry #4 (nvmlDeviceGetName) args" in result.stderr
    assert "Traceback" not in result.stderr


def _scan(root: Path):
    started = time.perf_counter()
    report = scan(RecordedHost(root), ScanOptions(level=Level.QUICK), PROBES, RULES)
    return report, time.perf_counter() - started, len(render(report))


def _count(value):
    def edit(entries):
        for entry in entries:
            if entry["call"] == "nvmlDeviceGetCount":
                entry["value"] = value
    return edit


@pytest.mark.timeout(120)
@pytest.mark.parametrize("count", [3, 1000, 2**62, 2**64 - 1])
def test_a_count_above_the_devices_recorded_is_answered_at_once(tmp_path, count):
    _, _, plain_bytes = _scan(SOURCE)
    report, _, size = _scan(_copy(tmp_path, _count(count)))
    # the read stops at the first device not recorded (the reason below names device 2), so
    # the count is never walked: 73 s and 210 MB for 1000 before, 2**62 never ended (the
    # timeout mark); how long a scan takes is the machine's
    assert size < 2 * plain_bytes
    gpu = [p for p in report.probes if p.name.startswith("gpu.")]
    # a probe that needs another (gpu.peer_to_peer needs gpu.topology) is skipped, naming it
    assert gpu and all(p.status == "error" or (p.status == "skipped" and p.reason.startswith("needs "))
                       for p in gpu)
    assert all(f"nvml.json entry #1: nvmlDeviceGetCount is {count}, but the recording holds "
               "answers for devices 0, 1 (none for device 2); set the count to the devices "
               "recorded, or capture the host again" in p.reason for p in gpu)
    assert {p.status for p in report.probes if p.name.startswith("host.")} <= {"ok", "skipped"}


def test_a_count_below_the_devices_recorded_reads_those_devices(tmp_path):
    report, _, _ = _scan(_copy(tmp_path, _count(1)))
    inventory = next(p for p in report.probes if p.name == "gpu.inventory")
    assert inventory.status == "ok" and len(inventory.record.gpus) == 1


def test_more_gpus_than_a_recording_may_hold(tmp_path):
    def edit(entries):
        _count(MAX_GPUS + 1)(entries)
        entries += [{"call": "nvmlDeviceGetName", "args": [i], "value": "GPU"}
                    for i in range(2, MAX_GPUS + 1)]
    report, _, _ = _scan(_copy(tmp_path, edit))
    inventory = next(p for p in report.probes if p.name == "gpu.inventory")
    assert inventory.status == "error"
    assert f"nvmlDeviceGetCount is {MAX_GPUS + 1}; a recorded host holds at most {MAX_GPUS} GPUs" \
        in inventory.reason
