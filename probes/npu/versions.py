"""npu.versions: the Ascend driver, its firmware and the CANN packages, and whether each pair
says it fits the other.

Source (``key=value`` files the installers write): ``/usr/local/Ascend/driver/version.info``
(``Version``, ``Innerversion=V100R001C15SPC012B220``, ``compatible_version=[V100R001C29],...``,
``compatible_version_fw=[7.0.0,7.1.99]``), ``/usr/local/Ascend/firmware/version.info``
(``Version=7.1.0.11.220``), the CANN toolkit's ``ascend_toolkit_install.info`` (under
``ascend-toolkit/latest/<arch>-linux/``, or ``cann/<arch>-linux/`` from CANN 8.5) and NNAE's
``nnae/latest/ascend_nnae_install.info`` (``version``, ``innerversion``, ``compatible_version``).
Huawei's fault-diagnosis guide collects exactly these files (mind-cluster
docs/en/faultdiag/user_guide/03_collecting_logs.md). No root needed. Manual equivalent: ``cat``
of each file.

How the lists are read (an inference from the files, not a statement Huawei makes in them; see
docs/ascend.md): a bracket of one release line (``[V100R001C15]``) names that line, a bracket of
two (``[V100R001C13,V100R001C19]``, ``[7.0.0,7.1.99]``) a range, ends included. A CANN package
fits the driver when its list covers the driver's release line (``V100R001C15`` of its
Innerversion) or the driver's list covers the package's; it does not when both lists are
there and neither covers the other. The firmware fits when its Version lies in the driver's
``compatible_version_fw`` range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host, HostReadError
from probes.helpers.npu_read import absent_reason
from probes.helpers.npu_smi import parse_kv

VENDOR = "huawei"
ROOT = "/usr/local/Ascend"
DRIVER = f"{ROOT}/driver/version.info"
FIRMWARE = f"{ROOT}/firmware/version.info"
PACKAGES = (
    ("toolkit", f"{ROOT}/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info"),
    ("toolkit", f"{ROOT}/ascend-toolkit/latest/x86_64-linux/ascend_toolkit_install.info"),
    ("toolkit", f"{ROOT}/cann/aarch64-linux/ascend_toolkit_install.info"),
    ("toolkit", f"{ROOT}/cann/x86_64-linux/ascend_toolkit_install.info"),
    ("nnae", f"{ROOT}/nnae/latest/ascend_nnae_install.info"),
)
_LINE = re.compile(r"V(\d{1,4})R(\d{1,4})C(\d{1,4})")
_NUMS = re.compile(r"\d{1,9}")


@dataclass(frozen=True, slots=True)
class CannPackage:
    kind: str  # "toolkit" or "nnae"
    path: str
    version: str | None  # "8.5.0", "7.0.T10"
    innerversion: str | None  # "V100R001C25SPC001B212"
    compatible: tuple[str, ...]  # its compatible_version, one bracket an item ("V100R001C13-V100R001C19")
    fits_driver: bool | None  # None: a list or the driver's line missing


@dataclass(frozen=True, slots=True)
class NpuVersionsRecord:
    vendor: str
    driver_version: str | None  # "23.0.7"
    driver_innerversion: str | None  # "V100R001C15SPC012B220"
    driver_compatible: tuple[str, ...]  # the CANN lines the driver lists
    firmware_range: str | None  # "7.0.0-7.1.99": compatible_version_fw
    firmware_version: str | None  # "7.1.0.11.220"
    firmware_fits: bool | None  # firmware_version in firmware_range (None: either missing)
    packages: tuple[CannPackage, ...]
    missing: dict[str, str]


def _groups(value: str | None) -> list[tuple[str, ...]]:
    if not value:
        return []
    return [tuple(i.strip() for i in g.split(",") if i.strip())
            for g in re.findall(r"\[([^\]]{0,200})\]", value)[:64]]


def _line(text: str | None) -> tuple[int, int, int] | None:
    m = _LINE.search(text or "")
    return (int(m[1]), int(m[2]), int(m[3])) if m else None


def _nums(text: str | None) -> tuple[int, ...]:
    return tuple(int(n) for n in _NUMS.findall(text or "")[:8])


def covers(groups: list[tuple[str, ...]], line: tuple[int, int, int] | None) -> bool | None:
    """Whether a compatible_version list covers release line ``line`` (None: nothing to judge)."""
    if not groups or line is None:
        return None
    for group in groups:
        ends = [_line(item) for item in group[:2]]
        if len(ends) == 1 and ends[0] == line:
            return True
        if len(ends) == 2 and ends[0] and ends[1] and ends[0] <= line <= ends[1]:
            return True
    return False


def in_range(version: str | None, group: tuple[str, ...] | None) -> bool | None:
    if not version or not group or len(group) != 2:
        return None
    lo, hi, have = _nums(group[0]), _nums(group[1]), _nums(version)
    if not lo or not hi or not have:
        return None
    return lo <= have[:len(lo)] and have[:len(hi)] <= hi


def _show(groups: list[tuple[str, ...]]) -> tuple[str, ...]:
    return tuple("-".join(g)[:60] for g in groups)


def _kv(host: Host, path: str, missing: dict[str, str]) -> dict[str, str] | None:
    try:
        return parse_kv(host.read_text(path), "=")
    except HostReadError as exc:
        if exc.reason.value != "not-found":
            missing[path] = exc.reason.value
        return None


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> NpuVersionsRecord:
    missing: dict[str, str] = {}
    driver = _kv(host, DRIVER, missing)
    firmware = _kv(host, FIRMWARE, missing)
    found = [(kind, path, kv) for kind, path in PACKAGES if (kv := _kv(host, path, missing))]
    if driver is None and not found:
        raise Skip(absent_reason(host, t("no Ascend driver: {path} not found", path=DRIVER)))
    driver = driver or {}
    driver_groups = _groups(driver.get("compatible_version"))
    driver_line = _line(driver.get("Innerversion"))
    packages = []
    for kind, path, kv in found:
        groups = _groups(kv.get("compatible_version"))
        mine, theirs = covers(groups, driver_line), covers(driver_groups, _line(kv.get("innerversion")))
        fits = True if mine or theirs else (False if mine is False and theirs is False else None)
        packages.append(CannPackage(kind, path, kv.get("version"), kv.get("innerversion"),
                                    _show(groups), fits))
    fw_groups = _groups(driver.get("compatible_version_fw"))
    fw_version = (firmware or {}).get("Version")
    return NpuVersionsRecord(
        VENDOR, driver.get("Version"), driver.get("Innerversion"), _show(driver_groups),
        _show(fw_groups)[0] if fw_groups else None, fw_version,
        in_range(fw_version, fw_groups[0] if fw_groups else None), tuple(packages), missing)


def summary(record: NpuVersionsRecord) -> str:
    cann = ", ".join(f"{p.kind} {p.version or '?'}" for p in record.packages) or t("no CANN")
    return t("driver {driver}, firmware {firmware}, {cann}", driver=record.driver_version or "?",
             firmware=record.firmware_version or "?", cann=cann)
