"""A field that could not be read says why, the same way in every record (doctor/seam/missing.py)."""

from __future__ import annotations

import shutil

import pytest

from doctor.model import ScanOptions
from doctor.seam.recorded import RecordedHost
from probes.host import memory as host_memory, sysctl as host_sysctl
from tests.conftest import FIXTURE_HOSTS


def _copy(tmp_path):
    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "healthy-epyc-9654-vllm", root, symlinks=True)
    return root


@pytest.mark.slow
def test_an_unreadable_setting_is_none_with_its_reason_and_an_absent_one_too(tmp_path):
    root = _copy(tmp_path)
    (root / "fs/proc/sys/vm/swappiness").unlink()
    manifest = root / "host.toml"
    text = manifest.read_text().replace("[errors]", '[errors]\n"/proc/sys/net/core/somaxconn" = "no-permission"', 1)
    manifest.write_text(text)
    record = host_sysctl.probe(RecordedHost(root), ScanOptions())
    assert record.vm_swappiness is None and record.net_core_somaxconn is None
    assert record.missing == {"vm_swappiness": "not-found", "net_core_somaxconn": "no-permission"}
    line = host_sysctl.summary(record)  # each value says why it is missing, in its place
    assert "somaxconn not read (no permission)" in line and "swappiness not found" in line
    assert "None" not in line


@pytest.mark.slow
def test_a_complete_read_has_nothing_missing(tmp_path):
    host = RecordedHost(_copy(tmp_path))
    assert host_sysctl.probe(host, ScanOptions()).missing == {}
    assert host_memory.probe(host, ScanOptions()).missing == {}
