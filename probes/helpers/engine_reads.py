"""Two reads the engine probes share: a JSON page of an engine, and a process's argv.

Both turn a failure into a reason (the page's, appended to the caller's ``errors``; an empty
argv for a process that ended or cannot be read), never an exception: an engine's answer
is hostile input (doctor.values.page_json bounds its depth and its numbers).
"""

from __future__ import annotations

from typing import Any

from doctor.seam.host import Host, HostReadError
from doctor.values import page_json

PAGE_MAX_BYTES = 4 << 20  # an engine's JSON page (/props, /slots, /api/ps) is a few KiB


def json_page(host: Host, url: str, errors: list[str], timeout_s: float = 5.0) -> Any:
    """The JSON at ``url``, or None with why in ``errors`` (unreachable, not 200, not JSON)."""
    try:
        page = host.http_get(url, timeout_s, PAGE_MAX_BYTES)
    except HostReadError as exc:
        errors.append(str(exc))
        return None
    if page.status != 200:
        errors.append(f"{url}: HTTP {page.status}")
        return None
    try:
        return page_json(page.body)
    except ValueError:
        errors.append(f"{url}: not JSON")
        return None


def argv_of(host: Host, pid: int | None) -> list[str]:
    """``/proc/<pid>/cmdline`` as arguments; [] when there is no pid or it cannot be read."""
    if pid is None:
        return []
    try:
        return host.read_text(f"/proc/{pid}/cmdline").replace("\0", " ").split()
    except HostReadError:
        return []
