"""The recorder's side of the history database: samples in, one transaction per batch out.

Rows are written as increments, so a restarted recorder carries on where the last stopped,
and a crash loses at most the batch being written. When the database cannot be written,
:meth:`~HistoryWriter.record` raises :class:`HistoryError` and the pending rows wait
(bounded) for the next batch. Used by one thread.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import socket
import sqlite3
import time
from collections.abc import Callable

from gpumon.data.idle import IdleRule
from gpumon.data.model import Sample
from gpumon.sampling.history import live, rows
from gpumon.sampling.history.aggregate import Pending
from gpumon.sampling.history.files import LIVE_SUFFIX, check_sidecars
from gpumon.sampling.history.live import WritableHistory, configure_for_writing, open_for_writing
from gpumon.sampling.history.retention import PruneHorizon, prune
from gpumon.sampling.history.schema import (
    DATABASE_ERRORS,
    HOUR_S,
    HistoryError,
    add_columns,
    check_objects,
    explain,
    meta_values,
    migrate,
    transaction,
)

#: While the database cannot be written: at most this many GPU minutes, usage rows and ended
#: sessions wait in memory (8 GPUs: a day of minutes; then the oldest go).
MAX_PENDING_ROWS = 12_000
#: The write-ahead log is cut back to this after a checkpoint.
WAL_LIMIT_BYTES = 8 * 1024 * 1024
#: A write-ahead log that cannot be reset (a process of this user or root holds the live
#: database open) grows at most to this: then the samples wait in memory instead.
WAL_MAX_BYTES = 64 * 1024 * 1024
#: What :meth:`HistoryWriter.notices` says once a problem it reported is over.
RESOLVED = {
    "clock": "the clock agrees with the history: pruning resumes",
    "wal": "the write-ahead log is reset again",
}


class HistoryWriter:
    """Records samples into the history database at ``path`` (created when missing): IDLE by
    ``rule``; a gap over three ``interval_s`` (a minute at least) is credited to nobody; minute
    rows kept ``history_days``; written at most every ``batch_s`` (0: every sample); the
    readers' snapshot published at most every ``publish_s`` (default: by the history's size)
    and as it stops; ``clock``: monotonic seconds."""

    def __init__(
        self,
        path: str,
        *,
        rule: IdleRule,
        interval_s: float,
        history_days: int,
        batch_s: float = 0.0,
        publish_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self.interval_s = interval_s
        self.history_days = history_days
        self.batch_s = batch_s
        self._least_publish_s = live.PUBLISH_S if publish_s is None else publish_s
        #: How often the snapshot is published now: at least every ``publish_s``, stretched
        #: for a large history (readers read it from the meta table).
        self.publish_s = self._least_publish_s
        self.max_gap_s = max(3 * interval_s, 60.0)
        self.pending = Pending(rule, self.max_gap_s)
        #: What pruning goes by: the newest sample time it trusts.
        self.horizon = PruneHorizon(self.max_gap_s)
        self._clock = clock
        self._database: WritableHistory | None = None
        self._gpu_ids: dict[str, int] = {}
        self._gpus_written: dict[str, tuple[int, str | None]] = {}
        self._node = socket.gethostname()
        self._last_write: float | None = None
        self._pruned_hour: int | None = None
        self._published: float | None = None
        self._wal_stuck = False

    def open(self) -> None:
        """Open the database now (else the first write does); raises :class:`HistoryError`."""
        if self._database is not None:
            return
        database = open_for_writing(self.path)
        try:
            connection = database.connection
            configure_for_writing(connection)
            check_sidecars(database.live_path)
            migrate(connection, self._named(database))
            add_columns(connection)
            # A trigger or view put in the file would run in every write, or every read.
            check_objects(connection, self._named(database))
            connection.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
            self._gpu_ids = dict(connection.execute("SELECT uuid, id FROM gpus").fetchall())
            meta = meta_values(connection, "last_sample_s", "prune_horizon_s")
        except DATABASE_ERRORS as error:
            problem = explain(self._named(database), error, writing=True)
            database.close(discard=database.taken_in and not problem.retry)
            raise problem from None
        except HistoryError as error:
            database.close(discard=database.taken_in and not error.retry)
            raise
        except BaseException:
            database.close()
            raise
        self._database = database
        last = meta.get("last_sample_s")
        horizon = meta.get("prune_horizon_s", last)
        if isinstance(last, (int, float)):
            self.pending.resume(float(last))
        if isinstance(horizon, (int, float)) and math.isfinite(horizon):
            self.horizon.resume(float(horizon))  # before anything that may fail: it guards pruning
        if database.taken_in:
            self._publish(database)  # readers read it as a snapshot from now on

    def record(self, sample: Sample) -> None:
        """Take in ``sample``; write the batch when due (:class:`HistoryError`: it waits)."""
        if self._database is None:
            # Opened before the first sample is taken in, to carry on from the database's
            # last one; what goes wrong is raised by the write below.
            with contextlib.suppress(HistoryError):
                self.open()
        self.pending.observe(sample)
        if self.pending.last_sample_s == sample.timestamp_s:
            self.horizon.observe(sample.timestamp_s)
        now = self._clock()
        if self._last_write is None or now - self._last_write >= self.batch_s:
            self.write()

    def write(self) -> None:
        """Write what is pending in one transaction (:class:`HistoryError`: it stays pending)."""
        pending = self.pending
        if pending.last_sample_s is None:
            return
        self._last_write = self._clock()
        try:
            self.open()
            assert self._database is not None
            connection = self._database.connection
            self._check_wal_size(self._database)
            with transaction(connection):
                self._check_simulated(connection)
                gpu_ids = self._write_gpus(connection)
                found = rows.write_sessions(connection, pending, gpu_ids)
                rows.write_minutes(connection, pending.minutes, gpu_ids)
                rows.write_usage(connection, pending.usage, gpu_ids)
                self._write_meta(connection)
                horizon_s = self.horizon.trusted_s
                hour = None if horizon_s is None else int(horizon_s // HOUR_S)
                if horizon_s is not None and hour != self._pruned_hour:
                    prune(connection, horizon_s, self.history_days)
        except DATABASE_ERRORS as error:
            pending.trim(MAX_PENDING_ROWS)
            problem = explain(self.path, error, writing=True)
            if not problem.retry and self._database is not None:  # the live database's
                problem = explain(self._database.live_path, error, writing=True)
            raise problem from None
        except HistoryError:
            pending.trim(MAX_PENDING_ROWS)
            raise
        self._gpu_ids = gpu_ids
        self._gpus_written.update(pending.gpus)
        self._pruned_hour = hour
        for session, row_id in found:
            session.row_id = row_id
        pending.written()
        if self._published is None or self._clock() - self._published >= self.publish_s:
            self._publish(self._database)

    def _named(self, database: WritableHistory) -> str:
        """The file a problem found on opening is about: ``path`` for a database just taken
        in from there (it is discarded: move ``path`` aside), else the live database."""
        return self.path if database.taken_in else database.live_path

    def notices(self) -> dict[str, str]:
        """What to say once while it lasts (by kind; :data:`RESOLVED` says when it is over):
        a clock more than a day past the newest sample the history had (nothing is pruned
        meanwhile), a write-ahead log that cannot be reset."""
        found = {}
        clock = self.horizon.ahead_notice()
        if clock is not None:
            found["clock"] = clock
        if self._wal_stuck:
            found["wal"] = (
                f"the write-ahead log of {self.path} cannot be reset: a process of yours or "
                "root's holds the live database open (fuser "
                f"{shlex.quote(self.path + LIVE_SUFFIX)}/*); it grows to at most "
                f"{WAL_MAX_BYTES // 2**20} MiB, then the samples wait in memory"
            )
        return found

    def _publish(self, database: WritableHistory) -> None:
        """Reset the write-ahead log, then publish the snapshot (:class:`HistoryError`: retry)."""
        self._published = self._clock()
        self._reset_wal(database)
        database.publish()
        if self._least_publish_s:  # 0: at every write, whatever the size
            with contextlib.suppress(OSError):
                size = os.stat(database.path).st_size
                stretched = min(size * 3600 / live.PUBLISH_BYTES_PER_HOUR, 3000.0)  # readers: < 1 h
                self.publish_s = max(self._least_publish_s, stretched)

    def _reset_wal(self, database: WritableHistory) -> None:
        """Reset the write-ahead log (a TRUNCATE checkpoint), noting when it cannot be."""
        connection = database.connection
        try:
            # Not waiting: a TRUNCATE checkpoint waits for every reader, for the busy timeout.
            connection.execute("PRAGMA busy_timeout = 0")
            busy, *_ = connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        except DATABASE_ERRORS:
            busy = 1
        finally:
            connection.execute(f"PRAGMA busy_timeout = {int(live.BUSY_TIMEOUT_S * 1000)}")
        self._wal_stuck = bool(busy)

    def _check_wal_size(self, database: WritableHistory) -> None:
        """Refuse (:class:`HistoryError`, retry) to grow a stuck WAL past :data:`WAL_MAX_BYTES`."""
        if not self._wal_stuck:
            return
        try:
            size = os.stat(database.live_path + "-wal").st_size
        except OSError:
            return
        if size < WAL_MAX_BYTES:
            return
        self._reset_wal(database)  # when the other process has let go (no copy published)
        if self._wal_stuck:
            raise HistoryError(
                f"{self.path}: the write-ahead log of the live database is "
                f"{size // 2**20} MiB and cannot be reset (a process of yours or root's holds "
                "it open): the samples wait in memory; retrying",
                retry=True,
            )

    def close(self) -> None:
        """Write what is pending (one try), publish the snapshot, then close. Never
        raises."""
        with contextlib.suppress(HistoryError):
            self.write()
        database, self._database = self._database, None
        if database is None:
            return
        try:
            with contextlib.suppress(*DATABASE_ERRORS):  # what readers allow for: not any more
                database.connection.execute("UPDATE meta SET value = 0 WHERE key = 'publish_s'")
            self._publish(database)
        except HistoryError:
            pass  # readers keep the last snapshot
        finally:
            database.close()

    # Each of these runs inside the batch's transaction.

    def _check_simulated(self, connection: sqlite3.Connection) -> None:
        """Simulated samples (``--demo``) and real ones never share a database."""
        simulated = int(self.pending.simulated)
        row = connection.execute("SELECT value FROM meta WHERE key = 'simulated'").fetchone()
        if row is None:
            connection.execute(
                "INSERT INTO meta (key, value) VALUES ('simulated', ?)", (simulated,)
            )
        elif row[0] != simulated:
            holds = "simulated (--demo)" if row[0] else "real"
            raise HistoryError(
                f"{self.path} holds {holds} GPU history: record "
                f"{'real' if not simulated else 'simulated'} samples into another file (--db)"
            )

    def _write_gpus(self, connection: sqlite3.Connection) -> dict[str, int]:
        gpu_ids = dict(self._gpu_ids)
        for uuid, seen in self.pending.gpus.items():
            if self._gpus_written.get(uuid) == seen:
                continue
            index, name = seen
            if uuid not in gpu_ids:
                cursor = connection.execute(
                    "INSERT INTO gpus (uuid, gpu_index, name) VALUES (?, ?, ?)",
                    (uuid, index, name),
                )
                assert cursor.lastrowid is not None
                gpu_ids[uuid] = cursor.lastrowid
            else:
                connection.execute(
                    "UPDATE gpus SET gpu_index = ?, name = ? WHERE id = ?",
                    (index, name, gpu_ids[uuid]),
                )
        return gpu_ids

    def _write_meta(self, connection: sqlite3.Connection) -> None:
        pending = self.pending
        connection.executemany(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
            [
                ("node", self._node),
                ("interval_s", self.interval_s),
                ("batch_s", self.batch_s),
                ("last_sample_s", pending.last_sample_s),
                # sessions.idle_unknown is this recorder's as of this sample: an older
                # recorder writing after it leaves this behind (its rows have no such flag)
                ("idle_unknown_at_s", pending.last_sample_s),
                ("prune_horizon_s", self.horizon.trusted_s),
                # readers allow for it while the recorder runs (0: it has stopped)
                ("publish_s", self.publish_s),
            ],
        )
        connection.execute(
            "INSERT OR IGNORE INTO meta (key, value) VALUES ('first_sample_s', ?)",
            (pending.first_sample_s,),
        )
