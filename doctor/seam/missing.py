"""Why a record's field holds no value, said the same way in every probe.

A record keeps ``missing: dict[str, str]``: field name → read-failure reason
(``doctor.seam.host.Reason``: not-found, no-permission, timeout, failed, not-supported,
device-lost, library-missing), so that ``None`` never has to mean three things. Rules read
it (``'vm_swappiness' in host.sysctl.missing``); reports show it beside the value.
A file that was read but holds garbage is not missing: it is a MalformedError.
"""

from __future__ import annotations

from doctor.seam.host import Host, HostReadError, MalformedError


class Missing:
    """Collects the reasons while a probe reads; ``reasons`` goes into the record."""

    def __init__(self) -> None:
        self.reasons: dict[str, str] = {}

    def text(self, field: str, host: Host, path: str) -> str | None:
        """The file's text, or None with the reason kept under ``field``."""
        try:
            return host.read_text(path)
        except MalformedError:
            raise
        except HostReadError as exc:
            self.reasons[field] = exc.reason.value
            return None

    def absent(self, field: str, reason: str) -> None:
        self.reasons[field] = reason
