"""What a recording keeps of the ranges of a file a probe read with ``host.read_bytes``: the
text in them passes doctor.redact as every other text a capture keeps, each byte where it was.

The ranges are of two kinds of file. Binaries: a library's ELF headers
(probes/helpers/cuda_build.py), a GGUF header, a PCI device's config space under /sys
(probes/helpers/pcie_acs.py): kept as read, byte for byte, since a replay parses them.
Logs: an engine's stdout, NCCL's debug files (probes/net/nccl_log.py): a log carries what the
engine printed, its arguments with ``--api-key`` among them (vLLM logs its non-default
arguments at start), ``HF_TOKEN=`` in a traceback's environment, a URL with its password.
A file is a binary when it lies under /sys or /dev or its first bytes are an ELF or GGUF
magic; the ranges of every other file are text.

A range is redacted line by line (``\\n``), each line as long as it was (a mask shorter than
its value is padded with spaces, a longer one cut), so the offsets the replay reads at stay
true and the file's listed size with them. A line holding a NUL byte is kept as read (a
log's zero-filled tail after a crash holds no text). A range that begins inside a line (at
an offset other than 0) has its first line blanked: the rest of a value whose name lies
before the range, unread, cannot be told from any other word; the log reader drops that
line anyway (a line cut at a range's edge is no line).
"""

from __future__ import annotations

from typing import BinaryIO

from doctor.redact import redact_text

BINARY_DIRS = ("/sys/", "/dev/")
BINARY_MAGICS = (b"\x7fELF", b"GGUF")
BLOCK_LINES = 256


def is_binary(path: str, head: bytes | None) -> bool:
    """Whether the file ``path`` (its first bytes ``head``, None when not read) is kept as read."""
    return path.startswith(BINARY_DIRS) or (head is not None and head.startswith(BINARY_MAGICS))


def merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(offset, length) ranges joined where they touch or overlap, in order."""
    out: list[list[int]] = []
    for start, length in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], start + length)
        else:
            out.append([start, start + length])
    return [(start, end - start) for start, end in out]


def redacted_range(data: bytes, inside_line: bool) -> bytes:
    """``data`` with each text line masked in place, ``len(data)`` bytes long; the first
    line blanked when ``data`` begins inside a line."""
    lines = data.split(b"\n")
    if inside_line and b"\0" not in lines[0]:
        lines[0] = b" " * len(lines[0])
    # Masking finds a value by the name before it on its line, so a block in which it
    # masks nothing holds no line it would mask: most of a log is passed over a block at a
    # time (an engine's "tokens/s" lines make every line a candidate, and a line at a time
    # costs 4 times as much)
    for at in range(0, len(lines), BLOCK_LINES):
        block = b"\n".join(lines[at:at + BLOCK_LINES]).decode("utf-8", "surrogateescape")
        if redact_text(block) != block:
            for i in range(at, min(at + BLOCK_LINES, len(lines))):
                lines[i] = _line(lines[i])
    return b"\n".join(lines)


def _line(line: bytes) -> bytes:
    if b"\0" in line:
        return line
    text = line.decode("utf-8", "surrogateescape")
    masked = redact_text(text)
    if masked == text:
        return line
    return masked.encode("utf-8", "surrogateescape")[:len(line)].ljust(len(line), b" ")


def redact_file(f: BinaryIO, path: str, ranges: list[tuple[int, int]]) -> None:
    """The recorded file ``f`` (the host's ``path``) with the text in its ``ranges`` redacted
    in place; a binary's left as it is."""
    spans = merged(ranges)
    head = f.read(4) if spans and spans[0][0] == 0 else None
    if not spans or is_binary(path, head):
        return
    for start, length in spans:
        f.seek(start)
        data = redacted_range(f.read(length), inside_line=start > 0)
        f.seek(start)
        f.write(data)
