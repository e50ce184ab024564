"""What names this machine: its machine id and its DMI product UUID, for the scan's ``host``.

Sources: ``/etc/machine-id`` (systemd's, 32 hex digits), else ``/var/lib/dbus/machine-id``
(dbus's copy on hosts without systemd); ``/sys/class/dmi/id/product_uuid`` (the firmware's
SMBIOS system UUID; root only: the kernel makes it 0400). Both are read through the host's
``read_text``, so a capture records them and a replay answers the same. They are
identifiers, not secrets: doctor/diff/identity.py proves two states are of one host with them.

A value that names no machine is not kept: an image's empty or ``uninitialized`` machine id
(systemd fills it at first boot), an all-zero or all-F UUID, or the UUID that many boards'
firmware ships unset (``03000200-0400-0500-0006-000700080009``: every such board has it).
What is not kept has its reason under ``<key>_reason`` instead (the report's ``host`` holds
strings only). Manual equivalent: ``cat /etc/machine-id; sudo cat /sys/class/dmi/id/product_uuid``.
"""

from __future__ import annotations

import re
from typing import Callable

from doctor.seam.host import HostReadError, Reason

MACHINE_ID_PATHS = ("/etc/machine-id", "/var/lib/dbus/machine-id")
PRODUCT_UUID_PATH = "/sys/class/dmi/id/product_uuid"
MACHINE_ID = re.compile(r"[0-9a-f]{32}")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
MAX_CHARS = 64  # either value is under 40 characters; longer is no identifier, read no further
PLACEHOLDER_UUIDS = frozenset({
    "00000000-0000-0000-0000-000000000000", "ffffffff-ffff-ffff-ffff-ffffffffffff",
    "03000200-0400-0500-0006-000700080009",  # AMI firmware's default, on many boards at once
})


def identity(read_text: Callable[[str], str]) -> dict[str, str]:
    """``machine_id`` and ``product_uuid`` as read, or ``machine_id_reason`` /
    ``product_uuid_reason`` saying why not (a read-failure reason and the path, or what
    the file held instead of an identifier)."""
    out: dict[str, str] = {}
    for key, paths, check in (("machine_id", MACHINE_ID_PATHS, _machine_id),
                              ("product_uuid", (PRODUCT_UUID_PATH,), _product_uuid)):
        failed: list[str] = []
        for path in paths:
            try:
                raw = read_text(path)
            except HostReadError as exc:
                failed.append(f"{exc.reason.value}: {path}"
                              + (" (root only)" if exc.reason is Reason.NO_PERMISSION
                                 and path == PRODUCT_UUID_PATH else ""))
                continue
            value, why = check(raw)
            if value:
                out[key] = value
                break
            failed.append(f"{why}: {path}")
        else:
            out[f"{key}_reason"] = "; ".join(failed)
    return out


def _machine_id(raw: str) -> tuple[str, str]:
    value = raw.strip()[:MAX_CHARS + 1]
    if not value:
        return "", "empty (an image's blank machine id, filled at first boot)"
    if value == "uninitialized":
        return "", "uninitialized (the first boot has not completed)"
    value = value.lower()
    if not MACHINE_ID.fullmatch(value) or value == "0" * 32:
        return "", "not a machine id (32 hex digits)"
    return value, ""


def _product_uuid(raw: str) -> tuple[str, str]:
    value = raw.strip()[:MAX_CHARS + 1].lower()
    if not UUID.fullmatch(value):
        return "", "not a UUID"
    if value in PLACEHOLDER_UUIDS:
        return "", "a placeholder the firmware ships, the same on many machines"
    return value, ""
