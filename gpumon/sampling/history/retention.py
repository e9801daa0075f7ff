"""What the history keeps, and for how long: pruning as the recorder goes.

GPU minute rows and usage hour rows are kept ``history_days``; GPU hour rows, usage day rows
and sessions a year. The recorder prunes once an hour, in whole buckets, by
:class:`PruneHorizon`, never by the clock alone. Why: docs/history.md.
"""

from __future__ import annotations

import sqlite3
import time

from gpumon.data.usage import GROUPINGS
from gpumon.sampling.history.schema import DAY_S, HOUR_S, YEAR_DAYS

_USAGE_KEY = "grouping, start_s, gpu_id, key"
_GROUPINGS = ", ".join(str(position) for position in range(len(GROUPINGS)))


def prune(connection: sqlite3.Connection, now_s: float, history_days: int) -> None:
    """Prune and roll up what ``now_s`` makes old; call inside a write transaction."""
    execute = connection.execute
    # Whole hours of GPU minutes go; whole days of usage hours are rolled up into days.
    kept_from_s = now_s - history_days * DAY_S
    execute("DELETE FROM gpu_minutes WHERE start_s < ?", (int(kept_from_s // HOUR_S) * HOUR_S,))
    day_cut = int(kept_from_s // DAY_S) * DAY_S
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
    # GPU hours, usage days and sessions: whole days.
    year_cut = int((now_s - max(YEAR_DAYS, history_days) * DAY_S) // DAY_S) * DAY_S
    execute("DELETE FROM gpu_hours WHERE start_s < ?", (year_cut,))
    execute(f"DELETE FROM usage_days WHERE grouping IN ({_GROUPINGS}) AND start_s < ?", (year_cut,))
    execute("DELETE FROM sessions WHERE last_seen_s < ?", (year_cut,))


class PruneHorizon:
    """The newest sample time pruning trusts (:attr:`trusted_s`). It follows samples at most a
    day past it; one further ahead (a clock stepped forward) is trusted only after a whole day
    of samples from there with no gap over ``max_gap_s``. A clock put back is trusted at once.
    """

    def __init__(self, max_gap_s: float) -> None:
        self.max_gap_s = max_gap_s
        self.trusted_s: float | None = None
        #: While the clock is ahead: the first and the latest sample of the run there.
        self.ahead_from_s: float | None = None
        self._ahead_to_s = 0.0

    def resume(self, trusted_s: float | None) -> None:
        """Start from the database's horizon (before the first sample)."""
        if self.trusted_s is None:
            self.trusted_s = trusted_s

    def observe(self, sample_s: float) -> None:
        """Take in the time of a sample."""
        trusted = self.trusted_s
        if trusted is None or sample_s <= trusted + DAY_S:
            self.trusted_s = sample_s if trusted is None else max(trusted, sample_s)
            self.ahead_from_s = None
            return
        ahead_from = self.ahead_from_s
        if ahead_from is None or not 0 <= sample_s - self._ahead_to_s <= self.max_gap_s:
            ahead_from = self.ahead_from_s = sample_s  # a new run ahead
        self._ahead_to_s = sample_s
        if sample_s - ahead_from >= DAY_S:
            self.trusted_s, self.ahead_from_s = sample_s, None

    def ahead_notice(self) -> str | None:
        """While the clock is ahead: one line saying so and what it means; else ``None``."""
        if self.ahead_from_s is None or self.trusted_s is None:
            return None
        days = (self._ahead_to_s - self.trusted_s) / DAY_S
        return (
            f"the clock ({_utc(self._ahead_to_s)}) is {days:.1f} days past the newest "
            f"sample in the history ({_utc(self.trusted_s)}): nothing is pruned until the "
            "clock is put back, or the recorder has recorded a whole day at this time"
        )


def _utc(time_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(time_s))
