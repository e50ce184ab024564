"""An engine's version, from the page it states it on (engine.discovery reads it).

vLLM ``GET /version`` (``{"version": "0.11.0"}``, vllm/entrypoints/openai/api_server.py),
SGLang ``/get_server_info`` or ``/server_info`` (``version``), TGI ``/info`` (``version``),
llama.cpp ``/props`` (``build_info``: ``b6700-1a2b3c4d``). Only vLLM's page is an extra GET:
the others are the pages discovery reads for the engine's configuration already. Ollama's
is engine.ollama's (``/api/version``). Manual equivalent: ``curl -s :8000/version``.

A version is a short string of the characters versions use; anything else an engine (or
what answers in its place) sends is not kept, and the reason says what it was, never quoting
it: a version decides a diff's CHANGED row and becomes an exporter label, one per engine.
"""

from __future__ import annotations

import re
from typing import Any, Callable

from doctor.seam.host import HostReadError
from doctor.values import page_json

# kind → the pages, in order, that state its version, and the field that holds it
PAGES: dict[str, tuple[tuple[str, str], ...]] = {
    "vllm": (("/version", "version"),),
    "sglang": (("/server_info", "version"), ("/get_server_info", "version")),
    "tgi": (("/info", "version"),),
    "llama.cpp": (("/props", "build_info"),),
}
MAX_CHARS = 64  # "0.11.1rc2.dev120+g0123abcd.cu128" is 32
VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+\-~]*")


class Unread(str):
    """What came back from a page discovery asked that gave no JSON: "HTTP 404", "timeout"."""


def clean(value: Any) -> tuple[str | None, str | None]:
    """(the version, None) or (None, why it is not one)."""
    if not isinstance(value, str):
        return None, f"is not a string ({type(value).__name__})"
    value = value.strip()
    if not value:
        return None, "is empty"
    if len(value) > MAX_CHARS:
        return None, f"is {len(value)} characters, longer than a version ({MAX_CHARS} at most)"
    if not VERSION.fullmatch(value):
        return None, "holds characters no version has (letters, digits and . _ + - ~ only)"
    return value, None


def read(kind: str, asked: dict[str, Any], fetch: Callable[[str], Any] | None
         ) -> tuple[str | None, str]:
    """(version, "") or (None, the reason). ``asked`` holds what discovery's own reads of
    this engine gave, by path: the page's JSON, or ``Unread``; ``fetch(path)`` GETs a page
    not among them (an HttpResponse, or raises HostReadError); None when the endpoint
    stopped answering, so that it is asked nothing more."""
    pages = PAGES.get(kind)
    if not pages:
        return None, f"not read: {kind} states no version on a page discovery reads"
    reasons = []
    for path, key in pages:
        if path in asked:
            data = asked[path]
        elif fetch is None:
            reasons.append(f"{path}: not asked, the endpoint stopped answering")
            continue
        else:
            data = _fetched(fetch, path)
        if isinstance(data, Unread):
            reasons.append(f"{path}: {data}")
            continue
        if not isinstance(data, dict) or key not in data:
            reasons.append(f"{path}: no {key}")
            continue
        version, why = clean(data[key])
        if version is not None:
            return version, ""
        reasons.append(f"{path}: {key} {why}")
    return None, "not served: " + "; ".join(reasons)


def _fetched(fetch: Callable[[str], Any], path: str) -> Any:
    try:
        answer = fetch(path)
    except HostReadError as exc:
        return Unread(exc.reason.value + (" (not recorded)" if "not recorded" in exc.detail else ""))
    if answer.status != 200:
        return Unread(f"HTTP {answer.status}")
    try:
        return page_json(answer.body)
    except ValueError:
        return Unread("not JSON")
