"""NCCL's own words: what its ``NCCL INFO`` / ``NCCL WARN`` lines (``NCCL_DEBUG=INFO``) say
about the network it chose, read from text as hostile as any log.

The lines parsed, as NCCL 2.4 to 2.27 write them (src/bootstrap.cc, src/transport/net_ib.cc,
net_socket.cc, src/init.cc; real examples in tests/fixtures/nccl_logs/ with their sources):

* ``Bootstrap : Using eth0:10.0.0.1<0>`` (or ``[0]eth0:…``): the interface of the bootstrap;
* ``NET/Socket : Using [0]eth0:10.0.0.1<0> [1]…``, ``NET/IB : Using [0]mlx5_0:1/RoCE …``,
  ``NET/IB : No device found.``, ``Using network IB`` / ``Socket`` (older: ``Using internal
  Network Socket``);
* ``NET/IB : GPU Direct RDMA Disabled for HCA 0 'mlx5_0'`` (``(no module)`` when neither
  nvidia_peermem nor dma-buf is there) and ``GPU Direct RDMA Enabled for …``;
* ``Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA`` (older ``Ring 00 : …``): the
  transport of each channel: P2P/IPC, P2P/CUMEM, SHM, NET/IB[/GDRDMA], NET/Socket;
* ``comm 0x… rank 0 nRanks 16 nNodes 2 localRanks 8 …``: how many hosts the group spans;
* failures: ``Bootstrap : no socket interface found``, ``Call to ibv_modify_qp failed``,
  ``Failed to open libibverbs.so``, ``unhandled system error``, a socket refused or closed.

Nothing here reads the host: ``parse(lines)`` is a function of text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_LINE_CHARS = 4096  # of one line parsed; NCCL's own are under 1,000
MAX_KEPT = 16  # interfaces, devices, failures kept of each kind
MAX_SHOWN = 300  # characters of a failure's line kept

ADDRESS = re.compile(r"(?:\[\d+\])?([A-Za-z0-9_.@-]{1,32}):([0-9A-Fa-f.:%]{2,64})<\d+>")
IB_DEVICE = re.compile(r"\[\d+\]([A-Za-z0-9_]{1,32}):(\d{1,3})/(IB|RoCE)")
NETWORK = re.compile(r"Using (?:internal )?[Nn]etwork (\S{1,40})")
VIA = re.compile(r"(?:Channel|Ring) \d+.* via (\S{1,60})")
NODES = re.compile(r"nRanks (\d{1,7}) nNodes (\d{1,6}) localRanks (\d{1,5})")
RANKS = re.compile(r"\bnranks (\d{1,7})\b")
GDR_OFF = re.compile(r"GPU Direct RDMA Disabled for (?:GPU \S+ / )?HCA \d+ '?([A-Za-z0-9_]{1,32})'?")
# (kind, what in a line says it); the first that matches names the failure
FAILURES = (
    ("no-socket-interface", re.compile(r"no socket interface found|no NCCL_SOCKET_IFNAME interface found", re.I)),
    ("ibv-modify-qp", re.compile(r"ibv_modify_qp failed")),
    ("no-libibverbs", re.compile(r"Failed to open libibverbs")),
    ("ib-device-error", re.compile(r"NET/IB ?: .*(?:failed|error)", re.I)),
    ("system-error", re.compile(r"unhandled system error|ncclSystemError")),
    ("socket-connect", re.compile(r"(?:Connect|connect|recv|send).*(?:failed|refused|timed out)|Connection closed by remote peer")),
)


@dataclass(frozen=True, slots=True)
class Failure:
    kind: str  # no-socket-interface, ibv-modify-qp, no-libibverbs, ib-device-error, system-error, socket-connect
    count: int
    line: str  # the first line that said it, cut to 300 characters


@dataclass(frozen=True, slots=True)
class Said:
    """What NCCL's lines in one text said."""

    nccl_lines: int
    warn_lines: int
    network: str | None  # "IB", "Socket", a plugin's name: "Using network X", else the channels, else the devices listed
    bootstrap_ifs: tuple[str, ...]  # "eth0:10.0.0.1"
    socket_ifs: tuple[str, ...]  # NET/Socket's interfaces
    ib_devices: tuple[str, ...]  # "mlx5_0:1/RoCE"
    ib_no_device: bool  # "NET/IB : No device found"
    ib_disabled_by_env: bool  # "NCCL_IB_DISABLE set by environment to 1"
    gdr_disabled_hcas: tuple[str, ...]  # "GPU Direct RDMA Disabled for HCA 0 'mlx5_0'"
    gdr_enabled: bool  # "GPU Direct RDMA Enabled for …"
    transports: dict[str, int]  # channel lines per transport: {"NET/IB/GDRDMA": 16, "P2P/IPC": 56}
    nodes: int | None  # the largest nNodes said (or nRanks over localRanks)
    ranks: int | None
    bootstrap_on_lo: bool  # the bootstrap (or NET/Socket's only interface) is loopback
    failures: tuple[Failure, ...]


def _add(kept: list[str], value: str) -> None:
    if value not in kept and len(kept) < MAX_KEPT:
        kept.append(value)


def transport(via: str) -> str:
    """``NET/IB/0/GDRDMA`` → ``NET/IB/GDRDMA``: the device's index dropped, the kind kept."""
    return "/".join(p for p in via.split("/") if p and not p.isdigit())[:40]


class _Reader:
    def __init__(self) -> None:
        self.nccl = self.warn = 0
        self.network: str | None = None
        self.boot: list[str] = []
        self.sock: list[str] = []
        self.ib: list[str] = []
        self.gdr_off: list[str] = []
        self.flags = {"ib_none": False, "ib_env_off": False, "gdr_on": False}
        self.transports: dict[str, int] = {}
        self.nodes: int | None = None
        self.ranks: int | None = None
        self.failures: dict[str, list] = {}

    def line(self, raw: str) -> None:
        text = raw[:MAX_LINE_CHARS]
        at = text.find("NCCL INFO")
        warn = text.find("NCCL WARN")
        if at < 0 and warn < 0:
            return
        self.nccl += 1
        body = text[(warn if warn >= 0 else at) + 9:].strip()
        if warn >= 0:
            self.warn += 1
            self._failure(body, text)
            return
        self._info(body)
        if "unhandled system error" in body:
            self._failure(body, text)

    def _failure(self, body: str, text: str) -> None:
        for kind, pattern in FAILURES:
            if pattern.search(body):
                seen = self.failures.setdefault(kind, [0, text.strip()[:MAX_SHOWN]])
                seen[0] += 1
                return

    def _info(self, body: str) -> None:
        if body.startswith("Bootstrap") and "Using" in body:
            for name, address in ADDRESS.findall(body):
                _add(self.boot, f"{name}:{address}")
        elif body.startswith("NET/Socket") and "Using" in body:
            for name, address in ADDRESS.findall(body):
                _add(self.sock, f"{name}:{address}")
        elif body.startswith("NET/IB") and "No device found" in body:
            self.flags["ib_none"] = True
        elif body.startswith("NET/IB") and "Using [" in body:
            for hca, port, layer in IB_DEVICE.findall(body):
                _add(self.ib, f"{hca}:{port}/{layer}")
        if "GPU Direct RDMA Disabled" in body:
            m = GDR_OFF.search(body)
            _add(self.gdr_off, m.group(1) if m else "?")
        elif "GPU Direct RDMA Enabled" in body:
            self.flags["gdr_on"] = True
        if body.startswith("NCCL_IB_DISABLE set by environment to") and body.rstrip(".").endswith(" 1"):
            self.flags["ib_env_off"] = True
        m = NETWORK.search(body)
        if m:
            self.network = m.group(1)
        m = VIA.search(body)
        if m and len(self.transports) < MAX_KEPT * 4:
            kind = transport(m.group(1))
            self.transports[kind] = self.transports.get(kind, 0) + 1
        m = NODES.search(body)
        if m:
            nodes = int(m.group(2))
            self.nodes = max(self.nodes or 0, nodes)
            self.ranks = max(self.ranks or 0, int(m.group(1)))
        else:
            m = RANKS.search(body)
            if m:
                self.ranks = max(self.ranks or 0, int(m.group(1)))

    def said(self) -> Said:
        network = self.network
        if network is None:  # older NCCL: the channels say it, else the transport it set up
            nets = sorted({k.split("/")[1] for k in self.transports if k.startswith("NET/")})
            network = nets[0] if len(nets) == 1 else None
        if network is None and (self.ib or self.sock):
            # NCCL tries IB first and takes it when it found devices (src/net.cc ncclNetInit)
            network = "IB" if self.ib else "Socket"
        boot_names = [b.split(":")[0] for b in self.boot]
        sock_names = [s.split(":")[0] for s in self.sock]
        on_lo = ((bool(boot_names) and all(n == "lo" for n in boot_names))
                 or (bool(sock_names) and all(n == "lo" for n in sock_names)))
        failures = tuple(Failure(k, v[0], v[1]) for k, v in self.failures.items())
        return Said(self.nccl, self.warn, network, tuple(self.boot), tuple(self.sock), tuple(self.ib),
                    self.flags["ib_none"], self.flags["ib_env_off"], tuple(self.gdr_off),
                    self.flags["gdr_on"], dict(sorted(self.transports.items())), self.nodes,
                    self.ranks, on_lo, failures)


def parse(lines) -> Said:
    """What NCCL said in ``lines`` (an iterable of text lines)."""
    reader = _Reader()
    for line in lines:
        reader.line(line)
    return reader.said()
