"""host.storage as a person meets it: a virtual disk's rotational flag is not evidence, and
a value or a path this user cannot read says what and why (no permission), never blank."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from doctor.model import Level, ScanOptions
from doctor.seam.live import LiveHost
from probes.host import storage as host_storage
from tests.conftest import FIXTURE_HOSTS
from tests.test_fixtures import replay

NOBODY = 65534


def _storage(report):
    return next(p for p in report.probes if p.name == "host.storage")


def test_a_virtio_disk_flagged_rotational_is_not_judged_without_a_read():
    """This VM's vda reports rotational = 1, as virtio does whatever backs it: at level
    quick (no read) it raised model-on-slow-disk as a warning; now only a read judges it."""
    report = replay(FIXTURE_HOSTS / "this-vm-epyc-2cpu", "quick")
    assert [f.rule for f in report.findings if f.rule == "model-on-slow-disk"] == []
    (path,) = _storage(report).record.paths
    assert (path.block_device, path.rotational, path.virtual_disk) == ("vda", True, True)
    assert path.missing["read_mbps"] == "not measured at level quick"
    assert "vda (virtual disk, flagged rotational)" in _storage(report).summary
    assert "not measured at level quick" in _storage(report).summary


def test_a_physical_rotational_disk_at_level_quick_still_warns_with_a_title_that_needs_no_read():
    report = replay(FIXTURE_HOSTS / "model-on-hdd-xeon-e5", "quick")
    (finding,) = [f for f in report.findings if f.rule == "model-on-slow-disk"]
    assert finding.title == ("Model weights at /data/models/llama-2-13b are on a slow disk "
                             "(sdb (rotational), not read)")
    assert finding.evidence["read_mbps"] is None
    assert finding.missing["read_mbps"] == "not measured at level quick"


def _copy(tmp_path: Path, name: str) -> Path:
    host = tmp_path / name
    shutil.copytree(FIXTURE_HOSTS / name, host, symlinks=True)
    return host


@pytest.mark.slow
@pytest.mark.parametrize("plant", ["vendor", "driver"])
def test_a_cloud_or_hypervisor_disk_is_virtual_by_its_sysfs_vendor_or_driver(tmp_path, plant):
    """sdb on the ATA path is physical; the same disk whose SCSI vendor is Google's
    persistent disk, or whose driver is virtio_blk, is a hypervisor's: silent without a read."""
    host = _copy(tmp_path, "model-on-hdd-xeon-e5")
    device = host / "fs/sys/block/sdb/device"
    device.mkdir()
    if plant == "vendor":
        (device / "vendor").write_text("Google  \n")
    else:
        os.symlink("../../../../bus/virtio/drivers/virtio_blk", device / "driver")
    report = replay(host, "quick")
    assert [f.rule for f in report.findings if f.rule == "model-on-slow-disk"] == []
    assert _storage(report).record.paths[0].virtual_disk is True
    measured = replay(host, "standard")  # its read (160 MB/s) still judges it
    (finding,) = [f for f in measured.findings if f.rule == "model-on-slow-disk"]
    assert finding.evidence["device"] == "sdb (virtual)" and finding.evidence["judged_by"] == "160.1 MB/s"


def _plant_errors(host: Path, errors: dict[str, str]) -> None:
    manifest = host / "host.toml"
    lines = "".join(f'{json.dumps(k)} = "{v}"\n' for k, v in errors.items())
    manifest.write_text(manifest.read_text().replace("[errors]\n", "[errors]\n" + lines, 1))


@pytest.mark.slow
def test_an_engines_model_path_this_user_cannot_see_is_said_with_the_reason(tmp_path):
    """An engine run by another user keeps its weights where this user cannot look: the
    path was dropped and the probe came back blank; now it is listed with why."""
    host = _copy(tmp_path, "healthy-epyc-9654-vllm")
    (path,) = _storage(replay(host)).record.paths
    _plant_errors(host, {path.path: "no-permission"})
    storage = _storage(replay(host))
    assert storage.status == "ok" and storage.record.paths == ()
    assert storage.record.unread == {f"{path.path} ({path.source})": "no-permission"}
    assert storage.summary == f"{path.path} ({path.source}): not read (no permission)"


def test_a_disk_whose_sysfs_entry_cannot_be_read_says_so(tmp_path):
    host = _copy(tmp_path, "model-on-hdd-xeon-e5")
    _plant_errors(host, {"/sys/dev/block/8:17": "no-permission"})
    storage = _storage(replay(host, "quick"))
    (path,) = storage.record.paths
    assert path.block_device is None and path.missing["block_device"] == "no-permission"
    assert "ext4, disk not read (no permission)" in storage.summary
    assert "None" not in storage.summary


def _as_nobody(fn):
    """``fn()`` in a forked child running as nobody (uid and gid 65534, no groups); returns
    what it returned (JSON), or raises with what went wrong there."""
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: drop to nobody, run, report, exit without pytest's cleanup
        os.close(read)
        try:
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = {"value": fn()}
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            out = {"error": f"{type(exc).__name__}: {exc}"}
        os.write(write, json.dumps(out).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        data = json.loads(pipe.read() or '{"error": "no answer"}')
    os.waitpid(pid, 0)
    assert "error" not in data, data["error"]
    return data["value"]


@pytest.fixture
def shared_tmp():
    """A folder every user may enter (pytest's own tmp_path sits under a root-only one)."""
    path = Path(tempfile.mkdtemp(prefix="llm-doctor-test-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("level", [Level.QUICK, Level.STANDARD])
def test_run_unprivileged_a_folder_it_cannot_list_says_no_permission(shared_tmp, level):
    """Run as nobody on a model folder only root may list: the row said '0.0 GB weights,
    no weight files found'; now each value it could not read carries the reason."""
    folder = shared_tmp / "private-model"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"\0" * 4096)
    folder.chmod(0o700)

    def probe():
        record = host_storage.probe(LiveHost(), ScanOptions(level=level, model_dirs=(str(folder),)))
        (row,) = [p for p in record.paths if p.source == "--model-dir"]
        return {"weights_bytes": row.weights_bytes, "missing": row.missing,
                "reason": row.read_reason, "summary": host_storage.summary(record)}

    row = _as_nobody(probe)
    assert row["weights_bytes"] is None
    assert row["missing"]["weights_bytes"] == "no-permission"
    assert row["reason"] == "the weight files could not be listed (no permission)"
    assert "weights not read (no permission)" in row["summary"]
    assert "None" not in row["summary"] and "no weight files" not in row["summary"]


def test_run_unprivileged_a_model_dir_behind_a_closed_folder_is_a_clear_error(shared_tmp):
    """os.path.exists says False for a path behind a folder this user may not enter, and
    the error said 'no such file or directory'."""
    from doctor.commands.setup import ScanCannotRun, check_model_dirs

    closed = shared_tmp / "closed"
    (closed / "model").mkdir(parents=True)
    closed.chmod(0o700)

    def check():
        try:
            check_model_dirs(ScanOptions(model_dirs=(str(closed / "model"),)))
        except ScanCannotRun as exc:
            return str(exc)
        return "no error"

    message = _as_nobody(check)
    assert message.startswith(f"--model-dir {closed / 'model'}: this user may not look inside")
    assert "permission denied" in message and "run as the user that runs the engine" in message
