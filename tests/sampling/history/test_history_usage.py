"""A report's numbers over a month of a busy 8-GPU server (64 processes each), against sums
computed by hand (tests/support/history_synthetic.py); what pruning keeps; the schema's versions."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.data.idle import IdleRule
from gpumon.data.usage import GROUPINGS, UsageRow
from gpumon.sampling.history import retention, schema
from gpumon.sampling.history.reader import HistoryError, open_history
from gpumon.sampling.history.writer import HistoryWriter
from tests.support import history_synthetic as synthetic

START = 1_700_006_400  # a whole day (UTC)
DAYS = 30
END = START + DAYS * 86400

#: A month of a busy server, filled once for the module: seconds.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def month(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, synthetic.Expected]]:
    path = tmp_path_factory.mktemp("month") / "history.db"
    connection = sqlite3.connect(path, isolation_level=None)
    expected = synthetic.fill(connection, START, DAYS, minutes=False)
    connection.close()
    yield path, expected


def by_key(rows: list[UsageRow]) -> dict[str | None, UsageRow]:
    return {row.key: row for row in rows}


def check(rows: list[UsageRow], totals: dict[str, tuple[float, ...]], counts: dict) -> None:
    found = by_key(rows)
    assert set(found) == {key or None for key in totals}
    for key, (held, used, idle, peak) in totals.items():
        row = found[key or None]
        assert row.gpu_hours_held == pytest.approx(held)
        assert row.gpu_hours_used == pytest.approx(used)
        assert row.idle_held_hours == pytest.approx(idle)
        assert row.peak_memory_bytes == peak
        assert row.processes == counts[key]


@pytest.mark.parametrize("by", GROUPINGS)
def test_a_months_report_adds_up_to_the_hand_computed_sums(
    month: tuple[Path, synthetic.Expected], by: str
) -> None:
    path, expected = month
    with open_history(str(path)) as reader:  # type: ignore[union-attr]
        rows = reader.usage(START, END, by)
    check(
        rows,
        expected.totals(by, 0, DAYS * 24),
        synthetic.session_counts(START, DAYS, by, (START, END)),
    )
    assert [row.gpu_hours_held for row in rows] == sorted(
        (row.gpu_hours_held for row in rows), reverse=True
    )


def test_a_week_inside_the_month_counts_only_its_hours(
    month: tuple[Path, synthetic.Expected],
) -> None:
    path, expected = month
    first_hour, hours = 5 * 24 + 7, 7 * 24
    period = (START + first_hour * 3600, START + (first_hour + hours) * 3600)
    with open_history(str(path)) as reader:  # type: ignore[union-attr]
        rows = reader.usage(*period, "user")
    check(
        rows,
        expected.totals("user", first_hour, hours),
        synthetic.session_counts(START, DAYS, "user", period),
    )


def test_an_hour_the_period_covers_in_part_counts_in_proportion(
    month: tuple[Path, synthetic.Expected],
) -> None:
    path, expected = month
    whole = expected.totals("gpu", 10, 2)  # hours 10 and 11
    with open_history(str(path)) as reader:  # type: ignore[union-attr]
        # Hour 10 from its half, all of hour 11, hour 12's first quarter.
        rows = by_key(reader.usage(START + 10.5 * 3600, START + 12.25 * 3600, "gpu"))
    hour_12 = expected.totals("gpu", 12, 1)
    hour_10 = expected.totals("gpu", 10, 1)
    for key, (held, *_) in whole.items():
        share = held - hour_10[key][0] / 2 + hour_12[key][0] / 4
        assert rows[key].gpu_hours_held == pytest.approx(share)


def test_rolling_hours_up_into_days_keeps_the_totals(
    month: tuple[Path, synthetic.Expected], tmp_path: Path
) -> None:
    """history_days = 7: all but the last week becomes day rows; a report over the month
    and over whole days of it says the same as before."""
    copy = tmp_path / "copy.db"
    source = sqlite3.connect(month[0])
    target = sqlite3.connect(copy, isolation_level=None)
    source.backup(target)
    source.close()
    with open_history(str(copy)) as reader:  # type: ignore[union-attr]
        before = [reader.usage(START, END, by) for by in GROUPINGS]
        before_days = reader.usage(START + 86400, START + 9 * 86400, "job")
    target.execute("BEGIN")
    retention.prune(target, END, history_days=7)
    target.execute("COMMIT")
    hours = target.execute("SELECT min(start_s), count(*) FROM usage_hours").fetchone()
    days = target.execute("SELECT count(DISTINCT start_s) FROM usage_days").fetchone()
    target.close()
    assert hours[0] == END - 7 * 86400 and days == (DAYS - 7,)
    with open_history(str(copy)) as reader:  # type: ignore[union-attr]
        after = [reader.usage(START, END, by) for by in GROUPINGS]
        after_days = reader.usage(START + 86400, START + 9 * 86400, "job")
    for old, new in zip([*before, before_days], [*after, after_days], strict=True):
        assert [row.key for row in new] == [row.key for row in old]
        for a, b in zip(old, new, strict=True):
            assert b.gpu_hours_held == pytest.approx(a.gpu_hours_held)
            assert b.gpu_hours_used == pytest.approx(a.gpu_hours_used)
            assert b.idle_held_hours == pytest.approx(a.idle_held_hours)
            assert (b.peak_memory_bytes, b.processes) == (a.peak_memory_bytes, a.processes)


def test_pruning_keeps_minutes_for_history_days_and_the_rest_a_year(tmp_path: Path) -> None:
    connection = sqlite3.connect(tmp_path / "history.db", isolation_level=None)
    schema.create(connection)
    now = START + 400 * 86400
    ages_days = (0, 2, 6, 8, 100, 364, 367)
    connection.execute("BEGIN")
    connection.execute("INSERT INTO gpus (id, uuid) VALUES (1, 'GPU-1')")
    for age in ages_days:
        start = now - age * 86400 - 7200
        connection.execute(
            "INSERT INTO gpu_minutes (start_s, gpu_id, samples) VALUES (?, 1, 1)", (start,)
        )
        connection.execute(
            "INSERT INTO gpu_hours (start_s, gpu_id, samples) VALUES (?, 1, 1)", (start,)
        )
        connection.execute(
            "INSERT INTO usage_hours VALUES (0, ?, 1, 'alice', 3600, 60, 0, 1, 3600)", (start,)
        )
        connection.execute(
            "INSERT INTO sessions (gpu_id, pid, first_seen_s, last_seen_s) VALUES (1, ?, ?, ?)",
            (age, start - 86400, start),
        )
    retention.prune(connection, now, history_days=7)
    connection.execute("COMMIT")

    def ages(table: str, column: str = "start_s") -> list[int]:
        rows = connection.execute(f"SELECT {column} FROM {table} ORDER BY 1 DESC").fetchall()
        return [round((now - 7200 - value) / 86400) for (value,) in rows]

    assert ages("gpu_minutes") == [0, 2, 6]
    assert ages("gpu_hours") == [0, 2, 6, 8, 100, 364]
    assert ages("usage_hours") == [0, 2, 6]
    assert len(ages("usage_days")) == 3  # ages 8, 100 and 364, rolled up by day
    assert ages("sessions", "last_seen_s") == [0, 2, 6, 8, 100, 364]
    connection.close()


def test_a_database_of_a_newer_gpumon_is_one_line_for_readers_and_the_recorder(
    tmp_path: Path,
) -> None:
    path = tmp_path / "history.db"
    connection = sqlite3.connect(path, isolation_level=None)
    schema.create(connection)
    connection.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
    connection.close()
    with pytest.raises(HistoryError) as reading:
        open_history(str(path))
    writer = HistoryWriter(str(path), rule=synthetic_rule(), interval_s=10, history_days=90)
    with pytest.raises(HistoryError) as writing:
        writer.open()
    for error in (reading.value, writing.value):
        assert str(error).startswith(f"{path} was written by a newer gpumon")
        assert "upgrade gpumon" in str(error) and "\n" not in str(error)
    assert not writing.value.retry


def test_a_version_1_file_opens_and_migrates_one_step_at_a_time(tmp_path: Path) -> None:
    """A v1 file with data: version 2's real step (known seconds), then a test step that
    adds a column; the data kept, each version in turn, and the report's numbers the same
    as a file written at the current version (v1 rows count as known)."""
    path = tmp_path / "history.db"
    connection = sqlite3.connect(path, isolation_level=None)
    synthetic.fill(connection, START, 1, minutes=False, version=1)
    assert schema.user_version(connection) == 1
    with pytest.raises(HistoryError, match="start the recorder"):
        open_history(str(path))

    def add_gpu_serial(database: sqlite3.Connection) -> None:
        database.execute("ALTER TABLE gpus ADD COLUMN serial TEXT")

    steps = {**schema.MIGRATIONS, 2: add_gpu_serial}
    assert schema.migrate(connection, str(path), steps, target=3) == 1
    assert schema.user_version(connection) == 3
    assert connection.execute("SELECT count(serial) FROM gpus").fetchone() == (0,)
    # Again: nothing to do.
    assert schema.migrate(connection, str(path), steps, target=3) == 3
    connection.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION}")
    connection.close()
    current = tmp_path / "current.db"
    fresh = sqlite3.connect(current, isolation_level=None)
    synthetic.fill(fresh, START, 1, minutes=False)
    fresh.close()
    with open_history(str(path)) as migrated, open_history(str(current)) as written:  # type: ignore[union-attr]
        after = migrated.usage(START, START + 86400, "user")
        assert after and after == written.usage(START, START + 86400, "user")
    assert all(row.gpu_hours_used is not None for row in after)


def test_another_programs_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("CREATE TABLE accounts (id)")
    connection.close()
    writer = HistoryWriter(str(path), rule=synthetic_rule(), interval_s=10, history_days=90)
    with pytest.raises(HistoryError, match="is not a gpumon history database"):
        writer.open()
    with pytest.raises(HistoryError, match="not a gpumon history database"):
        open_history(str(path))


def synthetic_rule() -> IdleRule:
    return IdleRule()
