"""HTTP/1.1 requests and answers as :mod:`gpumon.commands.export.server` reads and writes them:
the request line and headers, parsed strictly (anything malformed is ``400``, a version other
than 1.x ``505``), and an answer's parts.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

#: Lines of request line and headers (as http.client allows 100 headers).
MAX_HEAD_LINES = 101

_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VERSION = re.compile(rb"HTTP/(\d)\.(\d)")


@dataclass(frozen=True, slots=True)
class Request:
    """A request's line and headers (names in lower case, repeated ones joined by ``, ``)."""

    method: str
    target: str
    version: tuple[int, int]
    headers: Mapping[str, str]

    @property
    def keep_alive(self) -> bool:
        """The connection may carry another request after this one's answer."""
        tokens = {token.strip().lower() for token in self.headers.get("connection", "").split(",")}
        if "close" in tokens or self.has_body:  # a body is not read: the next request is lost
            return False
        return self.version >= (1, 1) or "keep-alive" in tokens

    @property
    def has_body(self) -> bool:
        """The request says a body follows it."""
        length = self.headers.get("content-length", "").strip()
        return "transfer-encoding" in self.headers or length.strip("0") != ""


@dataclass(frozen=True, slots=True)
class Response:
    """An answer: ``parts`` are the body's pieces, sent in order without being joined."""

    status: int
    headers: tuple[tuple[str, str], ...] = ()
    parts: tuple[bytes, ...] = ()


Handler = Callable[[Request], Response]


def plain(status: int, text: str, *headers: tuple[str, str]) -> Response:
    """A plain-text answer."""
    return Response(
        status, (("Content-Type", "text/plain; charset=utf-8"), *headers), (text.encode(),)
    )


class Refused(Exception):
    """The request cannot be answered; ``status`` says why, and the connection closes."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


async def read_head(reader: asyncio.StreamReader, start: bytes, max_bytes: int) -> list[bytes]:
    """The request line and header lines (with their line ends) up to the blank line, the
    first starting with ``start``; ``Refused`` (414, 431) beyond ``max_bytes`` in all.

    ``reader``'s limit must be at most ``max_bytes``."""
    lines: list[bytes] = []
    size = 0
    while True:
        try:
            line = start + await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:  # one line longer than the whole limit
            line = b""
            size = max_bytes + 1
        start = b""
        size += len(line)
        if size > max_bytes or len(lines) >= MAX_HEAD_LINES:
            raise Refused(431 if lines else 414, "request line or headers too long")
        if line.strip(b"\r\n"):
            lines.append(line)
        elif lines:
            return lines
        # else: a blank line before the request line, which HTTP says to skip


def parse_request(lines: list[bytes]) -> Request:
    """A request from its line and header lines; ``Refused`` (400, 505) if malformed."""
    parts = lines[0].rstrip(b"\r\n").split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not parts[1]:
        raise Refused(400, "malformed request line")
    method, target, version_text = parts
    version = _VERSION.fullmatch(version_text)
    if version is None:
        raise Refused(400, "malformed HTTP version")
    if version.group(1) != b"1":
        raise Refused(505, "only HTTP/1.0 and HTTP/1.1")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.rstrip(b"\r\n").partition(b":")
        if not colon or not _TOKEN.fullmatch(name):  # also a folded line, or space before ":"
            raise Refused(400, "malformed header line")
        key, text = name.decode("ascii").lower(), value.strip(b" \t").decode("latin-1")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    return Request(
        method.decode("ascii"),
        target.decode("latin-1"),
        (1, int(version.group(2))),
        headers,
    )
