"""``llm-doctor rules export --prometheus --fleet``: recording and alerting rules across the
hosts one Prometheus scrapes, over the daemons' metrics (docs/fleet.md).

Recording rules, in Prometheus' ``level:metric:operations`` convention:

* ``job:`` rules aggregate the fleet, fit for federation (a global Prometheus federates
  ``{__name__=~"job:.*"}``): findings per cause and severity, per GPU model, the hosts that
  have them, the hosts scraped and up, and each compared figure's median and host count per
  group;
* ``instance:`` rules reduce each host to one figure per comparison, labelled with its group
  (``gpu_model``, ``driver_version``: ``instance:llm_doctor_fleet_group:info``, the first of
  NVIDIA's ``llm_doctor_host_fleet_info``, AMD's ``llm_doctor_amd_gpu_info`` (with
  ``llm_doctor_amd_gpu_version_info``'s driver) and Ascend's
  ``llm_doctor_npu_chip_info`` a host exports: ``GROUP_INFO``).

Outlier alerts: a host whose figure sits below ``ratio`` (0.8 unless given) times the median
of the hosts with the same GPU model and driver (and, for the engine's knee, the same engine
kind and model; for the all-reduce across hosts, the same backend, interface kind and world
size: ``BY_NET_PATH``), only in a group of at least ``MIN_HOSTS`` hosts: the median of two is one of
the two, and a fleet of two cannot say which one is slow. The alert's value is the ratio.

A host with several GPUs is one figure, its slowest GPU's (``min``): tensor parallelism runs
at its slowest rank, and a median over eight cards would hide the one bad card this looks for.

YAML written by hand as in doctor/daemon/promrules.py (strings JSON-quoted); ``promtool check
rules`` and ``promtool test rules`` (tests/promtool/fleet_rules_test.yml) check it.
"""

from __future__ import annotations

from dataclasses import dataclass

from doctor.daemon.promrules import JOB, _duration, _q, _rule_yaml

OUTLIER_RATIO = 0.8  # below 0.8 x the group's median: well past run-to-run noise (a few %)
OUTLIER_FOR_S = 900.0  # the figures change only when the kernels run again (every 6 h)
MIN_HOSTS = 3
GROUP = ("job", "gpu_model", "driver_version")
FLEET_INFO = "llm_doctor_host_fleet_info"
GROUP_INFO = "instance:llm_doctor_fleet_group:info"  # one series per host: its group's labels
AMD_INFO = "llm_doctor_amd_gpu_info"  # per GPU: model_name (the market name)
AMD_VERSION = "llm_doctor_amd_gpu_version_info"  # per GPU: driver_version (amdgpu's)
NPU_INFO = "llm_doctor_npu_chip_info"  # per chip: model_name (npu-smi's Name: 910B2C)
NPU_SOFTWARE = "llm_doctor_npu_software_info"  # per host: driver_version (version.info)
NPU_SMI = "llm_doctor_npu_smi_info"  # per host: version (npu-smi's, the driver package's)
NET_INFO = "llm_doctor_net_collective_info"
NET_RANKS = "llm_doctor_net_collective_ranks"


@dataclass(frozen=True, slots=True)
class Grouping:
    """What hosts must share to be compared (beside ``job``), and the series each host's
    figure is joined with to carry those labels: ``joins`` are (labels, PromQL with
    ``{job}`` for the job's matcher), each a one-to-one join on (job, instance)."""

    labels: tuple[str, ...]
    joins: tuple[tuple[str, str], ...]
    where: str  # the group for people, in the alert's summary (Go template)

    def joined(self, job: str) -> str:
        return "".join(f" * on (job, instance) group_left ({labels}) {expr.format(job=job)}"
                       for labels, expr in self.joins)


# GPU figures: the same GPU model and driver (GROUP_INFO, recorded first: _group_info)
BY_GPU = Grouping(GROUP[1:], (("gpu_model, driver_version", GROUP_INFO + '{{job="{job}"}}'),),
                  "{{ $labels.gpu_model }}{{ if $labels.driver_version }}, driver "
                  "{{ $labels.driver_version }}{{ end }}")
# The all-reduce across hosts: every host of one run reports the group's busbw, so hosts
# are compared across runs, and only runs that should measure the same: one backend (gloo is
# bound by the CPU, NCCL by the network), one kind of interface (physical, bond, veth...),
# one world size (busbw's 2(n-1)/n and the ring's hops move with it). Not the line rate: a
# port trained at half its rate is what the comparison is for. The world is a value
# (net_collective_ranks); count_values turns it into the label ``world``.
BY_NET_PATH = Grouping(
    ("backend", "interface_kind", "world"),
    (("backend, interface_kind", NET_INFO + '{{job="{job}"}}'),
     ("world", 'count_values by (job, instance) ("world", ' + NET_RANKS + '{{job="{job}"}})')),
    "{{ $labels.backend }} over {{ $labels.interface_kind }}, {{ $labels.world }} ranks")


@dataclass(frozen=True, slots=True)
class Figure:
    """One figure compared across a group: its per-host reduction and its alert."""

    name: str  # the alert's ``figure`` label
    alert: str
    metric: str  # the exported metric
    selector: str  # extra matchers on it
    what: str  # for people: "HBM copy bandwidth"
    cause: str
    check: str  # how a person looks closer
    keep: tuple[str, ...] = ()  # labels kept per host beside job, instance (and grouped by)
    recorded: str = ""  # the recorded rules' metric name, where the selector narrows it
    grouping: Grouping = BY_GPU

    @property
    def base(self) -> str:
        return self.recorded or self.metric

    @property
    def per_host(self) -> str:
        level = "_".join(("instance", *self.keep))
        return f"{level}:{self.base}:min"

    @property
    def median(self) -> str:
        return f"job:{self.base}:median"

    @property
    def hosts(self) -> str:
        return f"job:{self.base}:count"

    @property
    def group(self) -> str:
        return ", ".join(("job", *self.grouping.labels, *self.keep))


FIGURES = (
    Figure("hbm_bandwidth", "LlmDoctorFleetHbmBandwidthOutlier",
           "llm_doctor_gpu_memory_copy_bytes_per_second", "", "HBM copy bandwidth",
           "gpu-memory-bandwidth-low",
           "'llm-doctor scan' on it sets the copy against the card's ceiling; "
           "'nvidia-smi -q -d ROW_REMAPPER,CLOCK' shows remapped rows and the memory clock."),
    Figure("pcie_h2d_bandwidth", "LlmDoctorFleetPcieBandwidthOutlier",
           "llm_doctor_gpu_host_copy_bytes_per_second",
           'direction="host_to_device", memory="pinned"', "PCIe host-to-device copy (pinned)",
           "pcie-bandwidth-low",
           "'llm-doctor scan' on it shows the link's trained generation and width against "
           "the card's; 'nvidia-smi -q -d PCIE' the same.",
           recorded="llm_doctor_gpu_host_to_device_pinned_copy_bytes_per_second"),
    Figure("host_memory_bandwidth", "LlmDoctorFleetHostMemoryBandwidthOutlier",
           "llm_doctor_host_memory_bandwidth_triad_bytes_per_second", "",
           "host memory bandwidth (STREAM triad)", "host-memory-bandwidth-low",
           "'llm-doctor scan' on it sets STREAM against the DIMMs' ceiling; "
           "'dmidecode -t memory' lists the DIMMs and their configured speed."),
    Figure("engine_knee_throughput", "LlmDoctorFleetKneeThroughputOutlier",
           "llm_doctor_engine_knee_output_tokens_per_second", "",
           "engine output tokens/s at its knee", "slowdown",
           "Rerun 'llm-doctor load --endpoint URL' on it and on a neighbour; 'llm-doctor scan' "
           "on it names what else differs (clocks, throttling, CPU contention).",
           keep=("kind", "model")),
    Figure("collective_busbw", "LlmDoctorFleetCollectiveBusbwOutlier",
           "llm_doctor_net_collective_bus_bytes_per_second", "",
           "all-reduce busbw across hosts", "collective-bandwidth-low",
           "Its run's hosts all report the group's figure: run 'llm-doctor collective "
           "--pairwise' over them to find the one that slows every partner, and "
           "'llm-doctor scan' there (RDMA ports, error counters, GPUDirect RDMA, the NIC each "
           "GPU uses).",
           grouping=BY_NET_PATH),
)


def _record(name: str, expr: str) -> list[str]:
    return [f"      - record: {name}", f"        expr: {_q(expr)}"]


def _sel(metric: str, job: str, extra: str = "") -> str:
    return f'{metric}{{job="{job}"' + (f", {extra}" if extra else "") + "}"


def _one_model(metric: str, job: str) -> str:
    """Per host, its accelerators' ``model_name`` as ``gpu_model`` (value 1), for hosts whose
    accelerators are of one model only: PromQL cannot join names as gpu.inventory's '+' does,
    and two series for one host would break every join on (job, instance), for the whole
    fleet. A host that mixes models, or whose model is not known, is in no group."""
    chips, named = _sel(metric, job), _sel(metric, job, 'model_name!=""')  # unnamed: no group
    return (f'group by (job, instance, gpu_model) (label_replace({named}, "gpu_model", "$1", '
            f'"model_name", "(.+)")) and on (job, instance) (count by (job, instance) '
            f"(group by (job, instance, model_name) ({chips})) == 1)")


def _one_driver(metric: str, job: str) -> str:
    """Per host, the one ``driver_version`` its accelerators report (value 1); a host whose
    GPUs report two, or none, gets none (two would break the join for the whole fleet)."""
    named = _sel(metric, job, 'driver_version!=""')
    versions = f"group by (job, instance, driver_version) ({named})"
    return f"{versions} and on (job, instance) (count by (job, instance) ({versions}) == 1)"


def _group_info(job: str) -> str:
    """Each host's group: NVIDIA's fleet info series where the host exports it; else AMD's
    GPU model with its amdgpu driver version, or the model alone where the driver is not
    known; else Ascend's chip model with the driver's version (version.info, else npu-smi's),
    or alone where neither is."""
    amd, npu = _one_model(AMD_INFO, job), _one_model(NPU_INFO, job)
    software, smi = _sel(NPU_SOFTWARE, job, 'driver_version!=""'), _sel(NPU_SMI, job, 'version!=""')
    driver = (f"group by (job, instance, driver_version) ({software}) or on (job, instance) "
              f"group by (job, instance, driver_version) "
              f'(label_replace({smi}, "driver_version", "$1", "version", "(.+)"))')
    return (f"{_sel(FLEET_INFO, job)} "
            f"or on (job, instance) (({amd}) * on (job, instance) group_left (driver_version) "
            f"({_one_driver(AMD_VERSION, job)})) "
            f"or on (job, instance) ({amd}) "
            f"or on (job, instance) (({npu}) * on (job, instance) group_left (driver_version) ({driver})) "
            f"or on (job, instance) ({npu})")


def _fleet_records(job: str) -> list[str]:
    # first: the rules below read it at the same evaluation (a group runs its rules in order)
    lines = _record(GROUP_INFO, _group_info(job))
    finding, info = _sel("llm_doctor_finding", job), _sel(GROUP_INFO, job)
    up = _sel("up", job)
    lines += _record("job:llm_doctor_findings:count",
                    f"count by (job, cause, severity) ({finding})")
    lines += _record("job:llm_doctor_findings_per_gpu_model:count",
                     f"count by (job, gpu_model, cause, severity) ({finding} "
                     f"* on (job, instance) group_left (gpu_model) {info})")
    lines += _record("job:llm_doctor_hosts_with_findings:count",
                     "count by (job, cause, severity) "
                     f"(count by (job, instance, cause, severity) ({finding}))")
    lines += _record("job:llm_doctor_hosts:count", f"count by (job) ({up})")
    lines += _record("job:llm_doctor_hosts_up:sum", f"sum by (job) ({up})")
    lines += _record("job:llm_doctor_hosts_per_gpu_model:count",
                     f"count by ({', '.join(GROUP)}) ({info})")
    return lines


def _figure_records(figure: Figure, job: str) -> list[str]:
    by = ", ".join(("job", "instance", *figure.keep))
    source = _sel(figure.metric, job, figure.selector)
    lines = _record(figure.per_host,
                    f"min by ({by}) ({source}){figure.grouping.joined(job)}")
    lines += _record(figure.median, f"quantile by ({figure.group}) (0.5, {figure.per_host})")
    lines += _record(figure.hosts, f"count by ({figure.group}) ({figure.per_host})")
    return lines


def _outlier(figure: Figure, ratio: float, for_s: float) -> list[str]:
    on = f"on ({figure.group})"
    expr = (f"{figure.per_host} / {on} group_left () {figure.median} < {ratio:g} "
            f"and {on} ({figure.hosts} >= {MIN_HOSTS})")
    where = figure.grouping.where
    if figure.keep:
        where += ", " + ", ".join(f"{{{{ $labels.{k} }}}}" for k in figure.keep)
    lines = _rule_yaml(
        figure.alert, expr, for_s, "warning",
        f"{{{{ $labels.instance }}}}: {figure.what} at {{{{ $value | humanizePercentage }}}} "
        f"of the median of its group ({where})",
        f"This host's {figure.what} sits below {ratio:g} x the median of the hosts with the "
        f"same {figure.group.removeprefix('job, ')} (a group of {MIN_HOSTS} or more). "
        + figure.check,
        {"cause": figure.cause, "ratio": "{{ $value | printf \"%.2f\" }}"}
        | ({"playbook": f"playbooks/{figure.cause}.md"} if figure.cause != "slowdown" else {}))
    # the figure label goes with the alert's labels, after its severity
    at = lines.index("        annotations:")
    return lines[:at] + [f"          figure: {_q(figure.name)}"] + lines[at:]


def export(job: str = JOB, ratio: float = OUTLIER_RATIO, for_s: float = OUTLIER_FOR_S) -> str:
    """The fleet rules file's text: one group of recording rules, one of outlier alerts."""
    lines = ["# Generated by 'llm-doctor rules export --prometheus --fleet'; regenerate, do not edit.",
             f"# Outliers: below {ratio:g} x the median of a group of {MIN_HOSTS} or more hosts "
             f"of one GPU model and driver (AMD: model only; the all-reduce across hosts: of one backend, "
             f"interface kind and world size), for {_duration(for_s)}.",
             "groups:", "  - name: llm-doctor-fleet-records", "    rules:"]
    lines += _fleet_records(job)
    for figure in FIGURES:
        lines += _figure_records(figure, job)
    lines += ["  - name: llm-doctor-fleet-outliers", "    rules:"]
    for figure in FIGURES:
        lines += _outlier(figure, ratio, for_s)
    return "\n".join(lines) + "\n"
