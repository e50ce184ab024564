"""Workload tools: the load generator, the throughput knee, capacity arithmetic, GGUF headers."""
