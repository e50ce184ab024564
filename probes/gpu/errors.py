"""gpu.errors: ECC counts, remapped rows or retired pages, and XID events from the kernel log.

Source: NVML ``nvmlDeviceGetEccMode``, ``GetTotalEccErrors`` (volatile: since the driver
loaded; aggregate: the card's lifetime), ``GetRemappedRows`` (Ampere and later),
``GetRetiredPagesPendingStatus`` (before Ampere); the kernel log for ``NVRM: Xid`` lines.

A GPU fallen off the bus (XID 79) answers NVML's calls with ``GPU_IS_LOST``
(NVML_ERROR_GPU_IS_LOST, 15), its bus id included; it is ``lost``, and its bus is inferred
when one NVIDIA GPU on the PCI bus is claimed by no GPU that still answers, or one bus logged
XID 79. A GPU the kernel still lists (``/sys/bus/pci/devices/*/{vendor,class}``: 0x10de,
0x0300xx or 0x0302xx) and the nvidia module still holds (``/proc/driver/nvidia/gpus/<bdf>``)
but NVML no longer counts is ``absent``; so is a bus that logged XID 79 this boot (dmesg) and
that no counted GPU has. The module's list is what a container was given, so a GPU of the
host that is not this container's is never absent. Manual equivalent: ``lspci -d 10de:``
against ``nvidia-smi -L``.

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
from doctor.inputs import NO_INPUTS, Inputs
from doctor.i18n import t
from probes.helpers.gpu_common import (
    Reader, driver_gpus, gpu_count, nvidia_pci, pci_bdf)
from probes.helpers.kernel_log import read_log
from probes.helpers.xid import XidEvent, parse_kernel_log, same_bus

ERR_CORRECTED, ERR_UNCORRECTED = 0, 1  # nvmlMemoryErrorType_t
VOLATILE, AGGREGATE = 0, 1  # nvmlEccCounterType_t
XID_OFF_THE_BUS = 79
LOST = "device-lost"  # the seam's reason for NVML_ERROR_GPU_IS_LOST
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
    lost: bool  # NVML answered GPU_IS_LOST to a call on this GPU: it fell off the bus
    bus_id_inferred: str | None  # how bus_id was found when NVML could not say (lost)
    missing: dict[str, str]


@dataclass(frozen=True, slots=True)
class AbsentGpu:
    bus_id: str  # "0000:2a:00.0", as sysfs and the kernel log name it
    device_id: int | None  # /sys/bus/pci/devices/<bdf>/device (None: seen in the log only)
    seen_in: str  # "PCI bus and nvidia driver" | "kernel log (XID 79)"
    xids: tuple[int, ...]  # codes logged for its bus


@dataclass(frozen=True, slots=True)
class GpuErrorsRecord:
    gpus: tuple[GpuErrors, ...]
    xid_source: str  # "dmesg", "/var/log/kern.log", or why neither could be read
    xids_unmatched: tuple[XidEvent, ...]  # logged for a bus no GPU has now (fell off the bus)
    xid_watch_s: float | None  # level standard: seconds NVML's XID events were watched
    xid_watch_reason: str | None  # why they were not (level quick, not supported, …)
    absent: tuple[AbsentGpu, ...]  # NVIDIA GPUs the host has that NVML does not count
    pci_gpus: int | None  # NVIDIA GPUs on the PCI bus (None: not read, see absent_reason)
    absent_reason: str | None  # why absence could not be judged (None: it was)


def read_kernel_log(host: Host) -> tuple[list[XidEvent], str]:
    """XID lines of the kernel log (probes/helpers/kernel_log.py reads it)."""
    return read_log(host, parse_kernel_log, t("run as root to see XID events"))


def _flag(value: int | None) -> bool | None:
    return None if value is None else bool(value)


def read_gpu(host: Host, index: int, events: list[XidEvent],
             inferred: tuple[str, str] | None = None) -> GpuErrors:
    r = Reader(host)
    pci = r.mapping("bus_id", "nvmlDeviceGetPciInfo", index)
    bus = r.item("bus_id", pci, "busId", str)
    if bus is None and inferred is not None:
        bus = inferred[0]
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
        lost=LOST in r.missing.values(),
        bus_id_inferred=None if inferred is None or pci is not None else inferred[1],
        missing=r.missing if inferred is None else {k: v for k, v in r.missing.items()
                                                     if k != "bus_id"},
    )


def nvml_bus(bdf: str) -> str:
    """sysfs's "0000:2a:00.0" as NVML writes a bus id: "00000000:2A:00.0"."""
    domain, rest = bdf.split(":", 1)
    return f"{int(domain, 16):08X}:{rest.upper()}"


def _logged_bdf(e: XidEvent) -> str | None:
    return pci_bdf(f"{e.bus}.0")  # the driver logs "0000:2a:00": function 0


def infer_buses(host: Host, buses: list[str | None], reasons: list[str | None],
                events: list[XidEvent], source: str) -> dict[int, tuple[str, str]]:
    """Bus ids for the GPUs NVML answers GPU_IS_LOST for: possible when exactly one is lost
    and exactly one NVIDIA GPU on the PCI bus, or one bus in this boot's XID 79 lines, is
    claimed by no GPU that answers."""
    unknown = [i for i, b in enumerate(buses) if b is None]
    lost = [i for i in unknown if reasons[i] == LOST]
    if len(lost) != 1 or len(unknown) != 1:  # another GPU without a bus could own the free one
        return {}
    claimed = {pci_bdf(b) for b in buses if b}
    pci = nvidia_pci(host)
    held, _ = driver_gpus(host)
    free = [f.bdf for f in pci.gpus if f.bdf not in claimed and (held is None or f.bdf in held)]
    if pci.reason is None and len(free) == 1:
        return {lost[0]: (nvml_bus(free[0]), t("the one NVIDIA GPU on the PCI bus that no "
                                               "answering GPU claims"))}
    logged = {b for e in events if e.code == XID_OFF_THE_BUS and source == "dmesg"
              and (b := _logged_bdf(e)) and b not in claimed}
    if len(logged) == 1:
        return {lost[0]: (nvml_bus(logged.pop()), t("the one bus that logged XID 79 this boot"))}
    return {}


def find_absent(host: Host, gpus: tuple[GpuErrors, ...], unmatched: list[XidEvent],
                source: str) -> tuple[tuple[AbsentGpu, ...], int | None, str | None]:
    """NVIDIA GPUs on the PCI bus and held by the driver, or logging XID 79 this boot, that
    NVML does not count."""
    counted = {pci_bdf(g.bus_id) for g in gpus if g.bus_id}
    unknown = [g.index for g in gpus if not g.bus_id]
    pci = nvidia_pci(host)
    pci_gpus = None if pci.reason else len(pci.gpus)
    if unknown:  # an unclaimed bus may be one of these: which is absent cannot be told
        return (), pci_gpus, (f"GPU {','.join(map(str, unknown))} in NVML's count give no "
                              "bus id, so no GPU on the bus can be called absent")
    logged: dict[str, list[int]] = {}
    for e in unmatched:
        if (bdf := _logged_bdf(e)) and bdf not in counted:
            logged.setdefault(bdf, []).append(e.code)
    held, held_reason = driver_gpus(host)
    absent = []
    if pci.reason is None and held is not None:
        absent = [AbsentGpu(f.bdf, f.device_id, "PCI bus and nvidia driver",
                            tuple(sorted(set(logged.get(f.bdf, ()))))) for f in pci.gpus
                  if f.bdf in held and f.bdf not in counted]
    seen = {a.bus_id for a in absent}
    if source == "dmesg":  # this boot; /var/log/kern.log holds boots before a card was changed
        absent += [AbsentGpu(bdf, None, "kernel log (XID 79)", tuple(sorted(set(codes))))
                   for bdf, codes in sorted(logged.items())
                   if XID_OFF_THE_BUS in codes and bdf not in seen]
    return tuple(absent), pci_gpus, pci.reason or held_reason


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


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> GpuErrorsRecord:
    count = gpu_count(host)
    events, source = read_kernel_log(host)
    readers = [Reader(host) for _ in range(count)]
    pci = [r.mapping("bus", "nvmlDeviceGetPciInfo", i) or {} for i, r in enumerate(readers)]
    buses = [p.get("busId") if isinstance(p.get("busId"), str) else None for p in pci]
    reasons = [r.missing.get("bus") for r in readers]
    watched, watch_reason = watch_events(host, options, buses)
    events = events + watched
    inferred = infer_buses(host, buses, reasons, events, source)
    gpus = tuple(read_gpu(host, i, events, inferred.get(i)) for i in range(count))
    matched = {id(e) for g in gpus for e in g.xids}
    unmatched = [e for e in events if id(e) not in matched]
    absent, pci_gpus, absent_reason = find_absent(host, gpus, unmatched, source)
    return GpuErrorsRecord(gpus=gpus, xid_source=source, xids_unmatched=tuple(unmatched),
                           xid_watch_s=None if watch_reason else XID_WATCH_S,
                           xid_watch_reason=watch_reason, absent=absent, pci_gpus=pci_gpus,
                           absent_reason=absent_reason)


def summary(record: GpuErrorsRecord) -> str:
    xids = sorted({e.code for g in record.gpus for e in g.xids}
                  | {e.code for e in record.xids_unmatched})
    bad = [g.index for g in record.gpus if g.remap_failed or g.remap_pending
           or (g.ecc_uncorrected_volatile or 0) > 0]
    lost = [g.index for g in record.gpus if g.lost]
    return (t("XIDs {xids} ({source}); ", xids=xids or t("none"), source=record.xid_source)
            + (t("memory errors on GPU {gpus}", gpus=bad) if bad else t("no pending memory errors"))
            + (t("; GPU {gpus} lost (GPU_IS_LOST)", gpus=lost) if lost else "")
            + (t("; {n} GPU(s) on the bus NVML does not count: {bus_ids}", n=len(record.absent),
                 bus_ids=", ".join(a.bus_id for a in record.absent)) if record.absent else ""))
