"""Engine endpoints as the user names them (``--endpoint``), parsed once and checked.

An endpoint is ``[http|https://][KEY@]HOST[:PORT][/PREFIX]``:

* the scheme is http or https; without one, ``http://`` is meant (``127.0.0.1:8000``);
* HOST is an IPv4 address, a host name (ASCII letters, digits, ``-``, ``_``, dots; an
  internationalised name in its ``xn--`` form) or an IPv6 address in brackets
  (``[::1]``); brackets hold IPv6 only;
* PORT is one number from 1 to 65535 (default: the scheme's, 80 or 443);
* PREFIX is a path a gateway serves the engine under (``/llm``); a page path at its end
  (``/metrics``, ``/v1/models``, ``/v1``...) is taken off, so the URL of any page works;
* a key is written as ``:KEY@`` (or ``user:KEY@``, or ``KEY@``), percent-encoded where it
  holds ``@``, ``/`` or ``%``: it is sent as ``Authorization: Bearer KEY``, to this
  endpoint's origin only (doctor/seam/http.py), and never shown;
* no space, control or non-ASCII character anywhere, no ``?query`` or ``#fragment``.

``parse`` raises ``EndpointError`` saying what is wrong, with the endpoint shown without
its key; the command line turns it into exit 3. The scan's ``--endpoint``, ``warmup`` and
``load`` read endpoints through here, and so will the daemon.
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from dataclasses import dataclass, field

from doctor.i18n import t

SCHEMES = {"http": 80, "https": 443}
PAGE_SUFFIXES = ("/metrics", "/v1/models", "/v1", "/props", "/info", "/server_info")
MAX_LENGTH = 2048
_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
_PORT = re.compile(r"[0-9]{1,5}")
_PATH = re.compile(r"(/[A-Za-z0-9._~!$&'()*+,;=:@%-]*)*")


MIN_HIDDEN_KEY = 8  # a shorter key would mask ordinary words of a page


def hide_keys(text: str, keys: tuple[str, ...]) -> str:
    """``text`` with every key in ``keys`` (8 characters or more, any case) as ``***``:
    what an engine sends back (a page, an error, a status line) may echo the key it was
    sent, and whatever llm-doctor shows or records of it must not carry it on."""
    for key in keys:
        if len(key) >= MIN_HIDDEN_KEY and key.lower() in text.lower():
            text = re.sub(re.escape(key), "***", text, flags=re.IGNORECASE)
    return text


def header_keys(headers: dict[str, str]) -> tuple[str, ...]:
    """The secrets in an Authorization header: a Bearer token, a Basic pair's password
    and the pair as encoded."""
    scheme, _, token = next((v for k, v in headers.items() if k.lower() == "authorization"),
                            "").strip().partition(" ")
    keys = [token.strip()] if token.strip() else []
    if scheme.lower() == "basic" and keys:
        import base64
        import binascii

        try:
            keys.append(base64.b64decode(keys[0], validate=True).decode().partition(":")[2])
        except (binascii.Error, UnicodeDecodeError):
            pass
    return tuple(k for k in keys if k)


class EndpointError(ValueError):
    """An endpoint that cannot be used; the message names it (without its key) and says why."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    scheme: str  # "http" or "https"
    host: str  # as in a URL: "127.0.0.1", "gw.local", "[::1]"
    port: int | None  # None: the scheme's default
    prefix: str  # "" or "/llm"
    key: str | None = field(default=None, repr=False)  # sent as a Bearer token, never shown

    @property
    def base_url(self) -> str:
        """scheme://host[:port][/prefix], without the key: what reports show."""
        port = f":{self.port}" if self.port is not None else ""
        return f"{self.scheme}://{self.host}{port}{self.prefix}"

    @property
    def url(self) -> str:
        """The endpoint as given back to ``parse``: the base URL with the key in it."""
        if self.key is None:
            return self.base_url
        key = urllib.parse.quote(self.key, safe="")
        return self.base_url.replace("://", f"://:{key}@", 1)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}


def shown(text: str) -> str:
    """An endpoint as an error may show it: anything before an ``@`` in its authority
    masked, control characters escaped, cut to 200 characters."""
    from doctor.redact import safe_display

    scheme, sep, rest = text.partition("://") if "://" in text else ("", "", text)
    end = min((rest.find(c) for c in "/?#" if c in rest), default=len(rest))
    if "@" in rest[:end]:
        rest = "***@" + rest[:end].rpartition("@")[2] + rest[end:]
    out = safe_display(f"{scheme}{sep}{rest}")
    return out if len(out) <= 200 else out[:197] + "..."


def parse(text: object) -> Endpoint:
    """The endpoint ``text`` names; EndpointError says what is wrong with it."""
    if not isinstance(text, str) or not text:
        got = t("nothing") if not text else type(text).__name__
        raise EndpointError(t("an endpoint is a URL such as http://127.0.0.1:8000; got {got}",
                              got=got))
    if len(text) > MAX_LENGTH:
        raise EndpointError(t("{endpoint}: longer than {most} characters", endpoint=shown(text),
                              most=MAX_LENGTH))
    odd = next((c for c in text if not " " < c < "\x7f"), None)
    if odd is not None:
        what = t("a space") if odd == " " else t("the character {char}", char=repr(odd))
        raise EndpointError(t("{endpoint}: holds {what}; an endpoint is ASCII with no spaces "
                              "or control characters (percent-encode them in a key)",
                              endpoint=shown(text), what=what))
    scheme, sep, rest = text.partition("://")
    if not sep:
        scheme, rest = "http", text
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise EndpointError(t("{endpoint}: the scheme must be http or https, not {scheme}",
                              endpoint=shown(text), scheme=repr(scheme)))
    if "?" in rest or "#" in rest:
        raise EndpointError(t("{endpoint}: an endpoint has no ?query or #fragment (the pages "
                              "read, /metrics and others, are added after it)",
                              endpoint=shown(text)))
    slash = rest.find("/")
    authority, path = (rest, "") if slash < 0 else (rest[:slash], rest[slash:])
    userinfo, at, hostport = authority.rpartition("@")
    host, port = _host_port(hostport, text)
    return Endpoint(scheme, host, port, _prefix(path, text), _key(userinfo, text) if at else None)


def _host_port(hostport: str, text: str) -> tuple[str, int | None]:
    if hostport.startswith("["):
        inside, close, after = hostport[1:].partition("]")
        if not close:
            raise EndpointError(t("{endpoint}: an IPv6 address opens '[' and closes ']'",
                                  endpoint=shown(text)))
        try:
            ipaddress.IPv6Address(inside)
        except ValueError:
            raise EndpointError(t("{endpoint}: [{inside}] is not an IPv6 address; brackets "
                                  "hold IPv6 only (http://[::1]:8000, http://127.0.0.1:8000)",
                                  endpoint=shown(text), inside=inside)) from None
        if after and not after.startswith(":"):
            raise EndpointError(t("{endpoint}: after ']' comes ':PORT' or nothing",
                                  endpoint=shown(text)))
        host, colon, port_text = f"[{inside.lower()}]", after[:1], after[1:]
    else:
        name, colon, port_text = hostport.partition(":")
        if ":" in port_text:
            raise EndpointError(t("{endpoint}: more than one ':' after the host; give one "
                                  "port, and an IPv6 address in brackets (http://[::1]:8000)",
                                  endpoint=shown(text)))
        host = _host_name(name, text)
    return host, _port(port_text, text) if colon else None


def _host_name(host: str, text: str) -> str:
    if not host:
        raise EndpointError(t("{endpoint}: no host; e.g. http://127.0.0.1:8000",
                              endpoint=shown(text)))
    labels = host.rstrip(".").split(".")
    if all(label.isdigit() for label in labels):
        try:
            return str(ipaddress.IPv4Address(host))
        except ValueError:
            raise EndpointError(t("{endpoint}: {host} is not an IPv4 address",
                                  endpoint=shown(text), host=host)) from None
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise EndpointError(t("{endpoint}: {host} is not a host name (letters, digits, '-' "
                              "and dots, each part at most 63 characters)",
                              endpoint=shown(text), host=repr(host)))
    return host.lower()


def _port(port_text: str, text: str) -> int:
    if not _PORT.fullmatch(port_text) or not 1 <= int(port_text) <= 65535:
        raise EndpointError(t("{endpoint}: the port must be a number from 1 to 65535, not "
                              "{port}", endpoint=shown(text), port=repr(port_text[:20])))
    return int(port_text)


def _prefix(path: str, text: str) -> str:
    if not _PATH.fullmatch(path) or "//" in path:
        raise EndpointError(t("{endpoint}: the path {path} is not a URL path",
                              endpoint=shown(text), path=repr(path[:60])))
    if any(segment in (".", "..") for segment in path.split("/")):
        raise EndpointError(t("{endpoint}: the path may not hold '.' or '..' segments",
                              endpoint=shown(text)))
    path = path.rstrip("/")
    for suffix in PAGE_SUFFIXES:
        if path.endswith(suffix):
            return path[: -len(suffix)]
    return path


def _key(userinfo: str, text: str) -> str | None:
    """The key in ``:KEY``, ``user:KEY`` or ``KEY`` (as before: the password, else the user)."""
    user, _, password = userinfo.partition(":")
    raw = password or user
    if not raw:
        return None
    bad = EndpointError(t("{endpoint}: the key must be printable ASCII with no spaces, "
                          "percent-encoded where it holds '@', '/' or '%' (%40, %2F, %25)",
                          endpoint=shown(text)))
    if not re.fullmatch(r"([^%]|%[0-9A-Fa-f]{2})*", raw):  # a lone '%' is written %25
        raise bad
    try:
        key = urllib.parse.unquote(raw, errors="strict")
    except UnicodeDecodeError:
        raise bad from None
    if not all(" " < c < "\x7f" for c in key):
        raise bad
    return key
