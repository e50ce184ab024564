"""Is this host a virtual machine? What the kernel and the firmware say, through the seam.

A virtual machine cannot be fixed by hand: there is no card to reseat and no BIOS to
enter, so rules that would advise a hands-on fix ask this first. Signals, any one enough:

* the ``hypervisor`` CPU flag in ``/proc/cpuinfo`` (CPUID leaf 1, ECX bit 31: set by KVM,
  Xen HVM, Hyper-V, VMware and the clouds built on them; never on bare metal);
* ``/sys/hypervisor/type`` (Xen, including older EC2 instances);
* the DMI strings ``/sys/class/dmi/id/sys_vendor`` and ``product_name`` naming a
  hypervisor (QEMU, KVM, VMware, VirtualBox, Hyper-V, Xen, cloud VMs); a cloud's bare-metal
  instance (``*.metal``) is not one.

NVML's ``nvmlDeviceGetVirtualizationMode`` (a GPU passed through to a VM, or a vGPU) is the
GPU's own word for it; probes/gpu/pcie.py adds it per GPU. Manual equivalent:
``systemd-detect-virt``.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.seam.host import Host, HostReadError
from probes.helpers.gpu_common import reason_of

# DMI words of hypervisors and cloud VMs (lowercase substrings of sys_vendor or product_name)
VM_DMI = ("qemu", "kvm", "vmware", "virtualbox", "innotek", "xen", "bochs", "parallels",
          "virtual machine", "hvm domu", "openstack", "google compute engine", "amazon ec2",
          "alibaba cloud ecs", "standard pc (")
# nvmlGpuVirtualizationMode_t: 1 pass-through, 2 vGPU guest (3, 4 are the hypervisor's side)
NVML_GUEST_MODES = {1: "pass-through", 2: "vgpu"}


@dataclass(frozen=True, slots=True)
class Virtualization:
    virtual_machine: bool | None  # None: nothing could be read
    signals: tuple[str, ...]  # what said so: "cpu flag hypervisor", "dmi QEMU", ...
    missing: dict[str, str]


def _text(host: Host, path: str, missing: dict[str, str]) -> str | None:
    try:
        return host.read_text(path)
    except HostReadError as exc:
        missing[path] = reason_of(exc)
        return None


def _cpu_flag(cpuinfo: str) -> bool:
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return "hypervisor" in value.split()
    return False


def detect(host: Host) -> Virtualization:
    missing: dict[str, str] = {}
    signals: list[str] = []
    cpuinfo = _text(host, "/proc/cpuinfo", missing)
    if cpuinfo is not None and _cpu_flag(cpuinfo):
        signals.append("cpu flag hypervisor")
    xen = _text(host, "/sys/hypervisor/type", missing)
    if xen and xen.strip():
        signals.append(f"/sys/hypervisor/type {xen.strip()[:40]}")
    dmi = [(_text(host, f"/sys/class/dmi/id/{name}", missing) or "").strip()
           for name in ("sys_vendor", "product_name")]
    if not dmi[1].endswith(".metal"):  # an EC2 bare-metal instance keeps the vendor string
        hit = next((d for d in dmi if d and any(w in d.lower() for w in VM_DMI)), None)
        if hit:
            signals.append(f"dmi {hit[:60]}")
    read_any = cpuinfo is not None or any(dmi)
    vm = True if signals else (False if read_any else None)
    return Virtualization(virtual_machine=vm, signals=tuple(signals), missing=missing)
