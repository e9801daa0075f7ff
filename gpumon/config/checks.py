"""The one validator family: each check takes a value from a flag, the config file or the
environment and returns the value to use, or raises :class:`SettingsError` saying what was
expected (a flag's or a variable's text is first made a number: :meth:`Number.from_text`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from gpumon.data.format import safe_text


class SettingsError(ValueError):
    """A setting that cannot be used; ``str()`` is the one line to print, made safe."""

    def __init__(self, message: str) -> None:
        super().__init__(safe_text(message))


#: Textual's built-in themes (the tests check them against Textual's own list, so settings
#: need not import Textual to validate a name).
THEMES = (
    "textual-dark", "textual-light", "nord", "gruvbox", "catppuccin-mocha", "dracula",
    "tokyo-night", "monokai", "flexoki", "catppuccin-latte", "catppuccin-frappe",
    "catppuccin-macchiato", "solarized-light", "solarized-dark", "rose-pine", "rose-pine-moon",
    "rose-pine-dawn", "atom-one-dark", "atom-one-light", "ansi-dark", "ansi-light",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Number:
    """A number from ``low`` to ``high`` (``kind``: int or float); ``what`` says so in words
    (errors, and ``--help``)."""

    kind: type
    low: float
    high: float
    what: str

    def __call__(self, value: Any) -> Any:
        # bool is an int in Python, never a number here; integers are fine for floats.
        wrong_type = isinstance(value, bool) or not isinstance(value, (int, float))
        if wrong_type or (self.kind is int and isinstance(value, float)):
            raise SettingsError(f"expected {self.what}, got {shown(value)}")
        if not self.low <= value <= self.high:  # NaN fails this too
            raise SettingsError(f"expected {self.what}, got {shown(value)}")
        return self.kind(value)

    def from_text(self, text: str) -> Any:
        """A flag's or a variable's text as a number, from plain ASCII digits only; other text
        is left for the check to refuse."""
        pattern = WHOLE if self.kind is int else DECIMAL
        stripped = text.strip()
        return self.kind(stripped) if pattern.fullmatch(stripped) else text


#: What a person means by a whole number and a decimal one, in plain ASCII.
WHOLE = re.compile(r"[0-9]+")
DECIMAL = re.compile(r"[0-9]+\.?[0-9]*|\.[0-9]+")


def theme(value: Any) -> str:
    if not isinstance(value, str) or value not in THEMES:
        raise SettingsError(f"expected one of {', '.join(THEMES)}; got {shown(value)}")
    return value


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise SettingsError(f"expected true or false, got {shown(value)}")
    return value


def _path(value: Any, what: str) -> str:
    """``value`` as a path, ``~`` expanded; ``what`` names what was expected."""
    if not isinstance(value, str) or not value or "\x00" in value:
        raise SettingsError(f"expected the path of {what}, got {shown(value)}")
    return os.path.expanduser(value)


def interpreter(value: Any) -> str:
    """A program to run: an absolute path or a bare command name (looked up on ``PATH``). A
    relative path with a directory part is refused: it would name a different program in
    each directory gpumon starts in (``--probe-python`` is made absolute before it comes here).
    """
    expanded = _path(value, "a Python interpreter")
    if os.sep in expanded and not os.path.isabs(expanded):
        raise SettingsError(
            f"expected an absolute path or a command name, got {shown(value)} (a relative "
            "path would depend on the directory gpumon starts in)"
        )
    return expanded


def directory(value: Any) -> str:
    """A directory's absolute path (it need not exist yet: gpumon may create it)."""
    expanded = _path(value, "a directory")
    if not os.path.isabs(expanded):
        raise SettingsError(
            f"expected an absolute path, got {shown(value)} (a relative one would be made "
            "in whatever directory gpumon starts in)"
        )
    return expanded


def file_path(value: Any) -> str:
    """A file's path; whether it must exist is up to whoever opens it."""
    return _path(value, "a file")


def url(value: Any) -> str:
    """An http:// or https:// URL with a host and no credentials in it."""
    from urllib.parse import urlsplit  # here: only a cluster's settings need it

    if not isinstance(value, str):
        raise SettingsError(f"expected an http:// or https:// URL, got {shown(value)}")
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is no number
    except ValueError:
        parts = None
    # The text before "@" may be a password: never shown, whatever else is wrong.
    if parts is not None and ("@" in parts.netloc):
        raise SettingsError(
            "credentials in the URL are refused (they would be shown and logged): set "
            "prometheus_user and prometheus_password in the config file, or "
            "GPUMON_PROMETHEUS_USER and GPUMON_PROMETHEUS_PASSWORD"
        )
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        safe = shown(value.partition("@")[2] if "@" in value else value)
        raise SettingsError(f"expected an http:// or https:// URL, got {safe}")
    if any(ord(character) < 0x21 or ord(character) == 0x7F for character in value):
        raise SettingsError("expected a URL without spaces or control characters")
    return value


#: An HTTP header's name: RFC 9110's token characters.
HEADER_NAME_CHARACTERS = frozenset(
    "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
)


def headers(value: Any) -> tuple[str, ...]:
    """``"Name: value"`` strings. Errors name the header, never show its value."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise SettingsError('expected a list of "Name: value" strings')
    headers = []
    for number, header in enumerate(value, 1):
        if not isinstance(header, str):
            raise SettingsError(f'header {number}: expected a "Name: value" string')
        name, colon, text = header.partition(":")
        name, text = name.strip(), text.strip()
        if not colon or not name or not set(name) <= HEADER_NAME_CHARACTERS:
            raise SettingsError(
                f'header {number}: expected "Name: value" with a name of letters, digits '
                "and hyphens (the value is not shown)"
            )
        if not text or any(control(character) for character in text):
            raise SettingsError(
                f"header {name}: expected a value without line breaks or control "
                "characters (not shown)"
            )
        try:
            text.encode("latin-1")
        except UnicodeEncodeError:
            # HTTP sends header values as Latin-1: refused here, not on every request.
            raise SettingsError(
                f"header {name}: expected a value of Latin-1 characters (not shown)"
            ) from None
        headers.append(f"{name}: {text}")
    return tuple(headers)


def control(character: str) -> bool:
    # A line break in a header value would start a header of the attacker's choosing.
    return (ord(character) < 0x20 and character != "\t") or ord(character) == 0x7F


def user(value: Any) -> str:
    # RFC 7617: the user-id cannot contain a colon.
    if not isinstance(value, str) or not value or ":" in value or not value.isprintable():
        raise SettingsError(f"expected a user name without a colon, got {shown(value)}")
    return value


def password(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise SettingsError("expected a non-empty string (the value is not shown)")
    if any(control(character) for character in value):
        raise SettingsError("expected no control characters (the value is not shown)")
    return value


#: ``--only``: an NVML index, a GPU UUID or a MIG UUID (or a unique prefix of one).
_GPU_ID = re.compile(r"[0-9]{1,2}|(?:GPU|MIG)-[0-9A-Fa-f][0-9A-Fa-f-]{0,63}", re.ASCII)
#: ``--user``: a user name as useradd and LDAP allow it.
_USER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}\$?", re.ASCII)


def gpu_list(value: Any) -> tuple[str, ...]:
    """``0,3`` or UUIDs, each checked, duplicates dropped."""
    items = [item.strip() for item in value.split(",")] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(
        isinstance(item, str) and _GPU_ID.fullmatch(item) for item in items
    ):
        raise SettingsError(
            f"expected NVML indices, GPU-... or MIG-... UUIDs, comma-separated, got {shown(value)}"
        )
    return tuple(dict.fromkeys(items))


def user_name(value: Any) -> str:
    if not isinstance(value, str) or not _USER_NAME.fullmatch(value):
        raise SettingsError(f"expected a user name, got {shown(value)}")
    return value


def unknown_user(name: str | None, *, local: bool) -> str | None:
    """What is wrong with ``--user name`` on this machine, or ``None``: a name the system does
    not know matches no process (their names come from it), so it is a typo, said as one.
    Only ``local`` processes' users are (not the demo's nor remote nodes'), and not a bare
    uid (a process whose user has no name)."""
    if name is None or not local or name.isdigit():
        return None
    try:
        import pwd
    except ImportError:  # not a POSIX system: nothing to look the name up in
        return None
    try:
        pwd.getpwnam(name)
    except KeyError:
        return f"--user {name}: no such user on this machine"
    return None


def shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"
