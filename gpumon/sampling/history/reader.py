"""Reading the history database: what ``gpumon report`` prints and the dashboard graphs.

:func:`open_history` opens it read-only (``None``: none yet; :class:`HistoryError`: one line
on why it cannot be read); :class:`HistoryReader`'s methods raise only :class:`HistoryError`
for a database problem. A reader never creates or writes the database; one thread at a time
uses it.
"""

from __future__ import annotations

import dataclasses
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

from gpumon.data.format import safe_text
from gpumon.data.usage import GROUPINGS, UsageRow
from gpumon.sampling.history.files import (
    ReadConnection,
    connect_read_only,
    history_path,
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
    user_version,
)

T = TypeVar("T")
#: Seconds since the epoch at the start of the year 10000: no sample is recorded later.
_YEAR_10000_S = 253_402_300_800

__all__ = [
    "GROUPINGS",
    "HISTORY_FIELDS",
    "HistoryError",
    "HistoryReader",
    "IdleHolder",
    "RecordedGpu",
    "history_path",
    "open_history",
]


@dataclass(frozen=True, slots=True)
class IdleHolder:
    """A process recorded as holding GPU memory idle (the live view's rule) in the latest
    sample the recorder wrote.

    Attributes:
        user: its owner; ``None`` when it could not be read.
        gpu_uuid: the GPU's UUID; ``gpu_index`` its NVML index when recorded.
        pid: its PID; with ``create_time_s`` (``None`` when unknown), its identity.
        memory_bytes: the GPU memory it held in that sample.
        idle_since_s: when its quiet spell began (seconds since the epoch): at or below
            ``idle_below_pct`` since then.
        job_id, container_id: its Slurm job and container, ``None`` when in none.
    """

    user: str | None
    gpu_uuid: str
    gpu_index: int | None
    pid: int
    create_time_s: float | None
    memory_bytes: int | None
    idle_since_s: float
    job_id: str | None = None
    container_id: str | None = None


@dataclass(frozen=True, slots=True)
class RecordedGpu:
    """A GPU the database has readings of: its UUID, and its NVML index and name as last
    recorded."""

    uuid: str
    index: int | None
    name: str | None


def open_history(path: str) -> HistoryReader | None:
    """Open the history database at ``path`` read-only.

    Returns:
        ``None`` when there is no file at ``path``, or an empty one (nothing recorded yet).

    Every string read from it is made safe to print (:func:`~gpumon.data.format.safe_text`):
    the file is root's or this user's, but what it records (user names, job and container
    IDs) came from other users' processes. Every read gives up after
    :data:`~gpumon.sampling.history.files.READ_DEADLINE_S`.

    Raises:
        HistoryError: the file is not a gpumon history database (or holds views, triggers
            or tables gpumon never makes), is damaged, was written by a newer gpumon, is
            another user's, or cannot be read, or reading it ran past the deadline; its
            ``str`` is one line naming the path and what to do.
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
        if isinstance(error, sqlite3.Error) and _interrupted(error):
            raise past_deadline(path) from None
        raise explain(path, error, writing=False) from None
    except BaseException:
        connection.close()
        raise
    return HistoryReader(path, connection, meta)


class HistoryReader:
    """A read-only connection to the history database; see :func:`open_history`.

    Usable as a context manager (closes on exit). Times are seconds since the epoch.

    Attributes:
        path: the database.
        node: the host name of the recorder's machine, when recorded.
        interval_s: the recorder's sampling interval, when recorded.
        current_for_s: how long the latest sample stays current: three of the recorder's
            periods (its interval, or its batch period when it writes in batches, as
            ``export --record``), plus how often a running recorder publishes what readers
            read (a snapshot is up to that much older): older data is never current.
        simulated: the history is of a simulated server (``gpumon record --demo``): label
            it DEMO.
        usage_days_until_s: usage before this is kept per UTC day, not hour.
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
        node, interval, batch = meta.get("node"), meta.get("interval_s"), meta.get("batch_s")
        self.node = safe_text(node, 255) if isinstance(node, str) else None
        self.interval_s = float(interval) if isinstance(interval, (int, float)) else None
        period = max(
            self.interval_s or 10.0, float(batch) if isinstance(batch, (int, float)) else 0
        )
        publish = meta.get("publish_s")  # 0 once the recorder has stopped
        self.current_for_s = 3 * period + (
            float(publish) if isinstance(publish, (int, float)) and 0 < publish < 3600 else 0
        )
        self.simulated = bool(meta.get("simulated"))
        #: Usage before this is kept per UTC day (rolled up after ``history_days``), as of
        #: opening; ``None`` when nothing is yet.
        days = meta.get("usage_days_until_s")
        self.usage_days_until_s = float(days) if isinstance(days, (int, float)) else None

    def usage(self, start_s: float, end_s: float, by: str) -> list[UsageRow]:
        """Who used the GPUs from ``start_s`` to ``end_s``, one row per group.

        Args:
            start_s: the period's start; end_s: its end (seconds since the epoch).
            by: one of :data:`GROUPINGS`: ``user``, ``job``, ``container``, ``gpu`` (the
                row's key is then the GPU's UUID).

        Returns:
            Rows sorted by ``gpu_hours_held``, largest first (then by key, ``None`` last).
            Held, used and idle hours come from hourly rows (daily ones older than
            ``history_days``); a bucket the period covers in part counts in proportion,
            over the part of it between the first and last sample that saw the group's
            processes on that GPU (as if used evenly through that part). Two processes of a
            group on one GPU at once count once (the recorder keeps each grouping's own
            rows). ``processes`` counts the process sessions seen in the period;
            ``peak_memory_bytes`` is the most one process of the group held at once: in the
            buckets inside the period, and in those it covers in part, of the processes
            seen in the period (over their whole run: a bucket's own peak may be a job's
            that ended before the period began).

        Raises:
            ValueError: ``by`` is not one of :data:`GROUPINGS`.
            HistoryError: the database could not be read.
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
        """One GPU's readings of ``field`` from ``start_s`` to ``end_s``, for a graph.

        Args:
            gpu_uuid: the GPU's UUID.
            field: one of :data:`HISTORY_FIELDS` (the model's names:
                ``utilization_gpu_pct``, ``memory_used_bytes``, ``power_draw_w``,
                ``temperature_c``, ``energy_j``).
            bucket_s: the width of one point: minute rows are merged into buckets this wide
                (rounded to whole minutes, at least one). Where minute rows are gone (older
                than ``history_days``), hour rows are used, one point per hour at least.

        Returns:
            ``(bucket start, mean, max)`` in time order, only for buckets with readings (a
            gap where nothing was recorded). ``None`` where the field was N/A all bucket.
            For ``energy_j`` the mean is the joules used in the bucket and the max the joules
            of its busiest minute (hour, in hour rows).

        Raises:
            ValueError: ``field`` is not one of :data:`HISTORY_FIELDS`.
            HistoryError: the database could not be read.
        """
        if field not in HISTORY_FIELDS:
            raise ValueError(f"no history of {field!r}: one of {', '.join(HISTORY_FIELDS)}")
        return self._read(
            lambda: series(self._connection, gpu_uuid, field, start_s, end_s, bucket_s)
        )

    def idle_since(self, gpu_uuid: str, pid: int, create_time_s: float | None) -> float | None:
        """When the process's current idle spell began, as recorded: the start of its quiet
        spell while the latest recorded sample had it IDLE; ``None`` when it is not idle
        there, is not recorded, or the recorder has not written for a while (stopped).

        Raises:
            HistoryError: the database could not be read.
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
        """The processes IDLE in the latest sample recorded, if that sample is current at
        ``now_s`` (the recorder is writing); longest idle first.

        Raises:
            HistoryError: the database could not be read.
        """

        def read() -> list[IdleHolder]:
            if not self.is_current(now_s):
                return []
            rows = self._connection.execute(
                """
                SELECT user, uuid, gpu_index, pid, create_time_s, memory_bytes, idle_since_s,
                    job_id, container_id
                FROM sessions JOIN gpus ON gpus.id = sessions.gpu_id
                WHERE idle_since_s IS NOT NULL
                    AND last_seen_s >= (SELECT value FROM meta WHERE key = 'last_sample_s')
                ORDER BY idle_since_s, uuid, pid
                """
            ).fetchall()
            return [_idle_holder(*row) for row in rows]

        return self._read(read)

    def idle_unknown_count(self, now_s: float) -> int | None:
        """How many processes of the latest sample recorded hold GPU memory with no SM
        utilisation reading (MIG, no sample from the driver): whether they are idle is
        unknown; ``None`` when that sample is not current at ``now_s``, or the file has no
        such count for it (the recorder of that sample is an older gpumon: no column, or
        ``idle_unknown_at_s`` behind ``last_sample_s``).

        Raises:
            HistoryError: the database could not be read.
        """

        def read() -> int | None:
            if not self.is_current(now_s):
                return None
            if not has_column(self._connection, "sessions", "idle_unknown"):
                return None
            stamps = dict(
                self._connection.execute(
                    "SELECT key, value FROM meta WHERE key IN ('last_sample_s', "
                    "'idle_unknown_at_s')"
                ).fetchall()
            )
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
        """The GPUs with readings, by NVML index as last recorded.

        Raises:
            HistoryError: the database could not be read.
        """
        return self._read(
            lambda: [
                RecordedGpu(_text(uuid) or "", index, _text(name))
                for uuid, index, name in self._connection.execute(
                    "SELECT uuid, gpu_index, name FROM gpus ORDER BY gpu_index, uuid"
                )
            ]
        )

    def span(self) -> tuple[float, float] | None:
        """The times of the first and the latest sample recorded; ``None`` when empty.

        Raises:
            HistoryError: the database could not be read.
        """

        def read() -> tuple[float, float] | None:
            found = dict(
                self._connection.execute(
                    "SELECT key, value FROM meta WHERE key IN ('first_sample_s', 'last_sample_s')"
                ).fetchall()
            )
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
        """The latest sample recorded is at most :attr:`current_for_s` old at ``now_s``:
        the recorder is writing.

        Raises:
            HistoryError: the database could not be read.
        """
        span = self.span()
        if span is None:
            return False
        return now_s - span[1] <= self.current_for_s

    def _read(self, read: Callable[[], T]) -> T:
        self._connection.start_read()
        try:
            return read()
        except DATABASE_ERRORS as error:
            if isinstance(error, sqlite3.Error) and _interrupted(error):
                raise past_deadline(self.path) from None
            raise explain(self.path, error, writing=False) from None
        except (ValueError, TypeError, OverflowError) as error:
            # A value of a type or size no recorder writes (text for a number, infinity).
            raise damaged(self.path, f"{type(error).__name__}: {error}", writing=False) from None


def _interrupted(error: sqlite3.Error) -> bool:
    """SQLite gave up the statement: the read ran past its deadline."""
    return "interrupted" in str(error).lower()


def _text(value: object) -> str | None:
    """A string read from the database, safe to print; ``None`` for NULL."""
    return None if value is None else safe_text(str(value))


def _idle_holder(
    user: object,
    uuid: object,
    gpu_index: int | None,
    pid: int,
    create_time_s: float | None,
    memory_bytes: int | None,
    idle_since_s: float,
    job_id: object,
    container_id: object,
) -> IdleHolder:
    return IdleHolder(
        _text(user),
        _text(uuid) or "",
        gpu_index,
        pid,
        create_time_s,
        memory_bytes,
        idle_since_s,
        _text(job_id),
        _text(container_id),
    )
