"""A capture keeps the options it ran with (requests allowed or not, --busy-ok) in host.toml,
and a replay repeats them: a recording made with --no-requests holds no answer to a
completion, so its replay sends none (its request probes failed: 2 probes failed). The
command line can still forbid requests; it cannot make a recording answer them."""

from __future__ import annotations

import shutil

import pytest

from doctor.commands.setup import load_daemon, scan_options
from doctor.config import load_config
from doctor.seam.recorded import RecordedHost
from doctor.seam.recorded_store import RecordedHostError
from tests.conftest import FIXTURE_HOSTS

HOST = FIXTURE_HOSTS / "healthy-epyc-9654-vllm"


def _copy(tmp_path, extra: str):
    root = tmp_path / "host"
    shutil.copytree(HOST, root, symlinks=True)  # its fs/ keeps links as recorded
    manifest = root / "host.toml"
    text = manifest.read_text()
    head, _, rest = text.partition("\n[")  # the [host] table first: the keys go at its end
    manifest.write_text(f"{head}\n{extra}\n[{rest}")
    return root


@pytest.mark.slow
def test_a_recording_without_requests_replays_without_them(tmp_path):
    host = RecordedHost(str(_copy(tmp_path, "requests = false\nbusy_ok = true")))
    options = scan_options(load_config(None), None, host=host)
    assert options.requests is False and options.busy_ok is True
    assert scan_options(load_config(None), None, host=host, no_requests=True).requests is False
    loaded = load_daemon(None, (), {"requests": True}, host=host)  # the daemon repeats them too
    assert loaded.options.requests is False and loaded.options.busy_ok is True


def test_a_recording_from_before_the_options_were_kept_replays_as_before(tmp_path):
    host = RecordedHost(str(HOST))
    options = scan_options(load_config(None), None, host=host)
    assert options.requests is True and options.busy_ok is False


@pytest.mark.parametrize("extra", ['requests = "no"', "busy_ok = 1"])
def test_an_option_of_the_wrong_type_is_one_line_naming_it(tmp_path, extra):
    with pytest.raises(RecordedHostError) as caught:
        RecordedHost(str(_copy(tmp_path, extra)))
    said = str(caught.value)
    assert "host.toml" in said and extra.split(" ")[0] in said and "true or false" in said
    assert "\n" not in said.strip()
