"""What the history keeps, and for how long: pruning as the recorder goes.

- GPU minute rows: ``history_days`` (default 90); GPU hour rows: a year (or ``history_days``
  when longer).
- Usage hour rows: ``history_days``; then whole days of them are rolled up into usage day
  rows (the sums, the peak), kept a year.
- Sessions: a year after they were last seen.

Usage hour rows are not kept a year (as GPU hour rows are): per GPU and hour there is one
row per user, job and container, so 8 GPUs x 64 processes make about 25 times the GPU hour
rows, and a year's report would read them all; a report of a period whose ends fall inside
a day row says so (``prorated_s``) and clips the estimate to when the processes were seen.

The recorder prunes once an hour, in the transaction of a batch, so the file's size is
bounded whatever the uptime: SQLite reuses the freed pages. The cuts are whole hours (GPU
minutes) and whole days (usage), so a bucket is never half pruned.
"""

from __future__ import annotations

import sqlite3

from gpumon.data.usage import GROUPINGS
from gpumon.sampling.history.schema import DAY_S, HOUR_S, YEAR_DAYS

_USAGE_KEY = "grouping, start_s, gpu_id, key"
_GROUPINGS = ", ".join(str(position) for position in range(len(GROUPINGS)))


def minute_cut_s(now_s: float, history_days: int) -> int:
    """GPU minute rows before this are pruned (a whole hour)."""
    return int((now_s - history_days * DAY_S) // HOUR_S) * HOUR_S


def usage_day_cut_s(now_s: float, history_days: int) -> int:
    """Usage hour rows before this are rolled up into day rows (a whole day)."""
    return int((now_s - history_days * DAY_S) // DAY_S) * DAY_S


def year_cut_s(now_s: float, history_days: int) -> int:
    """GPU hour rows, usage day rows and sessions before this are pruned (a whole day)."""
    return int((now_s - max(YEAR_DAYS, history_days) * DAY_S) // DAY_S) * DAY_S


def prune(connection: sqlite3.Connection, now_s: float, history_days: int) -> None:
    """Prune and roll up what ``now_s`` makes old; call inside a write transaction."""
    execute = connection.execute
    execute("DELETE FROM gpu_minutes WHERE start_s < ?", (minute_cut_s(now_s, history_days),))
    day_cut = usage_day_cut_s(now_s, history_days)
    execute(
        f"""
        INSERT INTO usage_days ({_USAGE_KEY}, held_s, used_s, idle_held_s, peak_memory_bytes,
            known_s)
        SELECT grouping, start_s - start_s % {DAY_S}, gpu_id, key,
            sum(held_s), sum(used_s), sum(idle_held_s), max(peak_memory_bytes),
            sum(coalesce(known_s, held_s))
        FROM usage_hours WHERE grouping IN ({_GROUPINGS}) AND start_s < :cut
        GROUP BY 1, 2, 3, 4
        ON CONFLICT ({_USAGE_KEY}) DO UPDATE SET
            known_s = coalesce(known_s, held_s) + excluded.known_s,
            held_s = held_s + excluded.held_s,
            used_s = used_s + excluded.used_s,
            idle_held_s = idle_held_s + excluded.idle_held_s,
            peak_memory_bytes = coalesce(
                max(peak_memory_bytes, excluded.peak_memory_bytes),
                peak_memory_bytes,
                excluded.peak_memory_bytes
            )
        """,
        {"cut": day_cut},
    )
    # "grouping IN": the cut is a range of the primary key in each grouping.
    execute(f"DELETE FROM usage_hours WHERE grouping IN ({_GROUPINGS}) AND start_s < ?", (day_cut,))
    execute(
        """
        INSERT INTO meta (key, value) VALUES ('usage_days_until_s', :cut)
        ON CONFLICT (key) DO UPDATE SET value = max(value, excluded.value)
        """,
        {"cut": day_cut},
    )
    year_cut = year_cut_s(now_s, history_days)
    execute("DELETE FROM gpu_hours WHERE start_s < ?", (year_cut,))
    execute(f"DELETE FROM usage_days WHERE grouping IN ({_GROUPINGS}) AND start_s < ?", (year_cut,))
    execute("DELETE FROM sessions WHERE last_seen_s < ?", (year_cut,))
