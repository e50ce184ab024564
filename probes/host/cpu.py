"""host.cpu: CPU model, topology, instruction sets, frequency policy and load.

Reads ``/proc/cpuinfo``, ``/proc/loadavg``, ``/sys/devices/system/node/node*``,
``/sys/devices/system/cpu/cpu*/cpufreq/{scaling_governor,energy_performance_preference,
scaling_cur_freq,cpuinfo_max_freq}`` (kHz there, MHz here). No root needed. Manual
equivalent: ``lscpu``, ``cpupower frequency-info``, ``cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_governor``.
A VM or container without cpufreq has no governor: that is None, not "performance".
Whether the host is a virtual machine (``virtual_machine``, and what said so) comes from
probes/helpers/virtualization.py: the ``hypervisor`` flag, ``/sys/hypervisor``, DMI.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from doctor.seam.host import Host, HostReadError
from doctor.model import ScanOptions
from doctor.inputs import NO_INPUTS, Inputs
from doctor.display import text
from doctor.i18n import t
from probes.helpers import kernel_text
from probes.helpers.virtualization import detect as detect_virtualization
from probes.helpers.cpuinfo import parse_cpuinfo as parse_cpuinfo

# Instruction sets that decide CPU inference speed (002 §2: AVX-512 or AMX for CPU serving).
ISA_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")


@dataclass(frozen=True, slots=True)
class CpuFreq:
    cpu: int
    governor: str | None  # cpufreq/scaling_governor
    energy_preference: str | None  # cpufreq/energy_performance_preference (intel_pstate, amd-pstate)
    cur_mhz: int | None  # cpufreq/scaling_cur_freq
    max_mhz: int | None  # cpufreq/cpuinfo_max_freq


@dataclass(frozen=True, slots=True)
class CpuRecord:
    model: str
    logical_cpus: int
    physical_cores: int | None  # None when cpuinfo lacks core ids (some VMs, arm64)
    sockets: int | None
    numa_nodes: int
    isa: tuple[str, ...]  # the ISA_FLAGS present
    governor_counts: dict[str, int]  # governor -> CPUs; empty when cpufreq is absent
    energy_preference_counts: dict[str, int]
    cpufreq_available: bool
    cur_mhz_avg: int | None
    max_mhz: int | None
    load_1m: float
    load_5m: float
    cpus: tuple[CpuFreq, ...]
    virtual_machine: bool | None = None  # None: neither cpuinfo nor DMI could be read
    vm_signals: tuple[str, ...] = ()  # what said so: "cpu flag hypervisor", "dmi QEMU"


def parse_loadavg(text: str, path: str = "/proc/loadavg") -> tuple[float, float]:
    """``0.31 0.42 0.38 1/1691 412877`` → (0.31, 0.42): the 1- and 5-minute averages."""
    parts = kernel_text.fields(path, text, 5)
    return kernel_text.load(path, parts[0]), kernel_text.load(path, parts[1])


def parse_khz(path: str, text: str) -> int:
    """A cpufreq file in kHz (``3200000``) → MHz (3200)."""
    return kernel_text.count(path, kernel_text.fields(path, text, 1)[0], "a frequency in kHz") // 1000


def _khz_to_mhz(host: Host, path: str) -> int | None:
    try:
        text = host.read_text(path)
    except HostReadError:
        return None
    return parse_khz(path, text)


def _word(host: Host, path: str) -> str | None:
    try:
        text = host.read_text(path)
    except HostReadError:
        return None
    return kernel_text.word(path, text)


def _cpu_freq(host: Host, cpu: int) -> CpuFreq:
    base = f"/sys/devices/system/cpu/cpu{cpu}/cpufreq"
    return CpuFreq(
        cpu=cpu,
        governor=_word(host, f"{base}/scaling_governor"),
        energy_preference=_word(host, f"{base}/energy_performance_preference"),
        cur_mhz=_khz_to_mhz(host, f"{base}/scaling_cur_freq"),
        max_mhz=_khz_to_mhz(host, f"{base}/cpuinfo_max_freq"),
    )


def probe(host: Host, options: ScanOptions, inputs: Inputs = NO_INPUTS) -> CpuRecord:
    model, physical_cores, sockets, flags = parse_cpuinfo(host.read_text("/proc/cpuinfo"))
    cpu_ids = sorted(
        int(name[3:]) for name in host.list_dirs("/sys/devices/system/cpu")
        if re.fullmatch(r"cpu\d+", name)
    )
    try:
        nodes = [n for n in host.list_dirs("/sys/devices/system/node") if re.fullmatch(r"node\d+", n)]
    except HostReadError:  # kernels built without NUMA
        nodes = []
    freqs = tuple(_cpu_freq(host, cpu) for cpu in cpu_ids)
    cur = [f.cur_mhz for f in freqs if f.cur_mhz]
    maxes = [f.max_mhz for f in freqs if f.max_mhz]
    load_1m, load_5m = parse_loadavg(host.read_text("/proc/loadavg"))
    vm = detect_virtualization(host)
    return CpuRecord(
        model=model,
        logical_cpus=len(cpu_ids),
        physical_cores=physical_cores,
        sockets=sockets,
        numa_nodes=max(len(nodes), 1),
        isa=tuple(f for f in ISA_FLAGS if f in flags),
        governor_counts=dict(Counter(f.governor for f in freqs if f.governor)),
        energy_preference_counts=dict(
            Counter(f.energy_preference for f in freqs if f.energy_preference)
        ),
        cpufreq_available=any(f.governor for f in freqs),
        cur_mhz_avg=sum(cur) // len(cur) if cur else None,
        max_mhz=max(maxes) if maxes else None,
        load_1m=load_1m,
        load_5m=load_5m,
        cpus=freqs,
        virtual_machine=vm.virtual_machine,
        vm_signals=vm.signals,
    )


def summary(record: CpuRecord) -> str:
    """One line for people: model, CPUs, sockets, NUMA nodes, ISA, governors, load."""
    governors = ", ".join(f"{g}×{n}" for g, n in record.governor_counts.items()) or t("no cpufreq")
    isa = " ".join(record.isa) or t("no AVX2")
    return t("{model}: {cpus} CPUs, {sockets} socket(s), {nodes} NUMA node(s); {isa}; "
             "governor {governors}; load {load}",
             model=text(record.model), cpus=record.logical_cpus, sockets=record.sockets or "?",
             nodes=record.numa_nodes, isa=isa, governors=governors, load=text(record.load_1m)) + (
        t("; virtual machine ({signals})", signals=", ".join(record.vm_signals))
        if record.virtual_machine else "")
