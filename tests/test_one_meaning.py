"""Things the code said in several places, now said once (issue 29, "Also"): what a number
is in a value read from outside (doctor/values.py), the severities' words (doctor/model.py),
and how a command writes its output (doctor/commands/emit.py)."""

from __future__ import annotations

import math
import os

import pytest

from doctor.commands.emit import CannotWrite, check_output, emit
from doctor.i18n import Speaking
from doctor.model import SEVERITY_WORDS, Severity
from doctor.values import finite_float, is_finite, is_number

HUGE = 10**400  # a saved scan may hold an int of a thousand digits; float() raises on it


@pytest.mark.parametrize("value, number, finite, as_float", [
    (3, True, True, 3.0),
    (-2.5, True, True, -2.5),
    (True, False, False, None),  # a bool is an int in Python, never a figure
    (math.nan, True, False, None),
    (math.inf, True, False, None),
    (HUGE, True, True, None),  # exact and finite, but no float holds it
    ("4096", False, False, None),  # a numeric string is an engine page's (values.number)
    (None, False, False, None),
    ([1], False, False, None),
])
def test_each_meaning_of_a_number_is_one_function(value, number, finite, as_float):
    assert (is_number(value), is_finite(value), finite_float(value)) == (number, finite, as_float)


def test_a_severity_is_said_once_in_each_language():
    assert list(SEVERITY_WORDS) == sorted((s.label for s in Severity), key=lambda s: -Severity[s.upper()])
    assert [s.word for s in Severity] == ["info", "warning", "critical"]
    with Speaking("zh_CN"):
        words = [s.word for s in Severity]
    assert all(any("\u4e00" <= c <= "\u9fff" for c in w) for w in words), words
    assert len(set(words)) == 3


def test_output_goes_to_stdout_or_a_file_with_one_line_saying_where(tmp_path, capfd):
    emit("text\n", None, "thing written to {output}")
    assert capfd.readouterr() == ("text\n", "")
    target = tmp_path / "out.txt"
    emit("text\n", str(target), "thing written to {output}")
    assert target.read_text() == "text\n"
    assert capfd.readouterr() == ("", f"thing written to {target}\n")
    emit("to stdout\n", "-", "thing written to {output}")  # -o -: no line about '-'
    assert capfd.readouterr() == ("to stdout\n", "")


def test_an_output_that_cannot_be_written_is_one_line_in_the_callers_words(tmp_path):
    folder = tmp_path / "a-dir"
    folder.mkdir()
    with pytest.raises(CannotWrite) as caught:
        check_output(str(folder), "{output}: cannot write the thing: {why}")
    assert str(caught.value) == f"{folder}: cannot write the thing: is a directory; name a file inside it"
    with pytest.raises(CannotWrite, match="cannot write the report: "):
        emit("x", str(folder), "report written to {output}", "{output}: cannot write the report: {reason}")
    with pytest.raises(OSError):  # without the caller's words, the OSError for the command line
        emit("x", str(folder), "written to {output}")
    assert os.listdir(folder) == []
    with Speaking("zh_CN"), pytest.raises(CannotWrite) as caught:
        check_output(str(folder), "{output}: cannot write the report: {reason}")
    said = str(caught.value)
    assert said == f"{folder}：无法写入报告：是目录；请指定其中的一个文件", said  # the catalogue's words
