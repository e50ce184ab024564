"""One step builder per cause: a finding of a saved scan in, a step (or why none) out.

``BUILDERS`` maps the causes with a machine-side fix to the function that writes its step;
``NO_STEP`` says, for every other cause of the vocabulary, why the plan holds no command
for it (tests/test_fix_catalogue.py checks that each cause is in exactly one of them). A
builder reads the finding (a ``SavedFinding``: its rule, cause and key are the reader's
strings) and its evidence and, where the evidence is not enough, the probe data the saved
scan carries (``Scan.data``); it never reads the host. The evidence and the probe data are
the scan's own shapes, so their values are still guarded here.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Callable

from doctor.fix.model import Command, FileWrite, FlagDiff, Kind, LiveWrite, NoStep, Risk, Step
from doctor.fix.saved import Scan, dicts_in, header, integer
from doctor.fix.text import input_text, label
from doctor.i18n import lazy, t, translated
from doctor.saved_scan import SavedFinding

NOFILE = 1048576   # the playbook's value: every connection and weight shard holds one
NPROC = 65536
SOMAXCONN = 4096
SYN_BACKLOG = 4096
SOCKET_BUFFER_BYTES = 16777216
SWAPPINESS = 1
GPU_MEMORY_FRACTION = "0.90"   # 000 §4.2: keep 8-12 % free
SGLANG_MEM_FRACTION = "0.85"
DEV_CHAR_LINKS = ("nvidia-ctk", "system", "create-dev-char-symlinks", "--create-all")
DEV_CHAR_RULE_PATH = "/etc/udev/rules.d/71-llm-doctor-nvidia-dev-char.rules"
SYSCTL_PATH = "/etc/sysctl.d/60-llm-doctor-{name}.conf"  # name: one of the catalogue's, never input
UNIT_DIR = "/etc/systemd/system/"
# The limits of what a saved scan may claim: Linux's own (NR_CPUS is at most 8192, x86_64
# MAXSMP) and NVML's device indexes (a host's GPUs, with room for a large NVSwitch system).
MAX_CPUS = 8192
MAX_GPUS = 64
MAX_WATTS = 10000   # above any board's limit (a B200 is 1000 W); a larger value is not a reading
# systemd's unit names (systemd.unit(5)): letters, digits, ":_.-" and one "@" before an
# instance, at most 255 characters with the suffix; not starting with "-" or "." (a
# command that names it would read an option, or a hidden file)
UNIT = re.compile(r"(?=.{1,255}$)[A-Za-z0-9_:][A-Za-z0-9_.:-]*(?:@[A-Za-z0-9_.:-]+)?\.service")
CGROUP = re.compile(r"/[A-Za-z0-9_.:@/=+-]{0,400}")


Built = Step | str  # a step, or why this finding gets none
Builder = Callable[[SavedFinding, Scan, str], Built]


def _step(finding: SavedFinding, kind: Kind, risk: Risk, title: str, check: str, verify: str,
          revert: str, **parts) -> Step:
    return Step(id="", rule=input_text(finding.rule), key=input_text(finding.key),
                cause=finding.cause, kind=kind, risk=risk, title=title, check=check,
                verify=verify, revert=revert, **parts)


def _sysctl_step(finding: SavedFinding, scan: Scan, name: str, wanted: list[tuple[str, int | None, int]],
                 lower: bool = False, probe: str = "host.sysctl") -> Built:
    """A sysctl.d file named for ``name`` (the catalogue's: a file's path is never built from
    the scan) with the settings short of ``wanted`` (below it, or above it when ``lower``)
    and their live values."""
    low = [(name, seen, new) for name, seen, new in wanted
           if seen is None or (seen > new if lower else seen < new)]
    if not low:
        return t("the evidence shows no setting below the value the plan would set")
    path = SYSCTL_PATH.format(name=name)
    body = "".join(f"{name} = {new}\n" for name, _, new in low)
    live = tuple(LiveWrite("/proc/sys/" + name.replace(".", "/"), name,
                           None if seen is None else str(seen), str(new)) for name, seen, new in low)
    names = ", ".join(name for name, _, _ in low)
    return _step(finding, Kind.FILE, Risk.NONE, t("Set {names} now and at every boot", names=names),
                 check=t("sysctl {keys} shows the new values and {path} holds them",
                         keys=" ".join(n for n, _, _ in low), path=path),
                 verify=t("a scan of {probe} no longer raises the finding", probe=probe),
                 revert=t("delete {path} and write the saved live values back", path=path),
                 files=(FileWrite(path, header(finding, scan) + body),), live=live)


def network_backlog(finding: SavedFinding, scan: Scan, date: str) -> Built:
    sysctl = scan.data("host.sysctl")
    if finding.rule == "network-socket-buffers-default":
        return _sysctl_step(finding, scan, "network-socket-buffers-default", [
            ("net.core.rmem_max", integer(sysctl.get("net_core_rmem_max_bytes")), SOCKET_BUFFER_BYTES),
            ("net.core.wmem_max", integer(sysctl.get("net_core_wmem_max_bytes")), SOCKET_BUFFER_BYTES)])
    evidence = finding.evidence
    return _sysctl_step(finding, scan, "network-backlog-small", [
        ("net.core.somaxconn", integer(evidence.get("somaxconn")), SOMAXCONN),
        ("net.ipv4.tcp_max_syn_backlog", integer(evidence.get("syn_backlog")), SYN_BACKLOG)])


def swap(finding: SavedFinding, scan: Scan, date: str) -> Built:
    if finding.rule != "swap-swappiness-high":
        return _manual(finding, [
            t("Find what is swapped out: `grep VmSwap /proc/*/status | sort -k2 -n | tail`."),
            t("Give the host memory back (stop or move that process), then pull pages back in "
              "with `swapoff -a && swapon -a` in a quiet hour: it stalls the host while it runs."),
        ], Risk.DISRUPTIVE, t("Swap in use: free memory, then bring the pages back"))
    return _sysctl_step(finding, scan, "swap-swappiness-high", [
        ("vm.swappiness", integer(finding.evidence.get("swappiness")), SWAPPINESS)], lower=True)


def numa_balancing(finding: SavedFinding, scan: Scan, date: str) -> Built:
    """kernel.numa_balancing = 0, as AMD's MI300X tuning guide sets it (amd.host's reading)."""
    return _sysctl_step(finding, scan, "numa-balancing-on", [
        ("kernel.numa_balancing", integer(finding.evidence.get("numa_balancing")), 0)],
        lower=True, probe="amd.host")


def governor(finding: SavedFinding, scan: Scan, date: str) -> Built:
    cpus = dicts_in(scan.data("host.cpu").get("cpus"))
    if len(cpus) > MAX_CPUS:
        return t("the saved scan lists {n} CPUs, more than Linux's limit of {max}",
                 n=len(cpus), max=MAX_CPUS)
    base = "/sys/devices/system/cpu/cpu{}/cpufreq/"
    live = []
    seen: set[int] = set()
    for cpu in cpus:
        n = integer(cpu.get("cpu"), 0, MAX_CPUS - 1)
        if n is None or n in seen:  # once per CPU, whatever the scan repeats
            continue
        seen.add(n)
        if cpu.get("governor") not in (None, "performance"):
            live.append(LiveWrite(base.format(n) + "scaling_governor", f"cpu{n} scaling_governor",
                                  input_text(cpu["governor"]), "performance"))
        if cpu.get("energy_preference") not in (None, "performance"):
            live.append(LiveWrite(base.format(n) + "energy_performance_preference",
                                  f"cpu{n} energy_performance_preference",
                                  input_text(cpu["energy_preference"]), "performance"))
    if not live:
        return t("the saved scan has no per-CPU governor readings (host.cpu's cpus) to change")
    return _step(finding, Kind.LIVE, Risk.NONE,
                 t("Set the performance governor and energy preference on {n} CPUs", n=len(cpus)),
                 check="cat /sys/devices/system/cpu/cpu*/cpufreq/scaling_governor | sort | uniq -c",
                 verify=t("a scan of host.cpu no longer raises the finding"),
                 revert=t("write each CPU's saved governor and energy preference back"),
                 live=tuple(live),
                 manual=(t("It lasts until the next boot: set the BIOS power profile to performance "
                           "(or the distribution's cpupower service) to keep it."),))


def _engine_unit(scan: Scan, pid: int | None) -> tuple[str | None, str | None]:
    """(systemd unit, container cgroup) of the engine with ``pid``, from engine.container.

    The unit names a folder under /etc/systemd/system: it is taken only when it is a unit
    name by systemd's grammar (no "/", no leading "." or "-") and the drop-in's path stays
    in that folder; the cgroup is shown to a person, as a label."""
    for engine in scan.engines(pid):
        found = engine.get("cgroup")
        cgroup = found if isinstance(found, str) else ""
        last = cgroup.rstrip("/").rsplit("/", 1)[-1]
        if re.fullmatch(r"docker-[0-9a-f]{12,64}\.scope", last) or "/docker/" in cgroup:
            return None, cgroup if CGROUP.fullmatch(cgroup) else label(cgroup)
        if UNIT.fullmatch(last) and not last.startswith(("user@", "session-")) \
                and _drop_in_dir(last).startswith(UNIT_DIR):
            return last, None
    return None, None


def _drop_in_dir(unit: str) -> str:
    return posixpath.normpath(UNIT_DIR + unit + ".d") + "/"


def _pid_of(text: object) -> int | None:
    match = re.search(r"\bpid ([0-9]{1,10})\b", text) if isinstance(text, str) else None
    return int(match.group(1)) if match else None


def _dev_char_guard(scan: Scan) -> tuple[Command, ...]:
    """nvidia-ctk's links first where they are missing: without them a daemon-reload drops
    the device rules of every GPU container (the NVIDIA container toolkit's known issue)."""
    missing = scan.data("gpu.devices").get("char_links_missing")
    if scan.has_finding("gpu-dev-char-links-missing") or (isinstance(missing, list) and missing):
        why = t("the /dev/char links to the NVIDIA devices are missing: "
                "without them the daemon-reload detaches the GPUs from running containers")
        return (Command(DEV_CHAR_LINKS, (), why),)
    return ()


def limit(finding: SavedFinding, scan: Scan, date: str) -> Built:
    evidence = finding.evidence
    nofile = finding.cause == "fd-limit-low"
    directive, value = ("LimitNOFILE", NOFILE) if nofile else ("LimitNPROC", NPROC)
    item = "nofile" if nofile else "nproc"
    pid = _pid_of(evidence.get("process"))
    if evidence.get("role") == "engine" or finding.key.startswith("engine "):
        unit, container = _engine_unit(scan, pid)
        if container:
            return _manual(finding, [
                t("The engine runs in a container ({container}): start it with "
                  "`--ulimit {item}={value}:{value}` (docker run, or `ulimits:` in compose) and "
                  "restart it when traffic allows.", container=container, item=item, value=value)],
                Risk.RESTARTS_ENGINE, t("Raise the container's {item} limit at its next start", item=item))
        if unit is None:
            return _manual(finding, [
                t("The engine (pid {pid}) runs under no systemd unit llm-doctor can name: raise "
                  "the limit in the shell or script that starts it (`ulimit -{letter} {value}`) "
                  "and restart it.", pid=pid, letter="n" if nofile else "u", value=value)],
                Risk.RESTARTS_ENGINE, t("Raise the engine's {item} limit where it starts", item=item))
        path = _drop_in_dir(unit) + "llm-doctor.conf"
        body = f"[Service]\n{directive}={value}\n"
        return _step(finding, Kind.FILE, Risk.RESTARTS_ENGINE,
                     t("{directive}={value} for {unit} in a drop-in; it takes at the engine's next restart",
                       directive=directive, value=value, unit=unit),
                     check=t("systemctl show {unit} -p {directive} shows {value}", unit=unit,
                             directive=directive, value=value),
                     verify=t("after `systemctl restart {unit}`: grep 'Max open files' "
                              "/proc/$(systemctl show -p MainPID --value {unit})/limits", unit=unit),
                     revert=t("delete {path}, then systemctl daemon-reload", path=path),
                     files=(FileWrite(path, header(finding, scan) + body),),
                     commands=_dev_char_guard(scan) + (Command(("systemctl", "daemon-reload"), ("systemctl", "daemon-reload"),
                                                               t("systemd reads the drop-in")),),
                     manual=(t("Restart the engine when traffic allows: `systemctl restart {unit}`.", unit=unit),),
                     restart_to_take=True)
    path = "/etc/security/limits.d/60-llm-doctor.conf"
    body = f"*    soft    {item}    {value}\n*    hard    {item}    {value}\n"
    return _step(finding, Kind.FILE, Risk.NONE,
                 t("{item} {value} for new login sessions (pam_limits)", item=item, value=value),
                 check=f"grep {item} {path}",
                 verify=t("in a new login shell: ulimit -{letter}", letter="n" if nofile else "u"),
                 revert=t("delete {path}", path=path), files=(FileWrite(path, header(finding, scan) + body),),
                 manual=(t("It takes in new login sessions: log in again before starting the engine."),),
                 restart_to_take=True)


def memlock(finding: SavedFinding, scan: Scan, date: str) -> Built:
    """LimitMEMLOCK=infinity for an engine on an RDMA host (rdma-memlock-low fires for
    engines only): its unit's drop-in, or what to change where no unit is known."""
    pid = _pid_of(finding.evidence.get("process"))
    unit, container = _engine_unit(scan, pid)
    if container:
        return _manual(finding, [
            t("The engine runs in a container ({container}): start it with `--ulimit "
              "memlock=-1:-1` (docker run, or `ulimits:` in compose) and restart it when traffic "
              "allows.", container=container)],
            Risk.RESTARTS_ENGINE, t("Raise the container's locked-memory limit at its next start"))
    if unit is None:
        return _manual(finding, [
            t("The engine (pid {pid}) runs under no systemd unit llm-doctor can name: raise the "
              "limit in the shell or script that starts it (`ulimit -l unlimited`) and restart it.",
              pid=pid)],
            Risk.RESTARTS_ENGINE, t("Raise the engine's locked-memory limit where it starts"))
    path = _drop_in_dir(unit) + "llm-doctor.conf"
    directive, value = "LimitMEMLOCK", "infinity"
    return _step(finding, Kind.FILE, Risk.RESTARTS_ENGINE,
                 t("{directive}={value} for {unit} in a drop-in; it takes at the engine's next restart",
                   directive=directive, value=value, unit=unit),
                 check=t("systemctl show {unit} -p {directive} shows {value}", unit=unit,
                         directive=directive, value=value),
                 verify=t("after `systemctl restart {unit}`: grep 'Max locked memory' "
                          "/proc/$(systemctl show -p MainPID --value {unit})/limits", unit=unit),
                 revert=t("delete {path}, then systemctl daemon-reload", path=path),
                 files=(FileWrite(path, header(finding, scan) + f"[Service]\n{directive}={value}\n"),),
                 commands=_dev_char_guard(scan) + (Command(("systemctl", "daemon-reload"), ("systemctl", "daemon-reload"),
                                                           t("systemd reads the drop-in")),),
                 manual=(t("Restart the engine when traffic allows: `systemctl restart {unit}`.", unit=unit),),
                 restart_to_take=True)


def _gpus(text: object) -> list[str]:
    """The GPU indexes a finding names ("0,1", "0 1"): ASCII digits (str.isdigit takes "²"
    and "٣"), each once, at most MAX_GPUS."""
    found = re.findall(r"(?<![^,\s])[0-9]{1,2}(?![^,\s])", text[:4096]) if isinstance(text, str) else []
    return list(dict.fromkeys(g.lstrip("0") or "0" for g in found if int(g) < MAX_GPUS))


def persistence(finding: SavedFinding, scan: Scan, date: str) -> Built:
    gpus = _gpus(finding.evidence.get("gpus"))
    if not gpus:
        return t("the finding names no GPU index")
    ids = ",".join(gpus)
    return _step(finding, Kind.LIVE, Risk.NONE, t("Persistence mode on for GPU {ids}", ids=ids),
                 check=t("nvidia-smi -i {ids} --query-gpu=persistence_mode --format=csv,noheader shows Enabled",
                         ids=ids),
                 verify=t("a scan of gpu.inventory no longer raises the finding"),
                 revert=f"nvidia-smi -i {ids} -pm 0",
                 commands=(Command(("nvidia-smi", "-i", ids, "-pm", "1"), ("nvidia-smi", "-i", ids, "-pm", "0"),
                                   t("the driver keeps the GPU state between clients")),),
                 manual=(t("To keep it across reboots: `systemctl enable --now nvidia-persistenced`."),))


def power_cap(finding: SavedFinding, scan: Scan, date: str) -> Built:
    evidence = finding.evidence
    gpu, now, default = evidence.get("gpu"), evidence.get("power_limit_w"), evidence.get("power_default_limit_w")
    if integer(gpu, 0, MAX_GPUS - 1) is None or not (_watts(now) and _watts(default)):
        return t("the finding lacks the GPU index or its limits")
    watts, old = f"{default:g}", f"{now:g}"
    amd = dicts_in(scan.data("amd.gpu").get("gpus"))
    if amd and dicts_in(scan.data("gpu.thermal_power").get("gpus")):
        return t("this host has NVIDIA and AMD GPUs and the finding does not say whose GPU{gpu} "
                 "it is: set the limit by hand (the playbook)", gpu=gpu)
    if amd:  # issue 33: the same rule on an AMD host (amd.gpu)
        return _step(finding, Kind.LIVE, Risk.NONE,
                     t("GPU{gpu}: power limit {old} W back to its default {watts} W", gpu=gpu, old=old, watts=watts),
                     check=t("amd-smi static --limit -g {gpu} shows a {watts} W cap", gpu=gpu, watts=watts),
                     verify=t("a scan of {probe} no longer raises the finding", probe="amd.gpu"),
                     revert=f"amd-smi set -g {gpu} --power-cap {old}",
                     commands=(Command(("amd-smi", "set", "-g", str(gpu), "--power-cap", watts),
                                       ("amd-smi", "set", "-g", str(gpu), "--power-cap", old),
                                       t("the board's default limit")),),
                     manual=(t("Remove the cap from whatever set it (boot scripts, DCGM or BMC policy) or it returns."),))
    return _step(finding, Kind.LIVE, Risk.NONE,
                 t("GPU{gpu}: power limit {old} W back to its default {watts} W", gpu=gpu, old=old, watts=watts),
                 check=t("nvidia-smi -i {gpu} --query-gpu=power.limit --format=csv,noheader shows {watts} W",
                         gpu=gpu, watts=watts),
                 verify=t("a scan of gpu.thermal_power no longer raises the finding"),
                 revert=f"nvidia-smi -i {gpu} -pl {old}",
                 commands=(Command(("nvidia-smi", "-i", str(gpu), "-pl", watts), ("nvidia-smi", "-i", str(gpu), "-pl", old),
                                   t("the board's default limit")),),
                 manual=(t("Remove the cap from whatever set it (boot scripts, DCGM or BMC policy) or it returns."),))


def _watts(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and 0 < value < MAX_WATTS


def _engine_where(scan: Scan, finding: SavedFinding) -> tuple[str, str]:
    engine = label(finding.evidence.get("engine") or finding.key) or t("the engine")
    unit, container = _engine_unit(scan, _pid_of(engine))  # the label keeps "pid N" as it was
    if unit:
        return engine, t("ExecStart= of {unit} (`systemctl cat {unit}`); edit with `systemctl edit {unit}`",
                         unit=unit)
    if container:
        return engine, t("the container's command ({container}): its compose file or `docker run` line",
                         container=container)
    return engine, t("the command line that starts the engine")


def engine_flag(finding: SavedFinding, scan: Scan, date: str) -> Built:
    engine, where = _engine_where(scan, finding)
    sglang = engine.startswith("sglang")
    if finding.cause == "cuda-graphs-disabled":
        remove: tuple[str, ...] = ("--disable-cuda-graph",) if sglang else ("--enforce-eager",)
        add: tuple[str, ...] = ()
        title = t("Drop {flag}: CUDA graphs back on", flag=remove[0])
    else:
        seen = finding.evidence.get("gpu_memory_utilization")
        flag, value = (("--mem-fraction-static", SGLANG_MEM_FRACTION) if sglang
                       else ("--gpu-memory-utilization", GPU_MEMORY_FRACTION))
        fraction = isinstance(seen, (int, float)) and not isinstance(seen, bool) and 0 <= seen <= 1
        remove = (flag, f"{seen:g}") if fraction else (flag,)
        add = (flag, value)
        title = t("{flag} {value}: leave headroom", flag=flag, value=value)
    return _step(finding, Kind.ENGINE_FLAG, Risk.RESTARTS_ENGINE, title,
                 check=t("the engine's argv (`tr '\\0' ' ' < /proc/PID/cmdline`)"),
                 verify=t("after the engine's restart a scan of engine.discovery no longer raises the finding"),
                 revert=t("put the removed flags back and restart the engine"),
                 flags=FlagDiff(engine, remove, add, where),
                 manual=(t("llm-doctor edits no engine flag and restarts nothing: make the change "
                           "in {where}, then restart the engine when traffic allows.", where=where),))


def unified_fraction(finding: SavedFinding, scan: Scan, date: str) -> Built:
    """The fraction unified-memory-overcommit suggests (the host's room less its reserve,
    over MemTotal), in place of the engine's: a flag change, as for gpu-memory-no-headroom."""
    engine, where = _engine_where(scan, finding)
    flag = "--mem-fraction-static" if engine.startswith("sglang") else "--gpu-memory-utilization"
    seen, wanted = finding.evidence.get("fraction"), finding.evidence.get("suggested")
    try:
        value = float(wanted) if isinstance(wanted, str) and len(wanted) < 12 else math.nan
    except ValueError:
        value = math.nan
    if not 0.05 <= value <= 0.95:  # also refuses NaN: a saved scan may say anything
        return t("no fraction to suggest: the host has too little memory available for the engine")
    valid = isinstance(seen, (int, float)) and not isinstance(seen, bool) and 0 < seen <= 1
    given = valid and finding.evidence.get("source") != "vLLM default"
    remove = (flag, f"{seen:g}") if given else (flag,)
    return _step(finding, Kind.ENGINE_FLAG, Risk.RESTARTS_ENGINE,
                 t("{flag} {value}: leave the host its memory", flag=flag, value=f"{value:g}"),
                 check=t("the engine's argv (`tr '\\0' ' ' < /proc/PID/cmdline`)"),
                 verify=t("after the engine's restart a scan of gpu.unified_memory no longer raises the finding"),
                 revert=t("put the removed flags back and restart the engine"),
                 flags=FlagDiff(engine, remove, (flag, f"{value:g}"), where),
                 manual=(t("llm-doctor edits no engine flag and restarts nothing: make the change "
                           "in {where}, then restart the engine when traffic allows.", where=where),))


def dev_char(finding: SavedFinding, scan: Scan, date: str) -> Built:
    if finding.rule != "gpu-dev-char-links-missing":
        return t("the engine lost its GPUs inside its container: restart the container after "
                 "fixing the cause (gpu-dev-char-links-missing's step, where the scan raises it)")
    rule = ('ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", '
            'RUN+="/usr/bin/nvidia-ctk system create-dev-char-symlinks --create-all"\n')
    return _step(finding, Kind.FILE, Risk.NONE,
                 t("Create the /dev/char links to the NVIDIA devices, now and at every boot"),
                 check=t("ls -l /dev/char | grep nvidia shows a link per device"),
                 verify=t("a scan of gpu.devices no longer raises the finding"),
                 revert=t("delete {path} (links already made stay: they are harmless)", path=DEV_CHAR_RULE_PATH),
                 files=(FileWrite(DEV_CHAR_RULE_PATH, header(finding, scan) + rule),),
                 commands=(Command(DEV_CHAR_LINKS, (), t("the links, now")),))


def _manual(finding: SavedFinding, items: list[str], risk: Risk, title: str) -> Step:
    """``items`` and ``title`` in the current language, or literals marked with ``lazy``
    (the module's tables), translated here."""
    return _step(finding, Kind.MANUAL, risk, translated(title), check=t("see the playbook's Confirm section"),
                 verify=t("scan again after the change"), revert=t("undo the change by hand"),
                 manual=tuple(translated(item) for item in items))


def manual(items: list[str], risk: Risk, title: str) -> Builder:
    return lambda finding, scan, date: _manual(finding, items, risk, title)


def on_a_vm(finding: SavedFinding, scan: Scan) -> bool:
    """Whether the scanned host is a virtual machine (host.cpu's reading, or the finding's
    own ``on_vm``): its cards, slots, DIMMs and fans are the provider's, out of reach."""
    return scan.data("host.cpu").get("virtual_machine") is True or finding.evidence.get("on_vm") is True


def hands_on(items: list[str], risk: Risk, title: str) -> Builder:
    """A checklist for hands on the machine, or, on a virtual machine, no step and why: a
    reseat, a slot or a DIMM cannot be changed from inside one."""
    def build(finding: SavedFinding, scan: Scan, date: str) -> Built:
        if on_a_vm(finding, scan):
            return t("this host is a virtual machine: its cards, slots, memory and cooling are the "
                     "provider's; ask the provider, or move to another instance")
        return _manual(finding, items, risk, title)
    return build


_RESEAT_CARD = hands_on([
    lazy("Drain the host, power it off, reseat the card (and its riser) in its slot."),
    lazy("Check the BIOS PCIe generation setting for that slot (Auto or the card's generation)."),
], Risk.DISRUPTIVE, lazy("Reseat the card: its link trained below its capability"))
_MODULE_LINK = hands_on([
    lazy("Check the BIOS PCIe settings of the GPU's root port (generation Auto or the GPU's, "
         "no forced bifurcation)."),
    lazy("The GPU is a module on its baseboard (SXM or OAM, or a superchip): it is not reseated by hand. "
         "Open a case with the server vendor with the link's width and generation "
         "(`nvidia-smi -q -d PCIE` during a copy; AMD: `amd-smi metric --pcie` while it works) "
         "and the GPU's serial (`nvidia-smi -q | grep -i serial`; AMD: `amd-smi static --asic`)."),
], Risk.DISRUPTIVE, lazy("A GPU module's link trained below its capability: BIOS, then the server vendor"))


def link_hands_on(finding: SavedFinding, scan: Scan, date: str) -> Built:
    """pcie-link-degraded: a card is reseated by hand; a module (SXM, a superchip's board) is
    the server vendor's to remount, so its checklist asks for a case, not a reseat."""
    if finding.evidence.get("form_factor") == "module":
        return _MODULE_LINK(finding, scan, date)
    return _RESEAT_CARD(finding, scan, date)


def fabric_manager(finding: SavedFinding, scan: Scan, date: str) -> Built:
    """Start the fabric manager where it is this host's to run: where gpu.fabric found the
    NVSwitches on this host's PCI bus, or could not tell. A GB200/GB300 compute tray (no
    NVSwitch on its bus, the manager not judged) has its fabric trained from the switch
    trays: no service here to start, so no step, and why."""
    fabric = scan.data("gpu.fabric")
    if fabric.get("nvswitches") == 0 and fabric.get("manager_running") is None:
        return t("no NVSwitch on this host's PCI bus (a GB200/GB300 compute tray), or its daemons "
                 "not visible from here: the fabric is trained from the switch trays' NVLink "
                 "management (NMX), not by a fabric manager on this host; the playbook's tray "
                 "section says what to check")
    return _manual(finding, [
        t("`systemctl enable --now nvidia-fabricmanager` (its version must match the driver's), "
          "then restart the engines; a fabric that stays down needs the vendor."),
    ], Risk.RESTARTS_ENGINE, t("Start the fabric manager"))


def p2p(finding: SavedFinding, scan: Scan, date: str) -> Built:
    return _manual(finding, [
        t("If a bridge above the GPUs has ACS redirect on: turn ACS off in the BIOS "
          "(PCIe ACS / 'ACS Control'); a reboot."),
        t("If the IOMMU is not in passthrough: add `iommu=pt` (Intel also `intel_iommu=on`) to "
          "GRUB_CMDLINE_LINUX in /etc/default/grub, `update-grub`, reboot."),
        t("If NCCL_P2P_DISABLE or --disable-custom-all-reduce is set for the engine: remove it "
          "from the engine's environment or argv and restart it."),
    ], Risk.NEEDS_REBOOT, t("P2P between the GPUs: BIOS, kernel command line or engine settings"))


BUILDERS: dict[str, Builder] = {
    "network-backlog-small": network_backlog,
    "numa-balancing-on": numa_balancing,  # issue 33
    # issue 33: the kernel command line is a checklist, never written by llm-doctor
    "iommu-not-passthrough": manual([
        lazy("Add `iommu=pt` to GRUB_CMDLINE_LINUX in /etc/default/grub (keep `amd_iommu=on` if it is there)."),
        lazy("Regenerate the boot configuration: `sudo update-grub` (Debian, Ubuntu) or "
             "`sudo grub2-mkconfig -o /boot/grub2/grub.cfg`."),
        lazy("Reboot in a maintenance window, then check `cat /proc/cmdline` shows iommu=pt."),
    ], Risk.NEEDS_REBOOT, lazy("Put the IOMMU in passthrough (kernel command line)")),
    "swap-active": swap,
    "cpu-powersave-governor": governor,
    "fd-limit-low": limit,
    "process-limit-low": limit,
    "gpu-persistence-mode-off": persistence,
    "gpu-power-capped": power_cap,
    "cuda-graphs-disabled": engine_flag,
    "gpu-memory-no-headroom": engine_flag,
    "gpu-lost-in-container": dev_char,
    "gpu-p2p-blocked": p2p,
    "pcie-link-degraded": link_hands_on,
    "pcie-topology-shared-path": hands_on([
        lazy("Move the GPUs that talk to each other behind separate CPU root ports (another slot), "
             "or run one engine instance per GPU."),
    ], Risk.DISRUPTIVE, lazy("Change the slots of the GPUs (hands on the machine)")),
    "nvswitch-fabric-down": fabric_manager,
    "gpu-hardware-errors": manual([
        lazy("Drain the GPU, then `nvidia-smi -i GPU -r` (no process may hold it) or reboot; "
             "repeated errors or a lost GPU: open a case with the vendor (RMA)."),
    ], Risk.DISRUPTIVE, lazy("Drain and reset the GPU, or replace it")),
    "host-memory-bandwidth-low": hands_on([
        lazy("Populate every memory channel with matched DIMMs at the rated speed, and check the "
             "BIOS memory frequency (dmidecode -t memory shows the configured speed)."),
    ], Risk.DISRUPTIVE, lazy("Memory population or speed (hands on the machine)")),
    "gpu-thermal-throttling": hands_on([
        lazy("Check the fans, the airflow and the room: clean the filters, close blanking panels; "
             "the card should stay near 70 °C under load."),
    ], Risk.NONE, lazy("Cooling (hands on the machine)")),
    "mig-mps-misconfigured": manual([
        lazy("Change the MIG layout or stop the MPS daemon in a maintenance window "
             "(`nvidia-smi mig -dci/-dgi`, `echo quit | nvidia-cuda-mps-control`): every process on "
             "the GPU stops."),
    ], Risk.DISRUPTIVE, lazy("MIG or MPS in the way: change the layout")),
    # issue 30, net-gdr
    "gpudirect-rdma-off": manual([
        lazy("Load the peer-memory module: `modprobe nvidia-peermem` and "
             "`echo nvidia-peermem > /etc/modules-load.d/nvidia-peermem.conf`; if it fails with "
             "`Unknown symbol ib_register_peer_memory_client`, install MLNX_OFED/DOCA-OFED before "
             "the driver, or take the dma-buf path (the driver's open kernel module on Linux 5.12+)."),
        lazy("Restart the engines, and look for `GPU Direct RDMA Enabled` in an NCCL_DEBUG=INFO log."),
    ], Risk.RESTARTS_ENGINE, lazy("Give NCCL a GPUDirect RDMA path")),
    "rdma-memlock-low": memlock,
    "nic-far-from-gpu": hands_on([
        lazy("Move an RDMA NIC (or the GPU) into a slot under the same CPU socket, best behind the "
             "same PCIe switch (the server's block diagram says which); until then, serve "
             "multi-node ranks from the GPUs with a NIC near."),
    ], Risk.DISRUPTIVE, lazy("Change the slot of the NIC or the GPU (hands on the machine)")),
    # issue 32, gpu.cdi: the spec is regenerated where it lives, then the GPU containers restart
    "unified-memory-overcommit": unified_fraction,
    "cdi-spec-stale": manual([
        lazy("Regenerate the spec the finding names for the running driver and GPUs: "
             "`sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml` (or the finding's path); "
             "`nvidia-ctk cdi list` must name the GPUs `nvidia-smi -L` lists."),
        lazy("With NVIDIA Container Toolkit 1.18 or later, `sudo systemctl enable --now "
             "nvidia-cdi-refresh.path nvidia-cdi-refresh.service` keeps /var/run/cdi/nvidia.yaml "
             "current at every driver install; then delete a hand-made copy in /etc/cdi."),
        lazy("Restart the GPU containers: those started before keep the old driver's files."),
    ], Risk.RESTARTS_ENGINE, lazy("Regenerate the CDI spec")),
    # issue 32 item 8: the IMEX daemon and its default channel on a multi-node NVLink domain
    "imex-domain-not-ready": manual([
        lazy("Start IMEX on every node of the domain, with the same /etc/nvidia-imex/nodes_config.cfg "
             "on each: `sudo systemctl enable --now nvidia-imex`; `nvidia-imex-ctl -N` must show "
             "every node READY."),
        lazy("Create the default channel: `sudo nvidia-modprobe -i 0:1` now, and "
             "`options nvidia NVreg_CreateImexChannel0=1` in /etc/modprobe.d/ for the next boot."),
        lazy("Restart the engines that span trays: those started before have no channel."),
    ], Risk.RESTARTS_ENGINE, lazy("Start IMEX and create its channel")),
}

# Causes whose step is made from the scan alone, whatever the finding says (the governor of
# every CPU): a plan holds one, and a second finding of the cause is not built again (20,000
# findings each building 256 live writes took 160 s).
ONCE_PER_SCAN = frozenset({"cpu-powersave-governor"})

_ENGINE = lazy("an engine setting to review with the workload's owner; the playbook names the flag")
_NCCL_ENV = lazy("every rank's environment, the same on every host, and a restart of the whole group: the playbook names the variable")
NO_STEP: dict[str, str] = {
    "gpu-power-throttling": lazy("the power brake or board limit is the hardware's or the BMC's: the playbook says where to look"),
    "nvlink-domain-unhealthy": lazy("the fabric's partition and routes are the rack's NVLink management's (NMX on the switch trays): drain the tray first; the playbook says what to check before a GPU reset"),
    "pcie-bandwidth-low": lazy("a measurement: fix the link or topology finding it comes with"),
    "gpu-memory-bandwidth-low": lazy("a measurement: look at the thermal, power and hardware-error findings beside it"),
    "gpu-memory-held-by-other-process": lazy("another process holds the memory: which one may stop is the owner's call"),
    "cpu-contention": lazy("another workload takes the CPU: moving or stopping it is the owner's call"),
    "verbose-logging": _ENGINE,
    "kv-cache-pressure": _ENGINE,
    "kv-cache-fragmentation": _ENGINE,
    "engine-preemption": _ENGINE,
    "engine-not-warmed-up": lazy("a warm-up before traffic: `llm-doctor warmup --endpoint URL`, in the deployment"),
    "model-on-slow-disk": lazy("moving the weights to another disk is a data move to plan"),
    "model-does-not-fit": lazy("a model, quantization or GPU count choice"),
    "context-oversized": _ENGINE,
    "batch-token-budget-small": _ENGINE,
    "past-throughput-knee": lazy("the offered load: scale out or cap concurrency in front of the engine"),
    "multi-gpu-load-skew": lazy("routing between replicas: the load balancer's configuration"),
    "output-repetition": lazy("sampling parameters of the clients' requests"),
    "endpoint-unauthenticated": lazy("an API key or a bind address for the engine: a deployment change to review"),
    "shm-too-small": lazy("the container's --shm-size or --ipc=host: a deployment change to review"),
    "driver-runtime-mismatch": lazy("a driver or engine image upgrade, planned with the vendor's matrix"),
    "model-offloaded-to-cpu": _ENGINE,
    "cpu-quota-throttled": lazy("the container's CPU quota: a deployment change to review"),
    "frontend-cpu-bound": _ENGINE,
    "too-few-slots": _ENGINE,
    "model-reload-thrash": _ENGINE,
    "prompt-truncation": _ENGINE,
    "model-on-network-fs": lazy("moving the weights to a local disk is a data move to plan"),
    "memory-cgroup-oom": lazy("the container's memory limit: a deployment change to review"),
    "numa-misplaced": lazy("the engine's CPU and memory binding (numactl, cpuset): a deployment change to review"),
    "slow-quant-kernel": _ENGINE,
    "engine-unreachable": lazy("the engine is down or not an engine: see its playbook first; nothing to change on the host"),
    # issue 30, net.rdma: the fault is in the fabric's hardware
    "rdma-port-down": lazy("a cable, transceiver, switch port or subnet manager to fix by hand: the playbook says which"),
    "rdma-link-degraded": lazy("a cable, transceiver or switch port setting to replace or correct by hand"),
    "rdma-link-errors": lazy("a cable or transceiver to clean or replace by hand, or congestion on the fabric"),
    # the network NCCL and gloo use between hosts (checks/net_nccl.toml): every rank's
    # environment or the fabric, on every host at once, never one host's command
    "nccl-interface-wrong": _NCCL_ENV,
    "nccl-ib-disabled": _NCCL_ENV,
    "roce-gid-index-wrong": _NCCL_ENV,
    "nccl-socket-fallback": lazy("a container's RDMA devices or image, or the ranks' environment: a deployment change on every host"),
    "nccl-gdr-disabled": lazy("a kernel module or driver on every host, or the ranks' environment: a change to plan"),
    "nccl-bootstrap-loopback": _NCCL_ENV,
    "nccl-init-failed": lazy("NCCL's first failure names the layer: see the playbook; nothing to change on this host alone"),
    "collective-rank-missing": lazy("another host's command or network to fix: the playbook says where to look"),
    "network-mtu-mismatch": lazy("the MTU must match the switches and every host of the path: a network change to plan"),
    "collective-bandwidth-low": lazy("the path's cause is named by the scan's other findings, each with its own step"),
    "collective-slow-host": lazy("draining a host from the group is the scheduler's decision, by hand"),
    # issue 32, engine.features: the engine's own flags, changed where it is deployed
    "spec-decode-low-acceptance": _ENGINE,
    "lora-adapter-thrash": _ENGINE,
    "structured-output-bottleneck": _ENGINE,
    # issue 31, engine.roofline: explanations and pointers, not settings a script may change
    "decode-at-bandwidth-limit": lazy("an explanation, not a fault: quantisation, speculative decoding or faster memory are deployment choices"),
    "decode-below-ceiling": lazy("the step is the cause's: contention, throttling, offload or the thread count, each its own finding"),
    "ttft-queue-dominated": lazy("capacity (replicas, --max-num-seqs) is a sizing decision: the playbook says how to size it"),
    "ttft-prefill-dominated": lazy("prompt length and prefix caching are the application's and the deployment's: the playbook says what to measure"),
    "knee-at-bandwidth-limit": lazy("an explanation, not a fault: more throughput is fewer bytes a step, faster memory or more replicas, deployment choices"),
    "knee-below-bandwidth-ceiling": lazy("the limit that sets the knee (--max-num-seqs, -np, the KV cache) is the finding beside it, or a sizing decision the playbook walks through"),
    # issue 32 item 6: where an engine's caches live is its deployment's (volumes, environment)
    "engine-cache-ephemeral": lazy("a persistent volume for the engine's cache and its variable: a deployment change to review"),
    "engine-cache-disk-full": lazy("which cached models or compile artefacts may go is the owner's call: the playbook says how to list them"),
    "hf-offline-unset": lazy("HF_HUB_OFFLINE=1 in the engine's environment, set at its next planned restart"),
    "engine-compile-cache-missed": lazy("what changes vLLM's compile hash between starts, or disabled its cache, is the deployment's: the playbook says how to find it"),
    "engine-weights-load-slow": lazy("the loader, the filesystem or the memory that slows the load is found while the engine starts: the playbook walks through it"),
    # issue 32 items 1-2: the KV path between instances and the offload tier are deployment settings
    "kv-transfer-failing": lazy("the transfer path is two instances' and the network's: the playbook says how to take the pair out of the pool and find the fault"),
    "kv-transfer-ucx-tcp": _ENGINE,
    "kv-offload-tier-small": lazy("the CPU tier's size is bounded by the host memory left: a sizing decision the playbook walks through"),
    "kv-offload-hashseed-unset": lazy("PYTHONHASHSEED in the engine's environment, set at its next planned restart"),
    # issue 33, Huawei Ascend: a chip, a port, a container's devices or an install, by hand
    "npu-health-not-ok": lazy("a chip reset or a service request, once the engine is off the chip: the playbook says how to read its error code first"),
    "npu-network-port-down": lazy("an optical module, fibre or switch port to fix by hand: the playbook says which"),
    "hccl-timeout-low": _NCCL_ENV,
    "hccl-interface-wrong": _NCCL_ENV,
    "npu-device-files-missing": lazy("the container's --device list or the Ascend Docker Runtime: a deployment change to review"),
    "ascend-version-mismatch": lazy("a driver, firmware or CANN install, planned with Huawei's compatibility table"),
    "kv-offload-over-memory": lazy("the CPU tier's size is bounded by the host memory left: a sizing decision the playbook walks through"),
    "kv-transfer-slow": lazy("where a KV transfer spends its time is found by measuring the link: the playbook says how"),
    "kv-transfer-config-mismatch": lazy("which instance of the pair is restarted with the other's settings is the operator's call: the playbook lists the settings"),
    # an engine that holds requests and produces nothing: stacks first, then a restart by hand
    "engine-stalled": lazy("a held engine's stacks and logs are taken before it is restarted, and the restart is the operator's: the playbook says what to save"),
    "kv-offload-over-memlock": lazy("the engine's locked-memory limit is set where it is started (its unit, container or pod): the playbook names each"),
    # issue 33: AMD GPUs
    "amd-gpu-ras-errors": lazy("a GPU with uncorrectable errors is drained and reset, then serviced: the playbook says how, and it is the operator's call"),
    "amd-xgmi-link-degraded": lazy("an xGMI link is the baseboard's: drain the GPU and have the platform vendor check it (the playbook)"),
    "amd-device-files-missing": lazy("the driver or the container's devices are the deployment's: the playbook says what to pass"),
    "amd-gfx-unsupported": lazy("HSA_OVERRIDE_GFX_VERSION or another GPU is a deployment choice: the playbook says which target fits"),
    "amd-partition-layout-mismatch": lazy("the engine's tensor-parallel size, its visible GPUs or the partition mode is a deployment choice: the playbook says which fit"),
    "amd-p2p-fine-grain-off": lazy("HSA_FORCE_FINE_GRAIN_PCIE=1 in the engine's environment, set at its next planned restart"),
}


def build(finding: SavedFinding, scan: Scan) -> Step | NoStep:
    """The step for ``finding`` (its rule and cause strings), or why none: a step's cause is
    always a key of BUILDERS, and every text of the finding it carries is ``input_text``."""
    cause = finding.cause
    rule, key = input_text(finding.rule), input_text(finding.key)
    builder = BUILDERS.get(cause)
    if builder is None:
        why = NO_STEP.get(cause, lazy("no step is known for this cause"))
        return NoStep(rule, key, input_text(cause), translated(why))
    built = builder(finding, scan, scan.date)
    return NoStep(rule, key, cause, built) if isinstance(built, str) else built
