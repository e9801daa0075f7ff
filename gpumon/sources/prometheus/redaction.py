"""Credentials kept out of every line the Prometheus client shows.

:class:`Redactor` replaces, in any case, with ``***`` every form in which the request's
credentials could come back (header values, tokens, ``user:password``, base64 and
percent-encoded forms). A credential shorter than :data:`SHORTEST_REDACTABLE` cannot be
masked safely: then only :data:`HIDDEN` is shown.
"""

from __future__ import annotations

import base64
import binascii
import re
import urllib.parse
from collections.abc import Iterable, Mapping

#: Shorter credentials are not replaced: the server's text is hidden instead.
SHORTEST_REDACTABLE = 4
#: What stands where the server's text would be when it cannot be made safe.
HIDDEN = "the server's message is not shown: it could contain a credential"
MASK = "***"


def _credential_parts(value: str) -> list[str]:
    """A header value and the parts of it that are credentials on their own."""
    value = value.strip()
    parts = [value]
    scheme, _, credential = value.partition(" ")
    credential = credential.strip()
    if credential:
        parts.append(credential)
        if scheme.lower() == "basic":
            parts += _basic_parts(credential)
    for piece in re.split(r"[\s,;&]+", value):
        key, equals, secret = piece.partition("=")
        # key=secret (not the padding of a base64 token, which ends in "=")
        if equals and re.fullmatch(r"[\w.-]+", key) and secret.rstrip("="):
            parts.append(secret.strip("\"'"))
    return [part for part in parts if part]


def _basic_parts(token: str) -> list[str]:
    """``user:password`` and the password, from a basic-auth token given as a header."""
    try:
        pair = base64.b64decode(token, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return []
    return [pair, pair.partition(":")[2]] if ":" in pair else [pair]


def _forms(secret: str) -> set[str]:
    """The ways ``secret`` could come back in a server's text."""
    raw = secret.encode()
    forms = {
        secret,
        urllib.parse.quote(secret, safe=""),
        urllib.parse.quote(secret),
        urllib.parse.quote_plus(secret),
        # A prefix of the padded form, so "xyz==" and "xyz" are both caught.
        base64.b64encode(raw).decode("ascii").rstrip("="),
        base64.urlsafe_b64encode(raw).decode("ascii").rstrip("="),
    }
    return {form for form in forms if form}


class Redactor:
    """Replaces the credentials of one client in text, or hides the server's text."""

    def __init__(self, headers: Mapping[str, str], basic_auth: tuple[str, str] | None) -> None:
        secrets: list[str] = []
        for value in headers.values():
            secrets += _credential_parts(value)
        if basic_auth is not None:
            user, password = basic_auth
            pair = f"{user}:{password}"
            secrets += [pair, password, base64.b64encode(pair.encode()).decode("ascii")]
        secrets = [secret for secret in secrets if secret]
        #: True when some credential is too short to replace: the server's text is hidden.
        self.hides_server_text = any(len(secret) < SHORTEST_REDACTABLE for secret in secrets)
        forms = {form for secret in secrets for form in _forms(secret)}
        self._pattern = _pattern(form for form in forms if len(form) >= SHORTEST_REDACTABLE)

    def redact(self, text: str) -> str:
        """``text`` with every form of every credential (any case) replaced by ``***``."""
        if self._pattern is None:
            return text
        return self._pattern.sub(MASK, text)

    def server_text(self, text: str) -> str:
        """Text that came from the server, fit to show: redacted, or :data:`HIDDEN`."""
        if self.hides_server_text and text.strip():
            return HIDDEN
        return self.redact(text)


def _pattern(forms: Iterable[str]) -> re.Pattern[str] | None:
    ordered = sorted(set(forms), key=len, reverse=True)  # the longest form wins
    if not ordered:
        return None
    return re.compile("|".join(map(re.escape, ordered)), re.IGNORECASE)
