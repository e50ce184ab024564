"""Running Huawei Ascend's ``npu-smi`` and ``hccn_tool`` through the seam (``host.run``).

``npu-smi`` is installed on the PATH by the driver package (``/usr/local/bin/npu-smi``);
``hccn_tool`` stays in the driver's tools folder (``/usr/local/Ascend/driver/tools``), where
Huawei's own log-collection guide runs it from (tests/fixtures/ascend/sources/SOURCES.md), so
the bare name is tried first and that path second. A recorded host lists each command it ran
under ``[[commands]]`` (docs/recorded-host.md); one it does not list reads as not installed.
"""

from __future__ import annotations

from typing import Sequence

from doctor.i18n import t
from doctor.model import Skip
from doctor.seam.host import CommandOutput, Host, HostReadError, Reason
from probes.helpers.npu_smi import Overview, TableError, parse_info

NPU_SMI = "npu-smi"
HCCN_TOOL = "hccn_tool"
HCCN_TOOL_PATH = "/usr/local/Ascend/driver/tools/hccn_tool"
TIMEOUT_S = 10.0  # npu-smi info on a 16-chip host answers in about a second


def no_driver() -> str:
    return t("no Ascend driver: npu-smi not found")


def absent_reason(host: Host, own: str) -> str:
    """The reason a probe that found nothing of Ascend's skips with: ``no_driver()`` when
    npu-smi is not installed either, so that a host without Ascend shows one row for every
    npu probe (the scan's table joins probes skipped for one reason); else ``own``."""
    try:
        overview(host)
    except Skip:
        return no_driver()
    except Exception:  # npu-smi is there and failed: the probe's own words say more
        return own
    return own


class CommandFailed(Exception):
    """A command ran and refused: its argv, exit code and first line of stderr, in one line."""


def _failed(out: CommandOutput) -> CommandFailed:
    said = (out.stderr.strip() or out.stdout.strip()).splitlines()
    return CommandFailed(t("{command} exited {rc}: {said}", command=" ".join(out.argv),
                           rc=out.rc, said=said[0][:160] if said else "-"))


def npu_smi(host: Host, args: Sequence[str]) -> str:
    """``npu-smi <args>``'s output; Skip when npu-smi is not installed, CommandFailed when it
    exits non-zero (no permission on /dev/davinci_manager, a driver not loaded)."""
    try:
        out = host.run([NPU_SMI, *args], timeout_s=TIMEOUT_S)
    except HostReadError as exc:
        if exc.reason == Reason.NOT_FOUND:
            raise Skip(no_driver()) from exc
        raise
    if out.rc != 0:
        raise _failed(out)
    return out.stdout


def overview(host: Host) -> Overview:
    """``npu-smi info`` parsed, once a scan (every Ascend probe reads it). Raises Skip,
    CommandFailed, HostReadError, or TableError (output that holds no chip table)."""
    return host.memo("npu-smi info", lambda: parse_info(npu_smi(host, ["info"])))


def hccn(host: Host, device: int, *query: str) -> str:
    """``hccn_tool -i <device> <query...>``'s output. Skip when hccn_tool is not installed,
    CommandFailed when it exits non-zero, HostReadError when it could not run."""
    for argv0 in (HCCN_TOOL, HCCN_TOOL_PATH):
        try:
            out = host.run([argv0, "-i", str(device), *query], timeout_s=TIMEOUT_S)
        except HostReadError as exc:
            if exc.reason == Reason.NOT_FOUND:
                continue  # not on the PATH: the driver's tools folder next
            raise
        if out.rc != 0:
            raise _failed(out)
        return out.stdout
    raise Skip(t("hccn_tool not found (on the PATH or at {path}): no NPU network ports to "
                 "read (an inference card without RoCE ports, or the driver's tools not "
                 "installed)", path=HCCN_TOOL_PATH))


__all__ = ["CommandFailed", "TableError", "absent_reason", "hccn", "no_driver", "npu_smi", "overview"]
