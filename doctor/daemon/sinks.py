"""Where alerts go: Alertmanager's v2 API, a generic JSON webhook, and the log.

Alertmanager (https://prometheus.io/docs/alerting/latest/clients/): the client POSTs a JSON
list of alerts to ``/api/v2/alerts``, re-sends firing alerts regularly (their ``endsAt`` a
few resend intervals ahead, so that an alert from a daemon that died expires by itself),
and sends ``endsAt`` = now once resolved. Alertmanager deduplicates by label set, so the
labels are fixed for the life of an alert: alertname (the rule id), rule, cause, key,
severity, instance (this host) and job.

Delivery runs on one background thread with a bounded queue: a slow or absent receiver
never holds up the probes, and a failed POST is logged with its URL, not retried forever.
"""

from __future__ import annotations

import http.client
import json
import logging
import queue
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime, timezone
from typing import Any, Protocol

from doctor.daemon.alerts import Alert
from doctor.daemon.catalog.labels import finding_key
from doctor.i18n import speak_here, t
from doctor.i18n.text import render

log = logging.getLogger("llm-doctor.alerts")


def rfc3339(unix: float) -> str:
    return datetime.fromtimestamp(unix, timezone.utc).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z")


def alert_payload(alert: Alert, instance: str, now: float, expires_s: float,
                  report_url: str = "", severity: str = "") -> dict[str, Any]:
    """One alert in Alertmanager's v2 shape (postableAlert), at ``severity`` (by default the
    highest it fired with; an escalated alert is one payload per severity: ``payloads``)."""
    f = alert.finding
    labels = {"alertname": alert.rule, "rule": alert.rule, "cause": f.cause,
              "severity": severity or alert.severity or f.severity.label,
              "instance": instance, "job": "llm-doctor"}
    if alert.key:
        labels["key"] = finding_key(alert.key)
    annotations = {"summary": render(f.title), "description": render(f.remediation),
                   "symptoms": ",".join(f.symptoms), "playbook": f.playbook,
                   "evidence": json.dumps(f.evidence, default=str, sort_keys=True)[:2000]}
    if report_url:
        annotations["report"] = report_url
    ends = alert.resolved_at if alert.resolved_at is not None else now + expires_s
    return {"labels": labels, "annotations": annotations,
            "startsAt": rfc3339(alert.fired_at or alert.since), "endsAt": rfc3339(ends),
            "generatorURL": f"llm-doctor://{instance}/rules/{alert.rule}"}


def payloads(alerts: list[Alert], instance: str, now: float, expires_s: float) -> list[dict[str, Any]]:
    """Every severity each alert fired with, one payload each: a re-send keeps the warning
    of an escalated alert alive beside its critical, a resolve ends both."""
    return [alert_payload(a, instance, now, expires_s, severity=s)
            for a in alerts for s in (a.severities or [""])]


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """An alert goes to the URL configured, never where an answer points it: a redirect is
    an error that names it (point the setting at the final URL)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102
        raise urllib.error.HTTPError(req.full_url, code, t(
            "redirected to {url}; configure that URL instead (alerts do not follow redirects)",
            url=newurl), headers, fp)


_OPENER = urllib.request.build_opener(_NoRedirect)


def post_json(url: str, body: Any, timeout_s: float = 5.0) -> None:
    """POST ``body`` as JSON; raises OSError (URLError) with the URL on failure."""
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
    with _OPENER.open(request, timeout=timeout_s) as response:  # noqa: S310 (configured URL)
        response.read(1 << 16)


class Sink(Protocol):
    def send(self, alerts: list[dict[str, Any]], status: str) -> None: ...


class AlertmanagerSink:
    def __init__(self, base_url: str) -> None:
        self.url = base_url.rstrip("/") + "/api/v2/alerts"

    def send(self, alerts: list[dict[str, Any]], status: str) -> None:
        post_json(self.url, alerts)


class WebhookSink:
    """POSTs ``{"status": "firing"|"resolved", "alerts": [...]}`` (same alert shape)."""

    def __init__(self, url: str) -> None:
        self.url = url

    def send(self, alerts: list[dict[str, Any]], status: str) -> None:
        post_json(self.url, {"status": status, "alerts": alerts})


class LogSink:
    def send(self, alerts: list[dict[str, Any]], status: str) -> None:
        for a in alerts:
            labels = a["labels"]
            said = {"firing": t("alert firing"), "resolved": t("alert resolved")}
            log.warning("%s", t("{alert}: {rule} {key} [{severity}] {summary}",
                                alert=said.get(status, status), rule=labels["rule"],
                                key=labels.get("key", ""), severity=labels["severity"],
                                summary=a["annotations"]["summary"]))


class Dispatcher:
    """Sends batches to every sink from one thread; drops (and logs) when 100 are queued."""

    def __init__(self, sinks: list[Any], lang: str | None = None) -> None:
        self.sinks = sinks
        self.lang = lang  # what the sinks log, said in it (the daemon's); None: the process's
        self.failures = 0
        self.sent = 0
        self._queue: queue.Queue[tuple[list[dict[str, Any]], str, type | None] | None] = \
            queue.Queue(100)
        self._thread = threading.Thread(target=self._run, name="alert sinks", daemon=True)
        self._thread.start()

    def submit(self, alerts: list[dict[str, Any]], status: str) -> None:
        self.submit_to(alerts, status, None)

    def submit_to(self, alerts: list[dict[str, Any]], status: str, only: type | None) -> None:
        """Queue ``alerts`` for the sinks of type ``only`` (every sink when None)."""
        if not alerts:
            return
        try:
            self._queue.put_nowait((alerts, status, only))
        except queue.Full:
            log.error("%s", t("alert queue full: {count} alert(s) dropped; are the receivers "
                              "reachable?", count=len(alerts)))

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            alerts, status, only = item
            if self.lang is not None:
                speak_here(self.lang)
            for sink in self.sinks:
                if only is not None and not isinstance(sink, only):
                    continue
                try:
                    sink.send(alerts, status)
                    self.sent += 1
                except (OSError, ValueError, http.client.HTTPException) as exc:  # refused, timeouts,
                    # HTTP errors (URLError and HTTPError are OSErrors), malformed answers
                    self.failures += 1
                    log.error("%s", t("cannot send {count} alert(s) to {url}: {error}",
                                      count=len(alerts),
                                      url=getattr(sink, "url", type(sink).__name__), error=exc))

    def close(self, timeout_s: float = 5.0) -> None:
        """Deliver what is queued (up to ``timeout_s``), then stop the thread."""
        deadline = time.monotonic() + timeout_s
        while not self._queue.empty() and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            pass
        self._thread.join(max(0.0, deadline - time.monotonic()))
