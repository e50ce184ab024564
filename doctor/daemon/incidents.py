"""Incident reports written when an alert fires: self-contained HTML, atomic, bounded.

File names sort by time: ``incident-20260101T120000Z-cpu-contention-<key hash>.html``.
Only the newest ``keep`` reports stay (at least one: the one just written); older ones are
deleted after each write. ``unusable`` checks the folder when the daemon starts or reloads,
so a folder that cannot take a report is refused then, not found out when an alert fires.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import tempfile
import time
from pathlib import Path

from doctor.i18n import t
from doctor.output import write_atomic

log = logging.getLogger("llm-doctor.reports")


def report_name(rule: str, key: str, now: float) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"incident-{stamp}-{rule}-{digest}.html"


def unusable(folder: str) -> str | None:
    """Why ``folder`` cannot take reports (created if missing), or None when it can: it must
    be a directory this process can write a file in (tried, as root passes access checks)."""
    try:
        os.makedirs(folder, exist_ok=True)
        if not stat.S_ISDIR(os.stat(folder).st_mode):
            return t("is not a directory")
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".incident-check-"):
            pass
    except FileExistsError:
        return t("exists and is not a directory")
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        return t("cannot write a report there: {error}", error=getattr(exc, "strerror", None) or exc)
    return None


def write_report(folder: str, name: str, html: str, keep: int) -> Path | None:
    """Write ``html`` to ``folder/name`` atomically, then prune; None (logged) on failure."""
    root = Path(folder)
    try:
        root.mkdir(parents=True, exist_ok=True)
        write_atomic(root / name, html)
    except OSError as exc:
        log.error("%s", t("cannot write incident report {path}: {error}", path=root / name,
                          error=exc.strerror or exc))
        return None
    reports = sorted(root.glob("incident-*.html"))
    for old in reports[: max(0, len(reports) - max(1, keep))]:
        try:
            old.unlink()
        except OSError as exc:
            log.error("%s", t("cannot remove old report {path}: {error}", path=old,
                              error=exc.strerror))
    return root / name
