"""Measurement micro-kernels: short timed loops (memory bandwidth, disk reads) that probes run."""
