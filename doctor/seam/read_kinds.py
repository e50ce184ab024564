"""The kinds of read a host answers, each as one class: how it reads live, how a
recording keeps it, how a replay answers it (docs/recorded-host.md has a section each).

Adding a kind is one class here, a method on the hosts that calls ``Recorded*._read`` /
``RecordingHost._read`` with it, and one section in the docs. ``key`` names the read in
``[errors]`` of host.toml, where a failure can be recorded or planted by hand.

The hosts of doctor/seam/recorded.py call a kind with themselves (``w``, the writer of a
recording; ``r``, the recorded host): this module imports neither, so the two stay one
arrow apart (recorded → read_kinds).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from doctor.seam.host import CommandOutput, HostReadError, HttpResponse, PathInfo, Reason
from doctor.seam.http import display_url
from doctor.seam.live import LiveHost

RecordWriter = Any  # doctor.seam.recorded.RecordWriter
RecordedHost = Any  # doctor.seam.recorded.RecordedHost


class ReadKind:
    name = ""

    def key(self, *args: Any) -> str:
        return str(args[0])

    def live(self, host: LiveHost, *args: Any) -> Any:
        return getattr(host, self.name)(*args)

    def write(self, w: RecordWriter, args: tuple, value: Any) -> None:
        raise NotImplementedError

    def write_error(self, w: RecordWriter, args: tuple, exc: HostReadError) -> None:
        # An absent file replays as absent by itself; anything else is recorded.
        if exc.reason != Reason.NOT_FOUND:
            w.error(self.key(*args), exc.reason)

    def replay(self, r: RecordedHost, args: tuple) -> Any:
        raise NotImplementedError


class FileKind(ReadKind):
    name = "read_text"

    def write(self, w, args, value):
        w.file(args[0], value)

    def replay(self, r, args):
        data = r.store.read_bytes(r.store.fs / args[0].lstrip("/"), args[0])
        return data.decode("utf-8", "replace")


class BytesKind(ReadKind):
    name = "read_bytes"

    def write(self, w, args, value):
        w.byte_range(args[0], args[1], value)

    def replay(self, r, args):
        return r.store.read_range(r.store.fs / args[0].lstrip("/"), args[0], args[1], args[2])


class DirKind(ReadKind):
    name = "list_dirs"

    def write(self, w, args, value):
        w.dir(args[0], value)

    def replay(self, r, args):
        return r.store.list_dirs(r.store.fs / args[0].lstrip("/"), args[0])


class FilesKind(ReadKind):
    name = "list_files"

    def write(self, w, args, value):
        w.files(args[0], value)

    def replay(self, r, args):
        if args[0] not in r.sections["files"]:
            raise HostReadError(args[0], Reason.NOT_FOUND)
        return dict(r.sections["files"][args[0]])


class LinksKind(ReadKind):
    name = "list_links"

    def write(self, w, args, value):
        w.links(args[0], value)

    def replay(self, r, args):
        if args[0] not in r.sections["links"]:
            raise HostReadError(args[0], Reason.NOT_FOUND)
        return dict(r.sections["links"][args[0]])


class LinkKind(ReadKind):
    name = "read_link"

    def write(self, w, args, value):
        w.link(args[0], value)

    def replay(self, r, args):
        return r.store.read_link(r.store.fs / args[0].lstrip("/"), args[0])


class StatKind(ReadKind):
    name = "stat"

    def write(self, w, args, value):
        w.stat(args[0], value)

    def replay(self, r, args):
        info = r.sections["paths"].get(args[0])
        if info is None:
            raise HostReadError(args[0], Reason.NOT_FOUND)
        return PathInfo(device=info["device"], is_dir=info.get("is_dir", True),
                        fs_total_bytes=info["fs_total_bytes"], fs_free_bytes=info["fs_free_bytes"])


class CommandKind(ReadKind):
    name = "run"

    def key(self, argv: Sequence[str], *_: Any) -> str:
        return " ".join(argv)

    def write(self, w, args, value):
        w.command(args[0], value)

    def write_error(self, w, args, exc):
        w.error(self.key(*args), exc.reason)  # not installed replays as not installed

    def replay(self, r, args):
        argv = tuple(args[0])
        name = self.key(argv)
        cmd = r.commands.get(argv)
        if cmd is None:
            raise HostReadError(name, Reason.NOT_FOUND, "not recorded")
        stdout = ""
        if cmd.get("stdout_file"):
            stdout = r.store.read_bytes(r.store.root / cmd["stdout_file"], name).decode("utf-8", "replace")
        return CommandOutput(argv, int(cmd.get("rc", 0)), stdout, cmd.get("stderr", ""))


class HttpKind(ReadKind):
    """Every GET is kept in order; a replay answers a URL's GETs in that order, the last
    one repeating (two scrapes of /metrics replay as the two pages recorded)."""

    name = "http_get"

    def key(self, url: str, *_: Any) -> str:
        return f"GET {display_url(url)}"

    def write(self, w, args, value):
        w.http(args[0], value)

    def write_error(self, w, args, exc):
        w.http(args[0], exc.reason, exc.detail)

    def replay(self, r, args):
        url = display_url(args[0])
        answers = r.http.get(url)
        if not answers:
            raise HostReadError(url, Reason.FAILED, "not recorded: connection refused on replay")
        with r.lock:
            index = r.http_seen.get(url, 0)
            r.http_seen[url] = index + 1
        entry = answers[min(index, len(answers) - 1)]
        if "error" in entry:
            raise HostReadError(url, entry["error"], entry.get("detail", "recorded"))
        body = ""
        if entry.get("body_file"):
            body = r.store.read_bytes(r.store.root / entry["body_file"], url,
                                      limit=args[2] if len(args) > 2 else 8 << 20).decode("utf-8", "replace")
        return HttpResponse(url, int(entry.get("status", 200)), str(entry.get("content_type", "")),
                            body, float(entry.get("elapsed_s", 0.0)))


class NvmlKind(ReadKind):
    name = "nvml"

    def key(self, name: str, *args: Any) -> str:
        return f"nvml {name}({', '.join(map(repr, args))})"

    def live(self, host, *args):
        return host.nvml(*args)

    def write(self, w, args, value):
        w.nvml(args[0], args[1:], value)

    def write_error(self, w, args, exc):
        w.nvml(args[0], args[1:], exc.reason)

    def replay(self, r, args):
        if r.nvml_calls is None:
            raise HostReadError(self.key(*args), Reason.LIBRARY_MISSING,
                                "NVIDIA driver not loaded in this recording (no nvml.json)")
        answer = r.nvml_calls.get((args[0], tuple(args[1:])))
        if answer is None:
            raise HostReadError(self.key(*args), Reason.NOT_FOUND, "not recorded")
        if "error" in answer:  # recorded, or a count the recording cannot answer for
            raise HostReadError(self.key(*args), answer["error"], answer["detail"])
        return answer["value"]


class AmdsmiKind(NvmlKind):
    """AMD SMI calls (doctor/seam/amdsmi.py), kept in amdsmi.json as NVML's are in nvml.json."""

    name = "amdsmi"

    def key(self, name: str, *args: Any) -> str:
        return f"amdsmi {name}({', '.join(map(repr, args))})"

    def live(self, host, *args):
        return host.amdsmi(*args)

    def write(self, w, args, value):
        w.amdsmi(args[0], args[1:], value)

    def write_error(self, w, args, exc):
        w.amdsmi(args[0], args[1:], exc.reason)

    def replay(self, r, args):
        if r.amdsmi_calls is None:
            raise HostReadError(self.key(*args), Reason.LIBRARY_MISSING,
                                "AMD driver not loaded in this recording (no amdsmi.json)")
        answer = r.amdsmi_calls.get((args[0], tuple(args[1:])))
        if answer is None:
            raise HostReadError(self.key(*args), Reason.NOT_FOUND, "not recorded")
        if "error" in answer:
            raise HostReadError(self.key(*args), answer["error"], answer["detail"])
        return answer["value"]


FILE, BYTES, DIRS, FILES, LINKS, LINK, STAT, COMMAND, HTTP, NVML, AMDSMI = (
    FileKind(), BytesKind(), DirKind(), FilesKind(), LinksKind(), LinkKind(), StatKind(), CommandKind(),
    HttpKind(), NvmlKind(), AmdsmiKind())


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "_", text)[:60]
