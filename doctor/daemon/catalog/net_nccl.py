"""The catalog rows of the interfaces NCCL and gloo use: net.interfaces, net.nccl_env and
net.nccl_log (probes/net/). Addresses, variable values and log lines are free text (and an
address differs on every host): they stay in the scan, the series carry what a dashboard
can plot and alert on."""

from __future__ import annotations

from doctor.daemon.catalog import labels as L
from doctor.daemon.catalog.rows import Table, each, gauge, info, of, unexported

FREE_TEXT = "free text for people (it may name addresses, values and paths), shown by the scan"
MBIT = 125_000.0  # Mb/s (the kernel's /sys/class/net/<if>/speed) to bytes/s

TABLES = (
    Table("net.interfaces", (
        each("interfaces", L.fields("interface=name", "kind")),
        info("interfaces", "net_interface_info",
             "The interface's ARPHRD type, operstate and why a peer on another host cannot reach it",
             type="type", operstate="operstate", why_unreachable="why_unreachable"),
        gauge("interfaces.admin_up", "net_interface_admin_up", "1 when IFF_UP is set (ip link set up)"),
        gauge("interfaces.carrier", "net_interface_carrier", "1 when the link has carrier"),
        gauge("interfaces.up", "net_interface_up", "1 when the interface is up (operstate up, or unknown with carrier)"),
        gauge("interfaces.mtu", "net_interface_mtu_bytes", "The interface's MTU"),
        gauge("interfaces.speed_mbits", "net_interface_speed_bytes_per_second",
              "The link speed the kernel reports (/sys/class/net/<if>/speed)", MBIT),
        gauge("interfaces.peer_reachable", "net_interface_peer_reachable",
              "1 when up, not lo or a container bridge, with an address a peer on another host can reach"),
        each("interfaces.addresses", L.fields("family", "unreachable=why_not")),
        of("tally", "interfaces.addresses", "net_interface_addresses",
           "The interface's addresses by family and why a peer cannot reach them ('' when it can)"),
        unexported("interfaces.addresses.address", f"an address: {FREE_TEXT}"),
        unexported("interfaces.addresses.prefix_len", "the prefix of an address not exported"),
        unexported("interfaces.addresses.peer_reachable", "the tally's unreachable label says it"),
        unexported("interfaces.missing", f"field -> why it is absent: {FREE_TEXT}"),
        unexported("reachable", "net_interface_peer_reachable per interface"),
        unexported("address_source", "where the addresses were read: shown by the scan"),
        unexported("missing", f"field -> why it is absent: {FREE_TEXT}"),
    )),
    Table("net.nccl_env", (
        each("engines", L.engine(kind="kind", pid="pid", described="engine")),
        gauge("engines.tensor_parallel", "net_engine_tensor_parallel_size", "--tensor-parallel-size / --tp"),
        gauge("engines.pipeline_parallel", "net_engine_pipeline_parallel_size", "--pipeline-parallel-size / --pp-size"),
        gauge("engines.data_parallel", "net_engine_data_parallel_size", "--data-parallel-size / --dp"),
        gauge("engines.expert_parallel", "net_engine_expert_parallel", "1 with expert parallelism on"),
        gauge("engines.nodes", "net_engine_hosts", "Hosts the engine spans (--nnodes, or its GPUs against this host's)"),
        gauge("engines.rdma_across_hosts", "net_engine_rdma_across_hosts", "1 when the engine uses RDMA between hosts (layout or NCCL_IB_*), 0 when not; absent when neither says"),
        unexported("engines.rdma_why", f"what decided rdma_across_hosts: {FREE_TEXT}"),
        unexported("engines.env", f"the NCCL/gloo/Ray variables' values: {FREE_TEXT}"),
        unexported("engines.env_reason", "why the environment could not be read: shown by the scan"),
        unexported("engines.nodes_from", f"where the host count came from: {FREE_TEXT}"),
        unexported("engines.dist_init_addr", f"the rendezvous address: {FREE_TEXT}"),
        unexported("engines.node_ip", f"Ray's node address: {FREE_TEXT}"),
        unexported("engines.missing", f"field -> why it is absent: {FREE_TEXT}"),
        unexported("engines.conf_files", f"NCCL's config files that set a variable: {FREE_TEXT}"),
        each("checks", L.fields("variable", "problem")),
        of("tally", "checks", "net_nccl_env_checks",
           "The engines' NCCL/gloo/Ray variables judged, by variable and problem ('' when usable)"),
        *(unexported(f"checks.{f}", f"one variable's judgement: {FREE_TEXT}")
          for f in ("engine", "pid", "value", "detail", "matched", "nodes")),
        each("rdma_ports", L.fields("hca", "port")),
        info("rdma_ports", "net_nccl_env_rdma_port_info", "An RDMA port NCCL may use: its state and link layer",
             state="state", link_layer="link_layer"),
        unexported("interfaces_reason", "why the interfaces could not be read: shown by the scan"),
        unexported("missing", f"field -> why it is absent: {FREE_TEXT}"),
    )),
    Table("net.nccl_log", (
        each("logs", L.fields("path", "source")),
        gauge("logs.size_bytes", "net_nccl_log_size_bytes", "The log's size"),
        gauge("logs.bytes_read", "net_nccl_log_read_bytes", "Bytes read of it (its first MiB and last 2 MiB)"),
        gauge("logs.skipped_bytes", "net_nccl_log_skipped_bytes", "Bytes between the head and the tail, not read"),
        gauge("logs.rdma_devices_here", "net_nccl_log_host_rdma_devices", "RDMA devices on this host (/sys/class/infiniband)"),
        of("flag", "logs.error", "net_nccl_log_unread", "1 when the log could not be read (the scan says why)"),
        gauge("logs.nccl_lines", "net_nccl_log_lines", "NCCL INFO/WARN lines in what was read"),
        gauge("logs.warn_lines", "net_nccl_log_warn_lines", "NCCL WARN lines in what was read"),
        info("logs", "net_nccl_log_network_info", "The network NCCL said it used (IB, Socket, a plugin)", network="network"),
        unexported("logs.bootstrap_ifs", f"the bootstrap interface and address: {FREE_TEXT}"),
        unexported("logs.socket_ifs", f"NET/Socket's interfaces and addresses: {FREE_TEXT}"),
        of("length", "logs.ib_devices", "net_nccl_log_ib_devices", "IB/RoCE ports NCCL listed (NET/IB : Using)"),
        gauge("logs.ib_no_device", "net_nccl_log_ib_no_device", "1 when NCCL said NET/IB : No device found"),
        gauge("logs.ib_disabled_by_env", "net_nccl_log_ib_disabled_by_env", "1 when NCCL said NCCL_IB_DISABLE set by environment to 1"),
        of("length", "logs.gdr_disabled_hcas", "net_nccl_log_gdr_disabled_hcas", "HCAs NCCL said GPU Direct RDMA is disabled for"),
        gauge("logs.gdr_enabled", "net_nccl_log_gdr_enabled", "1 when NCCL said GPU Direct RDMA Enabled"),
        of("counts", "logs.transports", "net_nccl_log_channels", "Channel lines per transport (P2P/IPC, NET/IB/GDRDMA, NET/Socket...)", "transport"),
        gauge("logs.nodes", "net_nccl_log_hosts", "The hosts NCCL said its communicator spans (nNodes)"),
        gauge("logs.ranks", "net_nccl_log_ranks", "The ranks NCCL said its communicator has"),
        gauge("logs.bootstrap_on_lo", "net_nccl_log_bootstrap_on_loopback", "1 when NCCL bootstrapped on lo"),
        each("logs.failures", L.fields("failure=kind")),
        gauge("logs.failures.count", "net_nccl_log_failure_lines", "NCCL's failure lines by kind (no-socket-interface, ibv-modify-qp...)"),
        unexported("logs.failures.line", f"the first line of a failure: {FREE_TEXT}"),
        unexported("missing", f"field -> why it is absent: {FREE_TEXT}"),
    )),
)
