"""engine.frontend: each engine's API or tokenizer process, and how busy it is beside the GPU.

The front end takes HTTP, tokenises, schedules and streams in one Python process (vLLM's
API server, the parent of V1's ``VLLM::EngineCore``; SGLang's main process, which runs its
tokenizer manager beside the ``sglang::scheduler`` children) or a small router (TGI's
``text-generation-router``). Pinned at about one core, it starves the engine core and the
GPU of work. Sources: host.cpu_load's sample (its record, handed over: no second sample),
which holds each process of the ten busiest and each engine tree's total; the process
table (probes/helpers/processes.py) for the router and the front end's flags; NVML
``nvmlDeviceGetUtilizationRates`` (``gpu``: percent of the sample period a kernel ran) of
the engine's GPUs (those where a process of its tree holds a compute context, from NVML's
process list as gpu.numa reads it; every GPU of the host when NVML lists none of them, as
in a container that sees other pids), through the host's one NVML funnel. Units: cores (1.0 = one core busy for the
whole window), percent. No privilege needed. Manual equivalent: ``top -H -p $(pgrep -f
'vllm serve' | head -1)`` and ``nvidia-smi --query-gpu=utilization.gpu --format=csv``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from doctor import display
from doctor.i18n import t
from doctor.model import ScanOptions, Skip
from doctor.inputs import NO_INPUTS, Inputs
from doctor.seam.host import (Host, detail_text, read_error_text,
                              reason_text)
from doctor.values import count
from probes.helpers.engine_flags import flag
from probes.helpers.processes import process_table
from probes.helpers.gpu_busy import engine_gpus, gpu_utilisation
from probes.helpers.cpu_sample import NAME as CPU_LOAD, TOP_N, CpuLoadRecord, load_of

KINDS = ("vllm", "sglang", "tgi")
ROLES = {"vllm": "vLLM API server", "sglang": "SGLang tokenizer manager (main process)",
         "tgi": "TGI router"}
# The flag that runs more front-end processes or workers, per engine (each engine's --help).
WORKER_FLAGS = {"vllm": ("--api-server-count",), "sglang": ("--tokenizer-worker-num",),
                "tgi": ("--validation-workers",)}


@dataclass(frozen=True, slots=True)
class Frontend:
    engine: str  # vllm, sglang, tgi
    role: str  # what the front-end process is, in words
    pid: int  # the front-end process
    tree_pid: int  # the engine tree's root (host.cpu_load's engines)
    # processes in the tree: 1 is an engine in one process (vLLM V0's api_server, a
    # recording made before trees were kept), whose front end cannot be told from its core
    tree_processes: int
    frontend_cores: float | None  # the front end's CPU over the sample window, in cores
    frontend_absent: str | None  # why frontend_cores is None
    rest_cores: float | None  # the rest of the tree (engine core, workers), in cores
    workers: int | None  # --api-server-count / --tokenizer-worker-num / --validation-workers
    gpu_util_max_pct: float | None  # its busiest GPU, nvmlDeviceGetUtilizationRates .gpu
    gpu_util_absent: str | None  # why gpu_util_max_pct is None
    gpus: int | None
    window_s: float
    # the front end's listening sockets ("0.0.0.0:8000"; "" when unseen): what names the
    # engine across restarts, where its pid does not
    listen: str = ""
    # whose GPUs gpu_util_max_pct is of: "engine" (where its tree holds a context) or "host"
    # (every GPU: NVML listed none of the tree's processes)
    gpu_util_scope: str = "host"


@dataclass(frozen=True, slots=True)
class FrontendRecord:
    engines: tuple[Frontend, ...]


def _busiest(host: Host, root: int, util: dict[int, float] | None,
             gpus: int | None) -> tuple[float | None, str]:
    """The tree's busiest GPU's utilisation and its scope ("engine" or "host")."""
    if util is None or not gpus:
        return None, "host"
    mine = engine_gpus(host, root, gpus)
    if mine:
        return max(util[i] for i in mine), "engine"
    return max(util.values()), "host"


def _frontend_pid(kind: str, root: int, host: Host) -> tuple[int, str, str] | None:
    """The front-end process of the tree rooted at ``root``: its pid, command line and
    listening sockets."""
    table = process_table(host)
    if kind == "tgi":  # the launcher is the root; its router is a child of its own
        routers = [p for p in table if p.engine == "tgi" and "text-generation-router" in
                   p.cmdline.split(" ", 1)[0]]
        if len(routers) != 1:
            return None
        return routers[0].pid, routers[0].cmdline, ",".join(routers[0].listen)
    found = next((p for p in table if p.pid == root), None)
    return (root, found.cmdline, ",".join(found.listen)) if found else (root, "", "")


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> FrontendRecord:
    if inputs.get(CPU_LOAD, CpuLoadRecord) is None and not any(
            p.engine in KINDS for p in process_table(host)):
        # run without host.cpu_load (alone, or a subset of probes): no engine process of its
        # kinds, so no 0.5 s CPU sample of the whole host to find that out
        raise Skip(t("no vLLM, SGLang or TGI engine process"))
    sample = load_of(host, inputs)  # host.cpu_load's record (its needs), else its sample
    trees = [e for e in sample.engines if e.engine in KINDS]
    if not trees:
        raise Skip(t("no vLLM, SGLang or TGI engine in host.cpu_load's sample"))
    util, util_absent, gpus = gpu_utilisation(host)
    by_pid = {p.pid: p.cpu_cores for p in sample.top}
    complete = len(sample.top) < TOP_N  # every process above MIN_CORES is listed
    found = []
    for tree in trees:
        front = _frontend_pid(tree.engine, tree.pid, host)
        if front is None:
            continue
        pid, cmdline, listen = front
        cores, absent = by_pid.get(pid), None
        if cores is None:
            cores = 0.0 if complete else None
            absent = None if complete else "not among the ten busiest processes of the sample"
        rest = round(max(0.0, tree.cpu_cores - cores), 3) if cores is not None else None
        busiest, scope = _busiest(host, tree.pid, util, gpus)
        found.append(Frontend(
            tree.engine, ROLES[tree.engine], pid, tree.pid, tree.processes, cores, absent, rest,
            count(flag(cmdline.split(), *WORKER_FLAGS[tree.engine]), minimum=1),
            busiest, util_absent, gpus, sample.window_s, listen, scope))
    if not found:
        raise Skip(t("TGI without exactly one text-generation-router: its front end is not known"))
    return FrontendRecord(tuple(found))


def summary(record: FrontendRecord) -> str:
    return t("; ").join(
        t("{role} ({pid}) {cores} cores, GPU {util}", role=_role_text(e.role), pid=e.pid,
          cores=display.text(e.frontend_cores, e.frontend_absent, '.2f'),
          # the percent sign with the figure only: a reason in its place takes none (issue 28)
          util=(t("{pct}%", pct=display.number(e.gpu_util_max_pct, '.0f'))
                if e.gpu_util_max_pct is not None
                else display.text(None, _absent_text(e.gpu_util_absent))))
        for e in record.engines)


def _absent_text(why: str | None) -> str | None:
    """Why the utilisation is absent (kept in English in the record) for people."""
    if not why:
        return why
    call = re.fullmatch(r"GPU (\d+): (nvml\w+) ([a-z-]+)", why)  # gpu_utilisation's own words
    if call is not None:
        return t("GPU {index}: {call} {reason}", index=call[1], call=call[2],
                 reason=reason_text(call[3]))
    return read_error_text(detail_text(why))


def _role_text(role: str) -> str:
    """A front end's role (ROLES, kept in English in the record) for people."""
    return {"vLLM API server": t("vLLM API server"),
            "SGLang tokenizer manager (main process)": t("SGLang tokenizer manager (main process)"),
            "TGI router": t("TGI router")}.get(role, role)
