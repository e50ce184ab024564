"""The daemon's main loop, its signals and its reload.

SIGHUP re-reads the config file and the rules (a bad file is logged and the old ones kept),
and the server's basic-auth password file and TLS certificate and key, so a rotated secret or
a renewed certificate takes effect without a restart (connections already open keep theirs),
SIGTERM and SIGINT stop it cleanly (the HTTP server closes, queued alerts are delivered),
SIGUSR1 runs the micro-kernels at the next beat, SIGUSR2 writes the baseline (the next
evaluation, whatever it finds: doctor/daemon/baseline.py). One loop thread does everything but serve
/metrics and send alerts; probes run on their own threads (doctor/daemon/scheduler.py), and
the server's threads are fixed at start (doctor/daemon/server.py), so no client can take the
probes' threads. These handlers are installed once the server is up: until then SIGTERM has
its default action and stops the daemon at any point of its start.

The daemon speaks one language (its logs, its alerts' summaries and descriptions, its
incident reports): ``--lang``, else the config file's top-level ``lang``, else
LLM_DOCTOR_LANG, then the locale (``daemon_lang``); a reload that changes ``lang`` changes it.
Metric names, label names and label values are the same in every language. Its probes do
not read that language: their summaries and reasons are message values made in English in
their own threads (doctor/runner.py, doctor/i18n/text.py), said in the daemon's language only
where it writes them; its state file is in English with each text's value, so that every
adapter says it in its own (``npd --lang``).
"""

from __future__ import annotations

import logging
import signal
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from prometheus_client import CollectorRegistry

from doctor.config import Config, ConfigError
from doctor.daemon import baseline, incidents, sinks, state
from doctor.daemon.alerts import Alert, AlertTracker, Transitions, held_findings
from doctor.daemon.exporter import DoctorCollector, Snapshot
from doctor.daemon.history import History
from doctor.daemon.scheduler import Scheduler
from doctor.daemon.metrics_app import metrics_app, tls_context
from doctor.daemon.server import MetricsServer, serve
from doctor.daemon.settings import Settings
from doctor.i18n import Speaking, parse_lang, resolve, speak_here, t
from doctor.output import write_atomic
from doctor.rules.evaluate import evaluate
from doctor.seam.host import Host
from doctor.seam.live import LiveHost
from doctor.model import ProbeResult, ScanOptions, ScanReport, Severity
from probes.registry import PROBES
from doctor.rules.loader import Rule

log = logging.getLogger("llm-doctor")
# read once, when the server starts: a reload cannot change them. The basic-auth
# credentials and the TLS certificate are read again at every reload (a rotated password
# file, a renewed certificate); only turning TLS on or off needs a restart (the scheme).
_RESTART_KEYS = ("listen",)


def daemon_lang(config: Config, flag: str | None = None,
                env: dict[str, str] | None = None) -> str:
    """The daemon's language: ``flag`` (--lang), else the config's ``lang``, else
    LLM_DOCTOR_LANG, then the locale, else English (doctor.i18n.resolve)."""
    if flag:
        return parse_lang(flag)
    if config.lang:
        return config.lang
    return resolve(None, env)


@dataclass(frozen=True, slots=True)
class DaemonSetup:
    """Everything a reload replaces at once."""

    settings: Settings
    config: Config
    rules: list[Rule]
    options: ScanOptions


class Daemon:
    def __init__(self, loaded: DaemonSetup, reload: Any, host: Host | None = None,
                 textfile: Callable[[DoctorCollector, float], str] | None = None,
                 lang_flag: str | None = None) -> None:
        self.loaded, self._reload = loaded, reload
        self.lang_flag = lang_flag  # --lang as given; None: the config's lang decides
        # what the daemon says (logs, alerts, incident reports) is in this language, spoken by
        # its own threads only: the process's language is not flipped under running probes
        self.lang = daemon_lang(loaded.config, lang_flag)
        self.host = host or LiveHost()
        self.stop_event = threading.Event()
        self.reload_requested = False
        self.server: MetricsServer | None = None
        self.latest: dict[str, ProbeResult] = {}
        self.history = History(loaded.settings.history_s)
        self.collector = DoctorCollector({s.name: s.description for s in PROBES})
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self.collector.publish(Snapshot())  # build info and a zero heartbeat before the first beat
        self.tracker = AlertTracker(self._for_s(), loaded.settings.resolve_after)
        self.scheduler = self._scheduler()
        self.dispatcher = sinks.Dispatcher(self._sinks(), self.lang)
        self.evaluations = 0
        self.instance = self.host.describe().get("hostname", "localhost")
        self._state_problem = ""  # the last reason the state file could not be written
        self.baseline = baseline.Keeper()
        self._baseline_said = ""  # the last reason logged for not writing one
        # renders daemon.textfile (doctor/fleet/textfile.daemon_text: a layer above, so the
        # command hands it in); None writes no textfile
        self.textfile = textfile
        self._textfile_problem = ""

    def _for_s(self) -> dict[str, float]:
        base = {r.id: r.for_s or 0.0 for r in self.loaded.rules}
        return {**base, **self.loaded.settings.for_s}

    def _scheduler(self) -> Scheduler:
        s = self.loaded.settings
        return Scheduler(PROBES, self.host, self.loaded.options, s.interval_s,
                         s.kernel_interval_s, s.kernels_while_serving)

    def _sinks(self) -> list[Any]:
        s = self.loaded.settings
        return ([sinks.LogSink()] + [sinks.AlertmanagerSink(u) for u in s.alertmanager]
                + [sinks.WebhookSink(u) for u in s.webhook])

    # signals ------------------------------------------------------------------------------
    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, lambda *_: self.stop_event.set())
        signal.signal(signal.SIGINT, lambda *_: self.stop_event.set())
        signal.signal(signal.SIGHUP, lambda *_: self._request_reload())
        signal.signal(signal.SIGUSR1, lambda *_: self.scheduler.request_kernels())
        signal.signal(signal.SIGUSR2, lambda *_: self.baseline.request())

    def _request_reload(self) -> None:
        self.reload_requested = True

    def reload(self) -> None:
        """Re-read config and rules; keep the running ones when the new ones are wrong."""
        self.reload_requested = False
        try:
            loaded = self._reload()
        except Exception as exc:  # ConfigError, RuleError, OSError: the message names the file
            log.error("%s", t("reload failed, keeping the previous configuration: {error}",
                                error=exc))
            return
        problem = self._unusable(loaded.settings)
        if problem:
            log.error("%s", t("reload failed, keeping the previous configuration: {error}",
                                error=problem))
            return
        try:
            served = self._served(loaded.settings)
        except ConfigError as exc:  # names the file and the setting
            log.error("%s", t("reload failed, keeping the previous configuration: {error}",
                                error=exc))
            return
        changed = [key for key in _RESTART_KEYS
                   if getattr(loaded.settings, key) != getattr(self.loaded.settings, key)]
        if bool(loaded.settings.tls_cert_file) != bool(self.loaded.settings.tls_cert_file):
            changed.append("tls_cert_file")
        if changed:
            log.warning("%s", t("{keys}: changes need a restart; still serving on {listen} as before",
                                  keys=", ".join(f"daemon.{k}" for k in changed),
                                  listen=self.loaded.settings.listen))
        if served is not None and self.server is not None:
            app, tls = served
            self.server.app = app
            if (tls is None) == (self.server.tls is None):
                self.server.tls = tls
            log.info("%s", t("metrics server: basic auth {auth}, TLS {tls} (read again)",
                               auth=t("on") if loaded.settings.basic_auth_user else t("off"),
                               tls=loaded.settings.tls_cert_file or t("off")))
        self.loaded = loaded
        lang = daemon_lang(loaded.config, self.lang_flag)
        if lang != self.lang:
            self.lang = self.dispatcher.lang = lang
            speak_here(lang)
            log.info("%s", t("language: {lang}", lang=lang))
        self.tracker.for_s = self._for_s()
        self.tracker.resolve_after = loaded.settings.resolve_after
        self.scheduler.reconfigure(PROBES, loaded.options, loaded.settings.interval_s,
                                   loaded.settings.kernel_interval_s,
                                   loaded.settings.kernels_while_serving)
        self.dispatcher.sinks = self._sinks()
        enabled = {r.id for r in loaded.rules
                   if loaded.config.rules.get(r.id, {}).get("enabled", True)}
        wall = time.time()
        gone = self.tracker.forget(enabled, wall)
        expires = 4 * max(loaded.settings.resend_s, loaded.settings.interval_s)
        self.dispatcher.submit(sinks.payloads(gone, self.instance, wall, expires), "resolved")
        log.info("%s", t("configuration reloaded: {rules} rules, interval {interval:g}s",
                           rules=len(loaded.rules), interval=loaded.settings.interval_s))

    def _served(self, settings: Settings) -> tuple[Any, ssl.SSLContext | None] | None:
        """The server's app and TLS context built from ``settings`` (the password file and
        the certificate read now); None before the server runs. Raises ConfigError."""
        if self.server is None:
            return None
        return metrics_app(self.registry, settings), tls_context(settings)

    @staticmethod
    def _unusable(settings: Settings) -> str | None:
        """Why the settings' report folder cannot be used, naming it; None when it can."""
        if not settings.report_dir:
            return None
        why = incidents.unusable(settings.report_dir)
        return why and t("the incident report folder {folder} (--report-dir or "
                         "daemon.report_dir) {why}", folder=settings.report_dir, why=why)

    # the loop -----------------------------------------------------------------------------
    def run(self) -> int:
        """Serve, then beat until SIGTERM; ConfigError when a file the settings name is wrong."""
        speak_here(self.lang)
        problem = self._unusable(self.loaded.settings)
        if problem:
            raise ConfigError(problem)
        server, _ = serve(self.registry, self.loaded.settings)
        self.server = server
        self.install_signals()
        host, port = server.server_address[:2]
        scheme = "https" if self.loaded.settings.tls_cert_file else "http"
        shown = f"[{host}]" if ":" in host else host
        log.info("%s", t("serving metrics on {scheme}://{host}:{port}/metrics", scheme=scheme,
                           host=shown, port=port))
        try:
            while not self.stop_event.is_set():
                started = time.monotonic()
                if self.reload_requested:
                    self.reload()
                try:
                    self.beat()
                # The daemon's isolation boundary: a bug in one beat (a rule, a record of a
                # shape nobody expected) is logged with its traceback and the next beat runs.
                except Exception:  # noqa: BLE001
                    log.exception("%s", t("this beat failed; the daemon carries on"))
                self.stop_event.wait(max(0.0, started + self.loaded.settings.interval_s
                                         - time.monotonic()))
        finally:
            server.shutdown()
            server.server_close()
            self.dispatcher.close()
            log.info("%s", t("stopped"))
        return 0

    def serving(self) -> bool:
        return any(getattr(r.record, "engine_count", 0) for r in self.latest.values()
                   if r.status == "ok")

    def beat(self) -> None:
        """One interval: start due probes, wait for them (at most 80% of the interval),
        evaluate, move the alerts, publish; said in the daemon's language."""
        with Speaking(self.lang):
            self._beat()

    def _beat(self) -> None:
        # A fresh per-scan memo (process table, host.cpu_load's sample) every beat, even while a
        # slow probe still runs: it keeps what it already read, and nothing memoised outlives
        # one beat (a memo kept while any probe ran served one CPU sample for minutes).
        self.host.new_scan()
        now = time.monotonic()
        cycle = self.scheduler.start_due(now, self.serving())
        self._store(cycle.results)
        waiting = set(cycle.started) | set(self.scheduler.waiting())
        deadline = now + 0.8 * self.loaded.settings.interval_s
        while waiting and time.monotonic() < deadline and not self.stop_event.is_set():
            self.stop_event.wait(0.02)
            done = self.scheduler.collect(time.monotonic())
            more = self.scheduler.start_waiting(time.monotonic())  # what the finished ones held back
            self._store(done + more.results)
            waiting = (waiting | set(more.started)) - {r.name for r in done + more.results}
        self._store(self.scheduler.collect(time.monotonic()))
        # micro-kernels start once the beat's cheap probes are done, and hold the next beats'
        # cheap probes back until they finish (their results arrive in a later beat)
        self._store(self.scheduler.start_kernels(time.monotonic(), self.serving()).results)
        self.evaluate()

    def _store(self, results: list[ProbeResult]) -> None:
        for result in results:
            self.latest[result.name] = result

    def results(self) -> list[ProbeResult]:
        order = [s.name for s in PROBES]
        return sorted(self.latest.values(), key=lambda r: order.index(r.name)
                      if r.name in order else len(order))

    def evaluate(self) -> None:
        results = self.results()
        findings, errors = evaluate(self.loaded.rules, results, self.loaded.config)
        for message in errors:
            log.error("%s", t("rule error: {message}", message=message))
        ok = {r.name for r in results if r.status == "ok"}
        evaluated = {r.id for r in self.loaded.rules if r.evaluated_with(ok)}
        wall = time.time()
        # info findings are for the metrics and reports; only warnings and worse page people
        alerting = [f for f in findings if f.severity >= Severity.WARNING]
        held = held_findings(self.loaded.rules, results, self.loaded.config)
        moved = self.tracker.observe(alerting, evaluated, wall, held)
        self.evaluations += 1
        # an alert the hysteresis holds keeps its finding's series, so that rules exported
        # to Prometheus (doctor/daemon/promrules.py) see the same episode as the daemon
        shown = {(f.rule, f.identity) for f in findings}
        kept = [a.finding for a in self.tracker.active() if a.identity not in shown]
        self.collector.publish(Snapshot(
            results=dict(self.latest), findings=findings + kept,
            alerts=[(a.rule, a.key, a.finding.cause, a.finding.severity.label, a.state)
                    for a in self.tracker.active()],
            evaluated_at=wall, evaluations=self.evaluations))
        self.history.add(wall, self.collector.samples() + self._own_samples())
        self._write_state(findings, wall)
        self._write_baseline(results, findings, wall)
        self._write_textfile(wall)
        self._notify(moved, findings, wall)

    def _report(self, findings, wall: float) -> ScanReport:
        return ScanReport(host=self.host.describe(), level=self.loaded.options.level,
                          started_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(wall)),
                          duration_s=0.0, probes=self.results(), findings=list(findings))

    def _write_state(self, findings, wall: float) -> None:
        """The evaluation to the state file (doctor/daemon/state.py); a failure is logged
        when it starts and when it ends, not every beat."""
        s = self.loaded.settings
        if not s.state_file:
            return
        data = state.to_state(self._report(findings, wall), self.loaded.rules, s.interval_s,
                              wall, self.evaluations)
        try:
            state.write(s.state_file, data)
        except (OSError, ConfigError) as exc:
            problem = t("cannot write the state file {path} (--state-file): {error}",
                        path=s.state_file, error=exc)
            if problem != self._state_problem:
                log.error("%s", t("{problem}; npd and slurm-healthcheck will read this host as "
                                    "unknown", problem=problem))
            self._state_problem = problem
            return
        if self._state_problem:
            log.info("%s", t("state file {path} written again", path=s.state_file))
        self._state_problem = ""

    def _write_baseline(self, results: list[ProbeResult], findings, wall: float) -> None:
        """The baseline beside the state file, when doctor/daemon/baseline.py says it is due;
        why none could be written is logged once per reason."""
        s = self.loaded.settings
        if not s.state_file:
            if self.baseline.requested:
                self._baseline_log(logging.WARNING, t("SIGUSR2: no baseline is kept without a "
                                                      "state file (--state-file, daemon.state_file)"))
                self.baseline.failed()
            return
        path = baseline.baseline_path(s.state_file)
        why = self.baseline.due(path, baseline.unhealthy(results, findings, self.scheduler.slots))
        if not why:
            return
        data = state.to_state(self._report(findings, wall), self.loaded.rules, s.interval_s,
                              wall, self.evaluations)
        try:
            baseline.write(path, data)
        except (OSError, ConfigError) as exc:
            self.baseline.failed()
            self._baseline_log(logging.ERROR, t("cannot write the baseline {path}: {error}",
                                                path=path, error=exc))
            return
        self.baseline.written(path)
        self._baseline_said = ""
        log.info("%s", t("baseline written to {path} ({why})", path=path, why=why))

    def _baseline_log(self, level: int, message: str) -> None:
        if message != self._baseline_said:
            log.log(level, "%s", message)
        self._baseline_said = message

    def _write_textfile(self, wall: float) -> None:
        """The exporter's series to node_exporter's textfile (daemon.textfile), atomically;
        a failure is logged when it starts and when it ends, as the state file's."""
        path = self.loaded.settings.textfile
        if not path or self.textfile is None:
            return
        try:
            write_atomic(path, self.textfile(self.collector, wall))
        except OSError as exc:
            problem = t("cannot write the textfile {path} (--textfile): {error}", path=path,
                        error=exc.strerror or exc)
            if problem != self._textfile_problem:
                log.error("%s", t("{problem}; node_exporter serves the last one written, if any",
                                    problem=problem))
            self._textfile_problem = problem
            return
        if self._textfile_problem:
            log.info("%s", t("textfile {path} written again", path=path))
        self._textfile_problem = ""

    def _own_samples(self) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
        return [("llm_doctor_probe_duration_seconds", (("probe", r.name),), r.duration_s)
                for r in self.latest.values()]

    def _notify(self, moved: Transitions, findings, wall: float) -> None:
        """Fired and escalated alerts go to every sink once (an escalation is a new alert at
        the higher severity: Alertmanager tells alerts apart by their labels); re-sends keep
        every severity an alert fired with alive; a resolve ends them all."""
        s = self.loaded.settings
        expires = 4 * max(s.resend_s, s.interval_s)
        for alert in moved.fired + moved.escalated:
            report = self._incident_report(alert, findings, wall) if s.report_dir else ""
            alert.last_sent = wall
            self.dispatcher.submit([sinks.alert_payload(alert, self.instance, wall, expires,
                                                        report)], "firing")
        sent = moved.fired + moved.escalated
        due = [a for a in self.tracker.firing()
               if a not in sent and wall - a.last_sent >= s.resend_s]
        for alert in due:
            alert.last_sent = wall
        # re-sends go to Alertmanager only: the log and webhooks hear of an alert once
        resend = sinks.payloads(due, self.instance, wall, expires)
        if resend:
            self.dispatcher.submit_to(resend, "firing", sinks.AlertmanagerSink)
        self.dispatcher.submit(sinks.payloads(moved.resolved, self.instance, wall, expires),
                               "resolved")

    def _incident_report(self, alert: Alert, findings, wall: float) -> str:
        from reports.html import render_incident

        report = self._report(findings, wall)
        try:
            html = render_incident(report, self.history, alert)
        except Exception as exc:  # a report must never stop the alert it belongs to
            log.error("%s", t("cannot render the incident report for {rule}: {error}",
                                rule=alert.rule, error=exc))
            return ""
        name = incidents.report_name(alert.rule, alert.key, wall)
        path = incidents.write_report(self.loaded.settings.report_dir, name, html,
                                      self.loaded.settings.report_keep)
        if path:
            log.info("%s", t("incident report written to {path}", path=path))
        return str(path or "")
