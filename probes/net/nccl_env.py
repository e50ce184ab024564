"""net.nccl_env: the variables that choose each engine's interfaces and HCAs, checked against
the interfaces and RDMA ports this host has; the engine's parallel layout from its flags.

NCCL, gloo and Ray read their network from the environment. A value naming an interface
that does not exist, is down or holds no address a peer can reach makes a multi-node engine
hang at start ("Bootstrap : no socket interface found") or talk over the wrong network;
``NCCL_IB_DISABLE=1`` (or ``NCCL_NET=Socket``) where InfiniBand/RoCE ports are up sends the
collectives over TCP; ``NCCL_IB_GID_INDEX`` naming a RoCE v1 or empty GID fails the queue
pair's setup (``ibv_modify_qp failed``) or leaves the traffic unroutable across subnets.

The syntax judged is NCCL's (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html,
NCCL_SOCKET_IFNAME and NCCL_IB_HCA; src/misc/utils.cc ``parseStringList``/``matchIfList``):
a comma list of prefixes, each optionally ``:port``; a leading ``^`` excludes what matches,
then a leading ``=`` makes every entry an exact name (``^=docker0``). ``GLOO_SOCKET_IFNAME``
is torch's: a comma list of exact names (torch/csrc/distributed/c10d/ProcessGroupGloo.cpp).
Ray's node address: ``RAY_OVERRIDE_NODE_IP_ADDRESS`` (Ray's own override of the address it
detects), ``RAY_NODE_IP_ADDRESS`` (the name launch scripts export for ``ray start
--node-ip-address``), and ``--node-ip-address`` on the engine's own command line; the raylet's
command line is not read.

Sources: ``/proc/<pid>/environ`` (the engine's user or root; only the named variables are
kept), then NCCL's own config files as the engine sees them (``/proc/<pid>/root`` +
``NCCL_CONF_FILE`` or ``~/.nccl.conf``, then ``/etc/nccl.conf``: NCCL sets what they say
where the environment does not), ``/proc/<pid>/cmdline`` (the layout flags), net.interfaces' record (or the same reads,
probes/helpers/net_interfaces.py), ``/sys/class/infiniband/<hca>/ports/<p>/{state,link_layer}``
and ``.../gid_attrs/types/<index>``, NVML ``nvmlDeviceGetCount`` (a layout larger than this
host's GPUs spans hosts). Manual equivalent: ``sudo tr '\\0' '\\n' < /proc/PID/environ |
grep -E '^(NCCL|GLOO|VLLM_HOST_IP|RAY_)'; ibv_devinfo; cat
/sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/3``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions, Skip
from doctor.seam.host import Host, HostReadError
from probes.helpers.engine_discovery import found as found_engines
from probes.helpers.engine_flags import Engine
from probes.helpers.engine_layout import layout
from probes.helpers.engine_reads import argv_of
from probes.helpers.gpu_common import gpu_count, reason_of
from probes.helpers.net_interfaces import InterfacesRecord, interfaces_of
from probes.helpers.socket_ifname import (  # noqa: F401  (parse_list, selects: tests and callers)
    check_address, check_default, check_ifname, parse_list, selects)
from probes.helpers.process_env import env_value, home_of

KINDS = ("vllm", "sglang", "tensorrt-llm", "triton")  # engines that run NCCL groups
VARIABLES = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_IB_DISABLE",
             "NCCL_IB_GID_INDEX", "NCCL_NET_GDR_LEVEL", "NCCL_NET", "VLLM_HOST_IP",
             "RAY_NODE_IP_ADDRESS", "RAY_OVERRIDE_NODE_IP_ADDRESS", "NCCL_SOCKET_FAMILY", "NCCL_CONF_FILE")
MAX_HCAS = 64
MAX_PORTS = 8
ACTIVE = "ACTIVE"  # /sys/class/infiniband/<hca>/ports/<p>/state: "4: ACTIVE"
ROCE_V2 = "RoCE v2"  # gid_attrs/types/<index>: "IB/RoCE v1" or "RoCE v2"
NAME_OK = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


@dataclass(frozen=True, slots=True)
class RdmaPort:
    hca: str  # mlx5_0
    port: int
    state: str | None  # ACTIVE, DOWN, INIT, ARMED, POLLING (the text after "4: ")
    link_layer: str | None  # InfiniBand, Ethernet (RoCE)


@dataclass(frozen=True, slots=True)
class EnvCheck:
    """One variable of one engine judged against the host."""

    engine: str  # "vllm at http://127.0.0.1:8000 pid 4242"
    pid: int
    variable: str  # NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, NCCL_IB_HCA, VLLM_HOST_IP, ...
    value: str  # as set; "" where unset (NCCL's default judged)
    # None: fine. "no-match" (names nothing here), "down", "no-address", "unroutable" (only
    # lo, a container bridge or link-local addresses), "not-local" (an address this host
    # does not hold), "hca-down", "ib-disabled", "gdr-off", "gid-not-rocev2", "gid-missing";
    # "default-unroutable": unset, and NCCL's default takes an interface no peer can reach
    problem: str | None
    detail: str  # what matched and in what state, in one line
    matched: tuple[str, ...]  # the interfaces or HCA ports the value selects
    nodes: int | None  # the engine's hosts (EngineNet.nodes), for the rules


@dataclass(frozen=True, slots=True)
class EngineNet:
    engine: str
    kind: str
    pid: int
    env: dict[str, str]  # the VARIABLES set in its environment, values cut to 256 characters
    env_reason: str | None  # why its environment could not be read (no-permission)
    tensor_parallel: int | None
    pipeline_parallel: int | None
    data_parallel: int | None
    expert_parallel: bool | None  # vLLM --enable-expert-parallel, SGLang --ep-size > 1
    nodes: int | None  # hosts the engine spans: --nnodes, else its GPUs against this host's
    nodes_from: str | None  # "--nnodes", "tp x pp against 8 GPUs here"
    dist_init_addr: str | None  # SGLang --dist-init-addr, vLLM --master-addr / --data-parallel-address
    node_ip: str | None  # Ray --node-ip-address on its command line
    missing: dict[str, str] = field(default_factory=dict)
    # NCCL's config files that gave a variable its environment lacks (as the engine sees
    # them: /proc/<pid>/root/…): NCCL_CONF_FILE or ~/.nccl.conf, then /etc/nccl.conf
    conf_files: tuple[str, ...] = ()
    # whether NCCL will register RDMA memory across hosts (rdma_use): True, False, or None
    # where neither its layout nor its variables say; rdma_why says what decided
    rdma_across_hosts: bool | None = None
    rdma_why: str | None = None


@dataclass(frozen=True, slots=True)
class NcclEnvRecord:
    engines: tuple[EngineNet, ...]
    checks: tuple[EnvCheck, ...]
    rdma_ports: tuple[RdmaPort, ...]  # /sys/class/infiniband, empty on a host without RDMA
    interfaces_reason: str | None  # why the interfaces could not be read (then nothing judged)
    missing: dict[str, str] = field(default_factory=dict)


def rdma_ports(host: Host) -> tuple[tuple[RdmaPort, ...], str | None]:
    """Each RDMA port's state and link layer; () with why when there are none."""
    try:
        hcas = host.list_dirs("/sys/class/infiniband")
    except HostReadError as exc:
        return (), reason_of(exc)
    ports = []
    for hca in [h for h in hcas if NAME_OK.match(h)][:MAX_HCAS]:
        base = f"/sys/class/infiniband/{hca}/ports"
        try:
            numbers = [p for p in host.list_dirs(base) if p.isdigit()][:MAX_PORTS]
        except HostReadError:
            continue
        for number in numbers:
            ports.append(RdmaPort(hca, int(number), _text(host, f"{base}/{number}/state", after=": "),
                                  _text(host, f"{base}/{number}/link_layer")))
    return tuple(ports), None


def _text(host: Host, path: str, after: str = "") -> str | None:
    try:
        text = host.read_text(path).strip()[:64]
    except HostReadError:
        return None
    return text.partition(after)[2].strip() or text if after else text


def check_hca(value: str, ports: tuple[RdmaPort, ...]) -> tuple[str | None, str, tuple[str, ...]]:
    chosen = [p for p in ports if selects(value, p.hca, p.port)]
    names = tuple(f"{p.hca}:{p.port}" for p in chosen)
    if not chosen:
        return "no-match", t("no RDMA port here matches"), names
    shown = ", ".join(f"{p.hca}:{p.port} {p.state or '?'}" for p in chosen[:8])
    if not any(p.state == ACTIVE for p in chosen):
        return "hca-down", shown, names
    return None, shown, names


def check_gid(host: Host, value: str, ports: tuple[RdmaPort, ...], hca_filter: str | None) -> tuple[str | None, str, tuple[str, ...]]:
    """NCCL_IB_GID_INDEX on each RoCE port NCCL would use: the GID's type must be RoCE v2."""
    if not value.strip().isdigit() or int(value) > 4096:
        return None, t("not an index: NCCL picks the GID itself"), ()
    roce = [p for p in ports if p.link_layer == "Ethernet" and p.state == ACTIVE
            and (hca_filter is None or selects(hca_filter, p.hca, p.port))]
    wrong, seen = [], []
    for p in roce:
        path = f"/sys/class/infiniband/{p.hca}/ports/{p.port}/gid_attrs/types/{int(value)}"
        try:
            kind = host.read_text(path).strip()[:32]
        except HostReadError:
            kind = ""  # the kernel gives EINVAL for an empty slot of the table
        seen.append(f"{p.hca}:{p.port}")
        if kind != ROCE_V2:
            wrong.append((f"{p.hca}:{p.port}", kind))
    if not wrong:
        return None, ", ".join(seen) or t("no active RoCE port"), tuple(seen)
    shown = ", ".join(f"{name} {kind or t('empty')}" for name, kind in wrong[:8])
    problem = "gid-missing" if all(not kind for _, kind in wrong) else "gid-not-rocev2"
    return problem, shown, tuple(name for name, _ in wrong)


MAX_CONF_LINES = 1000


def nccl_conf(host: Host, pid: int, env: dict[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """The NCCL variables NCCL itself would add from its config files, and the files that
    gave them. NCCL reads ``NCCL_CONF_FILE`` (else ``~/.nccl.conf``), then ``/etc/nccl.conf``,
    never overriding a variable already set (src/misc/param.cc ``initEnv``, ``setenv(…, 0)``);
    the files are read inside the engine's own root (a container's)."""
    root = f"/proc/{pid}/root"
    user = env.get("NCCL_CONF_FILE")
    if not user:
        home, _ = home_of(host, pid)
        user = f"{home.rstrip('/')}/.nccl.conf" if home else None
    added: dict[str, str] = {}
    used = []
    for path in (p for p in (user, "/etc/nccl.conf") if p and p.startswith("/")):
        try:
            text = host.read_text(root + path)
        except HostReadError:
            continue
        for line in text.splitlines()[:MAX_CONF_LINES]:
            name, eq, value = line.strip().partition("=")
            name = name.strip()
            if eq and not name.startswith("#") and name.startswith("NCCL_") and name in VARIABLES \
                    and name not in env and name not in added:
                added[name] = value.strip()[:256]
                if path not in used:
                    used.append(path)
    return added, tuple(used)


def rdma_use(env: dict[str, str], nodes: int | None, nodes_from: str | None) -> tuple[bool | None, str]:
    """Whether the engine's NCCL will use RDMA between hosts, and what says so. IB turned off
    (NCCL_IB_DISABLE, NCCL_NET=Socket): no, whatever the layout. A layout across hosts, or
    NCCL_NET=IB, NCCL_IB_HCA, NCCL_IB_GID_INDEX set (a launcher's settings for a fabric): yes.
    A layout on one host: no (NCCL's transports inside a host are P2P and SHM). Else unknown."""
    disable, net = env.get("NCCL_IB_DISABLE", "").strip(), env.get("NCCL_NET", "").strip()
    if disable not in ("", "0"):
        return False, f"NCCL_IB_DISABLE={disable[:40]}"
    if net.lower() == "socket":
        return False, f"NCCL_NET={net[:40]}"
    if nodes is not None and nodes > 1:
        return True, t("{nodes} hosts ({source})", nodes=nodes, source=nodes_from or "?")
    named = [v for v in ("NCCL_NET", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX") if env.get(v, "").strip()
             and (v != "NCCL_NET" or net.upper() == "IB")]
    if named:
        return True, f"{named[0]}={env[named[0]].strip()[:60]}"
    if nodes is not None:
        return False, t("one host ({source})", source=nodes_from or "?")
    return None, t("no layout flag, no GPU count and no NCCL_IB_* variable say whether it spans hosts")


def _label(e: Engine) -> str:
    return f"{e.kind} at {e.base_url}" + (f" pid {e.pid}" if e.pid else "")


def _checks(host: Host, label: str, pid: int, env: dict[str, str], nodes: int | None,
            record: InterfacesRecord, ports: tuple[RdmaPort, ...]) -> list[EnvCheck]:
    out = []

    def add(variable: str, value: str, verdict: tuple[str | None, str, tuple[str, ...]]) -> None:
        out.append(EnvCheck(label, pid, variable, value, verdict[0], verdict[1][:300], verdict[2], nodes))

    for variable in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
        if env.get(variable):
            add(variable, env[variable], check_ifname(variable, env[variable], record))
    if not env.get("NCCL_SOCKET_IFNAME") and nodes is not None and nodes > 1:
        verdict = check_default(record)
        if verdict is not None:
            add("NCCL_SOCKET_IFNAME", "", verdict)
    for variable in ("VLLM_HOST_IP", "RAY_NODE_IP_ADDRESS", "RAY_OVERRIDE_NODE_IP_ADDRESS"):
        if env.get(variable):
            add(variable, env[variable], check_address(env[variable], record))
    if ports and env.get("NCCL_IB_HCA"):
        add("NCCL_IB_HCA", env["NCCL_IB_HCA"], check_hca(env["NCCL_IB_HCA"], ports))
    active = tuple(f"{p.hca}:{p.port}" for p in ports if p.state == ACTIVE)
    for variable, off in (("NCCL_IB_DISABLE", lambda v: v.strip() not in ("", "0")),
                          ("NCCL_NET", lambda v: v.strip().lower() == "socket")):
        if variable in env:
            value = env[variable]
            problem = "ib-disabled" if off(value) and active else None
            add(variable, value, (problem, t("active RDMA ports: {ports}", ports=", ".join(active) or t("none")), active))
    gdr = env.get("NCCL_NET_GDR_LEVEL")
    if gdr is not None:
        problem = "gdr-off" if gdr.strip().upper() in ("LOC", "0") and active else None
        add("NCCL_NET_GDR_LEVEL", gdr, (problem, t("GPUDirect RDMA only within the GPU itself: never over the NIC"), active))
    if ports and env.get("NCCL_IB_GID_INDEX"):
        add("NCCL_IB_GID_INDEX", env["NCCL_IB_GID_INDEX"],
            check_gid(host, env["NCCL_IB_GID_INDEX"], ports, env.get("NCCL_IB_HCA")))
    return out


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> NcclEnvRecord:
    """Each engine's NCCL/gloo/Ray variables against this host's interfaces and RDMA ports."""
    engines = [e for e in found_engines(host, options, inputs).engines if e.pid and e.kind in KINDS]
    if not engines:
        raise Skip(t("no vLLM, SGLang or TensorRT-LLM engine process: no NCCL group to judge"))
    record = interfaces_of(host, inputs)
    ports, ports_reason = rdma_ports(host)
    missing = {"rdma_ports": ports_reason} if ports_reason else {}
    try:
        gpus: int | None = gpu_count(host)
    except (Skip, HostReadError) as exc:
        gpus, missing["gpus"] = None, str(exc)[:200]
    items, checks = [], []
    for engine in engines:
        pid, label, env, reasons = engine.pid or 0, _label(engine), {}, set()
        for name in VARIABLES:
            got = env_value(host, pid, name)
            if got.value is not None:
                env[name] = got.value
            elif got.reason:
                reasons.add(got.reason)
        from_conf, conf_files = nccl_conf(host, pid, env)
        env.update(from_conf)
        shape = layout(argv_of(host, pid), gpus)
        if shape["node_ip"] and "RAY_NODE_IP_ADDRESS" not in env:
            env["RAY_NODE_IP_ADDRESS"] = shape["node_ip"][:256]
        across, why = rdma_use(env, shape["nodes"], shape["nodes_from"])
        items.append(EngineNet(label, engine.kind, pid, env, ", ".join(sorted(reasons)) or None,
                               shape["tp"], shape["pp"], shape["dp"], shape["ep"], shape["nodes"],
                               shape["nodes_from"], shape["dist_init_addr"], shape["node_ip"],
                               {} if gpus else {"nodes": missing.get("gpus", "no GPU count")},
                               conf_files, across, why))
        if record is not None:
            checks += _checks(host, label, pid, env, shape["nodes"], record, ports)
    return NcclEnvRecord(tuple(items), tuple(checks), ports,
                         None if record is not None else "/sys/class/net cannot be read", missing)


def summary(record: NcclEnvRecord) -> str:
    parts = []
    for e in record.engines:
        shown = ", ".join(f"{k}={v}" for k, v in sorted(e.env.items())[:6]) or t("no NCCL, gloo or Ray variable set")
        line = t("{engine}: {variables}", engine=e.engine, variables=shown)
        if e.nodes is not None:
            line += t(", {nodes} host(s)", nodes=e.nodes)
        parts.append(line)
    bad = [c for c in record.checks if c.problem]
    if bad:
        parts.append(t("{count} variable(s) name what this host cannot use", count=len(bad)))
    return t("; ").join(parts)
