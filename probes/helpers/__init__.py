"""What several probes share (process table, engine pages, NVML readers): no probe here."""
