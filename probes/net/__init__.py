"""Network probes: RDMA ports, GPUDirect RDMA, the interfaces NCCL and gloo use, collectives across hosts."""
