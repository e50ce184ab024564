"""The one seam through which every probe reads the host.

A probe never opens a file, runs a command, stats a path, fetches a page or calls NVML
itself: it asks a ``Host``. Two implementations stand behind the interface:

* ``LiveHost`` (doctor/seam/live.py) reads this machine.
* ``RecordedHost`` (doctor/seam/recorded.py) reads a directory written by ``llm-doctor capture``
  or by hand (docs/recorded-host.md).

``RecordingHost`` (doctor/seam/recorded.py) wraps a live host and writes everything read
through it into a recorded directory, so that ``capture`` then ``scan --replay`` sees
exactly what the live scan saw. Measurements (micro-kernels, CPU sampling) cannot be
replayed from raw reads; they go through ``Host.measure`` and their results are recorded
as values. Each kind of read is one class in doctor/seam/read_kinds.py.
"""

from __future__ import annotations

import enum
import re
import threading
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence, TypeVar

from doctor.i18n import t

T = TypeVar("T")


class Reason(str, enum.Enum):
    """Why a read failed: one vocabulary for files, commands, pages and NVML calls."""

    NOT_FOUND = "not-found"
    NO_PERMISSION = "no-permission"
    TIMEOUT = "timeout"
    FAILED = "failed"
    NOT_SUPPORTED = "not-supported"  # the hardware or driver does not report it
    DEVICE_LOST = "device-lost"  # the GPU fell off the bus
    LIBRARY_MISSING = "library-missing"  # no driver, no libnvidia-ml or libamd_smi

    def __str__(self) -> str:
        return self.value

    @classmethod
    def parse(cls, text: object) -> "Reason":
        """A reason from a recording; ValueError names the choices."""
        try:
            return cls(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a read-failure reason; use one of "
                             f"{', '.join(r.value for r in cls)}") from None


def reason_text(reason: Reason | str) -> str:
    """A read-failure reason for people, in the current language (in English the value
    itself, ``not-found``, as records and rules keep it)."""
    value = getattr(reason, "value", reason)
    words = {
        "not-found": t("not-found"), "no-permission": t("no-permission"),
        "timeout": t("timeout"), "failed": t("failed"), "not-supported": t("not-supported"),
        "device-lost": t("device-lost"), "library-missing": t("library-missing"),
    }
    return words.get(str(value), str(value))


def detail_text(detail: str) -> str:
    """A read's detail for people: the seam's own fixed words in the current language,
    anything else (the kernel's strerror, an engine's answer) as it came."""
    words = {
        "not recorded": t("not recorded"), "recorded": t("recorded"),
        "command not installed": t("command not installed"),
        "not recorded: connection refused on replay": t("not recorded: connection refused on replay"),
        "not a regular file: not read": t("not a regular file: not read"),
        "connection refused": t("connection refused"),
        "the server closed the connection without answering":
            t("the server closed the connection without answering"),
        "body cut short, or its chunked encoding broken":
            t("body cut short, or its chunked encoding broken"),
        "the URL or a header is not ASCII": t("the URL or a header is not ASCII"),
        "NVIDIA driver not loaded in this recording (no nvml.json)":
            t("NVIDIA driver not loaded in this recording (no nvml.json)"),
        "AMD driver not loaded in this recording (no amdsmi.json)":
            t("AMD driver not loaded in this recording (no amdsmi.json)"),
    }
    if detail in words:
        return words[detail]
    timed = re.fullmatch(r"(no answer|body not complete) in ([0-9.e+-]+) s", detail)
    if timed is not None:
        return (t("no answer in {seconds} s", seconds=timed[2]) if timed[1] == "no answer"
                else t("body not complete in {seconds} s", seconds=timed[2]))
    return detail


class HostReadError(Exception):
    """A read of the host failed; ``reason`` says why, ``detail`` says more.

    ``str(exc)`` is the English records keep; ``text()`` says it to people in the current
    language."""

    REASONS = tuple(r.value for r in Reason)

    def __init__(self, path: str, reason: Reason | str, detail: str = "") -> None:
        self.path = path
        self.reason = Reason(reason)
        self.detail = detail
        super().__init__(f"{path}: {self.reason.value}" + (f" ({detail})" if detail else ""))

    def text(self) -> str:
        """The error for people, in the current language."""
        if not self.detail:
            return t("{path}: {reason}", path=self.path, reason=reason_text(self.reason))
        return t("{path}: {reason} ({detail})", path=self.path, reason=reason_text(self.reason),
                 detail=detail_text(self.detail))


_SAID = re.compile(r"(?P<path>.+?): (?P<reason>not-found|no-permission|timeout|failed|"
                   r"not-supported|device-lost|library-missing)(?: \((?P<detail>.*)\))?", re.S)


def read_error_text(message: str) -> str:
    """A read error a record keeps as text (``str(exc)``: "path: not-found (detail)") for
    people, in the current language; any other text as it is."""
    found = _SAID.fullmatch(message)
    if found is None:
        return message
    return HostReadError(found["path"], found["reason"], found["detail"] or "").text()


class MalformedError(HostReadError):
    """A file was read, but its content is not what the kernel writes there."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(path, Reason.FAILED, problem)
        self.problem = problem
        self.args = (f"{path}: {problem}",)

    def __str__(self) -> str:
        return f"{self.path}: {self.problem}"

    def text(self) -> str:
        return str(self)


class MeasurementError(Exception):
    """A measurement (micro-kernel, sampling) failed; the message says why. ``said`` is
    the message for people where it differs (in the current language), else the message."""

    def __init__(self, message: str = "", said: str | None = None) -> None:
        super().__init__(message)
        self.said = said

    def text(self) -> str:
        return self.said if self.said is not None else str(self)


@dataclass(frozen=True, slots=True)
class CommandOutput:
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str


@dataclass(frozen=True, slots=True)
class PathInfo:
    """What ``stat``/``statvfs`` say of a path."""

    device: str  # "major:minor" of st_dev, as in /sys/dev/block/
    is_dir: bool
    fs_total_bytes: int
    fs_free_bytes: int  # available to unprivileged users (f_bavail)


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """One answered GET; a non-2xx status is an answer, not an error."""

    url: str
    status: int
    content_type: str
    body: str  # decoded as UTF-8, undecodable bytes replaced
    elapsed_s: float


class Host(Protocol):
    kind: str  # "live" or "recorded"

    def read_text(self, path: str) -> str: ...
    def list_dirs(self, path: str) -> list[str]: ...
    def list_files(self, path: str) -> dict[str, int]: ...
    def list_links(self, path: str) -> dict[str, str]: ...
    def read_link(self, path: str) -> str: ...
    def read_bytes(self, path: str, offset: int, size: int) -> bytes: ...
    def stat(self, path: str) -> PathInfo: ...
    def run(self, argv: Sequence[str], timeout_s: float = 5.0) -> CommandOutput: ...
    def measure(self, name: str, fn: Callable[[], Any]) -> Any: ...
    def http_get(self, url: str, timeout_s: float = 5.0, max_bytes: int = 8 << 20,
                 headers: dict[str, str] | None = None) -> HttpResponse: ...
    def nvml(self, name: str, *args: int | str) -> Any: ...
    def amdsmi(self, name: str, *args: int | str) -> Any: ...
    def memo(self, key: str, fn: Callable[[], T]) -> T: ...
    def new_scan(self) -> None: ...
    def describe(self) -> dict[str, str]: ...


class Memo:
    """A per-scan cache: what several probes need (the process table) is read once."""

    def __init__(self) -> None:
        self._memo_lock = threading.Lock()
        self._memo: dict[str, tuple[threading.Lock, list]] = {}

    def memo(self, key: str, fn: Callable[[], T]) -> T:
        with self._memo_lock:
            lock, box = self._memo.setdefault(key, (threading.Lock(), []))
        with lock:  # the second probe waits for the first's read instead of repeating it
            if not box:
                box.append(fn())
            return box[0]

    def new_scan(self) -> None:
        with self._memo_lock:
            self._memo = {}
