"""The recorder's own database, and the snapshot of it that every reader reads.

The live database lives in a private directory (``history.db.live/``, 0700), so no other
user can take its locks; ``history.db`` is a snapshot published at most every
:data:`PUBLISH_S` by backup and rename, which readers open ``immutable=1``. An older
recorder's database is taken in at first start. Why: docs/history.md.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import shlex
import shutil
import sqlite3
import stat

from gpumon.config.files import owner_name
from gpumon.sampling.history.files import (
    LIVE_SUFFIX,
    SIDECARS,
    check_database_file,
    check_links,
    check_safe,
    check_sidecars,
    make_directory,
)
from gpumon.sampling.history.schema import DATABASE_ERRORS, HistoryError, explain

#: How long a statement waits for a lock before it fails with "database is locked".
BUSY_TIMEOUT_S = 5.0
#: Readers see the recorder's data at most this old (while samples arrive) ...
PUBLISH_S = 60.0
#: ... while each publication, a whole copy, keeps to this many bytes written an hour
#: (1 GiB: a history up to 17 MiB is published every minute, one of 140 MB every 8 minutes).
PUBLISH_BYTES_PER_HOUR = 2**30
#: The live database's name in its directory, and the one-recorder lock's.
LIVE_NAME = "history.db"
LOCK_NAME = "recorder.lock"


class WritableHistory:
    """The recorder's connection to the live database and its claim on it; see
    :func:`open_for_writing`. ``path`` is the history's (the snapshot's)."""

    def __init__(
        self, path: str, connection: sqlite3.Connection, lock_fd: int, *, taken_in: bool
    ) -> None:
        self.path = path
        self.live_path = os.path.join(path + LIVE_SUFFIX, LIVE_NAME)
        self.connection = connection
        #: The live database was copied from ``path`` just now (an older recorder's).
        self.taken_in = taken_in
        self._lock_fd = lock_fd

    def publish(self) -> None:
        """Publish the live database as the readers' snapshot (:class:`HistoryError`: retry)."""
        temporary = _publishing(self.path, str(os.getpid()))
        try:
            fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        except OSError as error:
            raise _not_published(self.path, error) from None
        try:
            os.fchmod(fd, 0o644)  # readable by everyone, whatever the umask
            copy = sqlite3.connect(temporary, isolation_level=None)
            try:
                copy.execute("PRAGMA journal_mode = OFF")  # a new file: nothing to roll back
                copy.execute("PRAGMA synchronous = OFF")  # synced once, below
                self.connection.backup(copy)
                copy.execute("PRAGMA journal_mode = DELETE")  # as the live database said WAL
            finally:
                copy.close()
            os.fsync(fd)
            os.replace(temporary, self.path)
            directory_fd = os.open(os.path.dirname(self.path), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(directory_fd)  # the rename, on disk
            finally:
                os.close(directory_fd)
        except (OSError, *DATABASE_ERRORS) as error:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            if isinstance(error, OSError):
                raise _not_published(self.path, error) from None
            raise explain(self.path, error, writing=True) from None
        finally:
            os.close(fd)
        for suffix in SIDECARS:  # an older recorder's, beside a file that is now a snapshot
            with contextlib.suppress(OSError):
                os.unlink(self.path + suffix)

    def close(self, *, discard: bool = False) -> None:
        """Close the connection, then let go of the lock; ``discard``: remove the live
        database first (one just taken in that cannot be used: ``path`` stays the one to
        move aside)."""
        try:
            self.connection.close()
            if discard:
                for suffix in ("", *SIDECARS):
                    with contextlib.suppress(OSError):
                        os.unlink(self.live_path + suffix)
        finally:
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1


def open_for_writing(path: str) -> WritableHistory:
    """Open (creating what is missing) the live database of the history at ``path`` for the one
    recorder, taking in an older recorder's database first. Raises :class:`HistoryError` when a
    path is unsafe, another recorder writes it, or it cannot be created or opened.
    """
    directory = os.path.dirname(os.path.abspath(path))
    check_links(path, directory)
    make_directory(directory)
    check_safe(path, os.stat(directory), f"its directory {directory}", directory)
    if os.path.isdir(path):
        raise HistoryError(
            f"{path} is a directory: --db takes the database file's path, such as "
            f"{os.path.join(path, 'history.db')}"
        )
    live = _live_directory(path)
    lock_fd = _claim(path, live)
    try:
        for left in glob.glob(glob.escape(_publishing(path, "")) + "*"):
            with contextlib.suppress(OSError):  # the next publication's name is its own
                os.unlink(left)  # a publication a stop or a crash cut short
        live_path = os.path.join(live, LIVE_NAME)
        check_sidecars(live_path)
        taken_in = not os.path.exists(live_path) and os.path.lexists(path)
        if taken_in:
            _take_in(path, live_path)
        # Opened where the recorder starts, written on its own thread (one at a time).
        connection = sqlite3.connect(
            live_path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False
        )
    except BaseException:
        os.close(lock_fd)
        raise
    return WritableHistory(path, connection, lock_fd, taken_in=taken_in)


def configure_for_writing(connection: sqlite3.Connection) -> None:
    """WAL (the snapshot is copied while nothing waits) and ``synchronous = NORMAL`` (only a power
    cut may lose the last commits). Raises :class:`sqlite3.Error`.
    """
    mode = connection.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise sqlite3.OperationalError(f"cannot use WAL mode (journal mode stays {mode})")
    connection.execute("PRAGMA synchronous = NORMAL")


def _live_directory(path: str) -> str:
    """The live directory of the history at ``path``, created 0700 when missing; raises
    :class:`HistoryError` unless it is this user's alone.
    """
    live = path + LIVE_SUFFIX
    try:
        os.mkdir(live, 0o700)
    except FileExistsError:
        pass
    except OSError as error:
        raise HistoryError(
            f"{live}: cannot create the recorder's directory: {error.strerror or error} (a "
            "read-only file system? --db chooses another place)"
        ) from None
    info = os.lstat(live)
    if not stat.S_ISDIR(info.st_mode):
        raise HistoryError(
            f"{path}: refused: {live} is not a directory (rm {shlex.quote(live)}; the recorder "
            "keeps its live database there)"
        )
    if info.st_uid != os.geteuid():
        raise HistoryError(
            f"{path}: refused: its live directory {live} belongs to {owner_name(info.st_uid)}; "
            "the recorder keeps its database only in its own (remove it, or --db elsewhere)"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise HistoryError(
            f"{path}: refused: other users may enter its live directory {live}, and lock the "
            f"recorder's files there (chmod 700 {shlex.quote(live)})"
        )
    return live


def _claim(path: str, live: str) -> int:
    """The one-recorder lock: an ``flock`` on a file in the live directory, which no other
    user can open."""
    lock = os.path.join(live, LOCK_NAME)
    flags = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(lock, flags, 0o600)
    except OSError as error:
        raise HistoryError(f"{lock}: cannot open the recorder's lock: {error.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise HistoryError(
            f"{path}: another recorder (gpumon record or export --record) is writing it: "
            "one recorder per database"
        ) from None
    return fd


def _take_in(path: str, live_path: str) -> None:
    """Copy the database at ``path`` (an older recorder's, or a snapshot whose live
    database is gone) into the live directory: the file and its ``-wal`` (or ``-journal``),
    which SQLite then reads as it would have beside ``path``. Copied as files, not through
    SQLite: another user may hold a lock on the old ``-shm``, which would stall SQLite."""
    check_database_file(path)  # the same checks as for the recorder's own file
    check_sidecars(path)
    try:
        for suffix in ("", "-wal", "-journal"):
            if suffix == "" or os.path.exists(path + suffix):
                shutil.copyfile(path + suffix, live_path + suffix, follow_symlinks=False)
    except OSError as error:
        for suffix in ("", "-wal", "-journal"):
            with contextlib.suppress(OSError):
                os.unlink(live_path + suffix)
        raise HistoryError(
            f"{path}: cannot take it into {os.path.dirname(live_path)}: {error.strerror or error}"
        ) from None


def _publishing(path: str, pid: str) -> str:
    """The file a snapshot of ``path`` is written to by the recorder of ``pid``."""
    directory, name = os.path.split(path)
    return os.path.join(directory, f".{name}.publishing.{pid}")


def _not_published(path: str, error: OSError) -> HistoryError:
    return HistoryError(
        f"{path}: cannot publish the history for readers: {error.strerror or error} (a full "
        "disk? readers see it as of the last publication); retrying",
        retry=True,
    )
