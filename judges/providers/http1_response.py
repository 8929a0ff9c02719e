"""What the lean HTTP/1.1 pool (`http1.py`) hands back: an answer read in full
(`LeanResponse`, with case-insensitive `ResponseHeaders`; `LeanStream`, an answer being read,
is in `http1.py` beside the connection it reads from), and the decoding of a content-encoded
body."""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

import httpx


class ResponseHeaders(Mapping[str, str]):
    """A response's headers, case-insensitive: names lower-cased, repeated names joined with
    ", " (as `httpx.Headers.get` gives them)."""

    __slots__ = ("_map", "_raw")

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._raw = raw
        mapping: dict[str, str] = {}
        for name, value in raw:
            key = name.decode("ascii", "replace").lower()
            text = _header_text(value)
            mapping[key] = f"{mapping[key]}, {text}" if key in mapping else text
        self._map = mapping

    def __getitem__(self, name: str) -> str:
        return self._map[name.lower()]

    def get(self, name: str, default: Any = None) -> Any:
        return self._map.get(name.lower(), default)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._map

    def __iter__(self) -> Iterator[str]:
        return iter(self._map)

    def __len__(self) -> int:
        return len(self._map)

    @property
    def raw(self) -> list[tuple[bytes, bytes]]:
        """The headers as received: (name, value) bytes, in order."""
        return list(self._raw)

    def __repr__(self) -> str:
        return f"ResponseHeaders({self._map!r})"


def _header_text(value: bytes) -> str:
    try:
        return value.decode("ascii")
    except UnicodeDecodeError:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value.decode("iso-8859-1")


class LeanResponse:
    """What a provider call reads of an answer: `status_code`, `headers` (case-insensitive),
    `content` (decoded bytes), and `text` / `json()` / `request` as httpx's `Response` has
    them. The body is always read in full before the response is returned."""

    __slots__ = (
        "_method",
        "_request",
        "_url",
        "content",
        "headers",
        "http_version",
        "status_code",
    )

    def __init__(self, status_code: int, headers: ResponseHeaders, content: bytes,
                 http_version: str, method: str, url: httpx.URL) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content
        self.http_version = http_version
        self._method = method
        self._url = url
        self._request: httpx.Request | None = None

    @property
    def request(self) -> httpx.Request:
        """The request this answers (method and URL; built on first use)."""
        if self._request is None:
            self._request = httpx.Request(self._method, self._url)
        return self._request

    @property
    def url(self) -> httpx.URL:
        return self._url

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code <= 299

    @property
    def encoding(self) -> str:
        content_type = self.headers.get("content-type", "")
        for param in content_type.split(";")[1:]:
            key, _, value = param.strip().partition("=")
            if key.lower() == "charset" and value:
                return value.strip("\"'")
        return "utf-8"

    @property
    def text(self) -> str:
        try:
            return self.content.decode(self.encoding, "replace")
        except LookupError:  # an unknown charset
            return self.content.decode("utf-8", "replace")

    def json(self, **kwargs: Any) -> Any:
        return json.loads(self.content, **kwargs)

    def __repr__(self) -> str:
        return f"<LeanResponse [{self.status_code}]>"


def decode_body(content: bytes, encoding_header: str) -> bytes:
    """Undo the Content-Encoding (gzip, deflate; applied in the order listed)."""
    for coding in reversed([c.strip().lower() for c in encoding_header.split(",")]):
        if coding in ("", "identity"):
            continue
        try:
            if coding in ("gzip", "x-gzip"):
                content = zlib.decompress(content, 16 + zlib.MAX_WBITS)
            elif coding == "deflate":
                try:
                    content = zlib.decompress(content)
                except zlib.error:  # raw deflate, as some servers send it
                    content = zlib.decompress(content, -zlib.MAX_WBITS)
            else:
                raise httpx.DecodingError(f"unsupported content encoding {coding!r}")
        except zlib.error as exc:
            raise httpx.DecodingError(f"{coding} body could not be decoded: {exc}") from None
    return content
