"""Redaction: what llm-doctor may show or keep of text it read from a host.

Everything that writes (terminal, JSON, Markdown, capture, and later metrics and HTML)
passes host text through here, so there is one place to fix a leak:

* ``redact_cmdline`` masks the values of secret-bearing flags (``--api-key sk-…``,
  ``--token=…``), ``NAME=value`` words whose name says token, secret, password or key
  (``HF_TOKEN=…``), ``Authorization: Bearer …`` and passwords in URLs
  (``postgres://app:***@db/x``). A masked value reads ``***``.
* ``program_only`` cuts a command line to its program name: other people's processes'
  arguments are none of our business and may carry credentials nobody can recognise.
* ``redact_environ`` keeps an environment's variable names and masks every value.
* ``redact_text`` is the same masking for free text (evidence, HTTP bodies).
* ``safe_display`` shows control characters escaped, so that a recorded hostname or
  command line cannot retitle or clear the terminal of whoever reads the report.

Masking works token by token (whitespace and NUL separate tokens) and looks at each token
a bounded number of times, so its time is linear in the input: the regular expression it
replaces backtracked quadratically, and 30,000 ``--token`` arguments took minutes.
"""

from __future__ import annotations

import re

MASK = "***"

# Separators are kept as they were: /proc/<pid>/cmdline separates arguments with NUL.
# A single character class under one quantifier cannot backtrack.
_SEPARATORS = re.compile(r"([\s\x00]+)")
_WORD = re.compile(r"[a-z0-9]+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
_AUTHORITY_END = re.compile(r"[/?#]")

# Words that make a flag, variable or header name secret wherever they appear in it.
_SECRET_PARTS = ("secret", "password", "passwd", "passphrase", "credential", "apikey")
# Whole words: "auth" but not "author"; "pass" but not "passthrough".
_SECRET_WORDS = frozenset({"auth", "authorization", "pass", "cookie", "bearer"})
# After an Authorization header, the scheme word passes the mask on: "Bearer X", "Basic X".
_SCHEMES = frozenset({"bearer", "basic", "token", "digest"})


def secret_name(name: str) -> bool:
    """Whether a flag, variable or header name says it holds a secret.

    ``--api-key``, ``--api_key``, ``--apikey``, ``--hf-token``, ``HF_TOKEN``,
    ``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``, ``db_password``, ``X-Api-Key``: yes.
    Words ending in "token" count, "tokens" and "tokenizer" do not, so that an engine's
    ``--max-num-batched-tokens 8192`` and ``TOKENIZERS_PARALLELISM`` stay readable.
    A name whose last word ends in "key" counts (``--key``, ``--access-key``); a key
    file's path (``--ssl-keyfile``) does not.
    """
    words = _WORD.findall(name.lower())
    if not words:
        return False
    for word in words:
        if word.endswith("token") or word in _SECRET_WORDS:
            return True
        if any(part in word for part in _SECRET_PARTS):
            return True
    return words[-1].endswith("key")


def _flag(token: str) -> tuple[str, str | None] | None:
    """``--name=value`` → (name, value); ``--name`` → (name, None); else None."""
    if not token.startswith("-") or token in ("-", "--"):
        return None
    name, eq, value = token.partition("=")
    return name, (value if eq else None)


def _is_secret_flag(name: str) -> bool:
    if name == "-k":  # the short form of --api-key in llama.cpp tools and several CLIs
        return True
    return name.startswith("-") and secret_name(name.lstrip("-"))


def _looks_like_flag(token: str) -> bool:
    """A long flag, which ends a pending value (``--hf-token --port 8000``: vLLM's
    ``--hf-token`` may stand alone). A secret rarely starts with two dashes."""
    return token.startswith("--") and len(token) > 2 and (token[2].isalpha())


def _mask_url_passwords(token: str) -> str:
    """``scheme://user:PASSWORD@host`` → ``scheme://user:***@host``, every occurrence."""
    if "://" not in token:
        return token
    out, start = [], 0
    while True:
        at = token.find("://", start)
        if at < 0:
            break
        begin = at + 3
        found = _AUTHORITY_END.search(token, begin)
        end = found.start() if found else len(token)
        authority = token[begin:end]
        cut = authority.rfind("@")
        colon = authority.find(":", 0, cut) if cut > 0 else -1
        out.append(token[start:begin])
        if colon >= 0:
            authority = authority[:colon + 1] + MASK + authority[cut:]
        out.append(authority)
        start = end
    out.append(token[start:])
    return "".join(out)


def _opens_quote(value: str) -> str:
    """The quote a value opens and leaves open (``"abc`` of ``HF_TOKEN="abc def"``)."""
    if value[:1] in ("'", '"') and (len(value) == 1 or not value.endswith(value[0])):
        return value[0]
    return ""


def _mask_assignment(token: str) -> str | None:
    """``NAME=value`` with a secret NAME → ``NAME=***``; None when the token is not one."""
    name, eq, value = token.partition("=")
    if not eq or not value or not _NAME.fullmatch(name) or not secret_name(name):
        return None
    return f"{name}={MASK}"


def _header(token: str) -> tuple[str, bool] | None:
    """A ``Name:`` or ``Name:value`` token (HTTP header, YAML, JSON) with a secret name:
    (the token as kept, whether the next token is the value). None for any other token."""
    name, colon, rest = token.partition(":")
    if not colon or rest.startswith("//") or not secret_name(name.strip("\"'")):
        return None
    if not rest or rest.strip("\"'").lower() in _SCHEMES:
        return token, True
    return f"{name}:{MASK}", False


def _mask_token(token: str) -> tuple[str, bool, str]:
    """(the token as it may be kept, whether the next token is a secret value, the quote
    a masked value left open)."""
    flag = _flag(token)
    if flag is not None:
        name, value = flag
        if not _is_secret_flag(name):
            if value:  # --env=HF_TOKEN=x, --dsn=postgres://u:p@h
                inner = _mask_assignment(value) or _mask_url_passwords(value)
                return f"{name}={inner}", False, _opens_quote(value) if inner != value else ""
            return token, False, ""
        if value is None:
            return token, True, ""
        return f"{name}={MASK}", False, _opens_quote(value)
    if token.lower().strip("\"'") == "bearer":
        return token, True, ""
    header = _header(token)
    if header is not None:
        return header[0], header[1], ""
    assigned = _mask_assignment(token)
    if assigned is not None:
        return assigned, False, _opens_quote(token.partition("=")[2])
    return _mask_url_passwords(token), False, ""


def redact_cmdline(text: str) -> str:
    """A command line (NUL- or space-separated) with every secret value as ``***``.

    Idempotent, and linear in ``len(text)``. Separators are kept as they were.
    """
    parts = _SEPARATORS.split(text)
    pending = False  # the previous token asked for its value to be masked
    quote = ""  # a masked value opened a quote that a later token closes
    for i in range(0, len(parts), 2):  # odd indexes are separators
        token = parts[i]
        if not token:
            continue
        if quote:
            quote = "" if token.endswith(quote) else quote
            parts[i] = MASK
        elif pending and not _looks_like_flag(token):
            # "Authorization:" "Bearer" "X": the scheme passes the mask on to its value
            pending = token.lower().strip("\"'") in _SCHEMES
            if not pending:
                quote = _opens_quote(token)
                parts[i] = MASK
        else:
            parts[i], pending, quote = _mask_token(token)
    return "".join(parts)


def redact_text(text: str) -> str:
    """The same masking for free text: evidence values, HTTP bodies, error messages."""
    return redact_cmdline(text)


def program_only(cmdline: str) -> str:
    """A non-engine process's command line as its program alone: ``/usr/bin/python3 -c …``
    → ``/usr/bin/python3``. NUL-separated input (``/proc/<pid>/cmdline``) keeps its final
    NUL. The program word is masked too: a process can retitle itself with anything."""
    first = _SEPARATORS.split(cmdline.lstrip(" \t\n\x00"), maxsplit=1)[0]
    return redact_cmdline(first) + ("\0" if "\0" in cmdline else "")


def redact_environ(text: str) -> str:
    """``/proc/<pid>/environ`` as a recording may keep it: the names, every value ``***``.
    Which variables a process has can explain it; their values are nobody's business."""
    names = (item.partition("=")[0] for item in text.split("\0") if item)
    return "".join(f"{name}={MASK}\0" for name in names)


# What a terminal may obey rather than print: C0 and C1 controls (ESC starts every escape
# sequence, BEL ends an OSC title, CR overwrites a line), DEL, the line and paragraph
# separators, and the invisible format characters that reorder or hide text (bidi
# overrides, "Trojan Source"; zero-width spaces; the byte-order mark), and lone surrogates,
# which no terminal encoding can print.
_CONTROL = [*range(0x20), *range(0x7F, 0xA0), 0xAD, 0x061C, 0x180E,
            *range(0x200B, 0x2010), *range(0x2028, 0x202F), *range(0x2060, 0x2070),
            *range(0xD800, 0xE000), 0xFEFF, *range(0xFFF9, 0xFFFC)]
_NAMED = {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}
_ESCAPES = {code: _NAMED.get(code, f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
            for code in _CONTROL}


def safe_display(text: str) -> str:
    """``text`` with control characters (ESC, BEL, CR, C1, bidi overrides) shown as escapes,
    as ``\\x1b`` or ``\\u202e``: the terminal prints them instead of obeying them."""
    return text.translate(_ESCAPES)
