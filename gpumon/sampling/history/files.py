"""Where the history database is, opening it read-only for every reader, and the checks on
who else could write it that the recorder (:mod:`~gpumon.sampling.history.live`) makes too.

A directory or file that another user can write or owns is refused: they could rewrite what
reports show, and SQLite would read a planted ``-journal``. A reader opens ``mode=ro`` (a
snapshot ``immutable=1``), never creates or writes, and holds the files beside the database
to the same rules. An older recorder's WAL database is read as it is.
"""

from __future__ import annotations

import os
import shlex
import sqlite3
import stat
import time
import urllib.parse
from typing import TYPE_CHECKING

from gpumon.config.files import default_history_path, foreign_link, owner_name
from gpumon.sampling.history.schema import DATABASE_ERRORS, HistoryError, explain

if TYPE_CHECKING:
    from gpumon.config import Settings

#: The private directory beside the history that holds the recorder's live database.
LIVE_SUFFIX = ".live"
#: How long a reader waits for a lock (an older recorder's checkpoints): the dashboard must
#: not stall on the history.
READER_BUSY_TIMEOUT_S = 2.0
#: The longest one read may run: a report over a year of a busy server takes well under a
#: second; a database made to loop (or huge) is given up on, with one line, after this.
READ_DEADLINE_S = 20.0
#: How many SQLite virtual-machine steps between two looks at the clock.
_DEADLINE_STEPS = 10_000


class ReadConnection(sqlite3.Connection):
    """A reader's connection: every statement gives up (``sqlite3.OperationalError:
    interrupted``) once the time :meth:`start_read` set has passed."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.deadline = time.monotonic() + READ_DEADLINE_S
        self.set_progress_handler(self._past_deadline, _DEADLINE_STEPS)

    def start_read(self) -> None:
        """Give the next read :data:`READ_DEADLINE_S` from now."""
        self.deadline = time.monotonic() + READ_DEADLINE_S

    def _past_deadline(self) -> int:
        return 1 if time.monotonic() > self.deadline else 0


def past_deadline(path: str) -> HistoryError:
    """The one line for a read that ran past :data:`READ_DEADLINE_S`."""
    return HistoryError(
        f"{path}: gave up reading it after {READ_DEADLINE_S:g} s: it is damaged, made to "
        "loop, or far larger than a history grows (--db chooses another database)"
    )


def history_path(settings: Settings) -> str:
    """The history database of ``settings``: ``history_db`` (``--db``), else the default
    (``/var/lib/gpumon/history.db`` for root, else ``$XDG_STATE_HOME/gpumon/history.db``)."""
    if settings.history_db:
        return os.path.abspath(os.path.expanduser(settings.history_db))
    return default_history_path(os.environ, os.geteuid())


def connect_read_only(path: str) -> ReadConnection | None:
    """A read-only connection to the database at ``path``; ``None`` when there is none. Raises
    :class:`HistoryError` for a path that is no file, is another user's, or cannot be opened.
    """
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise HistoryError(f"{path}: cannot read the history: {error.strerror or error}") from None
    if not stat.S_ISREG(info.st_mode):
        raise HistoryError(f"{path}: not a file: use --db to choose the history database")
    _check_reader_owner(path, info)
    _check_reader_directory(path)
    for sidecar, sidecar_info in _sidecars(path):
        _check_reader_owner(path, sidecar_info, sidecar)
    uri = "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"
    if os.path.isdir(path + LIVE_SUFFIX) or (
        _left_in_wal_mode(path) and not os.path.exists(path + "-shm")
    ):
        # A snapshot, never written in place: read without locks. Or an older recorder's
        # database in WAL mode that no recorder has open (a running one has its -shm file),
        # for which SQLite would create the -wal and -shm files: read it as it is.
        uri += "&immutable=1"
    connection = None
    try:
        connection = sqlite3.connect(
            uri,
            uri=True,
            timeout=READER_BUSY_TIMEOUT_S,
            isolation_level=None,
            check_same_thread=False,  # opened on one thread, read on the dashboard's worker
            factory=ReadConnection,
        )
        connection.execute("PRAGMA query_only = ON")
        # Functions with side effects never run from the file's own schema (views, triggers).
        connection.execute("PRAGMA trusted_schema = OFF")
        # Reads the header: a file that is not a database fails here, not at the first query.
        connection.execute("PRAGMA user_version").fetchone()
        return connection
    except DATABASE_ERRORS as error:
        if connection is not None:
            connection.close()
        raise explain(path, error, writing=False) from None


def _check_reader_owner(path: str, info: os.stat_result, sidecar: str | None = None) -> None:
    """Read only a database (and the file ``sidecar`` beside it) that root or this user
    owns, and that no one else may write: another user's file could hold anything (text
    made to drive the terminal, a schema made to loop, a journal SQLite rolls into it)."""
    what, target = ("it", path) if sidecar is None else (f"its file {sidecar}", sidecar)
    uid = os.geteuid()
    if info.st_uid not in (0, uid):
        raise HistoryError(
            f"{path}: refused: {what} belongs to {owner_name(info.st_uid)}, not to you or root; "
            "gpumon reads only a history that you or root recorded (--db chooses another database)"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise HistoryError(
            f"{path}: refused: other users can write {what}, so it could hold anything "
            f"(chmod go-w {shlex.quote(target)}, or --db chooses another database)"
        )


def _check_reader_directory(path: str) -> None:
    """Read only a database in a directory that root or this user owns and no one else may
    write (sticky or not): others could plant a ``-journal`` or ``-wal`` file there, which
    SQLite reads into the database."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        info = os.stat(directory)
    except OSError as error:
        raise HistoryError(f"{path}: cannot read the history: {error.strerror or error}") from None
    uid = os.geteuid()
    if info.st_uid not in (0, uid):
        raise HistoryError(
            f"{path}: refused: its directory {directory} belongs to another user (uid "
            f"{info.st_uid}), who could put files beside it that SQLite reads into it "
            "(--db chooses another database)"
        )
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise HistoryError(f"{path}: refused: {_shared_directory(directory, info)}")


def _left_in_wal_mode(path: str) -> bool:
    """The database's header says WAL (bytes 18 and 19 are 2): the recorder stopped without
    switching back (it was killed, or a reader held the file as it stopped)."""
    try:
        with open(path, "rb") as file:
            header = file.read(20)
    except OSError:
        return False
    return header[:16] == b"SQLite format 3\x00" and header[18:20] == b"\x02\x02"


def check_links(path: str, directory: str) -> None:
    """Refuse (:class:`HistoryError`) a symbolic link on the way to ``directory`` that neither
    this user nor root owns: its owner could point the recorder at a directory of root's.
    """
    found = foreign_link(directory)
    if found is not None:
        link, uid = found
        raise HistoryError(
            f"{path}: refused: {link} is a symbolic link that {owner_name(uid)} owns, who could "
            "point it elsewhere (use the real path, or --db elsewhere)"
        )


#: The files SQLite opens by name beside the database: what they hold goes into it.
SIDECARS = ("-journal", "-wal", "-shm")


def check_sidecars(path: str) -> None:
    """Refuse (:class:`HistoryError`) the ``-journal``, ``-wal`` and ``-shm`` files when another
    user owns or can write them: SQLite reads them into the database.
    """
    for sidecar, info in _sidecars(path):
        check_safe(path, info, f"its file {sidecar}", sidecar)


def _sidecars(path: str) -> list[tuple[str, os.stat_result]]:
    """The files of :data:`SIDECARS` beside ``path``, with their ``lstat``; raises
    :class:`HistoryError` for one that cannot be looked at or is a symbolic link.
    """
    found = []
    for sidecar in (path + suffix for suffix in SIDECARS):
        try:
            info = os.lstat(sidecar)
        except FileNotFoundError:
            continue
        except OSError as error:
            raise HistoryError(f"{sidecar}: {error.strerror or error}") from None
        if stat.S_ISLNK(info.st_mode):
            raise HistoryError(
                f"{path}: refused: its file {sidecar} is a symbolic link "
                f"(rm {shlex.quote(sidecar)})"
            )
        found.append((sidecar, info))
    return found


def make_directory(directory: str) -> None:
    if os.path.isdir(directory):
        return
    try:
        os.makedirs(directory, exist_ok=True)
        os.chmod(directory, 0o755)  # readable by everyone, whatever the umask
    except OSError as error:
        raise HistoryError(
            f"{directory}: cannot create the history's directory: {error.strerror or error} "
            "(--db chooses another place)"
        ) from None


def check_database_file(path: str) -> None:
    """Refuse (:class:`HistoryError`) the database file at ``path`` unless it is a regular file
    this user may write, that no one else owns or can write; a symbolic link is not followed."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as error:
        raise _cannot_write(path, error) from None
    try:
        info = os.fstat(fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(info.st_mode):
        raise HistoryError(f"{path}: not a file: --db chooses the history database")
    check_safe(path, info, "the file", path)


def _cannot_write(path: str, error: OSError) -> HistoryError:
    return HistoryError(
        f"{path}: cannot write the history: {error.strerror or error} (a read-only file "
        "system? --db chooses another place)"
    )


def check_safe(path: str, info: os.stat_result, what: str, target: str) -> None:
    """Refuse the database at ``path`` when another user owns or can write ``target`` (the
    file itself, its directory, or one of its :data:`SIDECARS`; ``what`` names it): a
    directory may be root's, never writable by others (with the sticky bit neither)."""
    uid = os.geteuid()
    is_directory = stat.S_ISDIR(info.st_mode)
    owners = (uid, 0) if is_directory else (uid,)
    if info.st_uid not in owners:
        raise HistoryError(
            f"{path}: refused: {what} belongs to another user (uid {info.st_uid}); the "
            f"recorder writes only its own (chown {shlex.quote(target)}, or --db elsewhere)"
        )
    if not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return
    if is_directory:
        raise HistoryError(f"{path}: refused: {_shared_directory(target, info)}")
    raise HistoryError(
        f"{path}: refused: {what} is writable by other users, who could rewrite the "
        f"history (chmod go-w {shlex.quote(target)}, or --db elsewhere)"
    )


def _shared_directory(directory: str, info: os.stat_result) -> str:
    """Why a directory others can write is refused, and what to do, for the recorder and
    readers alike."""
    if info.st_mode & stat.S_ISVTX:  # /tmp and the like: not a directory to chmod
        remedy = (
            "a shared directory such as /tmp will not do: --db in a directory of your own, "
            "such as ~/.local/state/gpumon/"
        )
    else:
        remedy = f"chmod go-w {shlex.quote(directory)}, or --db in a directory of your own"
    return (
        f"its directory {directory} is writable by other users, who could put files beside "
        f"the database that SQLite reads into it ({remedy})"
    )
