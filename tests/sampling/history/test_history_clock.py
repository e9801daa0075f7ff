"""A clock stepped forward never deletes the history: pruning goes by the newest sample the
history had, and a clock more than a day past it is one line until it has recorded a whole
day at that time (or is put back)."""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path

from gpumon.data.idle import IdleRule
from gpumon.sampling.history.recorder import Recorder
from gpumon.sampling.history.schema import DAY_S
from gpumon.sampling.history.writer import HistoryWriter
from tests.sampling.history.test_history_writer import server
from tests.support import history_synthetic

WEEK_START = 1_790_035_200  # a whole day (UTC)
WEEK_END = WEEK_START + 7 * DAY_S
INTERVAL_S = 600.0


def a_week_of_history(path: Path) -> dict[str, int]:
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        history_synthetic.fill(connection, WEEK_START, 7, expected=False)
    finally:
        connection.close()
    return rows_of_the_week(path)


def rows_of_the_week(path: Path) -> dict[str, int]:
    """How many rows of each kind the week left in the database."""
    connection = sqlite3.connect(path)
    try:
        return {
            table: connection.execute(
                f"SELECT count(*) FROM {table} WHERE {column} < ?", (WEEK_END,)
            ).fetchone()[0]
            for table, column in (
                ("gpu_minutes", "start_s"),
                ("usage_hours", "start_s"),
                ("usage_days", "start_s"),
                ("sessions", "last_seen_s"),
            )
        }
    finally:
        connection.close()


def recorder(path: Path, lines: list[str]) -> Recorder:
    writer = HistoryWriter(str(path), rule=IdleRule(), interval_s=INTERVAL_S, history_days=90)
    return Recorder(writer, lines.append)


def record(into: Recorder, start_s: float, samples: int) -> float:
    """``samples`` samples, one every interval from ``start_s``; the time after the last."""
    for number in range(samples):
        into.sampled(dataclasses.replace(server(0), timestamp_s=start_s + number * INTERVAL_S))
    return start_s + samples * INTERVAL_S


def test_a_clock_400_days_ahead_prunes_nothing_until_it_has_recorded_a_day(
    tmp_path: Path,
) -> None:
    path = tmp_path / "history.db"
    week = a_week_of_history(path)
    assert all(week[table] > 0 for table in ("gpu_minutes", "usage_hours", "sessions"))
    lines: list[str] = []
    first = recorder(path, lines)
    ahead_s = record(first, WEEK_END + 400 * DAY_S, 12)  # two hours at the stepped clock
    first.close()
    assert rows_of_the_week(path) == week
    assert len(lines) == 1, lines
    assert lines[0].startswith("warning: the clock (") and "400.0 days past the newest" in lines[0]
    assert "nothing is pruned" in lines[0]

    second = recorder(path, lines)  # a restart does not take the stepped clock for the truth
    ahead_s = record(second, ahead_s, 6)
    assert rows_of_the_week(path) == week
    ahead_s = record(second, ahead_s, int(DAY_S / INTERVAL_S))  # a whole day at that time
    second.close()
    assert rows_of_the_week(path) == {
        "gpu_minutes": 0,
        "usage_hours": 0,
        "usage_days": 0,
        "sessions": 0,
    }
    assert lines[1].startswith("warning: the clock (")
    assert lines[2:] == ["the clock agrees with the history: pruning resumes"]
