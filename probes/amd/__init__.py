"""AMD (ROCm) probes: the GPUs through AMD SMI (amd.gpu) and the host settings ROCm needs (amd.host)."""
