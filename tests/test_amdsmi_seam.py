"""The AMD SMI seam (doctor/seam/amdsmi.py): the real bindings fail cleanly on this machine
(no ROCm), every amdsmi status maps onto one read-failure reason, only getters are called,
and a recording (amdsmi.json) replays what the live host answered; a hostile amdsmi.json is
one clear line naming the file and the entry."""

from __future__ import annotations

import enum
import json
import shutil

import pytest

from doctor.seam import amdsmi
from doctor.seam.host import HostReadError, Reason
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost, RecordedHostError, RecordingHost
from tests.conftest import FIXTURE_HOSTS


class AmdSmiLibraryException(Exception):
    """As amdsmi_exception.AmdSmiLibraryException: the status in ``err_code``."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.err_code = code


class AmdSmiTemperatureType(enum.IntEnum):
    EDGE = 0
    HOTSPOT = 1


class AmdSmiTemperatureMetric(enum.IntEnum):
    CURRENT = 0
    CRITICAL = 1


class FakeAmdsmi:
    """The bindings' surface the seam touches, answering as amdsmi 7.0.2 does."""

    AmdSmiTemperatureType = AmdSmiTemperatureType
    AmdSmiTemperatureMetric = AmdSmiTemperatureMetric

    def __init__(self) -> None:
        self.called: list[tuple] = []

    def amdsmi_get_temp_metric(self, handle, sensor, metric):
        self.called.append((handle, sensor, metric))
        if sensor is AmdSmiTemperatureType.EDGE:
            raise AmdSmiLibraryException(2)  # NOT_SUPPORTED: MI300X has no edge sensor
        return 47 if metric is AmdSmiTemperatureMetric.CURRENT else 110

    def amdsmi_get_gpu_asic_info(self, handle):
        return {"market_name": "AMD Instinct MI300X", "target_graphics_version": "gfx942",
                "num_compute_units": 304, "kind": AmdSmiTemperatureType.HOTSPOT}

    def amdsmi_get_gpu_bad_page_info(self, handle):
        raise AmdSmiLibraryException(10)  # NO_PERM: bad pages need root

    def amdsmi_get_gpu_process_list(self, handle):
        raise AmdSmiLibraryException(8)  # TIMEOUT

    def amdsmi_set_gpu_power_cap(self, handle, watts):  # pragma: no cover - must never run
        raise AssertionError("the seam called a setter")


@pytest.fixture
def fake():
    module = FakeAmdsmi()
    amdsmi._reset_for_tests(module, ["handle-0", "handle-1"])
    yield module
    amdsmi._reset_for_tests()


def test_the_real_bindings_fail_cleanly_without_rocm(capfd):
    amdsmi._reset_for_tests()
    try:
        for _ in range(3):  # remembered: the second and third answer at once, the same
            with pytest.raises(HostReadError) as err:
                LiveHost().amdsmi("amdsmi_get_processor_handles")
            assert err.value.reason == Reason.LIBRARY_MISSING
            assert err.value.detail in (amdsmi.NO_LIBRARY, amdsmi.NO_PACKAGE)
    finally:
        amdsmi._reset_for_tests()
    out, errors = capfd.readouterr()
    assert out == "" and errors == ""  # the bindings' own "Unable to find libamd_smi.so" is kept quiet


def test_calls_answer_by_device_index_and_enum_names(fake):
    assert amdsmi.query("amdsmi_get_processor_handles") == 2
    assert amdsmi.query("amdsmi_get_temp_metric", 1, "HOTSPOT", "CRITICAL") == 110
    assert fake.called == [("handle-1", AmdSmiTemperatureType.HOTSPOT, AmdSmiTemperatureMetric.CRITICAL)]
    info = amdsmi.query("amdsmi_get_gpu_asic_info", 0)
    assert info["target_graphics_version"] == "gfx942" and info["kind"] == "HOTSPOT"  # enums by name


@pytest.mark.parametrize("call,args,reason", [
    ("amdsmi_get_temp_metric", (0, "EDGE", "CURRENT"), "not-supported"),
    ("amdsmi_get_gpu_bad_page_info", (0,), "no-permission"),
    ("amdsmi_get_gpu_process_list", (1,), "timeout"),
    ("amdsmi_get_gpu_asic_info", (2,), "not-found"),  # no third GPU
    ("amdsmi_get_gpu_asic_info", (-1,), "failed"),
    ("amdsmi_get_temp_metric", (0, "NOSUCH", "CURRENT"), "failed"),
    ("amdsmi_get_gpu_vbios_info", (0,), "not-found"),  # a call this package lacks
    ("amdsmi_set_gpu_power_cap", (0, 100), "failed"),  # never a setter
])
def test_every_failure_is_one_reason(fake, call, args, reason):
    with pytest.raises(HostReadError) as err:
        amdsmi.query(call, *args)
    assert err.value.reason.value == reason
    assert str(err.value).startswith(f"amdsmi {call}")


def test_a_failed_start_is_remembered_with_its_advice():
    class NoDriver:
        def amdsmi_init(self):
            raise AmdSmiLibraryException(34)  # DRIVER_NOT_LOADED

    amdsmi._reset_for_tests()
    try:
        amdsmi._State.amdsmi = None
        original = amdsmi._import
        amdsmi._import = lambda: NoDriver()  # type: ignore[assignment]
        for _ in range(2):
            with pytest.raises(HostReadError) as err:
                amdsmi.query("amdsmi_get_processor_handles")
            assert err.value.reason == Reason.LIBRARY_MISSING
            assert "modprobe amdgpu" in err.value.detail
    finally:
        amdsmi._import = original  # type: ignore[assignment]
        amdsmi._reset_for_tests()


def test_a_recording_replays_what_the_live_host_answered(fake, tmp_path):
    recording = RecordingHost(LiveHost(), tmp_path / "rec")
    assert recording.amdsmi("amdsmi_get_processor_handles") == 2
    assert recording.amdsmi("amdsmi_get_temp_metric", 0, "HOTSPOT", "CURRENT") == 47
    assert recording.amdsmi("amdsmi_get_gpu_asic_info", 1)["target_graphics_version"] == "gfx942"
    with pytest.raises(HostReadError):
        recording.amdsmi("amdsmi_get_gpu_bad_page_info", 0)
    recording.save({"level": "quick"})
    replay = RecordedHost(tmp_path / "rec")
    assert replay.amdsmi("amdsmi_get_processor_handles") == 2
    assert replay.amdsmi("amdsmi_get_temp_metric", 0, "HOTSPOT", "CURRENT") == 47
    with pytest.raises(HostReadError) as err:
        replay.amdsmi("amdsmi_get_gpu_bad_page_info", 0)
    assert err.value.reason == Reason.NO_PERMISSION
    with pytest.raises(HostReadError) as err:
        replay.amdsmi("amdsmi_get_gpu_asic_info", 0)
    assert err.value.reason == Reason.NOT_FOUND and err.value.detail == "not recorded"


def test_a_recording_without_amdsmi_json_is_a_host_without_the_driver():
    host = RecordedHost(FIXTURE_HOSTS / "amd-rx6750-ollama")
    with pytest.raises(HostReadError) as err:
        host.amdsmi("amdsmi_get_processor_handles")
    assert err.value.reason == Reason.LIBRARY_MISSING
    assert err.value.detail == "AMD driver not loaded in this recording (no amdsmi.json)"


@pytest.mark.parametrize("edit,said", [
    (lambda e: e[1].__setitem__("args", [[0]]), "entry #2 (amdsmi_get_gpu_device_bdf) args: expected a list of integers"),
    (lambda e: e[1].__setitem__("call", 7), "entry #2 call: expected the name of an AMD SMI call"),
    (lambda e: e[1].__setitem__("error", "exploded"), "entry #2 error: expected a read-failure reason"),
    (lambda e: '{"call": "amdsmi_get_processor_handles"', "amdsmi.json"),  # cut short
])
def test_a_hostile_amdsmi_json_is_one_clear_line(tmp_path, edit, said):
    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "amd-mi300-8x", root, symlinks=True)
    entries = json.loads((root / "amdsmi.json").read_text())
    edited = edit(entries)
    (root / "amdsmi.json").write_text(edited if isinstance(edited, str) else json.dumps(entries))
    with pytest.raises(RecordedHostError) as err:
        RecordedHost(root)
    message = str(err.value)
    assert said in message and "amdsmi.json" in message and "\n" not in message.strip()


def test_a_count_beyond_the_devices_recorded_is_an_error_not_a_loop(tmp_path):
    root = tmp_path / "host"
    shutil.copytree(FIXTURE_HOSTS / "amd-mi300-8x", root, symlinks=True)
    entries = json.loads((root / "amdsmi.json").read_text())
    entries[0]["value"] = 1000
    (root / "amdsmi.json").write_text(json.dumps(entries))
    with pytest.raises(HostReadError) as err:
        RecordedHost(root).amdsmi("amdsmi_get_processor_handles")
    assert "amdsmi_get_processor_handles is 1000, but the recording holds answers for devices 0" in err.value.detail
