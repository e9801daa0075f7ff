"""The history database's tables, their versions, and the one-line errors about it.

Version 2 (``PRAGMA user_version``); times are seconds since the epoch, buckets start at a
multiple of their width (UTC). A newer version adds a step to :data:`MIGRATIONS`; a column
older gpumons can ignore is added without a new version (:data:`ADDED_COLUMNS`). The tables:
docs/history.md.
"""

from __future__ import annotations

import contextlib
import functools
import shlex
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from gpumon.data.format import safe_text

#: The GPU readings kept per minute and per hour (mean and max), by the model's names.
HISTORY_FIELDS = (
    "utilization_gpu_pct",
    "memory_used_bytes",
    "power_draw_w",
    "temperature_c",
    "energy_j",
)

#: What this gpumon writes and reads.
SCHEMA_VERSION = 2

#: Bucket widths, in seconds.
MINUTE_S = 60
HOUR_S = 3600
DAY_S = 86400
#: Hour rows of the GPUs, day rows of usage and sessions are kept this long (or
#: ``history_days``, when longer).
YEAR_DAYS = 365


class HistoryError(Exception):
    """The history database cannot be used; ``str`` is one line, safe to print: the path and
    what to do. ``retry`` is True for what may pass by itself (a locked database, a full disk),
    False for what will not (a damaged file, a newer schema).
    """

    def __init__(self, message: str, *, retry: bool = False) -> None:
        super().__init__(safe_text(message))
        self.retry = retry


def _gpu_table(name: str) -> str:
    fields = ",\n".join(f"    {field}_mean REAL,\n    {field}_max REAL" for field in HISTORY_FIELDS)
    return f"""
CREATE TABLE {name} (
    start_s INTEGER NOT NULL,
    gpu_id INTEGER NOT NULL,
    samples INTEGER NOT NULL,
{fields},
    PRIMARY KEY (start_s, gpu_id)
) WITHOUT ROWID"""


def _usage_table(name: str) -> str:
    return f"""
CREATE TABLE {name} (
    grouping INTEGER NOT NULL,
    start_s INTEGER NOT NULL,
    gpu_id INTEGER NOT NULL,
    key TEXT NOT NULL,
    held_s REAL NOT NULL,
    used_s REAL NOT NULL,
    idle_held_s REAL NOT NULL,
    peak_memory_bytes INTEGER,
    PRIMARY KEY (grouping, start_s, gpu_id, key)
) WITHOUT ROWID"""


# Primary keys lead with the bucket's start (after the grouping): rows are appended in key
# order (full pages), and a period or a pruning cut is one range of the key.
VERSION_1 = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value) WITHOUT ROWID",
    """
CREATE TABLE gpus (
    id INTEGER PRIMARY KEY,
    uuid TEXT NOT NULL UNIQUE,
    gpu_index INTEGER,
    name TEXT
)""",
    _gpu_table("gpu_minutes"),
    _gpu_table("gpu_hours"),
    """
CREATE TABLE sessions (
    id INTEGER PRIMARY KEY,
    gpu_id INTEGER NOT NULL,
    pid INTEGER NOT NULL,
    create_time_s REAL,
    user TEXT,
    job_id TEXT,
    container_id TEXT,
    command TEXT,
    gpu_instance_id INTEGER,
    compute_instance_id INTEGER,
    first_seen_s REAL NOT NULL,
    last_seen_s REAL NOT NULL,
    memory_bytes INTEGER,
    peak_memory_bytes INTEGER,
    memory_byte_s REAL NOT NULL DEFAULT 0,
    sm_s REAL NOT NULL DEFAULT 0,
    held_s REAL NOT NULL DEFAULT 0,
    idle_held_s REAL NOT NULL DEFAULT 0,
    quiet_since_s REAL,
    idle_since_s REAL
)""",
    "CREATE INDEX sessions_by_process ON sessions (gpu_id, pid)",
    # Only the sessions IDLE now: the dashboard asks for them every few seconds.
    "CREATE INDEX sessions_idle ON sessions (last_seen_s) WHERE idle_since_s IS NOT NULL",
    _usage_table("usage_hours"),
    _usage_table("usage_days"),
)


def _add_known_seconds(connection: sqlite3.Connection) -> None:
    """Version 2: the seconds of a usage row whose SM utilisation was known."""
    for table in ("usage_hours", "usage_days"):
        connection.execute(f"ALTER TABLE {table} ADD COLUMN known_s REAL")


#: ``MIGRATIONS[n]`` takes a database of version ``n`` to ``n + 1``, inside a transaction.
MIGRATIONS: dict[int, Callable[[sqlite3.Connection], None]] = {1: _add_known_seconds}

#: (table, column, type) added to the current version's files without a new version, for
#: older gpumons keep working with them (their statements name their columns; NULL where
#: they insert).
ADDED_COLUMNS = (("sessions", "idle_unknown", "INTEGER"),)


def has_column(connection: sqlite3.Connection, table: str, column: str) -> bool:
    return any(row[1] == column for row in connection.execute(f"PRAGMA table_info({table})"))


def add_columns(connection: sqlite3.Connection) -> None:
    """Add the :data:`ADDED_COLUMNS` a file lacks (the recorder, when it opens one)."""
    for table, column, kind in ADDED_COLUMNS:
        if not has_column(connection, table, column):
            connection.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")


def create(
    connection: sqlite3.Connection,
    migrations: Mapping[int, Callable[[sqlite3.Connection], None]] = MIGRATIONS,
    target: int = SCHEMA_VERSION,
) -> None:
    """Create version ``target``'s tables in an empty database, in one transaction: version
    1's, then each migration's."""
    with transaction(connection):
        for statement in VERSION_1:
            connection.execute(statement)
        for version in range(1, target):
            migrations[version](connection)
        if target == SCHEMA_VERSION:
            add_columns(connection)
        connection.execute(f"PRAGMA user_version = {int(target)}")


def migrate(
    connection: sqlite3.Connection,
    path: str,
    migrations: Mapping[int, Callable[[sqlite3.Connection], None]] = MIGRATIONS,
    target: int = SCHEMA_VERSION,
) -> int:
    """Bring the database at ``path`` to version ``target``, one step per transaction; returns
    the version it had (0: just created). Raises :class:`HistoryError` for a database that is
    not gpumon's or is newer, :class:`sqlite3.Error` when it cannot be read or written.
    """
    version = user_version(connection)
    if version == 0:
        if has_tables(connection):
            raise HistoryError(
                f"{path} is not a gpumon history database (it has other tables): "
                "use --db to choose another file"
            )
        create(connection, migrations, target)
        return 0
    check_version(version, path, target)
    start = version
    while version < target:
        with transaction(connection):
            migrations[version](connection)
            connection.execute(f"PRAGMA user_version = {version + 1}")
        version += 1
    return start


def check_version(version: int, path: str, target: int = SCHEMA_VERSION) -> None:
    """Raise :class:`HistoryError` for a database written by a newer gpumon, or of a version
    no gpumon writes (below 1, with tables: damaged, or another program's)."""
    if version < 1:
        raise HistoryError(
            f"{path} is not a gpumon history database (its version is {version}, which no "
            "gpumon writes): use --db to choose another file"
        )
    if version > target:
        raise HistoryError(
            f"{path} was written by a newer gpumon (history version {version}; this one "
            f"knows {target}): upgrade gpumon, or use --db to choose another file"
        )


def meta_values(connection: sqlite3.Connection, *keys: str) -> dict[str, Any]:
    """The values of ``keys`` in the meta table; a key not there is left out."""
    marks = ", ".join("?" * len(keys))
    query = f"SELECT key, value FROM meta WHERE key IN ({marks})"
    return dict(connection.execute(query, keys).fetchall())


def user_version(connection: sqlite3.Connection) -> int:
    return int(connection.execute("PRAGMA user_version").fetchone()[0])


@functools.cache
def _expected_objects(target: int = SCHEMA_VERSION) -> frozenset[tuple[str, str]]:
    """The ``(type, name)`` of every table and index of version ``target``'s schema."""
    connection = sqlite3.connect(":memory:", isolation_level=None)
    try:
        create(connection, target=target)
        return frozenset(connection.execute("SELECT type, name FROM sqlite_master").fetchall())
    finally:
        connection.close()


def check_objects(connection: sqlite3.Connection, path: str) -> None:
    """Refuse (:class:`HistoryError`, naming it) a database that holds anything but gpumon's
    tables and indexes: a view or trigger in their place could make reads loop or lie.
    """
    expected = _expected_objects()
    found = connection.execute(
        "SELECT type, name FROM sqlite_master ORDER BY type, name"
    ).fetchall()
    for kind, name in found:
        if (kind, name) in expected:
            continue
        if kind in ("table", "index") and str(name).startswith("sqlite_"):
            continue  # SQLite's own (sqlite_autoindex_*, sqlite_stat1 after ANALYZE)
        raise HistoryError(
            f"{path}: refused: not a gpumon history database (it holds the {kind} "
            f"{safe_text(str(name), 64)!r}, which gpumon never makes): --db chooses another "
            "database"
        )


def has_tables(connection: sqlite3.Connection) -> bool:
    return connection.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchone() is not None


@contextlib.contextmanager
def transaction(connection: sqlite3.Connection) -> Iterator[None]:
    """One write transaction on an autocommit connection: ``BEGIN IMMEDIATE`` ... ``COMMIT``,
    rolled back when the block raises."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
        connection.execute("COMMIT")
    finally:
        # After an error, or a COMMIT that failed (SQLite may have rolled back already).
        if connection.in_transaction:
            connection.execute("ROLLBACK")


# SQLite's primary result codes (sqlite3.Error.sqlite_errorcode, Python 3.11+, holds the
# extended code: its low byte is the primary one).
_BUSY, _LOCKED, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _NOTADB = 5, 6, 8, 10, 11, 13, 14, 26
_PERM = 3

# Python 3.10 has no error codes: the messages SQLite gives for each (sqlite3_errstr).
_BY_MESSAGE = (
    ("database is locked", _BUSY),
    ("database table is locked", _LOCKED),
    ("readonly database", _READONLY),
    ("disk i/o error", _IOERR),
    ("malformed", _CORRUPT),
    ("database or disk is full", _FULL),
    ("unable to open database file", _CANTOPEN),
    ("file is not a database", _NOTADB),
    ("access permission denied", _PERM),
)


def damaged(path: str, reason: str, *, writing: bool) -> HistoryError:
    """The one line for a file that is damaged (``reason`` says how) or not a history."""
    who = "gpumon record" if writing else "the recorder (gpumon record)"
    return HistoryError(
        f"{path} is damaged or not a gpumon history database ({reason}): move it aside "
        f"(mv {shlex.quote(path)} {shlex.quote(path + '.broken')}); {who} starts a new one"
    )


def error_code(error: sqlite3.Error) -> int | None:
    """SQLite's primary result code of ``error``; ``None`` when it cannot be told."""
    code = getattr(error, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF
    text = str(error).lower()
    return next((code for words, code in _BY_MESSAGE if words in text), None)


#: What using a damaged file may raise: SQLite's errors, and Python's failure to decode one
#: of SQLite's messages as UTF-8 (it quotes the file's schema, which may hold any bytes).
DATABASE_ERRORS = (sqlite3.Error, UnicodeDecodeError)


def explain(path: str, error: sqlite3.Error | UnicodeDecodeError, *, writing: bool) -> HistoryError:
    """``error`` as one line that names ``path`` and what to do about it."""
    if isinstance(error, UnicodeDecodeError):
        return damaged(path, "its schema is not UTF-8 text", writing=writing)
    code = error_code(error)
    # SQLite's text quotes what the file holds ("malformed database schema (<a name>)").
    reason = safe_text(str(error).splitlines()[0], 200) if str(error) else type(error).__name__
    who = "gpumon record" if writing else "the recorder (gpumon record)"
    if code in (_BUSY, _LOCKED):
        return HistoryError(f"{path} is locked by another program ({reason}): retrying", retry=True)
    if code == _FULL:
        return HistoryError(
            f"{path}: the disk is full ({reason}): free some space (or lower "
            "--history-days); retrying",
            retry=True,
        )
    if code in (_READONLY, _PERM):
        return HistoryError(
            f"{path} cannot be written ({reason}): a read-only file system or file? "
            f"{who} needs it writable; retrying",
            retry=True,
        )
    if code in (_CORRUPT, _NOTADB):
        return damaged(path, reason, writing=writing)
    if code == _IOERR and writing:
        return HistoryError(
            f"{path} cannot be written ({reason}): check the disk and its mount; retrying",
            retry=True,
        )
    if code in (_IOERR, _CANTOPEN):
        return HistoryError(f"{path} cannot be used ({reason}): check the disk and its mount")
    return HistoryError(f"{path}: {reason}")
