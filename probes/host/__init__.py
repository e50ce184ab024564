"""Host probes: limits, kernel settings, CPU, memory and its bandwidth, model disks."""
