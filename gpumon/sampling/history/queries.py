"""The reads behind :class:`~gpumon.sampling.history.reader.HistoryReader`: plain SQL over
the aggregates (see :mod:`~gpumon.sampling.history.schema`), never over raw samples.

A report over 30 days of 8 GPUs reads about 720 hour rows per holder and GPU, through the
primary key's range on time; a graph reads minute rows of one GPU in a range of time.
"""

from __future__ import annotations

import math
import sqlite3

from gpumon.data.usage import GROUPINGS, UsageRow
from gpumon.sampling.history.schema import DAY_S, HOUR_S, MINUTE_S, meta_values


def _usage_part(table: str, width: int) -> str:
    return f"""
    SELECT key, gpu_id, start_s, {width} AS width, held_s, used_s, idle_held_s,
        peak_memory_bytes, coalesce(known_s, held_s) AS known_s
    FROM {table}
    WHERE grouping = :grouping AND start_s > :start - {width} AND start_s < :end"""


#: The column of ``sessions`` that each grouping counts processes by.
_SESSION_KEYS = {"user": "user", "job": "job_id", "container": "container_id", "gpu": "gpu_id"}


def usage_rows(
    connection: sqlite3.Connection, start_s: float, end_s: float, by: str
) -> list[UsageRow]:
    """The rows of a report (see :meth:`HistoryReader.usage
    <gpumon.sampling.history.reader.HistoryReader.usage>`)."""
    if end_s <= start_s:
        return []
    # A bucket the period covers in part counts in proportion, over the part of it that has
    # been recorded (the hour in progress holds only what was recorded up to the last sample)
    # and in which the holder's processes were seen (their sessions' first and last seen, an
    # interval before the first: the first sample credits the time since the one before).
    # Only the (at most four) buckets the period's ends fall in are clipped: one pass over
    # the sessions that overlap them. Their peak memory too: a bucket's peak may be a job's
    # that ended before the period began, so there the peak is that of the sessions seen in
    # the period (each over its whole run).
    group_column = "gpu_id" if by == "gpu" else "owner_key"
    meta = meta_values(connection, "last_sample_s", "interval_s")
    recorded_to = float(meta.get("last_sample_s", end_s))
    slack = float(meta.get("interval_s") or 10.0)
    session_key = "''" if by == "gpu" else f"coalesce(s.{_SESSION_KEYS[by]}, '')"
    totals = connection.execute(
        f"""
        WITH rows AS ({_usage_part("usage_hours", HOUR_S)}
            UNION ALL {_usage_part("usage_days", DAY_S)}
        ),
        edges AS (
            SELECT DISTINCT start_s, width FROM rows
            WHERE start_s < :start OR start_s + width > :end
        ),
        seen AS (
            SELECT e.start_s, e.width, s.gpu_id, {session_key} AS key,
                min(s.first_seen_s) - :slack AS seen_from, max(s.last_seen_s) AS seen_to,
                max(CASE WHEN s.last_seen_s >= :start AND s.first_seen_s < :end
                    THEN s.peak_memory_bytes END) AS seen_peak
            FROM edges e JOIN sessions s
                ON s.last_seen_s >= e.start_s AND s.first_seen_s - :slack < e.start_s + e.width
            GROUP BY 1, 2, 3, 4
        ),
        edge_rows AS (
            SELECT * FROM rows WHERE start_s < :start OR start_s + width > :end
        ),
        joined AS (
            SELECT edge_rows.*, seen.seen_from, seen.seen_to, seen.seen_peak AS period_peak
            FROM edge_rows LEFT JOIN seen ON seen.start_s = edge_rows.start_s
                AND seen.width = edge_rows.width AND seen.gpu_id = edge_rows.gpu_id
                AND seen.key = edge_rows.key
            UNION ALL
            SELECT *, NULL, NULL, peak_memory_bytes FROM rows
            WHERE start_s >= :start AND start_s + width <= :end
        ),
        bounded AS (
            SELECT *, max(min(start_s + width, :recorded_to), start_s + 1) AS stop_s
            FROM joined
        ),
        clipped AS (
            SELECT *, coalesce(max(start_s, seen_from), start_s) AS from_s,
                coalesce(min(stop_s, seen_to), stop_s) AS to_s
            FROM bounded
        ),
        spans AS (
            SELECT key AS owner_key, gpu_id, held_s, used_s, idle_held_s, period_peak,
                known_s, from_s AS start_s, max(to_s, from_s + 1) AS stop_s
            FROM clipped
        ),
        parts AS (
            SELECT {group_column} AS owner, held_s, used_s, idle_held_s, period_peak,
                known_s,
                max(0.0, min(stop_s, :end) - max(start_s, :start)) * 1.0 / (stop_s - start_s)
                    AS part
            FROM spans
        )
        SELECT owner, sum(held_s * part), sum(used_s * part), sum(idle_held_s * part),
            max(period_peak), sum(known_s * part)
        FROM parts GROUP BY owner
        """,
        {
            "grouping": GROUPINGS.index(by),
            "start": start_s,
            "end": end_s,
            "recorded_to": recorded_to,
            "slack": slack,
        },
    ).fetchall()
    processes = dict(
        connection.execute(
            f"""
            SELECT coalesce({_SESSION_KEYS[by]}, ''), count(*) FROM sessions
            WHERE first_seen_s < :end AND (last_seen_s > :start OR first_seen_s >= :start)
            GROUP BY 1
            """,
            {"start": start_s, "end": end_s},
        ).fetchall()
    )
    names = dict(connection.execute("SELECT id, uuid FROM gpus").fetchall()) if by == "gpu" else {}
    rows = []
    for owner, held, used, idle, peak, known in totals:
        if not all(math.isfinite(total) for total in (held, used, idle, known)):
            raise ValueError("a usage total that is not a finite number")
        count = processes.pop(owner, 0)
        if held < 0.5 and not count:
            continue  # a bucket the period touches, when none of the group's processes ran
        # SM utilisation never known: used and idle are N/A, not 0 (a held second of known
        # use is 1/3600 GPU-hour); idleness is judged from the same utilisation.
        ever_known = known > 0.5 or held <= 0.5
        rows.append(
            UsageRow(
                key=_key(owner, names),
                gpu_hours_held=held / HOUR_S,
                gpu_hours_used=used / HOUR_S if ever_known else None,
                used_known_hours=known / HOUR_S,
                idle_held_hours=idle / HOUR_S if ever_known else None,
                peak_memory_bytes=None if peak is None else int(peak),
                processes=count,
            )
        )
    # Seen in the period, but for no time that counts (a single sample).
    for owner, count in processes.items():
        rows.append(UsageRow(_key(owner, names), 0.0, 0.0, 0.0, None, count, None, 0.0))
    rows.sort(key=lambda row: (-row.gpu_hours_held, row.key is None, row.key or ""))
    return rows


def _key(owner: object, gpu_uuids: dict[object, str]) -> str | None:
    """A row's key: ``''`` (none) is ``None``; a GPU's id is its UUID."""
    if gpu_uuids:
        return gpu_uuids.get(owner)
    return None if owner in ("", None) else str(owner)


def aggregates(field: str) -> str:
    """Mean (weighted by samples) and max of ``field`` over a bucket's rows; energy: the
    sum and the busiest row."""
    if field == "energy_j":
        # A minute row's max is its own joules (NULL there); an hour row's, its busiest minute.
        return "sum(energy_j_mean), max(coalesce(energy_j_max, energy_j_mean))"
    return (
        f"sum({field}_mean * samples) / "
        f"sum(CASE WHEN {field}_mean IS NULL THEN NULL ELSE samples END), max({field}_max)"
    )


def series(
    connection: sqlite3.Connection,
    gpu_uuid: str,
    field: str,
    start_s: float,
    end_s: float,
    bucket_s: float,
) -> list[tuple[float, float | None, float | None]]:
    """A graph's points (see :meth:`HistoryReader.gpu_series
    <gpumon.sampling.history.reader.HistoryReader.gpu_series>`)."""
    found = connection.execute("SELECT id FROM gpus WHERE uuid = ?", (gpu_uuid,)).fetchone()
    if found is None or end_s <= start_s:
        return []
    gpu_id = found[0]
    width = max(MINUTE_S, round(bucket_s / MINUTE_S) * MINUTE_S)
    (first_minute,) = connection.execute(
        "SELECT min(start_s) FROM gpu_minutes WHERE gpu_id = ?", (gpu_id,)
    ).fetchone()
    points: list[tuple[float, float | None, float | None]] = []
    values = aggregates(field)
    if first_minute is None or start_s < first_minute:
        # Hours whose minutes are gone: one point per hour, at least.
        hour_width = max(HOUR_S, round(width / HOUR_S) * HOUR_S)
        before = end_s if first_minute is None else min(end_s, first_minute)
        points += connection.execute(
            f"""
            SELECT start_s / :width * :width AS bucket, {values} FROM gpu_hours
            WHERE gpu_id = :gpu AND start_s >= :start AND start_s + {HOUR_S} <= :before
            GROUP BY bucket ORDER BY bucket
            """,
            {
                "width": hour_width,
                "gpu": gpu_id,
                "start": start_s // HOUR_S * HOUR_S,
                "before": before,
            },
        ).fetchall()
    if first_minute is not None:
        points += connection.execute(
            f"""
            SELECT start_s / :width * :width AS bucket, {values} FROM gpu_minutes
            WHERE gpu_id = :gpu AND start_s >= :start AND start_s < :end
            GROUP BY bucket ORDER BY bucket
            """,
            {"width": width, "gpu": gpu_id, "start": max(start_s, first_minute), "end": end_s},
        ).fetchall()
    return [(float(bucket), mean, highest) for bucket, mean, highest in points]
