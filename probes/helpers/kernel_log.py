"""The kernel log, read once for the probes that look for a driver's lines in it: NVIDIA's
XID lines (gpu.errors) and amdgpu's RAS and reset lines (amd.gpu), each parsed by the
pattern table of probes/helpers/xid.py.

Source: ``dmesg`` (needs root where kernel.dmesg_restrict is 1), else ``/var/log/kern.log``.
"""

from __future__ import annotations

from typing import Callable, TypeVar

from doctor.i18n import t
from doctor.seam.host import Host, HostReadError
from probes.helpers.gpu_common import reason_of

KERN_LOG = "/var/log/kern.log"
T = TypeVar("T")


def read_log(host: Host, parse: Callable[[str], list[T]], advice: str) -> tuple[list[T], str]:
    """``parse`` of the kernel log, and where it came from ("dmesg", the file) or, with no
    lines, why neither could be read (``advice`` says what would let it)."""
    try:
        out = host.run(["dmesg"], timeout_s=5.0)
        if out.rc == 0:
            return parse(out.stdout), "dmesg"
        why = t("dmesg exited {rc}: {stderr}", rc=out.rc, stderr=out.stderr.strip()[:120])
    except HostReadError as exc:
        why = f"dmesg: {reason_of(exc)}"
    try:
        return parse(host.read_text(KERN_LOG)), KERN_LOG
    except HostReadError as exc:
        return [], t("{why}; {path}: {reason} ({advice})", why=why, path=KERN_LOG,
                     reason=reason_of(exc), advice=advice)
