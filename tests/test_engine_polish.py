"""Issue 28 §16, the engine polish: a reason never fills a figure's slot with its unit
("GPU … run where the GPU is%", "TTFT p50 None ms"), engine.load is no "ok" when every read
failed, and warm-up's "steady" says what it is."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest

from doctor.commands.load import _progress_callback
from doctor.model import Level, ScanOptions
from doctor.seam.host import HostReadError
from doctor.seam.live import LiveHost
from probes.engine import frontend, load as engine_load, warmup
from probes.helpers.engine_targets import Target
from tests.stream_server import only_named_endpoints


class _Console:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def print(self, text: str, style: str | None = None) -> None:
        self.lines.append(text)


def _stats(ttft, e2e):
    return SimpleNamespace(completed=0, min_requests=12, output_tokens_per_s=0.0, cut=0,
                           errors=0, unusable=None, throughput_windows=[0.0],
                           ttft=SimpleNamespace(p50_ms=ttft), e2e=SimpleNamespace(p50_ms=e2e))


def test_load_progress_says_no_ttft_yet_instead_of_none_ms():
    console = _Console()
    on_level = _progress_callback(console)
    on_level("progress", 4, _stats(None, None))
    on_level("done", 4, _stats(41.5, 900.0))
    assert "None" not in console.lines[0] and "TTFT p50 none yet, e2e p50 none yet" in console.lines[0]
    assert "TTFT p50 41.5 ms, e2e p50 900 ms" in console.lines[1]


def _frontend(util, why):
    fields = {name: None for name in frontend.Frontend.__dataclass_fields__}
    return frontend.Frontend(**(fields | dict(
        engine="vllm", role="vLLM API server", pid=10, tree_pid=10, tree_processes=2,
        frontend_cores=0.5, gpu_util_max_pct=util, gpu_util_absent=why, window_s=1.0)))


def test_frontend_summary_puts_the_percent_with_the_figure_only():
    absent = frontend.summary(frontend.FrontendRecord((_frontend(None, "no GPU: run where the GPU is"),)))
    assert not absent.endswith("%") and "GPU is%" not in absent
    assert frontend.summary(frontend.FrontendRecord((_frontend(37.0, None),))).endswith("GPU 37%")


def test_warmup_summary_says_what_steady_is():
    record = warmup.WarmupRecord((), ())
    assert warmup.summary(record) == ""  # nothing to say of no endpoint
    fields = {name: None for name in warmup.WarmupEndpoint.__dataclass_fields__}
    one = warmup.WarmupEndpoint(**(fields | dict(base_url="http://127.0.0.1:1", rounds=3,
                                                 requests=15, errors=0, settled=True, first_ttft_ms=900.0,
                                                 steady_ttft_ms=40.0)))
    assert "steady 40 ms (the same prompt length in the last round)" in \
        warmup.summary(warmup.WarmupRecord((one,), ()))


def test_engine_load_fails_when_every_read_failed(monkeypatch):
    """A port that refuses, named: before, engine.load was "ok" with every read an error."""
    only_named_endpoints(monkeypatch)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    options = ScanOptions(level=Level.QUICK, endpoints=(f"http://127.0.0.1:{port}",))
    monkeypatch.setattr(engine_load, "targets", lambda host, options, inputs=None: (
        Target(f"http://127.0.0.1:{port}", None, "llama.cpp", "m", False, ()),))
    with pytest.raises(HostReadError):
        engine_load.probe(LiveHost(), options)


def test_a_recording_without_any_engine_figure_skips_engine_load_saying_why():
    """The recorded H100 holds none of its vLLM's pages and no saved sweep: engine.load was
    'ok' with every read failed in its text (issue 28 item 16); now it is skipped, saying so."""
    from reports.json_report import to_dict
    from tests.conftest import FIXTURE_HOSTS
    from tests.test_fixtures import replay

    report = to_dict(replay(FIXTURE_HOSTS / "h100-thermal-88c"))
    (load,) = [p for p in report["probes"] if p["name"] == "engine.load"]
    assert load["status"] == "skipped" and load["data"] is None
    assert "holds none of the engines' load figures" in load["reason"]
