"""The diagnosis gaps of issue 5 §5, on recorded hosts and live: empty memory channels, slow
disks stopped by time, contended bandwidth figures.

The rules' tables are in tests/rule_cases/; the recorded hosts' warnings in their
expected.toml. This file checks what those cannot: info findings, the probes' records, and
the live time bound of the disk read.
"""

from __future__ import annotations

from doctor.seam.live import LiveHost
from doctor.model import Level, ScanOptions
from doctor.seam.recorded import RecordedHost
from probes.helpers import dimms
from probes.host import storage as host_storage
from tests.conftest import FIXTURE_HOSTS
from tests.test_fixtures import replay
from tests.test_parsers import DMI


def _probe(report, name):
    return next(p for p in report.probes if p.name == name)


def test_half_the_channels_empty_names_them_and_says_how_to_fix_it():
    report = replay(FIXTURE_HOSTS / "epyc-9354-6of12-channels")
    record = _probe(report, "host.memory_bandwidth").record
    assert (record.channels, record.platform_channels) == (6, 12)
    assert record.empty_channels == ("DIMMB1", "DIMMD1", "DIMMF1", "DIMMH1", "DIMMJ1", "DIMML1")
    assert (record.ceiling_gbps, record.platform_ceiling_gbps) == (230.4, 460.8)
    # The measured ratio against what is installed is kept beside the platform's.
    assert (record.triad_ratio, record.platform_ratio) == (0.76, 0.38)
    (finding,) = [f for f in report.findings if f.rule == "host-memory-bandwidth-low"]
    assert "Populate one DIMM per channel" in finding.remediation
    assert "6 of 12 channels populated" in finding.title


def test_a_fully_populated_board_reports_no_empty_channel():
    report = replay(FIXTURE_HOSTS / "healthy-epyc-9654-vllm")
    record = _probe(report, "host.memory_bandwidth").record
    assert (record.channels, record.platform_channels, record.empty_channels) == (12, 12, ())
    assert record.platform_ratio == record.triad_ratio


def test_two_slots_per_channel_count_each_channel_once():
    # Xeon 6338 board: A1..H1 populated, A2..H2 empty, per socket: nothing is missing.
    report = replay(FIXTURE_HOSTS / "xeon-gold-6338-2socket-powersave")
    record = _probe(report, "host.memory_bandwidth").record
    assert (record.channels, record.platform_channels, record.empty_channels) == (16, 16, ())


def test_an_empty_slot_spelled_unlike_the_populated_ones_adds_no_channel(tmp_path):
    (tmp_path / "dmi.out").write_text(DMI)  # DIMM_A2 has no bank locator, the others do
    (tmp_path / "host.toml").write_text(
        '[host]\nformat = 1\n[[commands]]\nargv = ["dmidecode", "-t", "memory"]\n'
        'rc = 0\nstdout_file = "dmi.out"\n')
    ceiling = dimms.read_ceiling(RecordedHost(tmp_path))
    assert (ceiling.channels, ceiling.platform_channels, ceiling.empty_channels) == (2, 2, ())


def test_edac_lists_empty_channels_with_size_0(tmp_path):
    dell = DMI.replace("P0_Node0_Channel0_Dimm0", "Not Specified").replace(
        "P0_Node0_Channel1_Dimm0", "Not Specified").replace("DIMM_", "")
    (tmp_path / "dmi.out").write_text(dell)
    (tmp_path / "host.toml").write_text(
        '[host]\nformat = 1\n[[commands]]\nargv = ["dmidecode", "-t", "memory"]\n'
        'rc = 0\nstdout_file = "dmi.out"\n')
    for i, (channel, size) in enumerate([(0, "32768"), (1, "32768"), (2, "0"), (3, "0")]):
        folder = tmp_path / "fs/sys/devices/system/edac/mc/mc0" / f"dimm{i}"
        folder.mkdir(parents=True)
        (folder / "dimm_location").write_text(f"channel {channel} slot 0 \n")
        (folder / "size").write_text(f"{size}\n")
    ceiling = dimms.read_ceiling(RecordedHost(tmp_path))
    assert (ceiling.channels, ceiling.platform_channels) == (2, 4)
    assert ceiling.empty_channels == ("mc0 channel 2", "mc0 channel 3")
    assert ceiling.platform_ceiling_gbps == round(4 * 2133 * 8 / 1000, 1)


def test_a_contended_measurement_is_not_called_a_slow_host_and_says_why():
    report = replay(FIXTURE_HOSTS / "contended-epyc-7543-batch-job")
    rules = {f.rule: f for f in report.findings}
    assert "host-memory-bandwidth-low" not in rules
    info = rules["host-memory-bandwidth-contended"]
    assert info.severity.label == "info"
    assert info.evidence["other_busy_cores"] == 40.6 and info.evidence["threads"] == 32
    assert "40.6 cores were busy with other work" in info.title
    assert "re-run when idle" in info.title


def test_the_slow_cloud_volume_was_stopped_by_time_and_judged_from_what_was_read():
    report = replay(FIXTURE_HOSTS / "slow-cloud-volume-sc1-m6i-2xlarge")
    (path,) = _probe(report, "host.storage").record.paths
    assert (path.read_stopped_by, path.read_bytes, path.read_seconds) == (
        "max_seconds", 41943040, 3.33)
    assert path.read_bytes < 64 * 2**20  # under the minimum sample: judged because of time
    (finding,) = [f for f in report.findings if f.rule == "model-on-slow-disk"]
    assert finding.evidence["load_time_s"] > 1200  # 16 GB at 12.6 MB/s


def test_live_read_stopped_by_its_time_bound_is_recorded_as_such(tmp_path, monkeypatch):
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"\0" * (16 * 2**20))
    monkeypatch.setitem(host_storage.READ_BOUNDS, Level.STANDARD, (64 * 2**20, 1e-9))
    record = host_storage.probe(LiveHost(), ScanOptions(model_dirs=(str(model),)))
    # Engines other people run on this machine add their own rows: take ours.
    (path,) = [p for p in record.paths if p.source == "--model-dir"]
    assert path.read_stopped_by == "max_seconds"
    assert path.read_bytes == 8 * 2**20  # one 8 MiB block, then the deadline had passed
    assert path.read_seconds is not None and path.read_seconds >= 0


def test_summaries_say_what_the_gaps_add():
    from probes.host import memory_bandwidth as host_memory_bandwidth

    channels = _probe(replay(FIXTURE_HOSTS / "epyc-9354-6of12-channels"), "host.memory_bandwidth")
    line = host_memory_bandwidth.summary(channels.record)
    assert "76% of the DIMMs' 230.4 GB/s, 38% of the platform's 460.8 GB/s" in line
    assert "(6 of 12 channels populated)" in line
    storage = _probe(replay(FIXTURE_HOSTS / "slow-cloud-volume-sc1-m6i-2xlarge"), "host.storage")
    assert "12.6 MB/s (42 MB, stopped by time)" in host_storage.summary(storage.record)
