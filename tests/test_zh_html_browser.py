"""The Chinese HTML report in headless Chromium: declared zh-CN, no network request, no
console error, and its Chinese drawn with a real CJK font (fonts-noto-cjk in CI): measured
wider than the same number of boxes for missing glyphs, and the font Chromium used for it,
asked through the DevTools protocol, is a CJK one."""

from __future__ import annotations

import os

import pytest

from doctor.commands.setup import render
from doctor.i18n import Speaking
from tests.conftest import FIXTURE_HOSTS
from tests.test_html_report import _chromium
from tests.test_zh_reports import _replay
from tests.zh_text import has_cjk

pytestmark = pytest.mark.browser

HOST = FIXTURE_HOSTS / "h100-thermal-88c"
SAMPLE = "显存不足首字延迟多卡张量并行"
PRIVATE = "\ue000" * len(SAMPLE)  # a code point no font has: drawn as a box


MEASURE = """([a, b]) => {
  const box = (text) => {
    const s = document.createElement('span');
    s.textContent = text;
    s.id = 'm' + Math.random().toString(36).slice(2);
    document.body.appendChild(s);
    return s;
  };
  const x = box(a), y = box(b);
  return [x.getBoundingClientRect().width, y.getBoundingClientRect().width, x.id,
          getComputedStyle(x).fontFamily];
}"""


@pytest.mark.timeout(180)
def test_the_chinese_report_opens_with_cjk_glyphs_and_nothing_else(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api") if os.environ.get("CI") != "true" \
        else __import__("playwright.sync_api", fromlist=["sync_playwright"])
    report, outputs = _replay(HOST, "zh_CN")
    assert report.findings
    with Speaking("zh_CN"):
        html = render(report, "html")
    assert html == outputs["html"] or has_cjk(html)
    page_file = tmp_path / "report.zh.html"
    page_file.write_text(html, encoding="utf-8")
    url = page_file.as_uri()
    requests, errors = [], []
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=_chromium(), args=["--no-sandbox"],
                                     timeout=60_000)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("request", lambda r: requests.append(r.url))
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url, timeout=30_000)
            page.wait_for_load_state("networkidle", timeout=30_000)
            assert page.evaluate("document.documentElement.lang") == "zh-CN"
            assert has_cjk(page.inner_text("body"))
            shot = os.environ.get("LLM_DOCTOR_ZH_SHOT") or str(tmp_path / "report.zh.png")
            page.screenshot(path=shot, full_page=True)
            cjk_w, boxes_w, span_id, family = page.evaluate(MEASURE, [SAMPLE, PRIVATE])
            assert "Noto Sans CJK SC" in family or "PingFang SC" in family
            assert cjk_w > 1.3 * boxes_w, (cjk_w, boxes_w)
            cdp = page.context.new_cdp_session(page)
            cdp.send("DOM.enable")
            cdp.send("CSS.enable")
            root = cdp.send("DOM.getDocument")["root"]["nodeId"]
            node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": f"#{span_id}"})
            fonts = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node["nodeId"]})["fonts"]
            used = {f["familyName"]: f["glyphCount"] for f in fonts}
            assert any("CJK" in name or "Han" in name or "PingFang" in name
                       for name in used), used
        finally:
            browser.close()
    assert [r for r in requests if r != url] == []
    assert errors == []
