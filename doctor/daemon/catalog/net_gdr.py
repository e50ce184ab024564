"""The catalog rows of net.gpudirect and net.nic_affinity (probes/net/gpudirect.py,
nic_affinity.py): which GPUDirect RDMA path NCCL can use, and the RDMA NIC nearest each GPU."""

from __future__ import annotations

from doctor.daemon.catalog import labels as L
from doctor.daemon.catalog.rows import Table, each, gauge, info, missing, of, unexported

TABLES: tuple[Table, ...] = (
    Table("net.gpudirect", (
        of("length", "rdma_devices", "net_gpudirect_rdma_devices",
           "RDMA devices (/sys/class/infiniband) on a host GPUDirect RDMA applies to"),
        gauge("gpu_count", "net_gpudirect_gpus", "NVIDIA GPUs NVML counts"),
        of("members", "peermem_modules", "net_gpudirect_peermem_module_info",
           "Peer-memory modules loaded and live (/proc/modules: nvidia_peermem, nv_peer_mem)",
           "module"),
        of("members", "peermem_files", "net_gpudirect_peermem_file_info",
           "The peer-memory files NCCL looks for that are present (net_ib.cc)", "path"),
        info("", "net_gpudirect_info", "The kernel release, the NVIDIA driver's version and "
             "the GPUDirect RDMA path NCCL can use (dma-buf, peer-memory; empty: none)",
             kernel_release="kernel_release", driver_version="driver_version", gdr_path="path"),
        gauge("kernel_dmabuf", "net_gpudirect_kernel_dmabuf",
              "1 when the kernel is 5.12 or later (RDMA dma-buf import)"),
        gauge("open_kernel_module", "net_gpudirect_open_kernel_module",
              "1 when the NVIDIA kernel module is the open one (/proc/driver/nvidia/version)"),
        gauge("peermem", "net_gpudirect_peermem", "1 when NCCL finds a peer-memory client"),
        gauge("peermem_registered", "net_gpudirect_peermem_registered",
              "1 when the peer-memory client is registered with ib_core (memory_peers/nv_mem*): "
              "what NCCL 2.22 and older look for"),
        gauge("dmabuf", "net_gpudirect_dmabuf",
              "1 when kernel and GPU driver allow dma-buf registration"),
        gauge("gdr_off", "net_gpudirect_off",
              "1 when RDMA devices and GPUs are here and neither GPUDirect RDMA path is"),
        missing("missing", "net_gpudirect_value_missing", "net.gpudirect"),
    )),
    Table("net.nic_affinity", (
        each("nics", L.fields("nic=name")),
        info("nics", "net_rdma_nic_pci_info", "An RDMA device's PCI function "
             "(/sys/class/infiniband/<dev>/device)", bus_id="bdf"),
        gauge("nics.numa_node", "net_rdma_nic_numa_node",
              "The NUMA node of an RDMA device's PCI function"),
        missing("nics.missing", "net_rdma_nic_value_missing", "net.nic_affinity's NICs"),
        each("gpus", L.gpu("gpu")),
        unexported("gpus.bdf", "gpu.inventory's bus id, on llm_doctor_gpu_info"),
        gauge("gpus.numa_node", "net_nic_affinity_gpu_numa_node",
              "The NUMA node of the GPU's PCI function"),
        info("gpus", "net_nic_affinity_nearest_info", "The RDMA NIC nearest the GPU and the "
             "PCIe path to it (PIX, PXB, PHB, NODE, SYS as nvidia-smi topo -m names it)",
             nic="nearest_nic", level="level"),
        gauge("gpus.across_sockets", "net_nic_affinity_across_sockets",
              "1 when the GPU's nearest RDMA NIC is across the socket link (SYS)"),
        gauge("gpus.beyond_gdr_default", "net_nic_affinity_beyond_gdr_default",
              "1 when the GPU's nearest RDMA NIC is past NCCL's default NCCL_NET_GDR_LEVEL (PXB)"),
        of("pairs", "gpus.levels", "net_nic_affinity_path_info",
           "The PCIe path from the GPU to each RDMA NIC", "nic", "level"),
        missing("gpus.missing", "net_nic_affinity_gpu_value_missing", "net.nic_affinity's GPUs"),
        unexported("gpus_far", "the GPUs whose llm_doctor_net_nic_affinity_across_sockets is 1"),
        gauge("on_vm", "net_nic_affinity_on_vm",
              "1 on a virtual machine: its PCIe tree is the hypervisor's picture"),
        missing("missing", "net_nic_affinity_value_missing", "net.nic_affinity"),
    )),
)
