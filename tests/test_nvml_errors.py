"""A host without the NVIDIA driver answers every NVML call with the same clear error, and
asking again and again (the daemon asks every interval) costs nothing that accumulates."""

from __future__ import annotations

import traceback

import pytest

from doctor.seam.host import HostReadError, Reason
from doctor.seam.live import LiveHost

pytest.importorskip("pynvml")


def _depth(exc: BaseException) -> int:
    return len(traceback.extract_tb(exc.__traceback__))


def test_a_failed_nvml_start_is_raised_afresh_each_time():
    host = LiveHost()
    try:
        host.nvml("nvmlDeviceGetCount")
    except HostReadError as exc:
        first = exc
    else:
        pytest.skip("this host has a working NVIDIA driver")
    assert first.reason == Reason.LIBRARY_MISSING
    depths = []
    for _ in range(50):
        with pytest.raises(HostReadError) as err:
            host.nvml("nvmlDeviceGetCount")
        assert str(err.value) == str(first)
        depths.append(_depth(err.value))
    assert depths[-1] == depths[0]  # the traceback does not grow call after call
