"""A recording of sysfs, where one path is listed as a folder and read through a link:
``/sys/bus/pci/devices`` lists ``0000:01:00.0``, which is a link to the device's folder under
``/sys/devices``, and probes read ``.../0000:01:00.0/vendor`` through it. Whatever order a
capture's probes record these in (they run in parallel), the recording holds the link, its
target folder and the file, and a replay reads the file through the link."""

from __future__ import annotations

import os

import pytest

from doctor.seam.recorded import RecordedHost, RecordWriter

LINK = "/sys/bus/pci/devices/0000:01:00.0"
TARGET = "../../../devices/pci0000:00/0000:01:00.0"
REAL = "/sys/devices/pci0000:00/0000:01:00.0"


def _listed(w: RecordWriter) -> None:
    w.dir("/sys/bus/pci/devices", ["0000:01:00.0"])


def _linked(w: RecordWriter) -> None:
    w.link(LINK, TARGET)


def _read(w: RecordWriter) -> None:
    w.file(LINK + "/vendor", "0x10de\n")


ORDERS = {
    "listed, linked, read": (_listed, _linked, _read),
    "linked, listed, read": (_linked, _listed, _read),
    "linked, read": (_linked, _read),
    "read, linked": (_read, _linked),
    "listed, read, linked": (_listed, _read, _linked),
}


@pytest.mark.parametrize("order", ORDERS)
def test_a_link_listed_and_read_through_in_any_order_replays(tmp_path, order):
    writer = RecordWriter(tmp_path)
    for step in ORDERS[order]:
        step(writer)
    writer.save({})
    assert os.readlink(tmp_path / "fs" / LINK.lstrip("/")) == TARGET
    assert (tmp_path / "fs" / REAL.lstrip("/") / "vendor").read_text() == "0x10de\n"
    host = RecordedHost(str(tmp_path))
    assert host.read_text(LINK + "/vendor") == "0x10de\n"
    assert host.read_text(REAL + "/vendor") == "0x10de\n"


def test_a_file_already_at_the_target_wins_over_one_listed_before_the_link(tmp_path):
    writer = RecordWriter(tmp_path)
    writer.file(REAL + "/vendor", "0x10de\n")  # the first read of a path wins
    _listed(writer)
    writer.file(LINK + "/vendor", "0x1002\n")  # through the folder the listing made
    _linked(writer)
    assert (tmp_path / "fs" / REAL.lstrip("/") / "vendor").read_text() == "0x10de\n"
    assert not list((tmp_path / "fs/sys/bus/pci/devices").glob("*.listed"))


def test_links_that_climb_past_the_root_or_loop_stay_inside_the_recording(tmp_path):
    writer = RecordWriter(tmp_path)
    writer.link("/sys/class/x", "../../../../../../../../etc")  # .. stops at the host's root
    writer.file("/sys/class/x/passwd", "recorded\n")
    assert (tmp_path / "fs/etc/passwd").read_text() == "recorded\n"
    writer.link("/sys/loop/a", "b")
    writer.link("/sys/loop/b", "a")
    with pytest.raises(OSError, match="too many levels"):
        writer.file("/sys/loop/a/file", "x")


def test_an_absolute_link_is_resolved_in_the_recording_never_on_this_machine(tmp_path):
    writer = RecordWriter(tmp_path / "rec")
    outside = tmp_path / "outside"
    outside.mkdir()
    writer.link("/proc/7/cwd", str(outside))  # the recorded host's path, which exists here
    writer.file("/proc/7/cwd/notes", "recorded\n")
    writer.byte_range("/proc/7/cwd/lib.so", 4, b"ELF")
    assert list(outside.iterdir()) == []  # nothing written on this machine
    inside = tmp_path / "rec" / "fs" / str(outside).lstrip("/")
    assert (inside / "notes").read_text() == "recorded\n"
    assert (inside / "lib.so").read_bytes() == b"\0" * 4 + b"ELF"
