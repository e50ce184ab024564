"""gpu.runtime: the CUDA each engine loads against what the driver and the GPUs can run.

Per engine process (up to MAX_ENGINES): the CUDA runtime it loads (the ``libcudart`` it has
mapped, else its torch's ``torch/version.py``, probes/helpers/cuda_loaded.py), a forward-
compatibility ``libcuda`` mapped from a ``compat`` directory, and the GPU architectures its
torch build has kernels for (``libtorch_cuda.so``'s ``.nv_fatbin``, probes/helpers/cuda_build.py).
Per GPU: NVML ``nvmlDeviceGetName`` and ``nvmlDeviceGetCudaComputeCapability`` (a driver
without the call: not-supported). The driver's CUDA: ``nvmlSystemGetCudaDriverVersion``
(12040 → 12.4, the "CUDA Version" nvidia-smi prints: the newest runtime it supports).

What the record's facts mean (NVIDIA's CUDA Compatibility guide):
* a runtime of a newer MAJOR than the driver's fails at start with "CUDA driver version is
  insufficient for CUDA runtime version" (cudaErrorInsufficientDriver, 35);
* a newer MINOR of the same major runs through minor version compatibility (CUDA 11.1 and
  later, driver >= 525 for 12.x), with a limited feature set: PTX the newer toolchain made
  cannot be JIT-compiled by the older driver ("the provided PTX was compiled with an
  unsupported toolchain", cudaErrorUnsupportedPtxVersion, 222);
* forward compatibility (the ``cuda-compat`` package's libcuda) is supported on datacenter
  GPUs (and select NGC Server Ready RTX SKUs) only; on a GeForce, TITAN or workstation RTX
  card CUDA fails with "forward compatibility was attempted on non supported HW" (804). The
  part is told by its NVML name: GeForce, TITAN, Quadro and RTX without "Server" are not
  datacenter parts. With compat on a datacenter GPU the driver's own CUDA version is not the
  limit, and a newer runtime is not flagged;
* a GPU whose architecture has neither a cubin of its major at or below its minor nor PTX at
  or below its capability gets "no kernel image is available for execution on the device".

The GPUs judged for an engine are all the host's (an engine that cannot start holds none).
No root for one's own engines; another user's /proc/<pid>/maps and root/ need root (the
reason is recorded). Manual equivalent: ``nvidia-smi`` (header "CUDA Version"),
``nvidia-smi --query-gpu=name,compute_cap --format=csv``, in the engine's environment
``python -c 'import torch; print(torch.version.cuda, torch.cuda.get_arch_list())'``, and
``cuobjdump --list-elf <site-packages>/torch/lib/libtorch_cuda.so``.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

from doctor.model import ScanOptions, Skip
from doctor.inputs import NO_INPUTS, Inputs
from doctor.seam.host import Host, HostReadError
from doctor.display import why
from doctor.i18n import lazy, t
from probes.helpers.gpu_common import cuda_version_text
from probes.helpers.cuda_build import BuildError, build_arches, runs_on
from probes.helpers.cuda_loaded import Loaded, TorchVersion, mapped, site_candidates, torch_version
from probes.helpers.gpu_common import Reader, gpu_count, reason_of
from probes.helpers.processes import Process, engine_processes, lasting_name
from probes.helpers.visible_gpus import visible

MAX_ENGINES = 8
NOT_DATACENTER = ("geforce", "titan")  # consumer parts
WORKSTATION = ("rtx", "quadro")  # workstation parts, unless a Server Edition


@dataclass(frozen=True, slots=True)
class GpuArch:
    index: int
    name: str | None  # nvmlDeviceGetName
    compute_capability: str | None  # nvmlDeviceGetCudaComputeCapability (12, 0) -> "12.0"
    datacenter: bool | None  # a part that supports forward compatibility (by its name)
    missing: dict[str, str]


@dataclass(frozen=True, slots=True)
class EngineRuntime:
    pid: int
    engine: str
    runtime_cuda: str | None  # the runtime judged: "12.8" (or "12": the major only)
    runtime_source: str | None  # what said so: "libcudart.so.12.8.90 mapped", torch's version file
    runtime_newer: str | None  # "major" | "minor": newer than the driver's CUDA; None: not newer
    torch_version: str | None  # torch/version.py __version__: "2.7.0+cu128"
    torch_cuda: str | None  # torch/version.py cuda: "12.8"
    torch_version_file: str | None  # as the engine sees it
    cudart: str | None  # /proc/<pid>/maps: the libcudart mapped
    libcuda: str | None  # /proc/<pid>/maps: the libcuda mapped
    nccl: str | None  # /proc/<pid>/maps: libnccl.so.2.21.5 mapped -> "2.21.5"; None: not mapped (yet)
    compat: bool  # that libcuda comes from a forward-compatibility (compat) directory
    compat_unsupported_gpus: str | None  # compat on parts without forward compatibility
    build_library: str | None  # the library whose kernels were read (libtorch_cuda.so)
    build_arches: str | None  # "sm_80,sm_86,sm_90,compute_90" from its .nv_fatbin
    arch_missing_gpus: str | None  # "GPU0 sm_120 (NVIDIA GeForce RTX 5090)": no kernel image
    missing: dict[str, str]
    name: str = ""  # processes.lasting_name: the finding's key (a pid is not one)
    # the GPUs judged for it: its CUDA_VISIBLE_DEVICES as NVML indexes, or why every GPU
    visible_gpus: str = ""


@dataclass(frozen=True, slots=True)
class RuntimeRecord:
    driver_cuda: str | None  # nvmlSystemGetCudaDriverVersion 12040 -> "12.4"
    gpus: tuple[GpuArch, ...]
    engines: tuple[EngineRuntime, ...]
    missing: dict[str, str]


def datacenter_part(name: str | None) -> bool | None:
    if not name:
        return None
    low = name.lower()
    if any(w in low for w in NOT_DATACENTER):
        return False
    return not (any(w in low for w in WORKSTATION) and "server" not in low)


def read_gpu(host: Host, index: int) -> GpuArch:
    r = Reader(host)
    name = r.text("name", "nvmlDeviceGetName", index)
    cc = r.mapping("compute_capability", "nvmlDeviceGetCudaComputeCapability", index)
    if r.missing.get("compute_capability") == "not-found":  # a driver before the call
        r.missing["compute_capability"] = "not-supported"
    major = r.item("compute_capability", cc, "major")
    minor = r.item("compute_capability", cc, "minor")
    ok = major is not None and minor is not None and 0 < major < 100 and 0 <= minor < 10
    if cc is not None and not ok and "compute_capability" not in r.missing:
        r.missing["compute_capability"] = f"wrong value: {cc!r:.40}"
    return GpuArch(index=index, name=name, compute_capability=f"{major}.{minor}" if ok else None,
                   datacenter=datacenter_part(name), missing=r.missing)


def _version(text: str) -> tuple[int, int | None]:
    parts = text.split(".")
    return int(parts[0]), int(parts[1]) if len(parts) > 1 else None


def newer(runtime: str | None, driver_code: int | None) -> str | None:
    """"major" or "minor" when the runtime is newer than the driver's CUDA, else None."""
    if runtime is None or driver_code is None or driver_code <= 0:
        return None
    major, minor = _version(runtime)
    if major != driver_code // 1000:
        return "major" if major > driver_code // 1000 else None
    return "minor" if minor is not None and minor > driver_code % 1000 // 10 else None


def _torch(host: Host, p: Process, root: str, loaded: Loaded,
           missing: dict[str, str]) -> TorchVersion | None:
    if loaded.site_packages:
        sites = [loaded.site_packages]
    else:
        interpreters = [p.cmdline.split(" ", 1)[0]]
        try:
            interpreters.append(host.read_link(f"/proc/{p.pid}/exe"))
        except HostReadError as exc:
            missing["exe"] = reason_of(exc)
        sites = site_candidates(host, root, interpreters)
    for site in sites:
        try:
            return torch_version(host, root + posixpath.join(site, "torch", "version.py"))
        except HostReadError as exc:
            if reason_of(exc) != "not-found":
                missing["torch_cuda"] = f"{reason_of(exc)}: {exc.detail}" if exc.detail else reason_of(exc)
                return None
    missing["torch_cuda"] = "no torch/version.py in the engine's site-packages" if sites else \
        lazy("torch not mapped and no site-packages found from the interpreter")
    return None


def _runtime(loaded: Loaded, torch: TorchVersion | None, root: str) -> tuple[str | None, str | None]:
    cudart = loaded.cudart_version
    if cudart and "." in cudart:
        return cudart, f"{posixpath.basename(loaded.cudart or '')} mapped"
    if torch and torch.cuda and (cudart is None or _version(torch.cuda)[0] == int(cudart)):
        source = torch.path.removeprefix(root)
        return ".".join(torch.cuda.split(".")[:2]), f"torch {torch.version or '?'} ({source})"
    if cudart:
        return cudart, f"{posixpath.basename(loaded.cudart or '')} mapped (major only)"
    return None, None


def _arches(host: Host, root: str, loaded: Loaded, gpus: tuple[GpuArch, ...],
            missing: dict[str, str]) -> tuple[str | None, str | None]:
    if loaded.torch_cuda_lib is None:
        missing["build_arches"] = "no libtorch_cuda.so mapped"
        return None, None
    try:
        arches = build_arches(host, root + loaded.torch_cuda_lib)
    except BuildError as exc:
        missing["build_arches"] = str(exc).removeprefix(root)[:300]
        return None, None
    lacking = []
    for g in gpus:
        if g.compute_capability is not None:
            major, minor = map(int, g.compute_capability.split("."))
            if not runs_on(arches, major, minor):
                lacking.append(f"GPU{g.index} sm_{major}{minor} ({g.name or '?'})")
    return arches.text(), ", ".join(lacking) or None


def read_engine(host: Host, p: Process, driver_code: int | None,
                gpus: tuple[GpuArch, ...]) -> EngineRuntime:
    missing: dict[str, str] = {}
    root = f"/proc/{p.pid}/root"
    try:
        loaded = mapped(host.read_text(f"/proc/{p.pid}/maps"))
    except HostReadError as exc:
        missing["maps"] = reason_of(exc)
        loaded = mapped("")
    torch = _torch(host, p, root, loaded, missing)
    runtime, source = _runtime(loaded, torch, root)
    seen = visible(host, p.pid, len(gpus), tuple(g.name for g in gpus))
    if seen.indexes is not None:  # a GPU it cannot use needs no kernel of its build
        gpus = tuple(g for g in gpus if g.index in seen.indexes)
    unsupported = [f"GPU{g.index} ({g.name})" for g in gpus if g.datacenter is False]
    build, lacking = _arches(host, root, loaded, gpus, missing)
    return EngineRuntime(
        pid=p.pid, name=lasting_name(p), engine=p.engine or "?", runtime_cuda=runtime, runtime_source=source,
        runtime_newer=newer(runtime, driver_code),
        torch_version=torch.version if torch else None, torch_cuda=torch.cuda if torch else None,
        torch_version_file=torch.path.removeprefix(root) if torch else None,
        cudart=loaded.cudart, libcuda=loaded.libcuda, nccl=loaded.nccl, compat=loaded.compat,
        compat_unsupported_gpus=", ".join(unsupported) if loaded.compat and unsupported else None,
        build_library=loaded.torch_cuda_lib, build_arches=build, arch_missing_gpus=lacking,
        missing=missing, visible_gpus=seen.note)


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> RuntimeRecord:
    count = gpu_count(host)
    r = Reader(host)
    code = r.integer("driver_cuda", "nvmlSystemGetCudaDriverVersion")
    engines = engine_processes(host)[:MAX_ENGINES]
    if not engines:
        raise Skip(t("no serving engine runs: no CUDA runtime loaded to judge against the driver"))
    gpus = tuple(read_gpu(host, i) for i in range(count))
    return RuntimeRecord(driver_cuda=cuda_version_text(code), gpus=gpus,
                         engines=tuple(read_engine(host, p, code, gpus) for p in engines),
                         missing=r.missing)


def _runtime_words(e: EngineRuntime) -> str:
    """The runtime judged, or why none was: its maps unread, no torch found."""
    if e.runtime_cuda:
        return e.runtime_cuda
    reason = e.missing.get("runtime_cuda") or e.missing.get("maps") or e.missing.get("torch_cuda")
    return t("unknown ({why})", why=why(reason)) if reason else t("unknown")


def summary(record: RuntimeRecord) -> str:
    engines = t("; ").join(t("{engine} pid {pid} runtime {cuda}", engine=e.engine, pid=e.pid,
                          cuda=_runtime_words(e))
                        + (t(", kernels {arches}", arches=e.build_arches) if e.build_arches else "")
                        for e in record.engines)
    return t("driver CUDA {cuda}; {engines}", cuda=record.driver_cuda or "?", engines=engines)
