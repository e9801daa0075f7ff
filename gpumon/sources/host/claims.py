"""The shared claims directory: opened and checked, read and written safely.

The rules (names, text, expiry) are :mod:`gpumon.data.claims`; this module does the file I/O.
The directory must be a real, sticky, world-writable directory, else :class:`ClaimsOff` says
why. A claim is written under a hidden name and renamed into place; what is read is other
users' input, checked before it counts. There is no lock. Details: docs/pick.md.
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import secrets
import stat
import time
from collections.abc import Collection
from dataclasses import dataclass

from gpumon.data import claims as rules
from gpumon.data.format import safe_text

#: A user has a claim per GPU (or MIG instance) at most, and a pick's new one beside it for a
#: moment: more claim files of one user than this are not read.
MAX_FILES_PER_USER = 256

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_SHARED_MODE = stat.S_ISVTX | stat.S_IWOTH


class ClaimsOff(Exception):
    """The claims directory cannot be used; the text says why in one line
    (``/dev/shm/gpumon-claims is a symbolic link``)."""


@dataclass(frozen=True, slots=True)
class Ignored:
    """An entry with a claim's name that is not a claim: its name (made safe to show), why,
    and its owner's uid."""

    name: str
    why: str
    uid: int


@dataclass(frozen=True, slots=True)
class Unread:
    """Why an entry was not read (empty: it was removed since the listing), and whose it is."""

    why: str
    uid: int


@dataclass(frozen=True, slots=True)
class Scan:
    """What the directory holds: the valid claims (live or not), and the entries that were
    ignored, each with why (``a symbolic link``) and whose."""

    claims: tuple[rules.Claim, ...]
    ignored: tuple[Ignored, ...]


_user_names: dict[int, str] = {}


def user_name(uid: int) -> str:
    """The name of ``uid`` (``uid 1234`` when the system has none); looked up once it has
    one (a directory service that failed once may answer the next time)."""
    if uid not in _user_names:
        try:
            _user_names[uid] = safe_text(pwd.getpwuid(uid).pw_name, 64)
        except KeyError:
            return f"uid {uid}"
    return _user_names[uid]


class ClaimsDir:
    """An open, checked claims directory. Close it (or use it as a context manager)."""

    def __init__(self, path: str, fd: int, uid: int) -> None:
        self.path = path
        self.fd = fd
        self.uid = uid

    @classmethod
    def open(cls, path: str, *, create: bool, uid: int | None = None) -> ClaimsDir:
        """Open ``path``, creating it (mode 1777) when ``create`` and it is missing; raises
        :class:`ClaimsOff` when it cannot be, or is not a sticky, world-writable real directory.
        """
        uid = os.geteuid() if uid is None else uid
        if create:
            _create(path)
        try:
            fd = os.open(path, _DIR_FLAGS)
        except OSError as error:
            raise ClaimsOff(_open_failure(path, error)) from None
        try:
            info = os.fstat(fd)
            if info.st_mode & _SHARED_MODE != _SHARED_MODE:
                raise ClaimsOff(
                    f"{path} is not sticky and world-writable "
                    f"(mode {stat.S_IMODE(info.st_mode):o}; chmod 1777 {path})"
                )
        except BaseException:
            os.close(fd)
            raise
        return cls(path, fd, uid)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self.fd = -1

    def __enter__(self) -> ClaimsDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def scan(self, keys: Collection[str] | None = None, now_s: float | None = None) -> Scan:
        """Every claim file (of ``keys`` only, when given) checked and read.

        Raises :class:`ClaimsOff` when the directory cannot be listed."""
        now_s = time.time() if now_s is None else now_s
        found: list[rules.Claim] = []
        ignored: list[Ignored] = []
        files_of: dict[int, int] = {}
        try:
            with os.scandir(self.fd) as entries:
                for entry in entries:
                    parsed = rules.parse_file_name(entry.name)
                    if parsed is None or (keys is not None and parsed[0] not in keys):
                        continue  # hidden temporary files, other names, other GPUs
                    claim, why, owner = self._read(entry.name, parsed, now_s, files_of)
                    if claim is not None:
                        found.append(claim)
                    elif why:  # no why: removed since the listing, as claims are
                        # Both are shown to every user who picks: another user's text.
                        name = safe_text(entry.name, 120)
                        ignored.append(Ignored(name, safe_text(why, 200), owner))
        except OSError as error:
            raise ClaimsOff(f"cannot list {self.path}: {error.strerror or error}") from None
        return Scan(tuple(found), tuple(ignored))

    def _read(
        self, name: str, parsed: tuple[str, int, str], now_s: float, files_of: dict[int, int]
    ) -> tuple[rules.Claim | None, str, int]:
        """The claim ``name`` holds, or why it is none; and whose the entry is."""
        key, uid, _ = parsed
        read = self.read_entry(name, uid, rules.MAX_CLAIM_FILE_BYTES, files_of)
        if isinstance(read, Unread):
            return None, read.why, read.uid
        data, opened = read
        try:
            claimed_s, stated_s = rules.parse_claim_text(data, key)
        except ValueError as error:
            return None, str(error), uid
        if rules.from_the_future(claimed_s, now_s):
            return None, "dated in the future", uid
        claim = rules.Claim(
            key=key,
            uid=opened.st_uid,
            owner=user_name(opened.st_uid),
            file_name=name,
            claimed_s=claimed_s,
            expires_s=rules.expiry(stated_s, claimed_s),
        )
        return claim, "", uid

    def read_entry(
        self, name: str, uid: int, max_bytes: int, files_of: dict[int, int]
    ) -> tuple[bytes, os.stat_result] | Unread:
        """The bytes of ``name``, whose name says it is ``uid``'s, and its ``fstat``; or why it
        is not read (:class:`Unread`; no why: removed since the listing). Never follows a
        symlink, never opens what is not a regular file of ``uid``, reads at most
        ``max_bytes`` and at most :data:`MAX_FILES_PER_USER` files of one user (``files_of``
        counts them)."""
        try:
            info = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:  # removed since the listing: not an entry any more
            return Unread("", uid)
        except OSError as error:
            return Unread(str(error.strerror), uid)
        problem = _kind_problem(info, uid, max_bytes)
        if problem is not None:
            return Unread(problem, info.st_uid)
        files_of[uid] = files_of.get(uid, 0) + 1
        if files_of[uid] > MAX_FILES_PER_USER:
            return Unread(f"more than {MAX_FILES_PER_USER} files of one user", uid)
        try:
            fd = os.open(name, _READ_FLAGS, dir_fd=self.fd)
        except FileNotFoundError:
            return Unread("", uid)
        except OSError as error:
            why = "a symbolic link" if error.errno == errno.ELOOP else str(error.strerror)
            return Unread(why, uid)
        try:
            opened = os.fstat(fd)
            if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
                return Unread("replaced while read", uid)
            problem = _kind_problem(opened, uid, max_bytes)
            if problem is not None:
                return Unread(problem, uid)
            return os.read(fd, max_bytes + 1), opened
        except OSError as error:
            return Unread(str(error.strerror), uid)
        finally:
            os.close(fd)

    def write_file(self, name: str, text: bytes) -> None:
        """Write this user's file ``name`` (readable by all) under a hidden name and rename it
        into place. Raises :class:`OSError`, leaving nothing behind."""
        temporary = f".{name}.tmp"
        fd = os.open(temporary, _CREATE_FLAGS, 0o644, dir_fd=self.fd)
        try:
            try:
                os.fchmod(fd, 0o644)  # whatever the umask: other users' picks must read it
                os.write(fd, text)
            finally:
                os.close(fd)
            os.rename(temporary, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except BaseException:
            self.remove(temporary)
            raise

    def write(self, key: str, claimed_s: float, expires_s: float, token: str | None = None) -> str:
        """Write this user's claim on ``key`` (named with ``token``, random by default); returns its
        file name. Raises :class:`OSError`, leaving nothing behind.
        """
        token = secrets.token_hex(8) if token is None else token
        name = rules.file_name(key, self.uid, token)
        self.write_file(name, rules.claim_text(key, claimed_s, expires_s, os.getpid()))
        return name

    def remove(self, name: str) -> None:
        """Remove one of this user's files; gone already, or not removable: nothing."""
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=self.fd)


def _create(path: str) -> None:
    """Make ``path`` mode 1777 when it is missing, in one step (umask cleared around the mkdir
    alone): no moment with a narrower mode, and no chmod on what another user put there.
    """
    previous = os.umask(0)
    try:
        os.mkdir(path, 0o1777)
    except FileExistsError:
        return  # another pick made it first, or it is there: checked on opening
    except OSError as error:
        raise ClaimsOff(f"cannot create {path}: {error.strerror or error}") from None
    finally:
        os.umask(previous)


def _open_failure(path: str, error: OSError) -> str:
    if error.errno in (errno.ELOOP, errno.ENOTDIR):
        # O_NOFOLLOW | O_DIRECTORY refuses a symlink with either: say which it was.
        try:
            link = stat.S_ISLNK(os.lstat(path).st_mode)
        except OSError:
            link = error.errno == errno.ELOOP
        what = "a symbolic link" if link else "not a directory"
        return f"{path} is {what}"
    return f"cannot open {path}: {error.strerror or error}"


def _kind_problem(info: os.stat_result, name_uid: int, max_bytes: int) -> str | None:
    """Why a file is not a claim to read, from its ``lstat``; None when it may be one."""
    if stat.S_ISLNK(info.st_mode):
        return "a symbolic link"
    if stat.S_ISDIR(info.st_mode):
        return "a directory"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file"
    if info.st_uid != name_uid:
        return f"owned by {user_name(info.st_uid)}, not the uid {name_uid} its name says"
    if info.st_size > max_bytes:
        return f"too large ({info.st_size} bytes)"
    return None
