"""A capture keeps the byte ranges a probe read of a log, and a journal's output, redacted as
every other text it keeps (doctor/seam/recorded_redact.py); a binary's ranges byte for byte.

The log is a real NCCL log (tests/fixtures/nccl_logs/) inside an engine's output with the
lines that carry secrets in real ones: vLLM's ``non-default args`` at start, a command line,
an Authorization header in a traceback. It is larger than the head and tail the probe reads,
so the capture holds three ranges: the head, and the tail read in two pieces whose seam cuts
a secret's line in two; a fourth secret's line is cut by the tail's first byte.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from doctor.model import ScanOptions
from doctor.seam.host import CommandOutput
from doctor.seam.live import LiveHost
from doctor.seam.recorded import RecordedHost, RecordingHost, RecordWriter
from doctor.seam.recorded_redact import merged, redacted_range
from probes.net import nccl_log

LOG = Path(__file__).parent / "fixtures" / "nccl_logs" / "nccl-2013-ibv-modify-qp.log"
SECRETS = {"args": "sk-PLANTEDargs41", "argv": "hf_PLANTEDargv7", "header": "eyPLANTEDbearer3",
           "seam": "sk-PLANTEDseam8f", "edge": "sk-PLANTEDedge2c"}
FILLER = "INFO 12-07 03:12:44 metrics.py:351] Avg prompt throughput: 0.0 tokens/s, Running: 0 reqs\n"


def _engine_log(path: Path) -> bytes:
    """An engine's output of 3.5 MiB: secrets at its start, NCCL's lines, requests' lines,
    and two secrets placed on the edges of the ranges the probe reads."""
    s = SECRETS
    head = (f"INFO 12-07 03:10:01 api_server.py:585] non-default args: {{'model': 'Qwen/Qwen2.5-72B', "
            f"'api_key': '{s['args']}', 'tensor_parallel_size': 8}}\n"
            f"INFO 12-07 03:10:01 launcher] argv: vllm serve Qwen/Qwen2.5-72B --hf-token {s['argv']} --port 8000\n"
            + LOG.read_text()
            + f"WARNING 12-07 03:10:09 hub.py:12] retrying with headers {{'Authorization': 'Bearer {s['header']}'}}\n")
    size = (7 << 19)  # 3.5 MiB: over the 3 MiB the probe reads whole
    body = bytearray((head + FILLER * (size // len(FILLER))).encode()[:size])
    tail_at = size - nccl_log.TAIL_BYTES
    for at, secret in ((tail_at + nccl_log.CHUNK, s["seam"]), (tail_at, s["edge"])):
        line = f"\nserve --api-key {secret} --x\n".encode()
        start = at - line.index(secret.encode()) - 3  # the range's edge falls inside the value
        body[start:start + len(line)] = line
    path.write_bytes(bytes(body))
    return bytes(body)


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    folder = tmp_path_factory.mktemp("capture")
    log = folder / "vllm.log"
    raw = _engine_log(log)
    host = RecordingHost(LiveHost(), folder / "cap")
    live = nccl_log.probe(host, ScanOptions(nccl_log=str(log)))
    host.save({"level": "quick"})
    return folder / "cap", log, raw, live


def test_the_secrets_in_a_logs_ranges_stay_out_of_the_capture(captured):
    cap, log, raw, live = captured
    assert all(s.encode() in raw for s in SECRETS.values())  # planted where the probe reads
    assert live.logs[0].skipped_bytes > 0 and live.logs[0].failures  # head and tail, NCCL's lines
    kept = (cap / "fs" / str(log).lstrip("/")).read_bytes()
    leaks = [name for name, s in SECRETS.items() if s[:8].encode() in kept]
    assert leaks == []
    assert b"'api_key': ***," in kept and b"--hf-token *** --port" in kept and b"Bearer ***" in kept


def test_a_replay_reads_what_the_live_scan_read(captured):
    cap, log, raw, live = captured
    kept = (cap / "fs" / str(log).lstrip("/")).read_bytes()
    assert len(kept) == len(raw)  # every offset where it was
    replayed = nccl_log.probe(RecordedHost(cap), ScanOptions(nccl_log=str(log)))
    assert replayed == live


def test_a_binarys_ranges_are_kept_byte_for_byte(tmp_path):
    elf = tmp_path / "libx.so"
    data = b"\x7fELF\x02\x01" + b"\0" * 58 + b"--api-key sk-notmasked1 --port 1\n" + bytes(range(256))
    elf.write_bytes(data)
    host = RecordingHost(LiveHost(), tmp_path / "cap")
    assert host.read_bytes(str(elf), 0, 64) + host.read_bytes(str(elf), 64, len(data) - 64) == data
    host.save({"level": "quick"})
    assert (tmp_path / "cap" / "fs" / str(elf).lstrip("/")).read_bytes() == data


def test_a_journals_output_is_redacted_in_the_capture(tmp_path):
    writer = RecordWriter(tmp_path / "cap")
    argv = ("journalctl", "--unit=vllm.service", "--output=cat")
    writer.command(argv, CommandOutput(argv, 0, f"args: --api-key {SECRETS['args']} x\n",
                                       f"HF_TOKEN={SECRETS['argv']}\n"))
    writer.save({"level": "quick"})
    text = "".join(p.read_text() for p in (tmp_path / "cap").rglob("*") if p.is_file())
    assert SECRETS["args"] not in text and SECRETS["argv"] not in text and "--api-key ***" in text


@pytest.mark.parametrize("data,inside,want", [
    (b"a --api-key sk-1\nHF_TOKEN=\"a b\"\n", False, b"a --api-key *** \nHF_TOKEN=*** *\n"),  # padded, cut
    (b"y sk-tail --port 1\nok\n", True, b"                  \nok\n"),  # begins inside a line
    (b"\0--api-key sk-kept\n--token t1\n", False, b"\0--api-key sk-kept\n--token **\n"),  # NUL: binary
    (b"--api-key \xff\xfe\xfd\xfc\n", False, b"--api-key *** \n"),  # undecodable bytes: masked too
])
def test_a_range_is_masked_line_by_line_at_its_own_length(data, inside, want):
    assert redacted_range(data, inside) == want and len(want) == len(data)


def test_ranges_that_touch_are_one():
    assert merged([(10, 5), (0, 10), (30, 2), (31, 4)]) == [(0, 15), (30, 5)]
