"""node-problem-detector's custom plugin protocol: one answer per family, and NPD's config.

NPD (kubernetes/node-problem-detector, ``docs/custom_plugin_monitor.md``) execs a plugin at
every ``invoke_interval``, in a process group of its own that it kills (SIGKILL) at the
rule's ``timeout`` (5 s by default), reads at most 4 KiB of its stdout, trims the white space
around it and cuts it at ``max_output_length`` *bytes* (80 by default: a cut inside a UTF-8
character leaves a broken one in the node's condition), and maps the exit code: 0 is the
condition False (OK), 1 True (a problem), anything else Unknown
(``pkg/custompluginmonitor/plugin/plugin.go``). A ``permanent`` rule sets the condition it
names; its reason is static, the message is the plugin's line.

So ``answer`` reads the daemon's state (never probes), judges one family
(doctor/fleet/verdict.py) and gives an exit code and a line that fits ``MAX_OUTPUT_BYTES``
bytes, its words from the state masked (a node condition is readable cluster-wide) and its
first word the rule id, ``ok`` or ``unknown``, never to be mistaken one for another; ``plugin_config`` writes the JSON NPD loads, checked as its
``pkg/custompluginmonitor/types/config.go`` checks it (``ApplyConfiguration``, ``Validate``).
"""

from __future__ import annotations

import os
import unicodedata
from dataclasses import dataclass, replace
from typing import Any

from doctor.daemon import state as daemon_state
from doctor.fleet.verdict import Status, judge, masked
from doctor.i18n import lazy, translated
from doctor.model import Severity

MAX_OUTPUT_BYTES = 80  # NPD's default max_output_length, in bytes
NPD_TIMEOUT_S = 5  # NPD's default global timeout: a plugin still running then is killed
PLUGIN_TIMEOUT_S = 3  # ours, under NPD's: the answer takes tens of ms from a fresh state
INVOKE_INTERVAL_S = 30  # NPD's default; the daemon beats every 15 s, so each run sees a new state
CONCURRENCY = 3  # NPD's default: of the four families one waits its turn (a run takes tens of ms)
SOURCE = "llm-doctor-custom-plugin-monitor"
# where contrib/kubernetes/Dockerfile.npd installs llm-doctor in NPD's image
BINARY = "/opt/llm-doctor/bin/llm-doctor"
# A node condition may cordon a node (an operator's policy, draino): only a critical finding
# (a GPU fallen off the bus, XID 79, an engine that cannot serve) is worth that; warnings go
# to the exporter and Alertmanager. --min-severity warning makes warnings conditions too.
DEFAULT_MIN_SEVERITY = Severity.CRITICAL
MIN_SEVERITIES = {"warning": Severity.WARNING, "critical": Severity.CRITICAL}


@dataclass(frozen=True, slots=True)
class Family:
    name: str  # gpu | engine | host | net, as doctor/daemon/state.py's FAMILIES
    condition: str  # the node condition NPD sets
    reason: str  # the condition's reason while a problem stands (static: NPD wants one)
    ok_reason: str  # the default condition's reason and message, shown while healthy
    ok_message: str


FAMILIES = (
    Family("gpu", "LlmDoctorGPUProblem", "LlmDoctorGPUProblem", "LlmDoctorGPUHealthy",
           lazy("llm-doctor finds no accelerator (GPU, NPU) problem on this node")),
    Family("engine", "LlmDoctorEngineProblem", "LlmDoctorEngineProblem",
           "LlmDoctorEngineHealthy",
           lazy("llm-doctor finds no serving-engine problem on this node")),
    Family("host", "LlmDoctorHostProblem", "LlmDoctorHostProblem", "LlmDoctorHostHealthy",
           lazy("llm-doctor finds no host (CPU, memory, disk, limits) problem on this node")),
    # issue 30: the network between hosts (net.rdma's InfiniBand/RoCE ports), NPD's
    # "network" condition; --family net, as the daemon state names the family
    Family("net", "LlmDoctorNetworkProblem", "LlmDoctorNetworkProblem", "LlmDoctorNetworkHealthy",
           lazy("llm-doctor finds no network (InfiniBand, RoCE) problem on this node")),
)
BY_NAME = {f.name: f for f in FAMILIES}  # the state's FAMILIES (tests/test_npd.py checks)


def fit_bytes(line: str, limit: int = MAX_OUTPUT_BYTES) -> str:
    """``line`` on one line of at most ``limit`` bytes of UTF-8, cut at a character (an
    ellipsis where it is cut), so that NPD's byte cut never splits a character. Control and
    format characters (an escape sequence, a NUL, a bidi override, a lone surrogate that has
    no UTF-8 at all) become "?": the line lands in the node's condition as it is."""
    flat = "".join("?" if unicodedata.category(c)[0] == "C" else c for c in " ".join(line.split()))
    if len(flat.encode()) <= limit:
        return flat
    out = flat[:limit]  # a character is a byte at least: no more than this can fit
    while out and len((out + "…").encode()) > limit:
        out = out[:-1]
    return out.rstrip() + "…"


def answer(path: str, family: str, min_severity: Severity = DEFAULT_MIN_SEVERITY,
           now: float | None = None) -> tuple[int, str]:
    """The exit code (0 OK, 1 a problem, 2 unknown) and the line for ``family`` from the
    state at ``path``: stale, absent or broken states are unknown (2), never OK."""
    read = daemon_state.read(path, now)
    if read.unknown:
        # the path is in NPD's config already; in 80 bytes it would hide why (stale, absent)
        read = replace(read, unknown=read.unknown.replace(read.path, os.path.basename(read.path)))
    return judged(read, family, min_severity)


def judged(read: daemon_state.State, family: str,
           min_severity: Severity = DEFAULT_MIN_SEVERITY) -> tuple[int, str]:
    """The exit code and the line for ``family`` from a state already read."""
    for width in range(MAX_OUTPUT_BYTES, 0, -1):  # narrower while its UTF-8 is too long
        verdict = judge(read, family, min_severity, width)
        if len(verdict.line.encode()) <= MAX_OUTPUT_BYTES:
            break
    return int(verdict.status), fit_bytes(verdict.line)


def unknown(why: str) -> tuple[int, str]:
    """A misuse of the plugin (a bad flag): unknown, as NPD reads any code but 0 and 1."""
    return int(Status.UNKNOWN), fit_bytes("unknown " + masked(why))


def plugin_config(binary: str = BINARY, state_file: str = daemon_state.DEFAULT_PATH,
                  min_severity: Severity = DEFAULT_MIN_SEVERITY) -> dict[str, Any]:
    """NPD's custom plugin monitor config: one permanent rule per family, each with its
    condition (and that condition's default, which Validate requires), a static reason and
    the plugin's path and arguments."""
    label = next(k for k, v in MIN_SEVERITIES.items() if v == min_severity)
    return {
        "plugin": "custom",
        "pluginConfig": {
            "invoke_interval": f"{INVOKE_INTERVAL_S}s",
            "timeout": f"{PLUGIN_TIMEOUT_S}s",
            "max_output_length": MAX_OUTPUT_BYTES,
            "concurrency": CONCURRENCY,
            # the message names the worst finding: show the new one when it changes (at most
            # one condition update per family per invoke_interval)
            "enable_message_change_based_condition_update": True,
        },
        "source": SOURCE,
        "metricsReporting": True,
        # the healthy message in the language the config is written in (kubectl shows it)
        "conditions": [{"type": f.condition, "reason": f.ok_reason,
                        "message": translated(f.ok_message)}
                       for f in FAMILIES],
        "rules": [{"type": "permanent", "condition": f.condition, "reason": f.reason,
                   "path": binary,
                   "args": ["npd", "--family", f.name, "--state-file", state_file,
                            "--min-severity", label],
                   "timeout": f"{PLUGIN_TIMEOUT_S}s"}
                  for f in FAMILIES],
    }
