"""Adapters to the systems a fleet runs: node-problem-detector, Slurm, node_exporter's
textfile collector and Prometheus across hosts. They read the daemon's state file
(doctor/daemon/state.py) and never run a scheduler or a collector of their own."""
