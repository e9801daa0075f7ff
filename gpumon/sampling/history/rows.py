"""The rows of one batch, written inside its transaction (see
:mod:`~gpumon.sampling.history.writer`), and the SQL that writes them.

Everything is written as an increment, so that a batch adds to what an earlier run of the
recorder left: a minute's mean is merged with the row's (weighted by samples), its max is the
greater, its joules are added; an hour row is recomputed from its minutes; usage seconds are
added; a session's totals are added to, its latest state replaced.
"""

from __future__ import annotations

import dataclasses
import sqlite3

from gpumon.sampling.history.aggregate import GpuMinute, Pending, Session, Usage, UsageKey
from gpumon.sampling.history.queries import aggregates
from gpumon.sampling.history.schema import HISTORY_FIELDS, HOUR_S

_ENERGY = HISTORY_FIELDS.index("energy_j")

_FIELD_COLUMNS = ", ".join(f"{name}_mean, {name}_max" for name in HISTORY_FIELDS)
_MERGED_MEANS = ",\n".join(
    f"""{name}_mean = CASE
        WHEN {name}_mean IS NULL THEN excluded.{name}_mean
        WHEN excluded.{name}_mean IS NULL THEN {name}_mean
        ELSE ({name}_mean * samples + excluded.{name}_mean * excluded.samples)
            / (samples + excluded.samples) END,
    {name}_max = coalesce(max({name}_max, excluded.{name}_max), {name}_max, excluded.{name}_max)"""
    for name in HISTORY_FIELDS
    if name != "energy_j"
)
_UPSERT_MINUTE = f"""
INSERT INTO gpu_minutes (start_s, gpu_id, samples, {_FIELD_COLUMNS})
VALUES ({", ".join("?" * (3 + 2 * len(HISTORY_FIELDS)))})
ON CONFLICT (start_s, gpu_id) DO UPDATE SET
    samples = samples + excluded.samples,
    {_MERGED_MEANS},
    energy_j_mean = coalesce(energy_j_mean + excluded.energy_j_mean, energy_j_mean,
        excluded.energy_j_mean)
"""
# An hour is the mean of its minutes, weighted by their samples; energy: the sum, and the
# busiest minute.
_HOUR_VALUES = ", ".join(aggregates(name) for name in HISTORY_FIELDS)
_HOUR_FROM_MINUTES = f"""
INSERT OR REPLACE INTO gpu_hours (start_s, gpu_id, samples, {_FIELD_COLUMNS})
SELECT :hour, gpu_id, sum(samples), {_HOUR_VALUES}
FROM gpu_minutes WHERE gpu_id = :gpu AND start_s >= :hour AND start_s < :hour + {HOUR_S}
GROUP BY gpu_id
"""
_UPSERT_USAGE = """
INSERT INTO usage_hours (grouping, start_s, gpu_id, key, held_s, used_s, known_s,
    idle_held_s, peak_memory_bytes)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (grouping, start_s, gpu_id, key) DO UPDATE SET
    known_s = coalesce(known_s, held_s) + excluded.known_s,
    held_s = held_s + excluded.held_s,
    used_s = used_s + excluded.used_s,
    idle_held_s = idle_held_s + excluded.idle_held_s,
    peak_memory_bytes = coalesce(max(peak_memory_bytes, excluded.peak_memory_bytes),
        peak_memory_bytes, excluded.peak_memory_bytes)
"""
_INSERT_SESSION = """
INSERT INTO sessions (gpu_id, pid, create_time_s, user, job_id, container_id, command,
    gpu_instance_id, compute_instance_id, first_seen_s, last_seen_s, memory_bytes,
    peak_memory_bytes, memory_byte_s, sm_s, held_s, idle_held_s, quiet_since_s, idle_since_s,
    idle_unknown)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
_UPDATE_SESSION = """
UPDATE sessions SET last_seen_s = ?1, memory_bytes = ?2,
    peak_memory_bytes = coalesce(max(peak_memory_bytes, ?3), peak_memory_bytes, ?3),
    memory_byte_s = memory_byte_s + ?4, sm_s = sm_s + ?5, held_s = held_s + ?6,
    idle_held_s = idle_held_s + ?7, quiet_since_s = ?8, idle_since_s = ?9, idle_unknown = ?10
WHERE id = ?11
"""
_FIND_SESSION = """
SELECT id, last_seen_s, quiet_since_s FROM sessions
WHERE gpu_id = ? AND pid = ? AND create_time_s IS ? ORDER BY id DESC LIMIT 1
"""


def write_sessions(
    connection: sqlite3.Connection, pending: Pending, gpu_ids: dict[str, int]
) -> list[tuple[Session, int]]:
    """Insert the new sessions (or find them: a restarted recorder), update the others;
    returns the rows found or made, for the sessions to remember once committed."""
    found: list[tuple[Session, int]] = []
    updates = []
    for session in pending.sessions.values():
        if not session.changed:
            continue
        row_id = session.row_id
        if row_id is None:
            row_id = _find_session(connection, gpu_ids, session, pending.max_gap_s)
            if row_id is None:
                found.append((session, _insert_session(connection, gpu_ids, session)))
                continue
            found.append((session, row_id))
        updates.append((*_progress(session), row_id))
    connection.executemany(_UPDATE_SESSION, updates)
    return found


def _find_session(
    connection: sqlite3.Connection, gpu_ids: dict[str, int], session: Session, max_gap_s: float
) -> int | None:
    """The row of this session written by an earlier run; its quiet spell carries on
    when that run saw it until moments before this one did."""
    uuid, pid, create_time_s = session.identity
    row = connection.execute(_FIND_SESSION, (gpu_ids[uuid], pid, create_time_s)).fetchone()
    if row is None:
        return None
    row_id, last_seen_s, quiet_since_s = row
    continuous = session.first_seen_s - last_seen_s <= max_gap_s
    if create_time_s is None and not continuous:
        return None  # a PID reused in another namespace, maybe: a new session
    if continuous and quiet_since_s is not None and session.quiet_since_s is not None:
        session.quiet_since_s = min(session.quiet_since_s, quiet_since_s)
    return int(row_id)


def _progress(session: Session) -> tuple[object, ...]:
    """What a session's row says of it so far, in the order both the insert and the update
    statements take it (from ``last_seen_s`` to ``idle_unknown``)."""
    return (
        session.last_seen_s,
        session.process.gpu_memory_bytes,
        session.peak_memory_bytes,
        session.pending_memory_byte_s,
        session.pending_sm_s,
        session.pending_held_s,
        session.pending_idle_held_s,
        session.quiet_since_s,
        session.idle_since_s,
        int(session.idle_unknown),
    )


def _insert_session(
    connection: sqlite3.Connection, gpu_ids: dict[str, int], session: Session
) -> int:
    process = session.process
    uuid, pid, create_time_s = session.identity
    cursor = connection.execute(
        _INSERT_SESSION,
        (
            gpu_ids[uuid],
            pid,
            create_time_s,
            process.user,
            process.job_id,
            process.container_id,
            process.command,
            process.gpu_instance_id,
            process.compute_instance_id,
            session.first_seen_s,
            *_progress(session),
        ),
    )
    assert cursor.lastrowid is not None
    return cursor.lastrowid


def write_minutes(
    connection: sqlite3.Connection,
    minutes: dict[tuple[int, str], GpuMinute],
    gpu_ids: dict[str, int],
) -> None:
    """Merge the pending minutes into their rows, and recompute their hours from them."""
    rows = []
    hours = set()
    for (minute, uuid), row in minutes.items():
        gpu_id = gpu_ids[uuid]
        values: list[object] = [minute, gpu_id, row.samples]
        for position, (mean, highest) in enumerate(zip(row.means(), row.maxes, strict=True)):
            # Energy: the joules used in the minute; its max is that (NULL: a byte, not 8).
            values += (_rounded(mean), None if position == _ENERGY else highest)
        rows.append(values)
        hours.add((minute // HOUR_S * HOUR_S, gpu_id))
    connection.executemany(_UPSERT_MINUTE, rows)
    connection.executemany(
        _HOUR_FROM_MINUTES, [{"hour": hour, "gpu": gpu} for hour, gpu in sorted(hours)]
    )


def write_usage(
    connection: sqlite3.Connection, usage: dict[UsageKey, Usage], gpu_ids: dict[str, int]
) -> None:
    """Add the pending usage to its hour rows."""
    connection.executemany(
        _UPSERT_USAGE,
        [
            (grouping, hour, gpu_ids[uuid], key, *dataclasses.astuple(held))
            for (grouping, hour, uuid, key), held in usage.items()
        ],
    )


def _rounded(value: float | None) -> float | None:
    """A mean to three digits or more: 0.1 below 100 (a utilisation, a temperature), whole
    numbers above (watts, bytes, joules). SQLite stores a whole number in a REAL column as an
    integer of 1 to 6 bytes instead of 8."""
    if value is None:
        return None
    return float(round(value)) if abs(value) >= 100 else round(value, 1)
