"""Property tests of the kernel-file parsers: any text either parses to a valid record or is
a MalformedError naming the file; what the kernel's printf writes parses back to its values.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import pytest

from probes.helpers.dimms import parse_dmidecode
from probes.host.cpu import parse_cpuinfo, parse_khz, parse_loadavg
from probes.helpers.proc_limits import ROWS, parse_limits
from probes.host.memory import parse_meminfo
from probes.host.sysctl import parse_choice, parse_int, tcp_ext
from probes.helpers.kernel_text import MAX_COUNT, MalformedError
from tests.fixtures.builders.kernel_formats import meminfo, proc_limits

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

# Text that looks like kernel output often enough to reach past the first check: digits,
# the words and separators the formats use, and anything else.
WORDS = st.sampled_from(["0", "1", "4096", "-1", "18446744073709551616", "unlimited", "kB",
                         "nan", "inf", "1e9", "0.42", "[madvise]", "TcpExt:", "MemTotal:",
                         "Max open files", "processor\t:", "\t", " ", "\n", ":", "[", "]"])
KERNELISH = st.lists(st.one_of(WORDS, st.text(max_size=8)), max_size=40).map("".join)
TEXT = st.one_of(st.text(max_size=400), KERNELISH)
COUNT = st.integers(0, MAX_COUNT)


def _valid_or_malformed(parse, text, path):
    """parse(text) or MalformedError naming ``path``; nothing else may escape."""
    try:
        return parse(text)
    except MalformedError as exc:
        assert str(exc).startswith(f"{path}: "), str(exc)
        return None


@pytest.mark.slow
@SETTINGS
@given(TEXT)
@example("")
@example("0.1 0.2 0.3 1/2 3")
def test_loadavg_any_text(text):
    got = _valid_or_malformed(parse_loadavg, text, "/proc/loadavg")
    if got is not None:
        assert all(math.isfinite(v) and v >= 0 for v in got)


@SETTINGS
@given(st.floats(0, 1e6), st.floats(0, 1e6), st.floats(0, 1e6), st.integers(1, 10**6), COUNT)
def test_loadavg_round_trip(one, five, fifteen, running, last_pid):
    # fs/proc/loadavg.c: "%lu.%02lu %lu.%02lu %lu.%02lu %u/%d %d\n"
    text = f"{one:.2f} {five:.2f} {fifteen:.2f} 1/{running} {last_pid}\n"
    assert parse_loadavg(text) == (float(f"{one:.2f}"), float(f"{five:.2f}"))


@SETTINGS
@given(TEXT)
@example("MemTotal: 1 kB\nMemTotal 2 kB\n")
def test_meminfo_any_text(text):
    got = _valid_or_malformed(parse_meminfo, text, "/proc/meminfo")
    if got is not None:
        assert all(isinstance(v, int) and 0 <= v <= MAX_COUNT for v in got.values())


@SETTINGS
@given(st.integers(1, 2**40), st.integers(0, 2**40), st.integers(0, 2**30))
def test_meminfo_round_trip(total, free, swap):
    kb = parse_meminfo(meminfo("6.8", total, free_kb=min(free, total), available_kb=total,
                               cached_kb=total // 4, anon_kb=total // 8, swap_total_kb=swap,
                               swap_free_kb=swap))
    assert (kb["MemTotal"], kb["MemFree"], kb["SwapTotal"]) == (total, min(free, total), swap)


@pytest.mark.slow
@SETTINGS
@given(TEXT)
@example("Limit\nMax open files 1 abc\n")
def test_limits_any_text(text):
    got = _valid_or_malformed(lambda t: parse_limits(t, "/proc/7/limits"), text, "/proc/7/limits")
    if got is not None:
        assert set(got) == {f"{key}_{w}" for key in ROWS.values() for w in ("soft", "hard")}
        for key in ROWS.values():
            soft, hard = got[f"{key}_soft"], got[f"{key}_hard"]
            assert hard is None or (soft is not None and soft <= hard)


LIMIT = st.one_of(st.none(), COUNT)
PAIR = st.tuples(LIMIT, LIMIT).filter(lambda p: p[1] is None or (p[0] is not None and p[0] <= p[1]))


@pytest.mark.slow
@SETTINGS
@given(PAIR, PAIR, PAIR, PAIR)
def test_limits_round_trip(nofile, nproc, memlock, sigpending):
    got = parse_limits(proc_limits(nofile, nproc, memlock, sigpending))
    assert (got["nofile_soft"], got["nofile_hard"]) == nofile
    assert (got["nproc_soft"], got["nproc_hard"]) == nproc
    assert (got["memlock_soft"], got["memlock_hard"]) == memlock


@SETTINGS
@given(TEXT)
@example("garbage")
@example(str(2**64))
def test_sysctl_any_text(text):
    path = "/proc/sys/net/core/somaxconn"
    got = _valid_or_malformed(lambda t: parse_int(path, t), text, path)
    assert got is None or 0 <= got <= MAX_COUNT
    path = "/proc/sys/net/ipv4/tcp_rmem"
    got = _valid_or_malformed(lambda t: parse_int(path, t, 2, of=3), text, path)
    assert got is None or 0 <= got <= MAX_COUNT


@SETTINGS
@given(COUNT, COUNT, COUNT)
def test_sysctl_round_trip(a, b, c):
    assert parse_int("/p", f"{a}\n") == a
    assert parse_int("/p", f"{a}\t{b}\t{c}\n", 2, of=3) == c  # tcp_rmem's "%d\t%d\t%d"


CHOICE = st.from_regex(r"[a-z_]{1,12}", fullmatch=True)


@SETTINGS
@given(TEXT)
def test_choice_any_text(text):
    path = "/sys/kernel/mm/transparent_hugepage/enabled"
    got = _valid_or_malformed(lambda t: parse_choice(path, t), text, path)
    assert got is None or (got and " " not in got)


@SETTINGS
@given(st.lists(CHOICE, min_size=1, max_size=5, unique=True), st.data())
def test_choice_round_trip(choices, data):
    chosen = data.draw(st.sampled_from(choices))
    text = " ".join(f"[{c}]" if c == chosen else c for c in choices) + "\n"
    assert parse_choice("/x", text) == chosen


@SETTINGS
@given(TEXT)
def test_netstat_any_text(text):
    got = _valid_or_malformed(tcp_ext, text, "/proc/net/netstat")
    assert got is None or all(0 <= v <= MAX_COUNT for v in got.values())


@pytest.mark.slow
@SETTINGS
@given(st.dictionaries(st.from_regex(r"[A-Za-z]{1,20}", fullmatch=True), COUNT, max_size=30))
def test_netstat_round_trip(counters):
    text = ("IpExt: A\nIpExt: 1\nTcpExt: " + " ".join(counters) + "\nTcpExt: "
            + " ".join(str(v) for v in counters.values()) + "\n")
    assert tcp_ext(text) == counters


@SETTINGS
@given(TEXT)
def test_cpuinfo_any_text(text):
    got = _valid_or_malformed(parse_cpuinfo, text, "/proc/cpuinfo")
    if got is not None:
        model, cores, sockets, _flags = got
        assert isinstance(model, str) and model
        assert cores is None or cores >= 1
        assert sockets is None or sockets >= 1


@SETTINGS
@given(TEXT)
def test_cpufreq_any_text(text):
    path = "/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq"
    got = _valid_or_malformed(lambda t: parse_khz(path, t), text, path)
    assert got is None or 0 <= got <= MAX_COUNT // 1000


@SETTINGS
@given(COUNT)
def test_cpufreq_round_trip(khz):
    assert parse_khz("/p", f"{khz}\n") == khz // 1000


@SETTINGS
@given(TEXT)
def test_dmidecode_any_text(text):
    # dmidecode output is free-form text: every input parses (to no DIMMs, at worst).
    assert isinstance(parse_dmidecode(text), list)
