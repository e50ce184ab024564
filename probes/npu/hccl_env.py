"""npu.hccl_env: each engine's HCCL variables (Huawei's collective library on Ascend), the
timeouts against HCCL's own floor and the interface variables against this host's interfaces.

HCCL reads its network and timeouts from the environment (CANN environment variable
reference, hiascend.com canncommercial maintenref/envvar): ``HCCL_CONNECT_TIMEOUT`` (seconds
to build the links between devices; default 120, the least HCCL accepts), ``HCCL_EXEC_TIMEOUT``
(seconds a device waits for its peers inside one collective; default 1836 on Atlas A2
training and inference), ``HCCL_SOCKET_IFNAME`` (the host NIC its bootstrap sockets use: NCCL's
list syntax) and ``HCCL_IF_IP`` (that NIC's address). A connect timeout below 120 s, or an
exec timeout shorter than a first graph compile, turns a slow start into ``HCCL ... timeout``
errors; an interface variable naming a NIC this host does not have, or one that is down,
hangs the group's start. vllm-ascend runs as vLLM; any engine process whose environment sets a
``HCCL_`` variable is judged, whatever its kind.

Source: ``/proc/<pid>/environ`` (the engine's user or root; only the HCCL variables are kept),
net.interfaces' record (or the same reads, probes/helpers/net_interfaces.py). Manual
equivalent: ``sudo tr '\\0' '\\n' < /proc/PID/environ | grep ^HCCL_; ip -br addr``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host
from probes.helpers.engine_discovery import found as found_engines
from probes.helpers.net_interfaces import interfaces_of
from probes.helpers.process_env import env_value
from probes.helpers.socket_ifname import check_address, check_ifname

VARIABLES = ("HCCL_CONNECT_TIMEOUT", "HCCL_EXEC_TIMEOUT", "HCCL_SOCKET_IFNAME", "HCCL_IF_IP",
             "HCCL_IF_BASE_PORT", "HCCL_BUFFSIZE", "HCCL_INTRA_ROCE_ENABLE",
             "HCCL_INTRA_PCIE_ENABLE", "ASCEND_RT_VISIBLE_DEVICES")
MAX_ENGINES = 32


@dataclass(frozen=True, slots=True)
class HcclCheck:
    """An interface variable of one engine judged against the host."""

    engine: str
    pid: int
    variable: str  # HCCL_SOCKET_IFNAME or HCCL_IF_IP
    value: str
    # None: fine. "no-match" (names nothing here), "down", "no-address", "unroutable",
    # "not-local" (an address this host does not hold): probes/helpers/socket_ifname.py
    problem: str | None
    detail: str
    matched: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class HcclEngine:
    engine: str  # "vllm at http://127.0.0.1:8000 pid 4242"
    kind: str
    pid: int
    env: dict[str, str]  # the VARIABLES set in its environment, values cut to 128 characters
    env_reason: str | None  # why its environment could not be read (no-permission)
    connect_timeout_s: int | None  # HCCL_CONNECT_TIMEOUT (None: unset, HCCL's default applies)
    exec_timeout_s: int | None  # HCCL_EXEC_TIMEOUT
    not_numbers: tuple[str, ...]  # timeout variables set to something that is not an integer


@dataclass(frozen=True, slots=True)
class HcclEnvRecord:
    vendor: str  # "huawei": HCCL is Ascend's collective library
    engines: tuple[HcclEngine, ...]
    checks: tuple[HcclCheck, ...]
    interfaces_reason: str | None  # why the interfaces could not be read (then none judged)
    missing: dict[str, str] = field(default_factory=dict)


def _seconds(env: dict[str, str], name: str, bad: list[str]) -> int | None:
    value = env.get(name, "").strip()
    if not value:
        return None
    if value.isdigit() and len(value) <= 9:
        return int(value)
    bad.append(name)
    return None


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> HcclEnvRecord:
    engines = [(e, e.pid) for e in found_engines(host, options, inputs).engines if e.pid]
    if not engines:
        raise Skip(t("no engine process: no HCCL group to judge"))
    record = interfaces_of(host, inputs)
    out: list[HcclEngine] = []
    checks: list[HcclCheck] = []
    for e, pid in engines[:MAX_ENGINES]:
        label = f"{e.kind} at {e.base_url} pid {pid}"
        env: dict[str, str] = {}
        reason = None
        for name in VARIABLES:
            got = env_value(host, pid, name)
            if got.value is not None:
                env[name] = got.value[:128]
            elif got.reason and reason is None:
                reason = got.reason
        if not any(name.startswith("HCCL_") for name in env) and reason is None:
            continue  # no HCCL variable: not an HCCL group, or HCCL's defaults (judged by none)
        bad: list[str] = []
        out.append(HcclEngine(label, e.kind, pid, env, reason,
                              _seconds(env, "HCCL_CONNECT_TIMEOUT", bad),
                              _seconds(env, "HCCL_EXEC_TIMEOUT", bad), tuple(bad)))
        if record is None:
            continue
        if env.get("HCCL_SOCKET_IFNAME"):
            problem, detail, matched = check_ifname("HCCL_SOCKET_IFNAME", env["HCCL_SOCKET_IFNAME"], record)
            checks.append(HcclCheck(label, pid, "HCCL_SOCKET_IFNAME", env["HCCL_SOCKET_IFNAME"],
                                    problem, detail[:300], matched))
        if env.get("HCCL_IF_IP"):
            problem, detail, matched = check_address(env["HCCL_IF_IP"], record)
            checks.append(HcclCheck(label, pid, "HCCL_IF_IP", env["HCCL_IF_IP"], problem,
                                    detail[:300], matched))
    if not out:
        raise Skip(t("no engine sets an HCCL variable (HCCL_*): nothing to judge"))
    return HcclEnvRecord("huawei", tuple(out), tuple(checks),
                         None if record is not None else t("/sys/class/net could not be read"))


def summary(record: HcclEnvRecord) -> str:
    wrong = sum(c.problem is not None for c in record.checks)
    return t("{n} engines with HCCL variables; {wrong} interface variables wrong",
             n=len(record.engines), wrong=wrong)
