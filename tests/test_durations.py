"""One duration grammar (doctor/durations.py) for a rule's ``for``, the daemon's ``[daemon]``
durations and ``[daemon.for]``, and the daemon's flags: every spelling accepted before is
accepted, a duration over ten years or of hundreds of digits is a message, never an
OverflowError."""

from __future__ import annotations

import re

import contextlib
import random

import pytest

from doctor.config import ConfigError
from doctor.daemon.alerts import parse_duration
from doctor.daemon.settings import load_settings
from doctor.durations import MAX_SECONDS, DurationError, parse
from probes.registry import by_name
from doctor.rules.loader import RuleError, load_file
from tests.test_rules_hardening import GOOD

FOUR_HUNDRED_NINES = "9" * 400

# Each spelling accepted before this grammar, and where: rules' `for` (\d{1,6}[smh]), the
# daemon's strings (\d+[smh] after strip) and numbers, and the flags' plain "15" / "1.5".
ACCEPTED = [("30s", 30), ("5m", 300), ("1h", 3600), ("0s", 0), (" 1h ", 3600),
            ("999999s", 999999), ("15", 15), ("1.5", 1.5), (".5", 0.5), ("5.", 5), ("0", 0),
            (15, 15), (2.5, 2.5), (0, 0)]
REFUSED = [
    ("5 minutes", "is not a duration like 30s, 5m or 1h"),
    ("soon", "is not a duration like 30s, 5m or 1h"),
    ("1.5s", "is not a duration"),
    ("-1s", "is not a duration"),
    ("", "is not a duration"),
    ("1e5", "is not a duration"),
    (True, "is not a duration"),
    ([], "is not a duration"),
    (-1, "is negative"),
    (float("nan"), "a finite number of seconds"),
    (float("inf"), "a finite number of seconds"),
    ("999999h", "'999999h' is over ten years; a duration is at most 315360000s"),
    (FOUR_HUNDRED_NINES + "s", "'999999999999'… (401 characters) is over ten years"),
    (FOUR_HUNDRED_NINES, "(400 characters) is over ten years"),
    (10**400, "a number of 401 digits is over ten years"),
    (1e300, "1e+300 is over ten years"),
    ("x" * 1_000_000, "(1000000 characters) is not a duration"),
]


@pytest.mark.parametrize("text, seconds", ACCEPTED, ids=repr)
def test_every_spelling_accepted_before_is_accepted(text, seconds):
    assert parse(text) == seconds


@pytest.mark.parametrize("value, message", REFUSED, ids=lambda v: repr(v)[:20])
def test_what_is_not_a_duration_says_so(value, message):
    with pytest.raises(DurationError) as err:
        parse(value)
    assert message in str(err.value)
    assert len(str(err.value)) < 200


def test_ten_years_is_the_most():
    assert parse(f"{MAX_SECONDS}s") == MAX_SECONDS == parse(MAX_SECONDS)
    with pytest.raises(DurationError):
        parse(f"{MAX_SECONDS + 1}")


def test_no_input_raises_anything_but_a_duration_error():
    rng = random.Random(12)
    alphabet = "0123456789.smh -+e_x\t"
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 30)))
        try:
            parse(text)
        except DurationError:
            pass
    for value in (10**n for n in range(0, 1000, 37)):
        with pytest.raises(DurationError) if value > MAX_SECONDS else contextlib.nullcontext():
            parse(value)


def test_the_daemons_alerts_read_the_same_grammar():
    assert parse_duration(None) == 0 and parse_duration("2m") == 120
    with pytest.raises(ValueError, match="over ten years"):
        parse_duration(FOUR_HUNDRED_NINES + "s")


# --- where durations are written ----------------------------------------------------

@pytest.mark.parametrize("written, seconds", [('"30s"', 30), ('"90"', 90), ('"1h"', 3600)])
def test_a_rules_for_reads_the_grammar(tmp_path, written, seconds):
    path = tmp_path / "rules.toml"
    path.write_text(GOOD.replace('for = "5m"', f"for = {written}"))
    (rule,) = load_file(path, by_name())
    assert rule.for_s == seconds


def test_a_rules_for_of_400_digits_names_the_file_line_and_rule(tmp_path):
    path = tmp_path / "rules.toml"
    path.write_text(GOOD.replace('for = "5m"', f'for = "{FOUR_HUNDRED_NINES}s"'))
    with pytest.raises(RuleError) as err:
        load_file(path, by_name())
    assert f"{path}:9: rule 'my-fd-rule': 'for' must be a duration: '999999999999'… (401 " \
           "characters) is over ten years" in str(err.value)


@pytest.mark.parametrize("key", ["interval", "kernel_interval", "resend_interval", "history"])
@pytest.mark.parametrize("value", [f'"{FOUR_HUNDRED_NINES}s"', FOUR_HUNDRED_NINES, "1e400", "nan",
                                   "-5", '"forever"'])
def test_every_daemon_duration_is_bounded(tmp_path, key, value):
    path = tmp_path / "c.toml"
    path.write_text(f"[daemon]\n{key} = {value}\n")
    with pytest.raises(ConfigError) as err:
        load_settings(path)
    assert re.match(rf"{re.escape(str(path))}(:\d+)?: daemon\.{key}[: =]", str(err.value)), err.value


def test_daemon_durations_as_numbers_and_strings(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[daemon]\ninterval = 15\nkernel_interval = "0s"\nresend_interval = 2.5\n'
                    'history = "2h"\n[daemon.for]\ncpu-contention = "90"\n')
    settings = load_settings(path)
    assert (settings.interval_s, settings.kernel_interval_s, settings.resend_s,
            settings.history_s) == (15, 0, 2.5, 7200)
    assert settings.for_s == {"cpu-contention": 90}


def test_a_daemon_for_of_400_digits_is_a_config_error(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text(f'[daemon.for]\ncpu-contention = "{FOUR_HUNDRED_NINES}s"\n')
    with pytest.raises(ConfigError, match=r"\[daemon.for\]: .* is over ten years"):
        load_settings(path)


@pytest.mark.parametrize("flag", ["--interval", "--kernel-interval"])
def test_the_daemons_flags_are_bounded_exit_3(cli, flag):
    result = cli("daemon", flag, FOUR_HUNDRED_NINES + "s", "--listen", "127.0.0.1:0", timeout=60)
    assert result.returncode == 3, result.stderr
    assert "is over ten years" in result.stderr and flag in result.stderr
    assert "Traceback" not in result.stderr
