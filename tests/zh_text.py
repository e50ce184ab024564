"""Is a Chinese report free of English sentences? What is left once code, ids and numbers go.

``english_runs(text)`` strips what is never translated: code spans (`` `…` ``), quotations of
an engine's own words (``"…"``, ``“…”``, ``'…'``), URLs, paths,
flags (``--max-num-seqs``), ids and names with a digit, dot, dash, underscore, slash, colon,
``=`` or ``@`` in them (``fd-limit-low``, ``host.limits``, ``gpu_memory_utilization``,
``H100``, ``x16``), numbers with their units, and then lists every run of three or more
Latin words in a row that each have a lowercase letter (``open files limit``). Product names
(``NVIDIA``, ``GeForce RTX``, ``AMD EPYC``) are shorter or capitals only, and survive.
``visible_text(html)`` is the text a browser shows, without code, pre, kbd, script and
style elements, nor elements that say they are English (``lang="en"``: a record's data,
kept in English in every language).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

CODE_SPAN = re.compile(r"`[^`]{0,400}`")  # a terminal may wrap one over lines
# an engine's or a tool's own words quoted as they are ("CUDA driver version is insufficient
# for CUDA runtime version", “Replays Since Reset”, 'truncating input prompt'): never translated
QUOTED = re.compile(r'"[^"]{1,300}"|“[^”]{1,300}”|(?<![A-Za-z])\'[^\'\n]{1,300}\'(?![A-Za-z])')
URL = re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.I)
# a token with any character that prose words do not have: ids, paths, flags, numbers
MARKED = re.compile(r"\S*[0-9_./\\:=@<>#$%{}\[\]|~^*+-]\S*")
WORD = re.compile(r"[A-Za-z]*[a-z][A-Za-z]*(?:'[a-z]+)?")
SEPARATOR = re.compile(r"[^A-Za-z' ]+")  # anything else ends a run: CJK, punctuation, boxes
MIN_RUN = 3


def english_runs(text: str, min_run: int = MIN_RUN) -> list[str]:
    """Runs of ``min_run`` or more English words left in ``text`` (see the module)."""
    text = CODE_SPAN.sub(" | ", text)
    text = QUOTED.sub(" | ", text)
    text = URL.sub(" | ", text)
    text = MARKED.sub(" | ", text)
    found: list[str] = []
    for chunk in SEPARATOR.split(text):
        words = chunk.split()
        run: list[str] = []
        for word in [*words, ""]:
            if word and WORD.fullmatch(word):
                run.append(word)
                continue
            if len(run) >= min_run:
                found.append(" ".join(run))
            run = []
    return found


class _Visible(HTMLParser):
    HIDDEN = {"code", "pre", "kbd", "samp", "script", "style", "title"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = 0
        self.stack: list[str] = []  # the hidden elements open now
        self.parts: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in self.HIDDEN or dict(attrs).get("lang", "").startswith("en"):
            self.stack.append(tag)
            self.depth += 1
        elif tag in ("br", "p", "div", "tr", "td", "th", "li", "h1", "h2", "h3", "h4",
                     "section", "table", "summary", "details", "text", "tspan", "span", "dt", "dd"):
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if self.depth and self.stack and self.stack[-1] == tag:
            self.stack.pop()
            self.depth -= 1
        else:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self.depth:
            self.parts.append(data)


def visible_text(html: str) -> str:
    parser = _Visible()
    parser.feed(html)
    return "".join(parser.parts)


def has_cjk(text: str) -> bool:
    return re.search(r"[\u4e00-\u9fff]", text) is not None


# Fields of a JSON report written for people: the findings' and probes' texts, and the
# sentences records keep beside their values (why a value is absent, where it came from,
# what an XID means). Every other field (ids, numbers, enums, paths, keys) is the same in
# every language; a ``missing`` mapping's labels are, its reasons are text.
TEXT_KEYS = frozenset({"title", "remediation", "summary", "reason", "description", "message",
                       "note", "text", "meaning", "action", "blockers", "seen_in",
                       "xid_meanings"})
TEXT_SUFFIXES = ("_reason", "_source", "_absent", "_note", "_inferred")
TIMINGS = frozenset({"duration_s", "started_at", "finished_at", "generated_at"})


def is_text(key: str) -> bool:
    return key in TEXT_KEYS or key.endswith(TEXT_SUFFIXES)


def without_text(value, key: str = ""):
    """A JSON report with its text for people, its ``lang`` and its timings taken out."""
    if isinstance(value, dict):
        if key == "missing":
            return sorted(value)
        return {k: without_text(v, k) for k, v in value.items()
                if not is_text(k) and k not in TIMINGS and k != "lang"}
    if isinstance(value, list):
        return [without_text(v, key) for v in value]
    return value
