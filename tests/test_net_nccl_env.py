"""net.nccl_env: NCCL's list syntax, and each engine's variables judged against the host.

The host is the recorded l40s-8x-nccl-p2p-disabled (vLLM, --tensor-parallel-size 4) copied
once per module; each case writes the engine's environ and command line and plants RDMA
ports in its sysfs, with net.interfaces' record handed through Inputs as a scan hands it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from doctor.inputs import Inputs
from doctor.model import ScanOptions
from doctor.seam.recorded import RecordedHost
from probes.helpers.net_interfaces import Address, Interface, InterfacesRecord
from probes.net import nccl_env

BASE = Path(__file__).parent / "fixtures" / "hosts" / "l40s-8x-nccl-p2p-disabled"
PID = 30412


def nic(name, kind="physical", up=True, addrs=(("10.10.1.5", True, None),)):
    addresses = tuple(Address(a, "ipv6" if ":" in a else "ipv4", 24, ok, why) for a, ok, why in addrs)
    reach = up and kind not in ("loopback", "container-bridge") and any(a.peer_reachable for a in addresses)
    why = None if reach else ("loopback" if kind == "loopback" else "container bridge" if kind == "container-bridge"
                              else "down" if not up else "link-local only")
    return Interface(name, kind, "ether", "up" if up else "down", up, up, up, 1500, None, addresses, reach, why)


INTERFACES = InterfacesRecord(
    (nic("ens1f0"), nic("ens1f1", up=False, addrs=(("10.10.2.5", True, None),)),
     nic("lo", "loopback", addrs=(("127.0.0.1", False, "loopback"),)),
     nic("docker0", "container-bridge", addrs=(("172.17.0.1", True, None),)),
     nic("ib0", addrs=(("fe80::2", False, "link-local"),))),
    ("ens1f0",), "ip -j -d addr show")
INPUTS = Inputs().adding("net.interfaces", INTERFACES)


@pytest.mark.parametrize("value, name, port, chosen", [
    ("eth", "eth0", None, True), ("eth", "ens1f0", None, False),
    ("^docker,lo", "docker0", None, False), ("^docker,lo", "ens1f0", None, True),
    ("=eth0", "eth0", None, True), ("=eth0", "eth01", None, False),
    ("^=docker0", "docker0", None, False), ("^=docker0", "docker01", None, True),
    ("mlx5_0:1,mlx5_1:1", "mlx5_0", 1, True), ("mlx5_0:1", "mlx5_0", 2, False),
    ("=mlx5_1", "mlx5_10", 1, False), ("mlx5", "mlx5_10", 1, True),
])
def test_nccls_list_syntax(value, name, port, chosen):
    assert nccl_env.selects(value, name, port) is chosen


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    dest = tmp_path_factory.mktemp("nccl") / "host"
    shutil.copytree(BASE, dest, symlinks=True)
    return dest


def plant(root, env, argv=None, ports=()):
    fs = root / "fs"
    (fs / f"proc/{PID}/environ").write_bytes(
        b"\0".join(f"{k}={v}".encode() for k, v in {"PATH": "/usr/bin", **env}.items()) + b"\0")
    args = argv or ["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model",
                    "Qwen/Qwen2.5-72B-Instruct-AWQ", "--tensor-parallel-size", "4", "--port", "8000"]
    (fs / f"proc/{PID}/cmdline").write_bytes(b"\0".join(a.encode() for a in args) + b"\0")
    shutil.rmtree(fs / "sys/class/infiniband", ignore_errors=True)
    for hca, port, state, layer, gids in ports:
        base = fs / f"sys/class/infiniband/{hca}/ports/{port}"
        (base / "gid_attrs/types").mkdir(parents=True)
        (base / "state").write_text(state + "\n")
        (base / "link_layer").write_text(layer + "\n")
        for index, kind in gids.items():
            (base / f"gid_attrs/types/{index}").write_text(kind + "\n")
    return nccl_env.probe(RecordedHost(root), ScanOptions(), INPUTS)


def problems(record):
    return {c.variable: c.problem for c in record.checks}


ROCE = ("mlx5_0", 1, "4: ACTIVE", "Ethernet", {0: "IB/RoCE v1", 1: "RoCE v2", 3: "RoCE v2"})
IB_DOWN = ("mlx5_1", 1, "1: DOWN", "InfiniBand", {})


@pytest.mark.parametrize("env, ports, expected", [
    ({"NCCL_SOCKET_IFNAME": "eth0"}, (), {"NCCL_SOCKET_IFNAME": "no-match"}),
    ({"NCCL_SOCKET_IFNAME": "^ens,ib"}, (), {"NCCL_SOCKET_IFNAME": "unroutable"}),  # lo, docker0 left
    ({"NCCL_SOCKET_IFNAME": "=ens1f1"}, (), {"NCCL_SOCKET_IFNAME": "down"}),
    ({"NCCL_SOCKET_IFNAME": "ens", "GLOO_SOCKET_IFNAME": "ens1f0"}, (), {"NCCL_SOCKET_IFNAME": None, "GLOO_SOCKET_IFNAME": None}),
    ({"GLOO_SOCKET_IFNAME": "ens1f0,eth9"}, (), {"GLOO_SOCKET_IFNAME": "no-match"}),
    ({"VLLM_HOST_IP": "172.17.0.1"}, (), {"VLLM_HOST_IP": "unroutable"}),
    ({"VLLM_HOST_IP": "10.9.9.9"}, (), {"VLLM_HOST_IP": "not-local"}),
    ({"VLLM_HOST_IP": "10.10.1.5"}, (), {"VLLM_HOST_IP": None}),
    ({"RAY_OVERRIDE_NODE_IP_ADDRESS": "127.0.0.1"}, (), {"RAY_OVERRIDE_NODE_IP_ADDRESS": "unroutable"}),
    ({"NCCL_IB_DISABLE": "1"}, (ROCE,), {"NCCL_IB_DISABLE": "ib-disabled"}),
    ({"NCCL_IB_DISABLE": "1"}, (IB_DOWN,), {"NCCL_IB_DISABLE": None}),  # no active port: nothing lost
    ({"NCCL_NET": "Socket"}, (ROCE,), {"NCCL_NET": "ib-disabled"}),
    ({"NCCL_IB_HCA": "=mlx5_1"}, (ROCE, IB_DOWN), {"NCCL_IB_HCA": "hca-down"}),
    ({"NCCL_IB_HCA": "mlx4"}, (ROCE,), {"NCCL_IB_HCA": "no-match"}),
    ({"NCCL_IB_GID_INDEX": "0"}, (ROCE,), {"NCCL_IB_GID_INDEX": "gid-not-rocev2"}),
    ({"NCCL_IB_GID_INDEX": "7"}, (ROCE,), {"NCCL_IB_GID_INDEX": "gid-missing"}),
    ({"NCCL_IB_GID_INDEX": "3"}, (ROCE,), {"NCCL_IB_GID_INDEX": None}),
    ({"NCCL_NET_GDR_LEVEL": "LOC"}, (ROCE,), {"NCCL_NET_GDR_LEVEL": "gdr-off"}),
    ({}, (ROCE,), {}),
])
def test_each_variable_against_the_host(root, env, ports, expected):
    assert problems(plant(root, env, ports=ports)) == expected


def test_the_layout_from_flags_and_the_hosts_it_spans(root):
    sglang = ["python", "-m", "sglang.launch_server", "--model-path", "/m", "--tp", "16",
              "--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "10.10.1.5:5000"]
    record = plant(root, {"NCCL_SOCKET_IFNAME": "lo"}, argv=sglang)
    engine = record.engines[0]
    assert (engine.tensor_parallel, engine.nodes, engine.nodes_from, engine.dist_init_addr) == (16, 2, "--nnodes", "10.10.1.5:5000")
    assert record.checks[0].nodes == 2 and record.checks[0].problem == "unroutable"
    vllm = plant(root, {}, argv=["vllm", "serve", "/m", "-tp", "8", "-pp", "2", "--enable-expert-parallel"])
    assert (vllm.engines[0].nodes, vllm.engines[0].expert_parallel) == (2, True)  # 16 GPUs, 8 here
    assert "tp x pp = 16 against 8 GPUs here" == vllm.engines[0].nodes_from


def test_only_the_named_variables_reach_the_record(root):
    record = plant(root, {"HF_TOKEN": "hf_secret", "NCCL_SOCKET_IFNAME": "ens"})
    assert record.engines[0].env == {"NCCL_SOCKET_IFNAME": "ens"}
    assert "hf_secret" not in repr(record)


def test_nccls_default_is_judged_only_for_a_group_across_hosts(root):
    # NCCL's default takes ib* first: ib0 here is up with a link-local address only
    vllm16 = ["vllm", "serve", "/m", "-tp", "16"]  # 16 GPUs, 8 here: two hosts
    record = plant(root, {}, argv=vllm16)
    assert [(c.variable, c.value, c.problem, c.matched) for c in record.checks] == [
        ("NCCL_SOCKET_IFNAME", "", "default-unroutable", ("ib0",))]
    assert plant(root, {}).checks == ()  # tp 4 on this host's 8 GPUs: one host, not judged
    assert problems(plant(root, {"NCCL_SOCKET_IFNAME": "ens"}, argv=vllm16)) == {"NCCL_SOCKET_IFNAME": None}


def test_nccls_config_files_fill_what_the_environment_lacks(root):
    """NCCL reads ~/.nccl.conf (or NCCL_CONF_FILE), then /etc/nccl.conf, inside the engine's
    root, and never overrides the environment (NVIDIA/nccl#286 sets it there per host)."""
    etc = root / f"fs/proc/{PID}/root/etc"
    etc.mkdir(parents=True, exist_ok=True)
    (etc / "nccl.conf").write_text("# site defaults\nNCCL_SOCKET_IFNAME=eth0\nNCCL_IB_DISABLE=1\nNCCL_DEBUG=INFO\n")
    try:
        record = plant(root, {"NCCL_IB_DISABLE": "0"}, ports=(ROCE,))
        engine = record.engines[0]
        assert engine.env == {"NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "eth0"}
        assert engine.conf_files == ("/etc/nccl.conf",)
        assert problems(record) == {"NCCL_SOCKET_IFNAME": "no-match", "NCCL_IB_DISABLE": None}
    finally:
        (etc / "nccl.conf").unlink()


def test_whether_an_engine_uses_rdma_between_hosts(root):
    """rdma_use: what rdma-memlock-low judges an engine by (a single-host engine never
    registers RDMA memory)."""
    one = plant(root, {}).engines[0]  # vLLM -tp 4 on this host's 8 GPUs
    assert (one.rdma_across_hosts, one.rdma_why) == (False, "one host (tp x pp = 4 against 8 GPUs here)")
    named = plant(root, {"NCCL_IB_HCA": "mlx5_0"}, ports=(ROCE,)).engines[0]
    assert (named.rdma_across_hosts, named.rdma_why) == (True, "NCCL_IB_HCA=mlx5_0")
    sglang = ["python", "-m", "sglang.launch_server", "--tp", "16", "--nnodes", "2"]
    across = plant(root, {}, argv=sglang).engines[0]
    assert (across.rdma_across_hosts, across.rdma_why) == (True, "2 hosts (--nnodes)")
    off = plant(root, {"NCCL_IB_DISABLE": "1"}, argv=sglang).engines[0]
    assert (off.rdma_across_hosts, off.rdma_why) == (False, "NCCL_IB_DISABLE=1")
    assert nccl_env.rdma_use({"NCCL_NET": "IB"}, 1, "--nnodes")[0] is True
    assert nccl_env.rdma_use({"NCCL_NET": "Socket"}, 2, "--nnodes")[0] is False
    assert nccl_env.rdma_use({"NCCL_NET": "Socket "}, None, None)[0] is False
    assert nccl_env.rdma_use({}, None, None)[0] is None  # no layout and no variable: unknown
