"""Redaction: what llm-doctor may show or keep of text it read from a host.

Everything that writes (terminal, JSON, Markdown, HTML, capture, metrics) passes host text
through here, so there is one place to fix a leak:

* ``redact_cmdline`` masks secret values in a command line; ``redact_text`` is the same
  masking for free text (evidence, HTTP bodies, probe reasons, dict keys). A masked value
  reads ``***``.
* ``redact_data`` masks a record or an evidence dict: every string and every key as text,
  and a string held under a key that names a secret (``{"api_key": "sk-…"}``) whole.
* ``program_only`` cuts a command line to its program name: other people's processes'
  arguments are none of our business and may carry credentials nobody can recognise.
* ``redact_environ`` keeps an environment's variable names and masks every value.
* ``safe_display`` shows control characters escaped, so that a recorded hostname or
  command line cannot retitle or clear the terminal of whoever reads the report.

The rule: a value is masked by what it is next to, never by what it looks like. It is
masked when it is the value of a name that says secret (``secret_name``), joined to it in
one of these ways, whatever quotes, brackets, braces or commas stand around either:

* a flag: ``--api-key VALUE``, ``--api-key=VALUE``, ``-k VALUE``, and a list written as
  text, ``["--api-key", "VALUE"]``;
* an assignment, with no space: ``HF_TOKEN=VALUE``, ``?token=VALUE``;
* a pair: ``X-Api-Key: VALUE``, ``"api_key": "VALUE"``, ``api_key = "VALUE"`` (HTTP
  headers, YAML, JSON and TOML written into text);
* a scheme: ``Bearer VALUE``; a pair's value that is a scheme word (``Authorization: Basic
  VALUE``: bearer, basic, token, digest) passes the mask on to the word after it.

A name is found wherever it begins, after any character that cannot be part of one, so
``(--api-key x)``, ``"HF_TOKEN=x"`` and ``{"id": "--api-key x"}`` are the plain forms with
punctuation around. A quoted value runs to its closing quote, spaces included; an unquoted
one to the next space or to a quote that closes the string it sits in, and closing brackets
and commas after it are kept. Each space-separated piece of a value becomes ``***``
(quotes included: ``HF_TOKEN="a b"`` → ``HF_TOKEN=*** ***``). What follows a name is not a
value when it is a flag (``--hf-token --port 8000``), another secret name with its own value
(``key: --api-key x`` masks ``x``), or a JSON literal (``null``, ``true``, ``false``).

Prose stays readable. Four words of secret names are also ordinary English or LLM words:
``key``, ``token``, ``pass``, ``auth``. Written alone as a plain word before a colon or a
spaced ``=`` (``an API key: give it as …``), and ``Bearer`` as a plain word (``a Bearer
token``), they mask the next word only if it is not a plain word of letters: prose goes
on, a value (``sk-…``, ``hunter2``, ``eyJ…``) is masked. As part of a name (``api_key:``,
``X-Api-Key:``, ``"key":``, ``key=``, ``--key``) their value is always masked. And
``token`` qualified as a token of text (``first_token``, ``inter_token``, ``bos_token``)
names text, not a credential, so ``inter_token: llama.cpp exports …`` is left as it is.

Passwords in URLs are masked (``postgres://app:***@db/x``), and so is a token given as the
user with no password (``https://***@github.com``, not ``git@``), except a template's
placeholders: ``http://:KEY@HOST:PORT`` (capitals in both the password and the host),
``${PASSWORD}``, ``<password>``.

Masking looks at each character a bounded number of times: names are found by one forward
search, and the scan always resumes after what it has looked at, so its time is linear in
the input (the regular expression it replaced backtracked quadratically: 30,000 ``--token``
arguments took minutes).
"""

from __future__ import annotations

import functools
import re
from typing import Any

MASK = "***"

# Separators are kept as they were: /proc/<pid>/cmdline separates arguments with NUL.
# A single character class under one quantifier cannot backtrack.
_SEPARATORS = re.compile(r"([\s\x00]+)")
# The words of a name: camelCase humps, runs of capitals, lowercase runs, digits.
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
# A name starts after any character that cannot be part of one: a flag's dashes, a letter
# or an underscore, then letters, digits, _ . and single dashes. Two dashes start a flag even
# inside a word: "\n--api-key" (a newline escaped in JSON text), "x--token". Only names
# holding a word that can make them secret are candidates (secret_name decides), so the
# search skips the others in C.
_NAME_CHAR = r"(?:[\w.]|-(?!-))"
_NAME_AT = re.compile(r"(?:(?<![\w.\-])-*|(?<=[\w.])--)(?=[A-Za-z_])" + _NAME_CHAR + "*?"
                      r"(?:key|token|auth|pass|secret|credential|cookie|bearer)" + _NAME_CHAR + "*"
                      r"|(?:(?<![\w.\-])|(?<=\\[nrt]))-k(?![\w.\-])", re.IGNORECASE)
_NAME_OR_URL = re.compile(_NAME_AT.pattern + "|://", re.IGNORECASE)
# What every candidate holds: most text holds none of it and is returned after one search
_HINT = re.compile(r"key|token|auth|pass|secret|credential|cookie|bearer|-k|://", re.IGNORECASE)
# Where a URL's authority ends: a path, query or fragment, or a character RFC 3986 never
# allows in it unescaped (a quote, a bracket or brace around the URL); ' ( ) , ; may be in
# a password, so they do not end it
_AUTHORITY_END = re.compile(r"[/?#\"<>\[\]{}\\\s\x00]")

# Words that make a flag, variable or header name secret wherever they appear in it.
_SECRET_PARTS = ("secret", "password", "passwd", "passphrase", "credential", "apikey")
# Whole words: "auth" but not "author"; "pass" but not "passthrough".
_SECRET_WORDS = frozenset({"auth", "authorization", "pass", "cookie", "bearer"})
# Words before "token" that make it a token of text: an LLM's vocabulary, not a credential.
_TEXT_TOKEN = frozenset({
    "inter", "first", "last", "next", "prev", "previous", "output", "input", "prompt", "per",
    "new", "each", "generated", "generation", "decode", "prefill", "sampled", "draft", "bos",
    "eos", "pad", "unk", "sep", "cls", "mask", "special", "stop", "start", "end", "image",
    "vocab", "text", "word", "max", "min", "num",
})
# Secret words that are also ordinary words: alone before a colon they may be prose.
_AMBIGUOUS = frozenset({"key", "token", "pass", "auth"})
_LITERALS = frozenset({"null", "none", "true", "false"})

_SPACES = " \t\n\r\x0b\x0c\x00"
_CLOSERS = ",;)]}>"
_FLAG_JOINT = re.compile(r"[\"']?(?:[ \t\n\r\x00]*,[ \t\n\r\x00]*|[ \t\n\r\x00]+)")
# A pair: a quoted name, then ``:`` or ``=`` (JSON allows spaces before the colon); an
# unquoted one, then ``:`` at once (a header, YAML) or ``=`` after spaces (TOML)
_PAIR_JOINT = re.compile(r"(?:(?P<quote>[\"'])[ \t\x00]*[=:]|[ \t\x00]*=|:)(?P<delimiter>)[ \t\x00]*")
_BLANK = re.compile(r"[ \t\x00]+")
# After a name, a scheme word passes the mask on to its value: "Authorization: Bearer X",
# "--auth Basic X". As schemes are written (RFC 9110 lets them be any case, but "BEARER"
# where a value goes is more likely the secret itself than a scheme).
_SCHEME = re.compile(r"(?:[Bb]earer|[Bb]asic|[Tt]oken|[Dd]igest)[ \t\x00]+")
_VALUE_STOP = re.compile(r"[\s\x00\"']")
_PROSE_WORD = re.compile(r"[A-Za-z][a-z]*(?:'[a-z]+)?[.,;!?)\]}>]*")  # not ':' (a name)
_PLACEHOLDER = re.compile(r"<[\w.-]+>|\$\{?[A-Z_][A-Z0-9_]*\}?")
_CAPITALS = re.compile(r"[A-Z][A-Z0-9_]*")
_CAPITALS_HOST = re.compile(r"[A-Z][A-Z0-9_]*(:[A-Z0-9_]+)?")


def secret_name(name: str) -> bool:
    """Whether a flag, variable or header name says it holds a secret.

    ``--api-key``, ``--api_key``, ``--apikey``, ``--hf-token``, ``HF_TOKEN``,
    ``OPENAI_API_KEY``, ``AWS_SECRET_ACCESS_KEY``, ``db_password``, ``X-Api-Key``,
    ``authToken``: yes. "key" and "token" count as the name's last word (its head noun:
    ``--access-key``, ``GITHUB_TOKEN``), not as a word before it (``token_usage``,
    ``key_count``) or a part of one (``--ssl-keyfile``, ``tokenizer``, ``--max-tokens``);
    a "token" qualified as a token of text (``first_token``, ``inter_token``,
    ``bos_token``) is text. The other secret words count anywhere.
    """
    words = [w.lower() for w in _WORD.findall(name)]
    for word in words:
        if word in _SECRET_WORDS or any(part in word for part in _SECRET_PARTS):
            return True
    while words and words[-1].isdigit():  # HF_TOKEN_2
        words.pop()
    if not words:
        return False
    head = words[-1]
    if head == "token" and len(words) > 1 and words[-2] in _TEXT_TOKEN:
        return False
    return head.endswith("token") or head.endswith("key")


@functools.lru_cache(maxsize=4096)
def _secret_short(name: str) -> bool:
    return secret_name(name)


def _secret(name: str) -> bool:
    """secret_name, remembered for the short names that text repeats (``--api-key``)."""
    return _secret_short(name) if len(name) <= 64 else secret_name(name)


def _is_secret_flag(name: str) -> bool:
    if name == "-k":  # the short form of --api-key in llama.cpp tools and several CLIs
        return True
    return _secret(name.lstrip("-"))


def takes_secret(argument: str) -> bool:
    """Whether ``argument`` is a secret flag standing alone, whose value is the next
    argument: ``--api-key``, ``-k``, ``--hf-token`` (as in an argv list)."""
    return (argument.startswith("-") and "=" not in argument and _NAME_AT.fullmatch(argument) is not None
            and _is_secret_flag(argument))


def _looks_like_flag(text: str, at: int) -> bool:
    """A long flag, which ends a pending value (``--hf-token --port 8000``: vLLM's
    ``--hf-token`` may stand alone). A secret rarely starts with two dashes."""
    return text.startswith("--", at) and text[at + 2:at + 3].isalpha()


def _placeholder(password: str, host: str) -> bool:
    """``http://:KEY@HOST:PORT``, ``${PASSWORD}``, ``<password>``: a template, not a secret."""
    if _PLACEHOLDER.fullmatch(password):
        return True
    return bool(_CAPITALS.fullmatch(password) and _CAPITALS_HOST.fullmatch(host))


# A URL's user with no password that is a token, not a name: a known token's prefix (GitHub,
# GitLab, Hugging Face, OpenAI, Slack) or 20 characters and more of letters and digits mixed.
# ``git@``, ``deploy@``, ``user.name@`` stay.
_TOKEN_USER = re.compile(r"(?:gh[pousr]_|github_pat_|glpat-|hf_|sk-|xox[abpr]-)[\w-]{6,}"
                         r"|(?=[\w-]*\d)(?=[\w-]*[A-Za-z])[\w-]{20,}")


def _authority(text: str, begin: int) -> tuple[str, int]:
    """The authority of a URL whose ``://`` ends at ``begin``, its password masked (unless
    it is a template's placeholder), and where it ends."""
    found = _AUTHORITY_END.search(text, begin)
    end = found.start() if found else len(text)
    authority = text[begin:end]
    cut = authority.rfind("@")
    colon = authority.find(":", 0, cut) if cut > 0 else -1
    if colon >= 0 and not _placeholder(authority[colon + 1:cut], authority[cut + 1:]):
        authority = authority[:colon + 1] + MASK + authority[cut:]
    elif cut > 0 and colon < 0 and _TOKEN_USER.fullmatch(authority[:cut]):
        authority = MASK + authority[cut:]  # a token given as the user: https://ghp_…@github.com
    return authority, end


class _Joint:
    """How a secret name is joined to its value: where the value starts, and how it is read.

    ``kind`` is "flag" (``--api-key V``), "assign" (``NAME=V``), "pair" (``Name: V``,
    ``"name": "V"``, ``name = V``) or "scheme" (``Bearer V``)."""

    __slots__ = ("value", "kind", "prose")

    def __init__(self, value: int, kind: str, prose: bool = False) -> None:
        self.value = value
        self.kind = kind
        self.prose = prose  # the name may be a word of prose: a plain word after it is kept


def _joint(text: str, start: int, end: int) -> _Joint | None:
    name = text[start:end]
    if name.startswith("-"):
        if not _is_secret_flag(name):
            return None
        if text.startswith("=", end):
            return _Joint(end + 1, "flag")
        gap = _FLAG_JOINT.match(text, end)
        return _Joint(gap.end(), "flag") if gap else None
    if not _secret(name):
        return None
    if text.startswith("=", end) and _NAME.fullmatch(name):  # NAME=value: never prose
        return _Joint(end + 1, "assign")
    pair = _PAIR_JOINT.match(text, end)
    if pair and not (text.startswith("://", pair.end("delimiter") - 1)):
        quoted = bool(pair.group("quote")) or text[start - 1:start] in ("'", '"')
        return _Joint(pair.end(), "pair", not quoted and name.lower() in _AMBIGUOUS)
    if _WORD.findall(name)[-1:] in (["Bearer"], ["bearer"]):  # also "\nBearer" in JSON text
        gap = _BLANK.match(text, end)
        return _Joint(gap.end(), "scheme", prose=True) if gap else None
    return None


def _names_a_secret(text: str, at: int) -> bool:
    """Whether a secret name joined to its own value starts at ``at``: a secret flag, or a
    secret name right before ``=`` or ``:`` (``token: X-Api-Key: V``: a name, not a value)."""
    found = _NAME_AT.match(text, at)
    if found is None:
        return False
    end = found.end()
    if not found.group().startswith("-") and not (text[end:end + 1] in ("=", ":")
                                                   and not text.startswith("://", end)):
        return False
    return _joint(text, at, end) is not None


def _quoted_end(text: str, at: int) -> int:
    """The end of the quoted string that starts at ``at`` (past its closing quote, which a
    backslash does not close), or the end of the text."""
    quote, i = text[at], at + 1
    while True:
        j = text.find(quote, i)
        if j < 0:
            return len(text)
        slashes = 0
        while j - 1 - slashes > at and text[j - 1 - slashes] == "\\":
            slashes += 1
        if slashes % 2 == 0:
            return j + 1
        i = j + 1


def _stops(text: str, at: int) -> bool:
    """Whether a value cannot go on at ``at``: a space, a closing bracket, a comma, a colon."""
    char = text[at]
    return char in _SPACES or char in _CLOSERS or char == ":"


def _bare_end(text: str, at: int) -> int:
    """The end of an unquoted value: the next space, or a quote that closes the string the
    value sits in; a quoted part inside (``ab"c d"``) belongs to it; closing brackets and
    commas after it do not."""
    i, end = at, len(text)
    while True:
        stop = _VALUE_STOP.search(text, i)
        if stop is None:
            break
        j = stop.start()
        char = text[j]
        if char not in "\"'" or j + 1 >= len(text) or _stops(text, j + 1):
            end = j
            break
        close = text.find('"', j + 1) if char == '"' else -1
        i = close + 1 if close > 0 else j + 1
    while end > at + 1 and text[end - 1] in _CLOSERS:
        end -= 1
    return end


def _value(text: str, joint: _Joint) -> tuple[int, int] | int:
    """The span of the value to mask, or where the scan goes on when there is none."""
    at, prose = joint.value, joint.prose
    if joint.kind != "scheme":  # "Authorization: Bearer X", "--auth Basic X": X is the secret
        inner = at + 1 if text[at:at + 1] in ("'", '"') else at
        scheme = _SCHEME.match(text, inner)
        if scheme is not None and scheme.end() < len(text) and not _stops(text, scheme.end()):
            if text.startswith(MASK, scheme.end()):  # masked already
                return scheme.end(), scheme.end() + len(MASK)
            if at == inner:
                return scheme.end(), _bare_end(text, scheme.end())
            end = _quoted_end(text, at)  # "Bearer a b": the words up to the closing quote
            if end > scheme.end() and text[end - 1] == text[at]:
                if _swallowed(text, scheme.end(), end - 1) <= end - 1:
                    return scheme.end(), end - 1
            # the quote is not closed, or a name inside has its value beyond it: the value
            # runs on to the end, as a second look would read it once the quote is masked
            return scheme.end(), len(text)
    if at >= len(text) or _stops(text, at):
        return at
    inner = at + 1 if text[at] in ("'", '"') else at
    if _looks_like_flag(text, inner):
        return inner  # "--hf-token --port 8000": the flag stands alone
    if joint.kind == "pair" and _names_a_secret(text, inner):
        return inner  # a name, not a value: the scan goes on there
    if text[at] in ("'", '"'):
        end = _quoted_end(text, at)
        if end < len(text) and not _stops(text, end):  # "a"b: one word, as a shell reads it
            return at, _bare_end(text, end)
        return (at, end) if end - at > 2 else end  # "": nothing to hide
    if text.startswith(MASK, at):  # masked already: the mask is the whole value
        return at, at + len(MASK)
    end = _bare_end(text, at)
    word = text[at:end]
    if word.lower() in _LITERALS or (prose and _PROSE_WORD.fullmatch(word)):
        return at
    return at, end


def _swallowed(text: str, start: int, end: int) -> int:
    """The end of a value to mask that holds names of its own (``key:`{"api_key": "V"}```):
    it reaches as far as their values do, so that masking it never leaves theirs behind."""
    pos = start
    while True:
        if _HINT.search(text, pos, end) is None:  # no name can be in what is left
            return end
        found = _NAME_AT.search(text, pos, end)
        if found is None:
            return end
        name = _NAME_AT.match(text, found.start())  # the whole name, past ``end`` if it goes on
        assert name is not None
        joint = _joint(text, found.start(), name.end())
        value = _value(text, joint) if joint is not None else None
        if isinstance(value, tuple):  # and the names inside that value, in turn
            end = max(end, value[1])
        pos = name.end()


def _masked(value: str) -> str:
    parts = _SEPARATORS.split(value)
    return "".join(MASK if i % 2 == 0 else part for i, part in enumerate(parts) if part)


# A long text is often masked several times: a saved scan's field in each format a diff
# writes (a 5,000,000-character field took 30 s a diff, 55 ms a pass). The answer depends on
# the text alone, so the last few long ones are kept; short ones cost less than the look-up.
_CACHED_FROM = 4096
_CACHED = 8


def redact_cmdline(text: str) -> str:
    """A command line (NUL- or space-separated) with every secret value as ``***``.

    Idempotent, and linear in ``len(text)``. Separators are kept as they were.
    """
    if len(text) >= _CACHED_FROM:
        return _redact_long(text)
    return _redact(text)


@functools.lru_cache(maxsize=_CACHED)
def _redact_long(text: str) -> str:
    return _redact(text)


def _redact(text: str) -> str:
    if _HINT.search(text) is None:
        return text
    out: list[str] = []
    done = pos = 0
    while True:
        found = _NAME_OR_URL.search(text, pos)
        if found is None:
            break
        if found.group() == "://":  # a URL's authority is one piece: its password, if any
            authority, end = _authority(text, found.end())
            out.append(text[done:found.end()])
            out.append(authority)
            # "a://b://u:p@h": the first authority ends at the ':' of the next "://"
            done, pos = end, (end - 1 if text.startswith("://", end - 1) else end)
            continue
        joint = _joint(text, found.start(), found.end())
        if joint is None:
            pos = found.end()
            continue
        value = _value(text, joint)
        if isinstance(value, int):
            pos = max(value, found.end())
            continue
        start, end = value
        end = _swallowed(text, start, end)
        out.append(text[done:start])
        out.append(_masked(text[start:end]))
        done = pos = end
    out.append(text[done:])
    return "".join(out)


def redact_text(text: str) -> str:
    """The same masking for free text: evidence values, HTTP bodies, error messages, keys."""
    return redact_cmdline(text)


MAX_DATA_DEPTH = 100  # deeper than any record (the JSON report cuts at 64)


def redact_data(value: Any, depth: int = 0) -> Any:
    """A record's or an evidence dict's value as it may be shown: every string and every
    key masked as text, and a string held under a key that names a secret shown as ``***``
    (``{"api_key": "sk-…"}``). Dicts, lists and tuples are copied; other values kept."""
    if isinstance(value, str):
        return redact_text(value)
    if depth >= MAX_DATA_DEPTH and isinstance(value, (dict, list, tuple)):
        return f"(nested deeper than {MAX_DATA_DEPTH} levels)"
    if isinstance(value, dict):
        out: dict[Any, Any] = {}
        for key, item in value.items():
            name = redact_text(key) if isinstance(key, str) else key
            if name in out:  # two keys masked alike: keep the first
                continue
            secret = isinstance(key, str) and isinstance(item, str) and item and secret_name(key)
            out[name] = MASK if secret else redact_data(item, depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return masked_list([redact_data(item, depth + 1) for item in value], value)
    return value


def masked_list(shown: list, raw: list | tuple) -> list:
    """``shown`` (the items of ``raw`` as shown) with each string that follows a secret flag
    in ``raw`` masked: an argv list ``["--api-key", "sk-…"]`` as its text would be."""
    for i in range(1, len(raw)):
        before, item = raw[i - 1], raw[i]
        if isinstance(before, str) and isinstance(item, str) and item and takes_secret(before) \
                and not _looks_like_flag(item, 0):
            shown[i] = MASK
    return shown


def program_only(cmdline: str) -> str:
    """A non-engine process's command line as its program alone: ``/usr/bin/python3 -c …``
    → ``/usr/bin/python3``. NUL-separated input (``/proc/<pid>/cmdline``) keeps its final
    NUL. The program word is masked too: a process can retitle itself with anything."""
    first = _SEPARATORS.split(cmdline.lstrip(" \t\n\x00"), maxsplit=1)[0]
    return redact_cmdline(first) + ("\0" if "\0" in cmdline else "")


# Variables whose values a recording keeps: what probes judge (probes/gpu/p2p.py), none a
# secret (switches, levels, device lists and a cache directory).
KEPT_ENV = frozenset({"NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_IB_DISABLE",
                      "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "VLLM_CACHE_ROOT", "XDG_CACHE_HOME",
                      "OLLAMA_NUM_PARALLEL", "OLLAMA_CONTEXT_LENGTH", "OLLAMA_KEEP_ALIVE",
                      "OLLAMA_MAX_LOADED_MODELS", "OLLAMA_FLASH_ATTENTION", "OLLAMA_KV_CACHE_TYPE",
                      "OLLAMA_HOST"}) | frozenset({
    # where an engine keeps its model and compile caches (probes/engine/cache.py): paths
    # and a switch, no secret; HOME and USER give the defaults (~/.cache, /tmp/torchinductor_<user>)
    "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TRITON_CACHE_DIR",
    "TRITON_HOME", "TORCHINDUCTOR_CACHE_DIR", "HOME", "USER"}) | frozenset({
    # ROCm: which GPUs an engine sees and the gfx target it pretends its card is
    # (probes/amd/host.py); versions and indexes, no secret
    "HSA_OVERRIDE_GFX_VERSION", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
    "HSA_FORCE_FINE_GRAIN_PCIE"})


def redact_environ(text: str) -> str:
    """``/proc/<pid>/environ`` as a recording may keep it: the names, every value ``***``
    but those of ``KEPT_ENV``. Which variables a process has can explain it; their values
    are nobody's business."""
    items = (item.partition("=") for item in text.split("\0") if item)
    return "".join(f"{name}={value if name in KEPT_ENV else MASK}\0" for name, _, value in items)


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
