"""Reading the history database: what ``gpumon report`` prints and the dashboard graphs.

:func:`open_history` opens it read-only (``None`` when there is none yet);
:class:`HistoryReader` answers usage, GPU series, idle holders and what is recorded. Every
method raises only :class:`HistoryError` for a database problem, and never writes. One
reader is used by one thread at a time.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from gpumon.data.format import safe_text
from gpumon.data.usage import GROUPINGS, UsageRow
from gpumon.sampling.history.files import (
    ReadConnection,
    connect_read_only,
    past_deadline,
)
from gpumon.sampling.history.queries import series, usage_rows
from gpumon.sampling.history.schema import (
    DATABASE_ERRORS,
    HISTORY_FIELDS,
    SCHEMA_VERSION,
    HistoryError,
    check_objects,
    check_version,
    damaged,
    explain,
    has_column,
    has_tables,
    meta_values,
    user_version,
)

T = TypeVar("T")
#: Seconds since the epoch at the start of the year 10000: no sample is recorded later.
_YEAR_10000_S = 253_402_300_800


@dataclass(frozen=True, slots=True)
class IdleHolder:
    """A process recorded as holding GPU memory idle (the live view's rule) in the latest
    sample the recorder wrote: ``pid`` and ``create_time_s`` are its identity, ``memory_bytes``
    what it held then, ``idle_since_s`` when its quiet spell began, ``command`` its command
    line as recorded; ``None``: not known (no job or container: none)."""

    user: str | None
    gpu_uuid: str
    gpu_index: int | None
    pid: int
    create_time_s: float | None
    memory_bytes: int | None
    idle_since_s: float
    job_id: str | None = None
    container_id: str | None = None
    command: str | None = None


@dataclass(frozen=True, slots=True)
class RecordedGpu:
    """A GPU the database has readings of: its UUID, and its NVML index and name as last
    recorded."""

    uuid: str
    index: int | None
    name: str | None


def open_history(path: str) -> HistoryReader | None:
    """Open the history database at ``path`` read-only; ``None`` when there is none (or it is
    empty).

    Every string read from it is made safe to print; every read gives up after
    :data:`~gpumon.sampling.history.files.READ_DEADLINE_S`. Raises :class:`HistoryError` (one
    line: the path and what to do) when it is not gpumon's, damaged, newer, another user's or
    unreadable.
    """
    connection = connect_read_only(path)
    if connection is None:
        return None
    try:
        version = user_version(connection)
        if version == 0 and not has_tables(connection):
            connection.close()
            return None  # made a moment ago: the recorder is creating its tables
        check_version(version, path)
        if version < SCHEMA_VERSION:
            raise HistoryError(
                f"{path} is not a gpumon history database of this version (version "
                f"{version}): start the recorder (gpumon record), which upgrades it"
            )
        check_objects(connection, path)
        meta = dict(connection.execute("SELECT key, value FROM meta").fetchall())
    except DATABASE_ERRORS as error:
        connection.close()
        raise _read_error(path, error) from None
    except BaseException:
        connection.close()
        raise
    return HistoryReader(path, connection, meta)


class HistoryReader:
    """A read-only connection to the history database; see :func:`open_history`.

    Usable as a context manager. Times are seconds since the epoch. ``node`` and
    ``interval_s`` are the recorder's, when recorded; ``current_for_s`` is how long the latest
    sample stays current (three recorder periods plus its publishing period); ``simulated``:
    the history is of ``--demo`` (label it DEMO); usage before ``usage_days_until_s`` is kept
    per UTC day.
    """

    def __init__(
        self,
        path: str,
        connection: ReadConnection,
        meta: dict[str, object],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        #: Wall-clock seconds: when "now" is, for :meth:`idle_since`.
        self.clock = clock
        self._connection = connection

        def number(key: str) -> float | None:
            value = meta.get(key)
            return float(value) if isinstance(value, (int, float)) else None

        node = meta.get("node")
        self.node = safe_text(node, 255) if isinstance(node, str) else None
        self.interval_s = number("interval_s")
        period = max(self.interval_s or 10.0, number("batch_s") or 0)
        publish = number("publish_s") or 0  # 0 once the recorder has stopped
        self.current_for_s = 3 * period + (publish if 0 < publish < 3600 else 0)
        self.simulated = bool(meta.get("simulated"))
        #: Usage before this is kept per UTC day (rolled up after ``history_days``), as of
        #: opening; ``None`` when nothing is yet.
        self.usage_days_until_s = number("usage_days_until_s")

    def usage(self, start_s: float, end_s: float, by: str) -> list[UsageRow]:
        """Who used the GPUs from ``start_s`` to ``end_s``, one row per group of ``by``
        (:data:`GROUPINGS`; for ``gpu`` the key is the UUID), most GPU-hours held first.

        Hours come from hourly rows (daily ones older than ``history_days``); a bucket the period
        covers in part counts in proportion over the part where the group's processes were seen.
        Two processes of a group on one GPU count once. Raises :class:`ValueError` for an unknown
        ``by``, :class:`HistoryError` when the database cannot be read.
        """
        if by not in GROUPINGS:
            raise ValueError(f"cannot group by {by!r}: one of {', '.join(GROUPINGS)}")
        return self._read(
            lambda: [
                row if row.key is None else dataclasses.replace(row, key=safe_text(row.key))
                for row in usage_rows(self._connection, start_s, end_s, by)
            ]
        )

    def gpu_series(
        self, gpu_uuid: str, field: str, start_s: float, end_s: float, *, bucket_s: float = 60.0
    ) -> list[tuple[float, float | None, float | None]]:
        """One GPU's readings of ``field`` (:data:`HISTORY_FIELDS`) from ``start_s`` to ``end_s``.

        ``(bucket start, mean, max)`` in time order, one per ``bucket_s`` (whole minutes; hours
        where minute rows are gone), only for buckets with readings; ``None`` where the field was
        N/A all bucket. For ``energy_j``: the joules used and those of the busiest minute. Raises
        :class:`ValueError` for an unknown field, :class:`HistoryError` when it cannot be read.
        """
        if field not in HISTORY_FIELDS:
            raise ValueError(f"no history of {field!r}: one of {', '.join(HISTORY_FIELDS)}")
        return self._read(
            lambda: series(self._connection, gpu_uuid, field, start_s, end_s, bucket_s)
        )

    def idle_since(self, gpu_uuid: str, pid: int, create_time_s: float | None) -> float | None:
        """When the process's current idle spell began, as recorded; ``None`` when it is not IDLE in
        the latest recorded sample, is not recorded, or the recorder has stopped writing.
        """

        def read() -> float | None:
            row = self._connection.execute(
                """
                SELECT idle_since_s FROM sessions JOIN gpus ON gpus.id = sessions.gpu_id
                WHERE gpus.uuid = ? AND pid = ? AND create_time_s IS ?
                    AND last_seen_s >= (SELECT value FROM meta WHERE key = 'last_sample_s')
                ORDER BY sessions.id DESC LIMIT 1
                """,
                (gpu_uuid, pid, create_time_s),
            ).fetchone()
            if row is None or row[0] is None or not self.is_current(self.clock()):
                return None
            return float(row[0])

        return self._read(read)

    def idle_holders(self, now_s: float) -> list[IdleHolder]:
        """The processes IDLE in the latest sample recorded, longest idle first, if that sample is
        current at ``now_s``.
        """

        def read() -> list[IdleHolder]:
            if not self.is_current(now_s):
                return []
            rows = self._connection.execute(
                """
                SELECT user, uuid, gpu_index, pid, create_time_s, memory_bytes, idle_since_s,
                    job_id, container_id, command
                FROM sessions JOIN gpus ON gpus.id = sessions.gpu_id
                WHERE idle_since_s IS NOT NULL
                    AND last_seen_s >= (SELECT value FROM meta WHERE key = 'last_sample_s')
                ORDER BY idle_since_s, uuid, pid
                """
            ).fetchall()
            return [_idle_holder(row) for row in rows]

        return self._read(read)

    def idle_unknown_count(self, now_s: float) -> int | None:
        """How many processes of the latest sample hold GPU memory with no SM utilisation reading;
        ``None`` when that sample is not current at ``now_s`` or an older recorder wrote it.
        """

        def read() -> int | None:
            if not self.is_current(now_s):
                return None
            if not has_column(self._connection, "sessions", "idle_unknown"):
                return None
            stamps = meta_values(self._connection, "last_sample_s", "idle_unknown_at_s")
            if stamps.get("idle_unknown_at_s") != stamps.get("last_sample_s"):
                return None  # an older recorder wrote the latest sample: its rows say nothing
            # A scan of the sessions (no index: an older gpumon refuses unknown indexes);
            # only ``report`` asks, once.
            row = self._connection.execute(
                """
                SELECT count(*) FROM sessions
                WHERE idle_unknown = 1
                    AND last_seen_s >= (SELECT value FROM meta WHERE key = 'last_sample_s')
                """
            ).fetchone()
            return int(row[0])

        return self._read(read)

    def gpus(self) -> list[RecordedGpu]:
        """The GPUs with readings, by NVML index as last recorded."""
        return self._read(
            lambda: [
                RecordedGpu(_text(uuid) or "", index, _text(name))
                for uuid, index, name in self._connection.execute(
                    "SELECT uuid, gpu_index, name FROM gpus ORDER BY gpu_index, uuid"
                )
            ]
        )

    def span(self) -> tuple[float, float] | None:
        """The times of the first and the latest sample recorded; ``None`` when empty."""

        def read() -> tuple[float, float] | None:
            found = meta_values(self._connection, "first_sample_s", "last_sample_s")
            first, last = found.get("first_sample_s"), found.get("last_sample_s")
            if first is None or last is None:
                return None
            span = float(first), float(last)
            if not all(0 <= time_s < _YEAR_10000_S for time_s in span):  # NaN too
                raise ValueError(f"a sample time of {span} is out of range")
            return span

        return self._read(read)

    def close(self) -> None:
        """Close the connection; the reader cannot be used after."""
        self._connection.close()

    def __enter__(self) -> HistoryReader:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def is_current(self, now_s: float) -> bool:
        """The latest sample recorded is at most :attr:`current_for_s` old at ``now_s``."""
        span = self.span()
        if span is None:
            return False
        return now_s - span[1] <= self.current_for_s

    def _read(self, read: Callable[[], T]) -> T:
        self._connection.start_read()
        try:
            return read()
        except DATABASE_ERRORS as error:
            raise _read_error(self.path, error) from None
        except (ValueError, TypeError, OverflowError) as error:
            # A value of a type or size no recorder writes (text for a number, infinity).
            raise damaged(self.path, f"{type(error).__name__}: {error}", writing=False) from None


def _read_error(path: str, error: sqlite3.Error | UnicodeDecodeError) -> HistoryError:
    """The one line for a failed read; SQLite's "interrupted": it ran past its deadline."""
    if isinstance(error, sqlite3.Error) and "interrupted" in str(error).lower():
        return past_deadline(path)
    return explain(path, error, writing=False)


def _text(value: object) -> str | None:
    """A string read from the database, safe to print; ``None`` for NULL."""
    return None if value is None else safe_text(str(value))


def _idle_holder(row: Any) -> IdleHolder:
    """An :class:`IdleHolder` of a ``sessions`` row, its texts made safe to print."""
    user, uuid, index, pid, created_s, memory, since_s, job_id, container_id, command = row
    return IdleHolder(
        _text(user),
        _text(uuid) or "",
        index,
        pid,
        created_s,
        memory,
        since_s,
        _text(job_id),
        _text(container_id),
        _text(command),
    )
