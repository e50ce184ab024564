"""gpu.errors: ECC counts, remapped rows or retired pages, and XID events from the kernel log.

Source: NVML ``nvmlDeviceGetEccMode``, ``GetTotalEccErrors`` (volatile: since the driver
loaded; aggregate: the card's lifetime), ``GetRemappedRows`` (Ampere and later),
``GetRetiredPagesPendingStatus`` (before Ampere); the kernel log for ``NVRM: Xid`` lines.

The kernel log is read with ``dmesg`` (the ring buffer since boot: a bounded window; needs
root where ``kernel.dmesg_restrict = 1``, the default on Debian/Ubuntu); when dmesg is
refused, ``/var/log/kern.log`` (readable by root and the ``adm`` group; its last 4 MiB). When
neither can be read the XID list is empty and ``xid_source`` says why. Manual equivalent:
``nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT`` and ``sudo dmesg | grep -i xid``.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.seam.host import Host, HostReadError, MeasurementError
from doctor.model import Level, ScanOptions
from probes.helpers.gpu_common import Reader, gpu_count, reason_of
from probes.helpers.xid import XidEvent, parse_kernel_log, same_bus

ERR_CORRECTED, ERR_UNCORRECTED = 0, 1  # nvmlMemoryErrorType_t
VOLATILE, AGGREGATE = 0, 1  # nvmlEccCounterType_t
KERN_LOG = "/var/log/kern.log"
XID_WATCH_S = 2.0  # level standard: how long to listen for XID events from NVML


@dataclass(frozen=True, slots=True)
class GpuErrors:
    index: int
    bus_id: str | None
    ecc_enabled: bool | None  # nvmlDeviceGetEccMode current (None: no ECC, consumer cards)
    ecc_corrected_volatile: int | None
    ecc_uncorrected_volatile: int | None
    ecc_uncorrected_aggregate: int | None
    remapped_rows_corrected: int | None  # rows remapped for correctable errors
    remapped_rows_uncorrected: int | None
    remap_pending: bool | None  # a remap waits for a GPU reset
    remap_failed: bool | None  # a remap could not be done: the card needs service
    retired_pages_pending: bool | None  # pre-Ampere page retirement waiting for a reset
    xids: tuple[XidEvent, ...]  # from the kernel log, this GPU's bus
    hardware_xids: tuple[int, ...]  # codes among xids that point at the hardware
    missing: dict[str, str]


@dataclass(frozen=True, slots=True)
class GpuErrorsRecord:
    gpus: tuple[GpuErrors, ...]
    xid_source: str  # "dmesg", "/var/log/kern.log", or why neither could be read
    xids_unmatched: tuple[XidEvent, ...]  # logged for a bus no GPU has now (fell off the bus)
    xid_watch_s: float | None  # level standard: seconds NVML's XID events were watched
    xid_watch_reason: str | None  # why they were not (level quick, not supported, …)


def read_kernel_log(host: Host) -> tuple[list[XidEvent], str]:
    try:
        out = host.run(["dmesg"], timeout_s=5.0)
        if out.rc == 0:
            return parse_kernel_log(out.stdout), "dmesg"
        why = f"dmesg exited {out.rc}: {out.stderr.strip()[:120]}"
    except HostReadError as exc:
        why = f"dmesg: {reason_of(exc)}"
    try:
        return parse_kernel_log(host.read_text(KERN_LOG)), KERN_LOG
    except HostReadError as exc:
        return [], (f"{why}; {KERN_LOG}: {reason_of(exc)} (run as root to see XID events)")


def _flag(value: int | None) -> bool | None:
    return None if value is None else bool(value)


def read_gpu(host: Host, index: int, events: list[XidEvent]) -> GpuErrors:
    r = Reader(host)
    pci = r.mapping("bus_id", "nvmlDeviceGetPciInfo", index)
    bus = r.item("bus_id", pci, "busId", str)
    mode = r.mapping("ecc_enabled", "nvmlDeviceGetEccMode", index)
    rows = r.mapping("remapped_rows", "nvmlDeviceGetRemappedRows", index)
    mine = tuple(e for e in events if same_bus(bus, e.bus))
    return GpuErrors(
        index=index, bus_id=bus, ecc_enabled=_flag(r.item("ecc_enabled", mode, "current")),
        ecc_corrected_volatile=r.integer("ecc_corrected_volatile", "nvmlDeviceGetTotalEccErrors",
                                     index, ERR_CORRECTED, VOLATILE),
        ecc_uncorrected_volatile=r.integer("ecc_uncorrected_volatile", "nvmlDeviceGetTotalEccErrors",
                                       index, ERR_UNCORRECTED, VOLATILE),
        ecc_uncorrected_aggregate=r.integer("ecc_uncorrected_aggregate",
                                        "nvmlDeviceGetTotalEccErrors", index, ERR_UNCORRECTED,
                                        AGGREGATE),
        remapped_rows_corrected=r.item("remapped_rows_corrected", rows, "corrected"),
        remapped_rows_uncorrected=r.item("remapped_rows_uncorrected", rows, "uncorrected"),
        remap_pending=_flag(r.item("remap_pending", rows, "pending")),
        remap_failed=_flag(r.item("remap_failed", rows, "failure")),
        retired_pages_pending=_flag(r.integer("retired_pages_pending",
                                          "nvmlDeviceGetRetiredPagesPendingStatus", index)),
        xids=mine,
        hardware_xids=tuple(sorted({e.code for e in mine if e.hardware})),
        missing=r.missing,
    )


def watch_events(host: Host, options: ScanOptions,
                 buses: list[str | None]) -> tuple[list[XidEvent], str | None]:
    """XID events NVML raises during a short window (level standard), as kernel-log events."""
    if options.level < Level.STANDARD:
        return [], "level quick reads the kernel log only"

    def watch() -> dict:
        from doctor.seam.nvml import watch_xids

        return {"seconds": XID_WATCH_S, "events": watch_xids(XID_WATCH_S)}
    try:
        data = host.measure("gpu.errors.xid_watch", watch)
    except (HostReadError, MeasurementError) as exc:
        return [], str(exc)
    found = data.get("events") if isinstance(data, dict) else None
    if not isinstance(found, list):
        return [], "the XID watch holds no event list"
    events = []
    for e in found:
        gpu, code = (e.get("gpu"), e.get("xid")) if isinstance(e, dict) else (None, None)
        if isinstance(gpu, int) and isinstance(code, int) and 0 <= gpu < len(buses):
            bus = (buses[gpu] or "").lower()
            line = f"NVRM: Xid (PCI:{bus[4:].rsplit('.', 1)[0]}): {code}, from NVML during the scan"
            events.extend(parse_kernel_log(line))
    return events, None


def probe(host: Host, options: ScanOptions) -> GpuErrorsRecord:
    count = gpu_count(host)
    events, source = read_kernel_log(host)
    pci = [Reader(host).mapping("bus", "nvmlDeviceGetPciInfo", i) or {} for i in range(count)]
    buses = [p.get("busId") if isinstance(p.get("busId"), str) else None for p in pci]
    watched, watch_reason = watch_events(host, options, buses)
    events = events + watched
    gpus = tuple(read_gpu(host, i, events) for i in range(count))
    matched = {id(e) for g in gpus for e in g.xids}
    return GpuErrorsRecord(gpus=gpus, xid_source=source,
                           xids_unmatched=tuple(e for e in events if id(e) not in matched),
                           xid_watch_s=None if watch_reason else XID_WATCH_S,
                           xid_watch_reason=watch_reason)


def summary(record: GpuErrorsRecord) -> str:
    xids = sorted({e.code for g in record.gpus for e in g.xids}
                  | {e.code for e in record.xids_unmatched})
    bad = [g.index for g in record.gpus if g.remap_failed or g.remap_pending
           or (g.ecc_uncorrected_volatile or 0) > 0]
    return (f"XIDs {xids or 'none'} ({record.xid_source}); "
            + (f"memory errors on GPU {bad}" if bad else "no pending memory errors"))
