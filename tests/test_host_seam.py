"""The host seam: recorded hosts read back what was recorded, and absent is not an error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from doctor.seam.host import HostReadError, MeasurementError
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost, RecordedHostError, RecordingHost


def test_recording_round_trip(tmp_path):
    live = LiveHost()
    rec = RecordingHost(live, tmp_path / "cap")
    meminfo = rec.read_text("/proc/meminfo")
    dirs = rec.list_dirs("/sys/devices/system/cpu")
    limits = rec.read_text("/proc/self/limits")
    info = rec.stat("/")
    out = rec.run(["uname", "-r"])
    value = rec.measure("m", lambda: {"x": 1.5, "none": None})
    with pytest.raises(HostReadError) as err:
        rec.read_text("/proc/does-not-exist")
    assert err.value.reason == "not-found"
    rec.save({"level": "quick"})

    replay = RecordedHost(tmp_path / "cap")
    assert replay.read_text("/proc/meminfo") == meminfo
    assert replay.list_dirs("/sys/devices/system/cpu") == dirs
    assert replay.read_text("/proc/self/limits") == limits
    assert replay.stat("/") == info
    assert replay.run(["uname", "-r"]) == out
    assert replay.measure("m", lambda: pytest.fail("must not run")) == value
    with pytest.raises(HostReadError, match="not-found"):
        replay.read_text("/proc/does-not-exist")
    with pytest.raises(HostReadError, match="not recorded"):
        replay.run(["uname", "-a"])


def test_first_read_wins(tmp_path):
    src = tmp_path / "f"
    src.write_text("one")
    rec = RecordingHost(LiveHost(), tmp_path / "cap")
    rec.read_text(str(src))
    src.write_text("two")
    assert rec.read_text(str(src)) == "two"  # the live answer is still live
    rec.save({})
    assert RecordedHost(tmp_path / "cap").read_text(str(src)) == "one"


def _recorded_cmdline(tmp_path, *args: str) -> str:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", *args])
    try:
        path = f"/proc/{proc.pid}/cmdline"
        deadline = time.monotonic() + 10
        while args[-1] not in open(path).read() and time.monotonic() < deadline:
            time.sleep(0.05)  # until the child has exec'd
        rec = RecordingHost(LiveHost(), tmp_path / "cap")
        assert args[-1] in rec.read_text(path)  # the live read is untouched
        rec.save({})
    finally:
        proc.kill()
        proc.wait()
    return RecordedHost(tmp_path / "cap").read_text(path)


def test_an_engine_command_line_is_kept_with_secrets_masked(tmp_path):
    stored = _recorded_cmdline(tmp_path, "vllm", "serve", "/m", "--api-key", "sk-secret")
    assert "sk-secret" not in stored
    assert stored.endswith("vllm\0serve\0/m\0--api-key\0***\0")


def test_other_command_lines_are_cut_to_the_program(tmp_path):
    stored = _recorded_cmdline(tmp_path, "--db", "postgres://user:hunter2@db")
    assert stored == sys.executable + "\0"


def test_planted_errors_and_links(tmp_path):
    root = tmp_path / "host"
    (root / "fs" / "sys" / "dev" / "block").mkdir(parents=True)
    os.symlink("../../devices/pci0000:00/block/sdb/sdb1", root / "fs/sys/dev/block/8:17")
    (root / "host.toml").write_text(
        '[host]\nformat = 1\n[errors]\n"/proc/1/limits" = "no-permission"\n'
        '"dmidecode -t memory" = "no-permission"\n')
    host = RecordedHost(root)
    assert host.read_link("/sys/dev/block/8:17").endswith("block/sdb/sdb1")
    with pytest.raises(HostReadError) as err:
        host.read_text("/proc/1/limits")
    assert err.value.reason == "no-permission"
    with pytest.raises(HostReadError, match="no-permission"):
        host.run(["dmidecode", "-t", "memory"])


def test_failed_measurement_replays_as_failure(tmp_path):
    rec = RecordingHost(LiveHost(), tmp_path / "cap")

    def boom():
        raise MeasurementError("kernel ran out of memory")

    with pytest.raises(MeasurementError):
        rec.measure("k", boom)
    rec.save({})
    assert json.loads((tmp_path / "cap" / "measurements.json").read_text()) == {
        "k": {"error": "kernel ran out of memory"}}
    with pytest.raises(MeasurementError, match="kernel ran out of memory"):
        RecordedHost(tmp_path / "cap").measure("k", dict)
    with pytest.raises(MeasurementError, match="not in .*measurements.json"):
        RecordedHost(tmp_path / "cap").measure("other", dict)


@pytest.mark.parametrize("content,message", [
    (None, "host.toml: not found"),
    ("[host\n", "not valid TOML"),
    ("[host]\nformat = 9\n", "format = 9; this llm-doctor reads format 1"),
])
def test_bad_recorded_host_is_a_clear_error(tmp_path, content, message):
    if content is not None:
        (tmp_path / "host.toml").write_text(content)
    with pytest.raises(RecordedHostError, match=message):
        RecordedHost(tmp_path)


def test_live_errors_are_classified():
    host = LiveHost()
    with pytest.raises(HostReadError) as err:
        host.read_text("/nonexistent/file")
    assert err.value.reason == "not-found"
    with pytest.raises(HostReadError) as err:
        host.run(["llm-doctor-no-such-command"])
    assert err.value.reason == "not-found"
    with pytest.raises(HostReadError) as err:
        host.run(["sleep", "5"], timeout_s=0.2)
    assert err.value.reason == "timeout"


def test_a_recorded_host_cannot_read_outside_itself(tmp_path):
    root = tmp_path / "host"
    (root / "fs" / "proc").mkdir(parents=True)
    secret = tmp_path / "secret.txt"
    secret.write_text("do not leak")
    os.symlink(secret, root / "fs/proc/meminfo")
    (root / "host.toml").write_text(
        '[host]\nformat = 1\n[[commands]]\nargv = ["dmidecode"]\nrc = 0\n'
        'stdout_file = "../secret.txt"\n')
    host = RecordedHost(root)
    with pytest.raises(HostReadError, match="points outside the recorded host"):
        host.read_text("/proc/meminfo")
    with pytest.raises(HostReadError, match="points outside the recorded host"):
        host.run(["dmidecode"])


def test_a_fifo_is_never_read_and_a_long_file_gives_its_tail(tmp_path):
    import os

    from doctor.seam.live import MAX_READ_BYTES

    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    with pytest.raises(HostReadError) as caught:
        LiveHost().read_text(str(fifo))
    assert caught.value.reason.value == "failed" and "FIFO" in caught.value.detail
    log = tmp_path / "kern.log"
    lines = [f"line {i:08d}\n" for i in range(MAX_READ_BYTES // 14 + 1000)]
    log.write_text("".join(lines))
    text = LiveHost().read_text(str(log))
    assert text.endswith(lines[-1]) and text.startswith("line ") and len(text) <= MAX_READ_BYTES
    assert lines[0] not in text  # the oldest lines are the ones left out
