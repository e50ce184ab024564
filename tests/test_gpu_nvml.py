"""doctor/seam/nvml.py: error mapping, renamed calls, struct conversion, lazy init; live on this host."""

from __future__ import annotations

import ctypes
import types

import pytest

from doctor.seam import nvml
from doctor.seam.host import HostReadError


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        self.value = value
        super().__init__(f"NVML error {value}")


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class Pci(ctypes.Structure):
    _fields_ = [("busId", ctypes.c_char * 32), ("domain", ctypes.c_uint)]


def fake_pynvml(**functions) -> types.SimpleNamespace:
    handles = {}

    def handle(i):
        if i >= 2:
            raise NVMLError(2)  # NVML_ERROR_INVALID_ARGUMENT
        return handles.setdefault(i, object())

    return types.SimpleNamespace(NVMLError=NVMLError, nvmlInit=lambda: None,
                                 nvmlDeviceGetHandleByIndex=handle, **functions)


@pytest.fixture
def use():
    def install(**functions):
        fake = fake_pynvml(**functions)
        nvml._reset_for_tests(fake)
        return fake
    yield install
    nvml._reset_for_tests(None)


def raiser(code):
    def fn(*args):
        raise NVMLError(code)
    return fn


@pytest.mark.parametrize("code,reason", [
    (3, "not-supported"), (4, "no-permission"), (13, "not-found"), (15, "device-lost"),
    (12, "library-missing"), (9, "library-missing"), (1, "library-missing"), (999, "failed"),
])
def test_every_nvml_error_maps_to_one_reason(use, code, reason):
    use(nvmlDeviceGetTemperature=raiser(code))
    with pytest.raises(HostReadError) as caught:
        nvml.query("nvmlDeviceGetTemperature", 0, 0)
    assert str(getattr(caught.value.reason, "value", caught.value.reason)) == reason
    assert caught.value.path == "nvml nvmlDeviceGetTemperature(0, 0)"


def test_renamed_call_falls_back_when_the_binding_lacks_it(use):
    use(nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0x4)
    assert nvml.query("nvmlDeviceGetCurrentClocksEventReasons", 0) == 0x4


def test_renamed_call_falls_back_when_the_driver_lacks_it(use):
    use(nvmlDeviceGetCurrentClocksEventReasons=raiser(13),
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0x41)
    assert nvml.query("nvmlDeviceGetCurrentClocksEventReasons", 0) == 0x41


def test_call_missing_everywhere_is_not_found(use):
    use()
    with pytest.raises(HostReadError) as caught:
        nvml.query("nvmlDeviceGetCurrentClocksEventReasons", 0)
    assert str(getattr(caught.value.reason, "value", caught.value.reason)) == "not-found"


def test_structs_arrays_bytes_and_tuples_become_json(use):
    mem = Memory(80, 30, 50)
    use(nvmlDeviceGetMemoryInfo=lambda h: mem,
        nvmlDeviceGetPciInfo=lambda h: Pci(b"00000000:18:00.0", 0),
        nvmlDeviceGetCpuAffinity=lambda h, n: (ctypes.c_ulonglong * n)(0xF, 0),
        nvmlDeviceGetRemappedRows=lambda h: (1, 2, 0, 1),
        nvmlDeviceGetComputeRunningProcesses=lambda h: [
            types.SimpleNamespace(pid=42, usedGpuMemory=None)],
        nvmlSystemGetDriverVersion=lambda: b"550.54.15")
    assert nvml.query("nvmlDeviceGetMemoryInfo", 1) == {"total": 80, "free": 30, "used": 50}
    assert nvml.query("nvmlDeviceGetPciInfo", 0) == {"busId": "00000000:18:00.0", "domain": 0}
    assert nvml.query("nvmlDeviceGetCpuAffinity", 0, 2) == [15, 0]
    assert nvml.query("nvmlDeviceGetRemappedRows", 0) == {
        "corrected": 1, "uncorrected": 2, "pending": 0, "failure": 1}
    assert nvml.query("nvmlDeviceGetComputeRunningProcesses", 0) == [
        {"pid": 42, "usedGpuMemory": None}]
    assert nvml.query("nvmlSystemGetDriverVersion") == "550.54.15"


def test_pair_calls_take_two_device_indexes(use):
    seen = []
    use(nvmlDeviceGetP2PStatus=lambda a, b, idx: seen.append((a, b, idx)) or 0)
    assert nvml.query("nvmlDeviceGetP2PStatus", 0, 1, 2) == 0
    a, b, idx = seen[0]
    assert a is not b and idx == 2


def test_a_device_that_does_not_exist_is_an_error_not_a_crash(use):
    use(nvmlDeviceGetName=lambda h: "x")
    for index in (5, -1, "0"):
        with pytest.raises(HostReadError):
            nvml.query("nvmlDeviceGetName", index)


def test_init_failure_is_remembered_and_says_what_is_missing():
    calls = []

    def init():
        calls.append(1)
        raise NVMLError(12)

    nvml._reset_for_tests(None)
    nvml._State.initialised = False
    fake = fake_pynvml()
    fake.nvmlInit = init
    original = nvml._import
    nvml._import = lambda: fake
    try:
        for _ in range(3):
            with pytest.raises(HostReadError) as caught:
                nvml.query("nvmlDeviceGetCount")
        assert "libnvidia-ml.so.1 not found" in caught.value.detail
        assert len(calls) == 1
    finally:
        nvml._import = original
        nvml._reset_for_tests(None)


def test_live_without_driver_is_library_missing():
    """This machine has no NVIDIA driver: the real pynvml says so, once, as library-missing."""
    nvml._reset_for_tests(None)
    try:
        nvml.query("nvmlDeviceGetCount")
    except HostReadError as exc:
        assert str(getattr(exc.reason, "value", exc.reason)) == "library-missing"
        assert "install the driver" in exc.detail
    else:
        pytest.skip("this machine has an NVIDIA driver")
    finally:
        nvml._reset_for_tests(None)


def test_watch_xids_collects_events_per_device_and_frees_the_sets(use):
    freed, waits = [], []

    def wait(event_set, timeout_ms):
        waits.append(event_set)
        if event_set == "set1" and len(waits) == 2:
            return types.SimpleNamespace(eventData=79)
        raise NVMLError(10)  # NVML_ERROR_TIMEOUT

    sets = iter(["set0", "set1"])
    use(nvmlDeviceGetCount=lambda: 2, nvmlEventSetCreate=lambda: next(sets),
        nvmlDeviceRegisterEvents=lambda h, kind, s: None, nvmlEventTypeXidCriticalError=8,
        nvmlEventSetWait_v2=wait, nvmlEventSetFree=freed.append)
    assert nvml.watch_xids(0.2) == [{"gpu": 1, "xid": 79}]
    assert sorted(freed) == ["set0", "set1"]


def test_watch_xids_not_supported_anywhere(use):
    freed = []
    use(nvmlDeviceGetCount=lambda: 1, nvmlEventSetCreate=lambda: "s",
        nvmlDeviceRegisterEvents=raiser(3), nvmlEventTypeXidCriticalError=8,
        nvmlEventSetFree=freed.append)
    with pytest.raises(HostReadError) as caught:
        nvml.watch_xids(0.1)
    assert str(getattr(caught.value.reason, "value", caught.value.reason)) == "not-supported"
    assert freed == ["s"]


class MemoryV2(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint), ("total", ctypes.c_ulonglong),
                ("reserved", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


def test_memory_v2_goes_through_the_bindings_versioned_argument(use):
    """nvmlDeviceGetMemoryInfo_v2 is not a name in nvidia-ml-py: it is the first call with
    version=nvmlMemory_v2; a driver without it answers FUNCTION_NOT_FOUND (not-found)."""
    seen = []

    def memory_info(handle, version=None):
        seen.append(version)
        if version is None:
            return Memory(8, 1, 7)
        return MemoryV2(version, 8, 406, 1, 1)
    use(nvmlDeviceGetMemoryInfo=memory_info, nvmlMemory_v2=0x02000028)
    assert nvml.query("nvmlDeviceGetMemoryInfo_v2", 0) == {
        "version": 0x02000028, "total": 8, "reserved": 406, "free": 1, "used": 1}
    assert nvml.query("nvmlDeviceGetMemoryInfo", 0) == {"total": 8, "free": 1, "used": 7}
    assert seen == [0x02000028, None]


def test_memory_v2_missing_from_the_driver_or_the_bindings_is_not_found(use):
    use(nvmlDeviceGetMemoryInfo=lambda handle, version=None: raiser(13)(), nvmlMemory_v2=0x02000028)
    with pytest.raises(HostReadError) as caught:
        nvml.query("nvmlDeviceGetMemoryInfo_v2", 0)
    assert str(getattr(caught.value.reason, "value", caught.value.reason)) == "not-found"
    use(nvmlDeviceGetMemoryInfo=lambda handle: Memory(8, 1, 7))  # bindings before the struct
    with pytest.raises(HostReadError) as caught:
        nvml.query("nvmlDeviceGetMemoryInfo_v2", 0)
    assert str(getattr(caught.value.reason, "value", caught.value.reason)) == "not-found"
