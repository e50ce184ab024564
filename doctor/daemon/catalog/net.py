"""The network probes' metrics (probes/net/*.py): net.rdma's InfiniBand and RoCE ports.

Rates are exported in bytes per second, as node_exporter's infiniband collector does
(a port's ``rate`` of 400 Gb/sec is 5e10 bytes/s); the error counters as the driver's
values (a gauge per counter: a snapshot since the last reset, which ``perfquery -R`` or a
reboot sets back to zero) and as their increase per second over the probe's one-second
window, the figure the rules judge against NVSentinel's published rates.
"""

from __future__ import annotations

from doctor.daemon.catalog import labels as L
from doctor.daemon.catalog.rows import Table, each, gauge, info, missing, of, unexported

GBIT = 1e9 / 8  # Gb/s → bytes/s
MBIT = 1e6 / 8  # Mb/s → bytes/s
PORT = L.fields("device", "port", "link_layer")

TABLES = (
    Table("net.rdma", (
        gauge("devices", "net_rdma_devices", "RDMA devices (/sys/class/infiniband)"),
        gauge("devices_listed", "net_rdma_devices_listed",
              "Entries of /sys/class/infiniband before the cut at MAX_DEVICES"),
        gauge("truncated", "net_rdma_devices_truncated",
              "1 when more devices were listed than are read (MAX_DEVICES): the rest not judged"),
        gauge("window_s", "net_rdma_sample_window_seconds",
              "How far apart the ports' counters were read twice"),
        missing("missing", "net_rdma_value_missing", "net.rdma"),
        each("ports", PORT),
        info("ports", "net_rdma_port_info", "A port's HCA type, board id (PSID), lane speed and netdev "
             "(/sys/class/infiniband/<dev>/{hca_type,board_id}, ports/<n>/rate, gid_attrs/ndevs/0)",
             hca_type="hca_type", board_id="board_id", speed="speed", netdev="netdev"),
        gauge("ports.state_code", "net_rdma_port_state",
              "IBTA port state (ports/<n>/state): 1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE"),
        gauge("ports.phys_state_code", "net_rdma_port_physical_state",
              "IBTA physical state (ports/<n>/phys_state): 2 Polling, 3 Disabled, 5 LinkUp, "
              "6 LinkErrorRecovery"),
        unexported("ports.state", "the state's name: net_rdma_port_state holds its code"),
        unexported("ports.phys_state", "the name: net_rdma_port_physical_state holds its code"),
        unexported("ports.name", "the device and port labels say it"),
        gauge("ports.rate_gbits", "net_rdma_port_speed_bytes_per_second",
              "The port's trained rate, all lanes (ports/<n>/rate)", GBIT,
              ceiling="llm_doctor_net_rdma_port_peer_speed_bytes_per_second"),
        gauge("ports.width", "net_rdma_port_lanes", "Lanes the link trained on (1X, 2X, 4X)"),
        gauge("ports.peers", "net_rdma_port_peers",
              "Other ACTIVE ports of this host with the same link layer, HCA type and board id"),
        gauge("ports.card_peers", "net_rdma_port_card_peers",
              "Other cards of the port's kind whose port of this number is ACTIVE"),
        gauge("ports.peer_rate_gbits", "net_rdma_port_peer_speed_bytes_per_second",
              "The fastest of those peers' rates", GBIT),
        gauge("ports.gids", "net_rdma_port_gids", "Non-zero GIDs of a RoCE port (ports/<n>/gids)"),
        gauge("ports.roce_v2_gids", "net_rdma_port_roce_v2_gids",
              "RoCE v2 GIDs of a RoCE port (gid_attrs/types)"),
        of("members", "ports.roce_v2_indexes", "net_rdma_port_roce_v2_gid_info",
           "A GID index that is RoCE v2: what NCCL_IB_GID_INDEX may name", "index"),
        gauge("ports.netdev_mtu", "net_rdma_port_netdev_mtu_bytes",
              "MTU of the interface behind a RoCE port (/sys/class/net/<if>/mtu)"),
        gauge("ports.netdev_speed_mbits", "net_rdma_port_netdev_speed_bytes_per_second",
              "Speed of the interface behind a RoCE port (/sys/class/net/<if>/speed)", MBIT),
        gauge("ports.roce_mtu", "net_rdma_port_roce_mtu_bytes",
              "The RDMA MTU a RoCE port's interface MTU gives it (the kernel's iboe_get_mtu)"),
        gauge("ports.mtu_peers", "net_rdma_port_mtu_peers",
              "Other ACTIVE RoCE ports of this host whose interface MTU is known"),
        gauge("ports.peer_mtu", "net_rdma_port_peer_mtu_bytes",
              "The interface MTU most of this host's ACTIVE RoCE ports use"),
        unexported("ports.node_type", "text (CA, RNIC): an iWARP card is not judged as RoCE"),
        unexported("ports.netdev_operstate", "text; the port's state codes say whether it is up"),
        of("counts", "ports.counters", "net_rdma_port_errors",
           "A port's error counter as the driver holds it since its last reset "
           "(counters/, hw_counters/)", "name"),
        of("counts", "ports.rates_per_s", "net_rdma_port_errors_per_second",
           "A port's error counter's increase per second over the sampled window", "name"),
        unexported("ports.deltas", "the window's increases: net_rdma_port_errors_per_second "
                   "says them per second"),
        unexported("ports.window_s", "the record's window_s: net_rdma_sample_window_seconds"),
        missing("ports.missing", "net_rdma_port_value_missing", "net.rdma, one port"),
    )),
)
