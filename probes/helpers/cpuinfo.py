"""``/proc/cpuinfo`` read as the kernel writes it: the CPU model, cores, sockets and flags.

Read by host.cpu and host.memory_bandwidth (its threads, and the instructions STREAM may
use). Source: ``/proc/cpuinfo`` (each architecture's show_cpuinfo()). No root needed.
Manual equivalent: ``lscpu``.
"""

from __future__ import annotations

from probes.helpers.kernel_text import MalformedError


def parse_cpuinfo(text: str, path: str = "/proc/cpuinfo"
                  ) -> tuple[str, int | None, int | None, set[str]]:
    """model name, physical cores, sockets, and the flags of the first CPU.

    A cpuinfo with no ``processor`` entry is not one (every architecture's show_cpuinfo()
    prints it): MalformedError.
    """
    model, flags = "unknown", set[str]()
    cores: set[tuple[str | None, str]] = set()
    sockets: set[str] = set()
    physical = None
    processors = 0
    for line in text.splitlines():
        key, _, value = (part.strip() for part in line.partition(":"))
        if key == "processor":
            processors += 1
        elif key in ("model name", "Model", "cpu model") and model == "unknown":
            model = value or "unknown"
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
        elif key == "physical id":
            physical = value
            sockets.add(value)
        elif key == "core id":
            cores.add((physical, value))
    if not processors:
        raise MalformedError(path, "no 'processor' entry: not a /proc/cpuinfo")
    return model, len(cores) or None, len(sockets) or None, flags
