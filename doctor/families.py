"""The families a fleet adapter answers for, and the family of each probe.

A scheduler acts on a family (node-problem-detector sets one condition per family,
doctor/fleet/npd.py): ``gpu`` (the accelerators, whatever their vendor), ``engine``, ``host``
and ``net`` (the network between hosts). A probe's family is the head of its name
(``gpu.nvml`` → gpu), except for the other vendors' backends (issue 33), whose heads are not
families: an AMD GPU's or an Ascend NPU's findings are the GPU family's, as NVIDIA's are,
and an NPU's own RoCE ports and HCCL's variables are the network's, as net.rdma's and
net.nccl_env's are. So an AMD or Ascend host sets the same condition, and drains the same
way, as an NVIDIA host with the same fault. tests/test_fleet_families.py holds every
registered probe to a family: a new backend's probes must be named here.
"""

from __future__ import annotations

FAMILIES = ("gpu", "engine", "host", "net")

# probe name, or the head of its name, → family; the longer (a probe's own name) wins
BACKENDS: dict[str, str] = {
    "amd": "gpu",  # amd.gpu, amd.host (ROCm's host settings: IOMMU, /dev/kfd, gfx targets)
    "npu": "gpu",  # npu.devices, npu.errors, npu.topology, npu.device_files, npu.versions
    "npu.network": "net",  # the NPU's RoCE ports (hccn_tool), as net.rdma's
    "npu.hccl_env": "net",  # HCCL's variables against the ports, as net.nccl_env's
    "npu.hccl_log": "net",  # HCCL's error lines in the engines' logs, as net.nccl_log's
}


def probe_family(name: str) -> str | None:
    """The family of the probe ``name``; None when neither its name nor its head has one."""
    if name in BACKENDS:
        return BACKENDS[name]
    head = name.partition(".")[0]
    return head if head in FAMILIES else BACKENDS.get(head)
