"""Where a judge may call and which key it may send: the operator's allow-lists of base URLs
and key variables, URL normalisation, host resolution and private-network checks (pure; reads
Django settings only in `JudgeNetworkPolicy.from_settings`).

Judge configs are validated against it (judges/config.py) and requests are checked against it
again where they are built (judges/prompts.py)."""


from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from urllib.parse import unquote, urlsplit

# --- base URL and key allow-lists ----------------------------------------------------------
#
# A judge's base URL and key variable are chosen by a study lead; what they may reach is the
# operator's choice (docs/judges.md, "Network and key allow-lists"):
#
# - "listed": under a prefix of REVIEWHUB_JUDGE_ALLOWED_BASE_URLS. The operator vouches for
#   these endpoints: a key may be sent to them and their error bodies are shown to leads.
#   Nothing is listed implicitly, loopback included.
# - "private": not listed, on a loopback/private/link-local address (literally, or by name
#   resolution at validation and again at call time), and the operator has set
#   REVIEWHUB_JUDGE_ALLOW_PRIVATE_NETWORKS. Called without a key (a name that resolved to a
#   private address when checked could point elsewhere when connected); what it answers on
#   error is never shown (only the HTTP status and a generic reason).
# - anything else is refused, at validation (400) and again in the worker.

BASE_URL_SETTING = "REVIEWHUB_JUDGE_ALLOWED_BASE_URLS"
PRIVATE_NETWORKS_SETTING = "REVIEWHUB_JUDGE_ALLOW_PRIVATE_NETWORKS"
KEY_ENV_SETTING = "REVIEWHUB_JUDGE_KEY_ENV_ALLOWED"

DEFAULT_KEY_ENV_ALLOWED = ("*_API_KEY",)
# Variables whose value must never leave the server, whatever the allow-list says: ReviewHub's
# own settings (every Django setting name is added by `JudgeNetworkPolicy.from_settings`),
# database/proxy credentials and the process environment.
RESERVED_KEY_ENV = (
    "DJANGO_*", "DATABASE_*", "REDIS_*", "CELERY_*", "REVIEWHUB_*", "SECRET_KEY", "PG*",
    "*_PROXY", "PATH", "HOME", "PYTHON*", "LD_*",
)

_DNS_LABEL_RE = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_NUMERIC_LABEL_RE = re.compile(r"^(?:0x[0-9a-f]*|[0-9]+)$")


class UrlRefused(ValueError):
    """A URL (or allow-list prefix) written in a form that is not compared; says why."""


@dataclass(frozen=True)
class UrlParts:
    """A URL reduced to what decides where a request goes, for prefix comparison."""

    scheme: str
    host: str  # lower-case DNS name, dotted-quad IPv4 or compressed IPv6
    port: int | None  # None only for a prefix written with ":*" (any port)
    segments: tuple[str, ...]  # percent-decoded path segments


def _default_port(scheme: str) -> int:
    return 443 if scheme == "https" else 80


def _host_normalise(text: str) -> str:
    host = text.lower()
    if not host:
        raise UrlRefused("has no host")
    labels = host.split(".")
    if all(_NUMERIC_LABEL_RE.match(label) for label in labels):
        # The C resolver reads 2130706433, 0x7f.1, 0177.0.0.1 and 127.1 as 127.0.0.1: only the
        # dotted quad is compared, so that no spelling of an address slips past a prefix.
        try:
            return str(ipaddress.IPv4Address(host))
        except ValueError:
            raise UrlRefused(f"has the IPv4 address {text!r} in a non-standard form; write "
                             "it as a dotted quad (e.g. 127.0.0.1)") from None
    if not all(_DNS_LABEL_RE.match(label) for label in labels):
        raise UrlRefused(f"has an invalid host name {text!r}")
    return host


def _path_segments(path: str) -> tuple[str, ...]:
    if path in ("", "/"):
        return ()
    if not path.startswith("/"):
        raise UrlRefused("has a relative path")
    raw = path[1:]
    if raw.endswith("/"):
        raw = raw[:-1]  # one trailing slash names the same place
    out = []
    for seg in raw.split("/"):
        if seg == "":
            raise UrlRefused("has an empty path segment ('//')")
        try:
            decoded = unquote(seg, errors="strict")
        except UnicodeDecodeError:
            raise UrlRefused("has a path segment that is not UTF-8") from None
        # Servers and proxies disagree on encoded slashes, dot segments (also as %2e%2e or
        # '..;'), double encoding and control characters; a base URL needs none of them.
        if "/" in decoded or "\\" in decoded or "%" in decoded:
            raise UrlRefused("has an encoded slash, backslash or '%' in its path")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in decoded):
            raise UrlRefused("has control characters in its path")
        if decoded.split(";", 1)[0] in (".", ".."):
            raise UrlRefused("has a '.' or '..' path segment")
        out.append(decoded)
    return tuple(out)


def url_parts(url: str, *, any_port: bool = False) -> UrlParts:
    """Parse and normalise an http(s) URL for comparison, or raise `UrlRefused`.

    Refused rather than guessed at: userinfo (`https://gw.example@evil/`), query, fragment,
    backslashes, whitespace and non-ASCII text, non-standard IPv4 spellings, empty or dot
    path segments (also percent-encoded), encoded slashes. `any_port` admits `host:*`
    (allow-list prefixes only).
    """
    if not isinstance(url, str) or not url:
        raise UrlRefused("is empty")
    if not url.isascii() or any(c.isspace() or ord(c) < 0x20 or ord(c) == 0x7F or c == "\\"
                                for c in url):
        raise UrlRefused("contains whitespace, control characters, backslashes or non-ASCII "
                         "text (write the host in punycode, percent-encode the path)")
    if "?" in url or "#" in url:
        raise UrlRefused("must not have a query or fragment")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not url.lower().startswith(scheme + "://"):
        raise UrlRefused("must be an http(s) URL with a host")
    netloc = parts.netloc
    if "@" in netloc:
        raise UrlRefused("must not contain credentials (user@host); use api_key_env")
    if "%" in netloc:
        raise UrlRefused("has a percent-encoded host")
    if netloc.startswith("["):
        close = netloc.find("]")
        if close < 0:
            raise UrlRefused("has an unclosed IPv6 address")
        try:
            host = str(ipaddress.IPv6Address(netloc[1:close]))
        except ValueError:
            raise UrlRefused(f"has an invalid IPv6 address {netloc[1:close]!r}") from None
        rest = netloc[close + 1:]
    else:
        name, sep, port_text = netloc.partition(":")
        host = _host_normalise(name)
        rest = sep + port_text
    port: int | None
    if rest == "":
        port = _default_port(scheme)
    elif rest == ":*" and any_port:
        port = None
    elif rest.startswith(":") and rest[1:].isdigit() and len(rest) <= 6 and (
            0 < int(rest[1:]) < 65536):
        port = int(rest[1:])
    else:
        raise UrlRefused(f"has an invalid port {rest[1:]!r}")
    return UrlParts(scheme, host, port, _path_segments(parts.path))


def base_url_under(url: str, prefix: str) -> bool:
    """True when `url` is `prefix` or below it: same scheme, host and port (":*" in the prefix:
    any port), and the prefix's path segments are the first segments of the URL's path.

    Both sides are normalised by `url_parts` first; a URL or prefix it refuses matches nothing.
    So `https://gw/llm` does not cover `https://gw/llm-other`, `https://gw/llm/../admin`,
    `https://gw/llm/%2e%2e/admin`, `https://gw//llm`, `https://gw@evil/llm` or `https://gw:8443/llm`.
    """
    try:
        u = url_parts(url)
        p = url_parts(prefix.strip(), any_port=True)
    except (UrlRefused, ValueError):
        return False
    if (u.scheme, u.host) != (p.scheme, p.host):
        return False
    if p.port is not None and u.port != p.port:
        return False
    return u.segments[: len(p.segments)] == p.segments


def base_url_allowed(url: str, allowed_prefixes: Iterable[str]) -> bool:
    """True when `url` is under one of the allow-listed prefixes (see `base_url_under`)."""
    return any(base_url_under(url, prefix) for prefix in allowed_prefixes)


Resolver = Callable[[str], Iterable[str]]


def resolve_host(host: str) -> list[str]:
    """The addresses `host` resolves to here (raises OSError when it does not resolve)."""
    import socket

    return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None,
                                                                   type=socket.SOCK_STREAM)})


def ip_is_public(address: str) -> bool:
    """False for loopback, private, link-local, unique-local, shared, reserved, unspecified
    and multicast addresses (IPv4-mapped IPv6 judged by its IPv4 address)."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def host_is_private(host: str, resolve: Resolver | None) -> bool | None:
    """True when every address of `host` is non-public, False when one is public, None when
    that cannot be told (no resolver given, or the name does not resolve)."""
    if host == "localhost" or host.endswith(".localhost"):
        return True  # RFC 6761: always loopback, whatever a resolver says
    try:
        return not ip_is_public(host)
    except ValueError:
        pass  # a name, not an address
    if resolve is None:
        return None
    try:
        addresses = list(resolve(host))
        if not addresses:
            return None
        return not any(ip_is_public(a) for a in addresses)
    except (OSError, ValueError, UnicodeError):
        return None


@dataclass(frozen=True)
class BaseUrlAccess:
    """How a base URL may be called: "listed", "private" or "refused" (with the reason)."""

    kind: str
    reason: str = ""
    transient: bool = False  # refused for now only: the host name did not resolve

    @property
    def listed(self) -> bool:
        return self.kind == "listed"


def base_url_access(
    url: str, *, allowed_prefixes: Iterable[str], allow_private: bool,
    resolve: Resolver | None = None,
) -> BaseUrlAccess:
    """Decide how `url` may be called (see the comment at the top of this section)."""
    prefixes = [p.strip() for p in allowed_prefixes if p.strip()]
    try:
        parts = url_parts(url)
    except UrlRefused as exc:
        return BaseUrlAccess("refused", f"base_url {url!r} {exc}.")
    if base_url_allowed(url, prefixes):
        return BaseUrlAccess("listed")
    listed = (f"only URLs under the prefixes in {BASE_URL_SETTING} are "
              f"({', '.join(prefixes) or 'none'})")
    if not allow_private:
        return BaseUrlAccess(
            "refused", f"base_url {url!r} is not allowed: {listed}. Loopback and private "
                       "addresses are no exception. An operator can add this URL's prefix to "
                       "that setting.")
    private = host_is_private(parts.host, resolve)
    if private is None:
        return BaseUrlAccess(
            "refused", f"base_url {url!r} is not allowed: {listed}, and the host "
                       f"{parts.host!r} did not resolve, so it cannot be told to be on a "
                       f"private network ({PRIVATE_NETWORKS_SETTING}).", transient=True)
    if not private:
        return BaseUrlAccess(
            "refused", f"base_url {url!r} is not allowed: {listed}; {PRIVATE_NETWORKS_SETTING} "
                       f"admits only hosts on loopback/private networks and {parts.host!r} "
                       "has a public address.")
    return BaseUrlAccess("private")


def key_env_refusal(name: str, *, allowed: Iterable[str],
                    reserved: Iterable[str] = RESERVED_KEY_ENV) -> str | None:
    """Why the environment variable `name` may not be sent as a judge's key, or None.

    `allowed` and `reserved` are names or glob patterns (`*_API_KEY`); reserved wins.
    """
    for pattern in reserved:
        if fnmatchcase(name, pattern.strip().upper()):
            return (f"api_key_env {name} is one of ReviewHub's own variables ({pattern}); its "
                    "value is never sent to a judge. Put the provider key in a variable of "
                    "its own (e.g. OPENAI_API_KEY).")
    patterns = [p.strip().upper() for p in allowed if p.strip()]
    if not any(fnmatchcase(name, p) for p in patterns):
        return (f"api_key_env {name} is not on the operator's allow-list of key variables "
                f"({KEY_ENV_SETTING}: {', '.join(patterns) or 'none'}). An operator can add "
                "the name to that setting.")
    return None


@dataclass(frozen=True)
class JudgeNetworkPolicy:
    """The operator's allow-lists, as configured in settings (read when called, not imported)."""

    allowed_base_urls: tuple[str, ...]
    allow_private: bool
    key_env_allowed: tuple[str, ...]
    reserved_key_env: tuple[str, ...]

    @classmethod
    def from_settings(cls) -> JudgeNetworkPolicy:
        from django.conf import settings

        own = tuple(sorted(name for name in dir(settings) if name.isupper()))
        return cls(
            allowed_base_urls=tuple(getattr(settings, BASE_URL_SETTING, ())),
            allow_private=bool(getattr(settings, PRIVATE_NETWORKS_SETTING, False)),
            key_env_allowed=tuple(getattr(settings, KEY_ENV_SETTING, DEFAULT_KEY_ENV_ALLOWED)),
            reserved_key_env=RESERVED_KEY_ENV + own,
        )

    def base_url_access(self, url: str, *, resolve: Resolver | None = resolve_host
                        ) -> BaseUrlAccess:
        return base_url_access(url, allowed_prefixes=self.allowed_base_urls,
                               allow_private=self.allow_private, resolve=resolve)

    def base_url_listed(self, url: str) -> bool:
        return base_url_allowed(url, self.allowed_base_urls)

    def key_env_refusal(self, name: str) -> str | None:
        return key_env_refusal(name, allowed=self.key_env_allowed,
                               reserved=self.reserved_key_env)

    def key_send_refusal(self, name: str, *, base_url: str, listed: bool | None = None
                         ) -> str | None:
        """Why the worker must not send the key in `name` to `base_url`, or None: the name is
        refused, or the URL is not listed (a private-network endpoint gets no key)."""
        refusal = self.key_env_refusal(name)
        if refusal is None and not (self.base_url_listed(base_url) if listed is None
                                    else listed):
            refusal = (f"api_key_env {name}: a key is only sent to base URLs listed in "
                       f"{BASE_URL_SETTING}.")
        return None if refusal is None else f"{refusal} No request was sent."

