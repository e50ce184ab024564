"""``llm-doctor diff --format html``: the page of each story pair holds its verdict, its first
change with both values and a plot of each changed number; host text is escaped, a secret
reads "changed"; and the page opens in headless Chromium with no request and no error."""

from __future__ import annotations

import copy
import html as html_lib
import os
import re

import pytest

from doctor.diff.compare import compare
from reports.diff_common import grouped
from reports.diff_html import render
from tests.conftest import FIXTURE_HOSTS
from tests.test_diff import GPU0, GPU4, VLLM, _upgrade, probe, saved
from tests.test_html_report import _chromium  # one finder of Debian's chromium

SCRIPT = '<script>window.__xss = 1</script>"\'><img src="x" onerror="window.__xss = 2">'
KEYS = ("sk-live-OLD0000000001", "sk-live-NEW9999999999")

# (base, story host, the first change, its before and after as the page shows them, plotted)
STORIES = [
    ("l40s-8x-acs-off", "diff-l40s-8x-gpu0-x8", f"{GPU0}.pcie.width", ("16", "8"), True),
    ("l40s-8x-acs-off", "diff-l40s-8x-gpu4-held", f"{GPU4}.memory.held_by_others_mib", None, True),
    ("vllm-v1-calm", "diff-vllm-v1-enforce-eager", f"{VLLM}.flag.enforce_eager", None, False),
    ("healthy-epyc-9654-vllm", "diff-epyc-9654-swappiness-thp", "host.sysctl.vm_swappiness",
     None, True),
]


def _rows(page: str) -> list[str]:
    """The rows of the changes table, header left out."""
    table = page.split('<table class="changes">', 1)[1].split("</table>", 1)[0]
    return table.split("<tr>")[2:]


def _cells(row: str) -> list[str]:
    return [html_lib.unescape(re.sub(r"<[^>]+>", " ", c)).strip()
            for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]


@pytest.mark.parametrize("base,story,first,values,plotted", STORIES, ids=[s[1] for s in STORIES])
def test_a_story_page_holds_its_verdict_first_change_values_and_plot(base, story, first, values,
                                                                     plotted):
    diff = compare(saved(base), saved(story), (base, story))
    page = render(diff)
    body = page.split("<body>", 1)[1]
    verdict = re.search(r'<p class="verdict">(.*?)</p>', body, re.S)
    assert verdict and body.index(verdict.group(0)) < body.index("<h2>")  # the verdict first
    assert "regression likely" in verdict.group(1) and first in html_lib.unescape(verdict.group(1))
    fact = diff.changes[0]
    status, fact_cell, before, after, ratio, causes = _cells(_rows(page)[0])
    assert status == "CHANGED (worse)" if fact.status == "changed" else status.startswith("ADDED")
    assert fact_cell.startswith(first)
    if values:
        assert (before, after) == values
    assert before == html_lib.unescape(html_lib.escape(str(fact.before) if fact.before is not None
                                                       else "—"))
    for cause in fact.causes:  # each linked to its playbook on the page
        assert f'<a href="#playbook-{cause}">' in page and f'id="playbook-{cause}"' in page
        assert cause in causes
    svgs = re.findall(r"<svg .*?</svg>", page, re.S)
    if plotted:
        (svg, *_) = [s for s in svgs if html_lib.escape(first) in s]
        assert ">before</text>" in svg and ">after</text>" in svg
        assert html_lib.escape(f"{fact.label}") in svg
    else:
        assert not svgs
    assert "Raised (1)" in page or story.endswith("swappiness-thp")


def test_the_argv_form_of_a_flag_added_is_in_the_after_column():
    page = render(compare(saved("vllm-v1-calm"), saved("diff-vllm-v1-enforce-eager")))
    status, _, before, after, _, causes = _cells(_rows(page)[0])
    assert status.startswith("ADDED") and before == "—" and "+ --enforce-eager" in after
    assert causes == "cuda-graphs-disabled"


def test_a_measured_figure_is_drawn_with_its_noise_floor():
    base = saved("l40s-8x-acs-off")
    before = _upgrade(copy.deepcopy(base), "550.90.07", "12.4", "2.5.1", 2400.0)
    after = _upgrade(copy.deepcopy(base), "570.86.15", "12.8", "2.7.0", 1150.0)
    page = render(compare(before, after))
    svgs = re.findall(r"<svg .*?</svg>", page, re.S)
    (svg,) = [s for s in svgs if "output tokens/s at the knee" in s]
    assert "noise floor ±10%" in svg and "2160 to 2640" in svg  # 2400 ± 10%
    assert ">2400 tokens/s</text>" in svg and ">1150 tokens/s (x0.48)</text>" in svg
    assert svg.count('stroke-dasharray="4 2"') == 4 + 1  # the band's two ticks per bar, and its legend
    status, fact, before_cell, after_cell, ratio, _ = _cells(_rows(page)[0])
    assert fact.startswith(f"{VLLM}.knee.output_tokens_per_s")
    assert (before_cell, after_cell, ratio) == ("2400", "1150", "x0.48 (floor 10%)")


def test_an_absolute_floor_reads_in_its_unit():
    page = render(compare(saved("l40s-8x-acs-off"), saved("diff-l40s-8x-gpu4-held")))
    _, fact, before, after, ratio, _ = _cells(_rows(page)[0])
    assert fact.startswith(f"{GPU4}.memory.held_by_others_mib")
    assert (before, after, ratio) == ("0", "20480", "(floor ±1024 MiB)")  # not "floor 0%"
    (svg,) = [s for s in re.findall(r"<svg .*?</svg>", page, re.S) if "held_by_others_mib" in s]
    assert "noise floor ±1024 MiB" in svg and ">20480 MiB</text>" in svg


def _hostile_pair() -> tuple[dict, dict]:
    before, after = saved("vllm-v1-calm"), saved("vllm-v1-calm")
    probe(after, "host.cpu")["governor"] = SCRIPT
    for engine in probe(after, "engine.discovery")["engines"]:
        engine["kv_cache_dtype"] = SCRIPT
    for report, key in zip((before, after), KEYS, strict=True):
        for engine in probe(report, "engine.discovery")["engines"]:
            engine["model"] = f"https://hf:{key}@hub.internal/llama-3-8b"
    return before, after


def test_hostile_values_are_escaped_and_a_changed_secret_reads_changed():
    page = render(compare(*_hostile_pair()))
    assert "<script" not in page and "<img" not in page and "onerror=\"" not in page
    assert html_lib.escape(SCRIPT, quote=True).replace("&#x27;", "&#39;") in page \
        or "&lt;script&gt;window.__xss = 1&lt;/script&gt;&#34;&#39;&gt;&lt;img" in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "@import" not in page and "url(" not in page and "default-src 'none'" in page
    for key in KEYS:
        assert key not in page and key[8:] not in page
    rows = [_cells(r) for r in _rows(page)]
    (secret,) = [r for r in rows if r[1].startswith(f"{VLLM}.flag.model")]
    assert secret[2] == "changed (neither value is shown)"


def _poisoned(value, keys: bool):
    """Every string of a record (and each key, with ``keys``) with SCRIPT appended."""
    if isinstance(value, str):
        return value + SCRIPT
    if isinstance(value, dict):
        return {(k + SCRIPT if keys and isinstance(k, str) else k): _poisoned(v, keys)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_poisoned(v, keys) for v in value]
    return value


def _everywhere(keys: bool = False) -> tuple[dict, dict]:
    before, after = saved("vllm-v1-calm"), saved("vllm-v1-calm")
    after["probes"] = [dict(p, data=_poisoned(p["data"], keys)) for p in after["probes"]]
    before["host"] = _poisoned(before["host"], keys=False)
    return before, after


def test_host_text_made_hostile_everywhere_stays_text():
    for keys in (False, True):  # a key made hostile loses its record: the facts go REMOVED
        before, after = _everywhere(keys)
        for diff in (compare(before, after), compare(before, after, different_hosts=True)):
            page = render(diff)
            assert not re.search(r"<(script|img)", page) and 'onerror="' not in page
    before, after = _everywhere()
    page = render(compare(before, after, different_hosts=True))
    assert page.count("&lt;script&gt;window.__xss = 1&lt;/script&gt;&#34;&#39;&gt;") >= 10  # as text


def test_a_diff_with_nothing_changed_says_so():
    page = render(compare(saved("l40s-8x-acs-off"), saved("l40s-8x-acs-off")))
    assert "no material change" in page and "No CHANGED, ADDED or REMOVED fact." in page
    assert '<table class="changes">' not in page and "<svg" not in page


def test_two_hosts_not_compared_say_why():
    page = render(compare(saved("healthy-epyc-9654-vllm"), saved("epyc-9354-6of12-channels")))
    assert "not comparable" in page and "--different-hosts" in page
    assert "Nothing compared: two different hosts" in page


def test_facts_read_on_one_side_list_why():
    before, after = saved("a100-pcie-gen3x8"), saved("a100-pcie-gen3x8")
    after["level"] = "quick"
    probe(after, "gpu.bandwidth")["gpus"][0]["d2d_gbps"] = 100.0
    page = render(compare(before, after))
    assert "levels differ" in page and "Read on one side only (" in page
    assert f"{GPU0}.bandwidth.d2d_gbps" in page and "not judged" in page


@pytest.mark.slow
def test_the_cli_writes_the_page(cli, tmp_path):
    out = tmp_path / "diff.html"
    base, x8 = FIXTURE_HOSTS / "l40s-8x-acs-off", FIXTURE_HOSTS / "diff-l40s-8x-gpu0-x8"
    result = cli("diff", str(base), str(x8), "--format", "html", "-o", str(out))
    assert "Traceback" not in result.stderr
    assert f"diff written to {out}" in result.stderr and result.returncode == 2
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "regression likely" in page
    assert f"{GPU0}.pcie.width" in page and "<svg" in page


@pytest.mark.browser
@pytest.mark.timeout(180)
@pytest.mark.parametrize("pair", ["x8", "hostile", "everywhere"])
def test_opens_in_headless_chromium_without_errors_or_requests(tmp_path, pair):
    sync_api = pytest.importorskip("playwright.sync_api") if os.environ.get("CI") != "true" \
        else __import__("playwright.sync_api", fromlist=["sync_playwright"])
    diff = compare(saved("l40s-8x-acs-off"), saved("diff-l40s-8x-gpu0-x8")) if pair == "x8" \
        else compare(*_hostile_pair()) if pair == "hostile" \
        else compare(*_everywhere(), different_hosts=True)
    page_file = tmp_path / "diff.html"
    page_file.write_text(render(diff))
    url = page_file.as_uri()
    requests, console_errors = [], []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"],
                                     timeout=60_000)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.on("request", lambda r: requests.append(r.url))
            page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: console_errors.append(str(e)))
            page.goto(url, timeout=30_000)
            page.wait_for_load_state("networkidle", timeout=30_000)
            shot = tmp_path / "diff.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
            assert page.evaluate("window.__xss") is None
            assert page.locator("table.changes tr").count() == len(grouped(diff)) + 1
            # nothing wider than the page: the table wraps its long ids
            assert page.evaluate("document.documentElement.scrollWidth") <= 1280
            text = page.inner_text("body")
            lines = [line for line in text.splitlines() if line.strip()]
            assert lines[1].startswith(diff.verdict)  # under the title, before anything else
            if pair != "x8":
                assert "<script>window.__xss = 1</script>" in text  # shown as text
                assert all(key not in text for key in KEYS)
            else:
                assert page.locator("svg.plot").count() == 1
        finally:
            browser.close()
    assert [r for r in requests if r != url] == []
    assert console_errors == []
