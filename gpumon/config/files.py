"""The config files: where they are (XDG), reading one safely, and TOML values written back.

A config file names a program gpumon runs (``probe_python``), so, as ssh does, only a small
regular file that no other user controls is read, without blocking on a FIFO; ``tomllib`` is
imported only when there is a file (``gpumon status`` builds its settings on every call).
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
import sys
from collections.abc import Mapping
from typing import Any

from gpumon.config.checks import SettingsError
from gpumon.data.format import safe_text


def default_config_path(environ: Mapping[str, str]) -> str:
    """``$XDG_CONFIG_HOME/gpumon/config.toml``, else (also for a relative one, as the XDG
    spec says) ``~/.config/gpumon/config.toml``."""
    base = environ.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "gpumon", "config.toml")


#: ``XDG_CONFIG_DIRS`` when it is unset or empty, as the XDG Base Directory spec says.
DEFAULT_CONFIG_DIRS = "/etc/xdg"


def system_config_paths(environ: Mapping[str, str]) -> list[str]:
    """``gpumon/config.toml`` in each directory of ``$XDG_CONFIG_DIRS``, most important
    first; relative entries are ignored, as the XDG spec says, and repeats count once."""
    directories = environ.get("XDG_CONFIG_DIRS", "") or DEFAULT_CONFIG_DIRS
    paths: list[str] = []
    for directory in directories.split(":"):
        path = os.path.join(directory, "gpumon", "config.toml")
        if os.path.isabs(directory) and path not in paths:
            paths.append(path)
    return paths


def default_history_path(environ: Mapping[str, str], uid: int) -> str:
    """The history database when ``history_db`` is not set: the system's for root (what
    the systemd unit records), else ``$XDG_STATE_HOME/gpumon/history.db``."""
    if uid == 0:
        return "/var/lib/gpumon/history.db"
    state = environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):  # the XDG spec: a relative path is to be ignored
        state = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "gpumon", "history.db")


#: A config file is a few hundred bytes; a bound so that /dev/zero or a huge file is one line.
MAX_CONFIG_BYTES = 256 * 1024


def read_config(path: str, *, required: bool) -> dict[str, Any]:
    """The config file's table, read as :func:`read_guarded` reads; ``{}`` when there is
    none (and none was asked for).

    Raises:
        SettingsError: the file cannot be used; its text names the file and why.
    """
    data = read_guarded(path, missing_ok=not required)
    return {} if data is None else _parse(path, data)


def read_guarded(
    path: str, *, max_bytes: int = MAX_CONFIG_BYTES, missing_ok: bool = False
) -> bytes | None:
    """The bytes of ``path`` if it is a regular file of at most ``max_bytes`` (opened
    without blocking) that it and every directory above it belong to this user or root and
    are writable by no one else, as ssh asks; ``None`` for a missing file when ``missing_ok``.

    Raises:
        SettingsError: the file cannot be used; its text names the file and why.
    """
    check_links(path)
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        if not missing_ok:
            raise SettingsError(f"{path}: no such file") from None
        return None
    except OSError as error:
        if missing_ok and error.errno == errno.EACCES and not _searchable(path):
            return None  # under a home that is not ours (su without -): no file we can have
        raise SettingsError(f"{path}: cannot read it: {error.strerror or error}") from None
    try:
        return _read_regular(path, fd, max_bytes)
    finally:
        os.close(fd)


def _read_regular(path: str, fd: int, max_bytes: int) -> bytes:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise SettingsError(f"{path}: not a regular file")
    _check_owner(path, info, "the file")
    _check_directories(path)
    if info.st_size > max_bytes:
        raise SettingsError(f"{path}: too large ({info.st_size} bytes; at most {max_bytes})")
    chunks: list[bytes] = []
    size = 0
    while size <= max_bytes:
        try:
            chunk = os.read(fd, max_bytes + 1 - size)
        except OSError as error:
            raise SettingsError(f"{path}: cannot read it: {error.strerror or error}") from None
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > max_bytes:  # it grew while being read
        raise SettingsError(f"{path}: too large (more than {max_bytes} bytes)")
    return b"".join(chunks)


def _check_owner(path: str, info: os.stat_result, what: str) -> None:
    """Refuse ``what`` when another user owns it or anyone but its owner may write it."""
    uid = os.geteuid()
    if info.st_uid not in (uid, 0):
        raise SettingsError(
            f"{path}: refused: {what} belongs to another user, {owner_name(info.st_uid)}; "
            "a config file must be yours or root's"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        if what != "the file" and info.st_mode & stat.S_ISVTX and info.st_uid == 0:
            return  # /tmp and the like: others cannot replace what is yours there
        raise SettingsError(
            f"{path}: refused: {what} is writable by other users (chmod go-w fixes it)"
        )


def _searchable(path: str) -> bool:
    """False when a directory on the way to ``path`` cannot be searched (EACCES)."""
    try:
        os.stat(path)
    except PermissionError:
        return False
    except OSError:
        pass
    return True


def _check_directories(path: str) -> None:
    """Refuse ``path`` when a directory above its real path is another user's or writable by
    others."""
    directory = os.path.dirname(os.path.realpath(path))
    while True:
        try:
            info = os.stat(directory)
        except OSError:
            return  # it was just opened: what cannot be looked at is not ours to judge
        _check_owner(path, info, f"its directory {directory}")
        parent = os.path.dirname(directory)
        if parent == directory:
            return
        directory = parent


def check_links(path: str) -> None:
    """Refuse ``path`` (a :class:`SettingsError` naming the link and its owner) when a
    symbolic link on the way to it is :func:`foreign_link`."""
    found = foreign_link(path)
    if found is not None:
        link, owner = found
        raise SettingsError(
            f"{path}: refused: {link} is a symbolic link that {owner_name(owner)} owns, who "
            "could point it elsewhere (use the real path)"
        )


def foreign_link(path: str) -> tuple[str, int] | None:
    """The first symbolic link on the way to ``path`` (also within a link's target) that
    neither this user nor root owns, and its owner's uid; ``None`` when there is none (or a
    component cannot be looked at: the opening reports that)."""
    uid = os.geteuid()
    pending = os.path.join(os.getcwd() if not os.path.isabs(path) else "/", path).split("/")
    resolved = "/"
    for _ in range(256):  # a loop of links ends here; the opening refuses it after
        if not pending:
            return None
        name = pending.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            resolved = os.path.dirname(resolved)
            continue
        candidate = os.path.join(resolved, name)
        try:
            info = os.lstat(candidate)
            target = os.readlink(candidate) if stat.S_ISLNK(info.st_mode) else None
        except OSError:
            return None
        if target is None:
            resolved = candidate
            continue
        if info.st_uid not in (uid, 0):
            return candidate, info.st_uid
        if target.startswith("/"):
            resolved = "/"
        pending = target.split("/") + pending
    return None


def owner_name(uid: int) -> str:
    """``alice (uid 1000)``, or ``uid 1000`` where the system has no name for it."""
    try:
        return f"{safe_text(pwd.getpwuid(uid).pw_name, 64)} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _parse(path: str, data: bytes) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the same parser, from PyPI
        import tomli as tomllib
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise SettingsError(f"{path}: not valid TOML: the file is not UTF-8") from None
    except tomllib.TOMLDecodeError as error:
        raise SettingsError(f"{path}: not valid TOML: {error}") from None
    except RecursionError:
        raise SettingsError(f"{path}: not valid TOML: values nested too deeply") from None


#: TOML's short escapes; every other character that is not printable is written ``\\uXXXX``.
_TOML_ESCAPES = {
    character: "\\" + name for character, name in zip('\\"\b\t\n\f\r', '\\"btnfr', strict=True)
}


def toml_value(value: Any) -> str:
    """``value`` as a TOML value, every unprintable character of a string escaped."""
    if isinstance(value, tuple):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return '"' + "".join(_toml_character(character) for character in str(value)) + '"'


def _toml_character(character: str) -> str:
    escaped = _TOML_ESCAPES.get(character)
    if escaped is not None:
        return escaped
    code = ord(character)
    if 0xD800 <= code <= 0xDFFF:  # a byte that was not UTF-8: TOML has no escape for it
        return "\\uFFFD"
    if character.isprintable():
        return character
    return f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}"
