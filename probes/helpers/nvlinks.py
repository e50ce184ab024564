"""A GPU's NVLinks: how many it has, and how many are up, through the seam's NVML.

Sources: ``nvmlDeviceGetFieldValues`` field ``NVML_FI_DEV_NVLINK_LINK_COUNT`` (91, nvml.h):
the links this device has; ``nvmlDeviceGetNvLinkState`` per link (1 = up). Where the driver
gives no count (not supported, or a recording made before the call was asked), the links are
probed from 0 up to NVML's bound (``NVML_NVLINK_MAX_LINKS``: 18 before nvidia-ml-py 13, 36
since), stopping at the first that does not answer: on GB200, indexes 18-35 answer
INVALID_ARGUMENT (a public report of detection that broke there). With the count, every link
below it is asked, and one that does not answer is left out without ending the loop.
No root needed. Manual equivalent: ``nvidia-smi nvlink --status -i N``.
"""

from __future__ import annotations

from doctor.seam.host import Host, HostReadError

NVLINK_MAX_LINKS = 36  # NVML_NVLINK_MAX_LINKS in nvml.h since CUDA 13 (a bound, not a count)
FI_DEV_NVLINK_LINK_COUNT = 91  # nvml.h NVML_FI_DEV_NVLINK_LINK_COUNT
NVLINK_UP = 1  # nvmlEnableState_t NVML_FEATURE_ENABLED


def link_count(host: Host, index: int) -> int | None:
    """The device's own NVLink count; None where the driver does not give it."""
    try:
        got = host.nvml("nvmlDeviceGetFieldValues", index, FI_DEV_NVLINK_LINK_COUNT)
    except HostReadError:
        return None
    value = got.get("value") if isinstance(got, dict) else None
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= NVLINK_MAX_LINKS
    return value if ok else None


def link_states(host: Host, index: int) -> tuple[int | None, int | None]:
    """(links up, links that answered); (None, None) when none answered (no NVLink)."""
    count = link_count(host, index)
    answered = up = 0
    for link in range(NVLINK_MAX_LINKS if count is None else count):
        try:
            state = host.nvml("nvmlDeviceGetNvLinkState", index, link)
        except HostReadError:
            if count is None:
                break  # probing blind: past this GPU's last link
            continue  # a link the device has that does not answer: left out
        answered += 1
        up += 1 if state == NVLINK_UP else 0
    return (up, answered) if answered else (None, None)
