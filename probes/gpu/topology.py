"""gpu.topology: how each pair of GPUs is connected, and which pairs must talk.

Source: NVML ``nvmlDeviceGetTopologyCommonAncestor`` (PIX/PXB/PHB/NODE/SYS),
``nvmlDeviceGetP2PStatus`` (read and NVLink capability), ``nvmlDeviceGetNvLinkState``
(links up), ``nvmlDeviceGetNumaNodeId``, ``nvmlDeviceGetCpuAffinity``; the engines' command
lines (``--tensor-parallel-size``) from the process table. No root needed. Manual equivalent:
``nvidia-smi topo -m`` and ``nvidia-smi topo -p2p rn``.

Which pairs must talk: an engine running with tensor parallelism N exchanges activations
between its N GPUs every layer. Its GPUs are those on which NVML's process list
(``nvmlDeviceGetComputeRunningProcesses``, no root needed) shows the engine or one of its
descendants (vLLM's and SGLang's TP workers are child processes; ``/proc/<pid>/stat`` gives
the parent). Where NVML lists none of them (an engine in another pid namespace, still
loading) the group is taken as GPUs 0..N-1, and the source says so: CUDA_VISIBLE_DEVICES
lives in the engine's environment, not readable without root. Two engines are two groups;
only pairs inside one group must talk. When no engine is known, every pair counts.

A pair is on a shared path when it has no NVLink and either both cards sit behind one CPU root
port without working P2P (PIX/PXB: their traffic goes up and down the one uplink) or the pair
crosses the inter-socket link (SYS).
"""


from __future__ import annotations

from doctor.i18n import t
from doctor.inputs import NO_INPUTS, Inputs
from doctor.model import ScanOptions
from doctor.seam.host import Host
from probes.helpers.gpu_topology import TopologyRecord, measured


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> TopologyRecord:
    """The GPUs' topology (probes/helpers/gpu_topology.py), read once a scan:
    gpu.peer_to_peer, gpu.numa and gpu.collective are handed this record."""
    return measured(host)


def summary(record: TopologyRecord) -> str:
    if not record.pairs:
        return t("one GPU")
    levels = sorted({("NVLink" if p.nvlink else p.level or "?") for p in record.pairs})
    return t("{n} pairs: {levels}; {source}", n=len(record.pairs), levels=", ".join(levels),
             source=record.talk_group_source)
