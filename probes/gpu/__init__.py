"""GPU probes: NVML health, PCIe, topology, throttling, memory, errors, micro-kernels."""
