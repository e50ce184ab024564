"""The scan's data model: levels, probe outcomes, findings, the report."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable

from doctor.i18n import lazy, t, translated
from doctor.endpoints import Endpoint
from doctor.i18n.text import Text
from doctor.inputs import Inputs
from doctor.seam.host import Host


class Level(enum.IntEnum):
    """How intrusive a scan may be, as DCGM's diagnostic levels are."""

    QUICK = 1  # read-only: files, sysctls, process tables, short CPU sampling
    STANDARD = 2  # adds bounded micro-kernels (seconds each)
    FULL = 3  # adds long load or soak tests (opt-in)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """("quick", "standard", "full"): the one spelling of the levels, for flags and files."""
        return tuple(level.name.lower() for level in cls)

    @classmethod
    def parse(cls, text: str) -> "Level":
        """A level from its name; ValueError names the choices."""
        try:
            return cls[str(text).upper()]
        except KeyError:
            raise ValueError(t("{text} is not a level; use {choices}", text=repr(str(text)[:40]),
                               choices=", ".join(cls.names()))) from None


class Severity(enum.IntEnum):
    INFO = 0
    WARNING = 1
    CRITICAL = 2

    @property
    def label(self) -> str:
        """The id, in JSON, rules and flags: ``critical``, ``warning``, ``info``."""
        return self.name.lower()

    @property
    def word(self) -> str:
        """The label as people read it, in the current language (严重 for ``critical``)."""
        return translated(SEVERITY_WORDS[self.label])


# Each severity's label, marked for the catalogue once; translated where it is shown.
SEVERITY_WORDS = {"critical": lazy("critical"), "warning": lazy("warning"), "info": lazy("info")}


@dataclass(frozen=True, slots=True)
class ScanOptions:
    """What the user asked of this scan."""

    level: Level = Level.STANDARD
    model_dirs: tuple[str, ...] = ()
    # --endpoint URL, [scan] endpoints, a recorded host's: engines elsewhere or behind a proxy,
    # parsed once where they come in (doctor/commands/setup.py scan_options); a text from a
    # caller that builds options itself is parsed by discovery, which shows its error
    endpoints: tuple[Endpoint | str, ...] = ()
    # False: no probe that sends requests to an engine runs (scan --no-requests, [scan]
    # requests = false; the daemon unless [daemon] requests = true); pages are still read
    requests: bool = True
    busy_ok: bool = False  # send even to an engine serving requests now (scan --busy-ok)
    # Which engines requests go to (scan --requests-to, [scan] requests_to): "named" sends
    # only to the --endpoint URLs when any are named (every engine found when none is),
    # "all" to those and every engine discovered beside them
    requests_to: str = "named"
    # Engines the user says are replicas behind one front ([scan] replicas: groups of
    # endpoint URLs); load skew is judged only between the members of one group
    replicas: tuple[tuple[str, ...], ...] = ()
    # Told, one line per engine, what a probe will send before it sends it (the CLI prints
    # it on stderr, the daemon logs it); None: nobody is told
    announce: Callable[[str], None] | None = field(default=None, compare=False, repr=False)
    # A log holding NCCL's INFO/WARN lines, named by scan --nccl-log (net.nccl_log); None: the
    # engines' own stdout/stderr where they are files
    nccl_log: str | None = None
    # A saved log or plog file holding HCCL's lines, named by scan --hccl-log (npu.hccl_log);
    # None: the engines' own stdout/stderr, journals and plog folders
    hccl_log: str | None = None
    # Where `llm-doctor collective` keeps its last result for net.collective: collective.json
    # beside the daemon's state file (doctor/commands/setup.py); None: beside the default one
    # (/var/lib/llm-doctor/), "": none kept (the daemon's --state-file "")
    collective_file: str | None = None


NO_REQUESTS = lazy("sends requests to the engine, and this scan sends none (scan --no-requests or "
                   "[scan] requests = false; the daemon sends them only with [daemon] requests = true)")


def no_requests() -> str:
    """NO_REQUESTS in the current language: why a probe that sends requests is skipped."""
    return translated(NO_REQUESTS)


@dataclass(frozen=True, slots=True)
class RequestCost:
    """The most a probe sends to each engine, declared on the probe (``COST``) and kept by
    it: completion requests, prompt tokens as the engine counts them, output tokens asked
    for (``max_tokens``), and the seconds it may spend sending (shared by all engines)."""

    requests: int
    prompt_tokens: int
    output_tokens: int
    seconds: float

    def text(self, engines: int = 1) -> str:
        """E.g. "at most 15 requests, 1,533 prompt + 240 output tokens, ≤ 40 s", for one of
        ``engines`` engines (the seconds are shared)."""
        return t("at most {requests:,} requests, {prompt:,} prompt + {output:,} output tokens, "
                 "≤ {seconds:.3g} s", requests=self.requests, prompt=self.prompt_tokens,
                 output=self.output_tokens, seconds=self.seconds / max(engines, 1))


@dataclass(frozen=True, slots=True)
class Sent:
    """What a probe sent to one engine: requests counted by the client, prompt tokens as
    the engine said (usage.prompt_tokens, else the words sent), output tokens received."""

    probe: str
    base_url: str
    requests: int
    prompt_tokens: int
    output_tokens: int
    seconds: float

    def text(self) -> str:
        """E.g. "sent http://127.0.0.1:8080 15 requests, 1,502 prompt + 240 output tokens in
        21.4 s"."""
        return t("sent {url} {requests:,} requests, {prompt:,} prompt + {output:,} output "
                 "tokens in {seconds:.1f} s", url=self.base_url, requests=self.requests,
                 prompt=self.prompt_tokens, output=self.output_tokens, seconds=self.seconds)


@dataclass(frozen=True, slots=True)
class ProbeSpec:
    """One registry entry: a probe's name, level, what it reads, and its entry point."""

    name: str  # dotted by area: host.limits, gpu.pcie, engine.kv_cache
    level: Level
    description: str
    reads: str  # what it reads, for `llm-doctor probes`
    timeout_s: float
    # run(host, options, inputs): a frozen record, or raises Skip; ``inputs`` holds the records
    # of ``needs`` and ``after`` (doctor/inputs.py), NO_INPUTS when run on its own
    run: Callable[[Host, ScanOptions, Inputs], Any]
    exclusive: bool = False  # measures the machine: runs alone, after the read-only probes
    summary: Callable[[Any], str] | None = None  # the record in one line for people
    needs: tuple[str, ...] = ()  # probes whose records it reads (its inputs): run first
    after: tuple[str, ...] = ()  # probes whose records it uses when they have them: run first, no skip
    # What it sends to each engine at most (the probe's COST); such a probe's record has a
    # ``sent()`` method listing what it did send. None: it sends no request to an engine.
    cost: RequestCost | None = None


class Skip(Exception):
    """A probe cannot apply to this host; the message is the reason shown to the user."""


@dataclass(frozen=True, slots=True)
class ProbeResult:
    name: str
    status: str  # ok | skipped | error | timeout
    duration_s: float
    # for skipped, error, timeout; the summary: the record in one line for people
    # (ProbeSpec.summary), made by the runner. Both are message values, said in a language
    # only where they are shown (doctor/i18n/text.py ``render``)
    reason: Text | None = None
    record: Any = None  # the probe's frozen record when ok
    summary: Text = ""


@dataclass(frozen=True, slots=True)
class Finding:
    rule: str
    cause: str
    symptoms: tuple[str, ...]
    severity: Severity
    title: Text  # message values (the rule's texts in each language): said where shown
    evidence: dict[str, Any]
    remediation: Text
    playbook: str
    key: str = ""  # the item's identity for a rule with `each` (pid, GPU UUID, path)
    # evidence label → why its value is None (the record's `missing` entry), for reports
    missing: dict[str, str] = field(default_factory=dict)

    @property
    def identity(self) -> str:
        """What the finding is about, for alerts and reports: its key, else what its
        evidence names."""
        return self.key or key_from_evidence(self.evidence)


def key_from_evidence(evidence: dict[str, Any]) -> str:
    """The item an evidence dict names (a GPU, a pid, a path), for a finding without a key."""
    for name in ("uuid", "gpu", "pid", "process", "path", "engine", "device", "mount"):
        if evidence.get(name) not in (None, ""):
            return str(evidence[name])
    return ""


@dataclass(slots=True)
class ScanReport:
    host: dict[str, str]
    level: Level
    started_at: str
    duration_s: float
    probes: list[ProbeResult] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    rule_errors: list[str] = field(default_factory=list)

    @property
    def worst(self) -> Severity | None:
        return max((f.severity for f in self.findings), default=None)

    def exit_code(self) -> int:
        """0 nothing at warning or above, 1 warning, 2 critical (monitoring-plugin style)."""
        worst = self.worst
        if worst is None or worst == Severity.INFO:
            return 0
        return 1 if worst == Severity.WARNING else 2
