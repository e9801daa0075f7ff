"""The recorder's writer: what a report and the graphs read back from samples whose numbers
can be checked by hand (one sample a minute; each credits the minute before it)."""

from __future__ import annotations

import sqlite3
from dataclasses import replace
from pathlib import Path

import pytest

from gpumon.cli import main
from gpumon.data.idle import IdleRule
from gpumon.data.model import GpuProcess, GpuStats, GpuUnavailable, Sample, UnavailableReason
from gpumon.sampling.history.reader import HistoryReader, open_history
from gpumon.sampling.history.writer import HistoryWriter
from tests.support.ui_helpers import GIB, MIB, make_gpu, make_process, make_sample

HOUR0 = 1_699_999_200.0  # a whole hour (UTC)
MINUTE = 60.0
RULE = IdleRule(min_memory_bytes=GIB, below_pct=5, after_s=10 * MINUTE)


def writer_at(path: Path, *, history_days: int = 90) -> HistoryWriter:
    return HistoryWriter(str(path), rule=RULE, interval_s=MINUTE, history_days=history_days)


def reader_at(path: Path, now_s: float) -> HistoryReader:
    reader = open_history(str(path))
    assert reader is not None
    reader.clock = lambda: now_s
    return reader


def server(minute: int, *, bob_sm: int = 0) -> Sample:
    """GPU 0: alice's two processes of one job (30 % and 40 % SM, 2 GiB each); GPU 1: bob's
    job (4 GiB at ``bob_sm`` %) beside carol's small quiet helper (256 MiB); GPU 2: nobody."""
    gpu0, gpu1, gpu2 = (
        make_gpu(
            index,
            utilization_gpu_pct=10 * (index + 1) + minute % 2,
            power_draw_w=100.0 + index,
            energy_j=5000.0 + 600.0 * minute,  # 10 W on average: 600 J a minute
        )
        for index in range(3)
    )
    processes = (
        alice(gpu0, 11, 30),
        alice(gpu0, 12, 40),
        make_process(
            gpu1,
            21,
            user="bob",
            job_id="7",
            gpu_memory_bytes=4 * GIB,
            sm_utilization_pct=bob_sm,
            create_time_s=HOUR0 - 5,
        ),
        make_process(
            gpu1,
            22,
            user="carol",
            gpu_memory_bytes=256 * MIB,
            sm_utilization_pct=0,
            container_id="c0ffee",
            create_time_s=HOUR0 - 7,
        ),
    )
    return make_sample((gpu0, gpu1, gpu2), processes, timestamp_s=HOUR0 + minute * MINUTE)


def alice(gpu: GpuStats, pid: int, sm: int) -> GpuProcess:
    return make_process(
        gpu,
        pid,
        user="alice",
        job_id="42",
        gpu_memory_bytes=2 * GIB,
        sm_utilization_pct=sm,
        create_time_s=HOUR0 - 100,
    )


def record(path: Path, minutes: range, **kwargs: int) -> None:
    writer = writer_at(path)
    try:
        for minute in minutes:
            writer.record(server(minute, **kwargs))
    finally:
        writer.close()


def test_two_processes_of_one_user_on_one_gpu_count_once(tmp_path: Path) -> None:
    database = tmp_path / "history.db"
    record(database, range(31))  # minutes 0..30: 30 minutes credited
    with reader_at(database, HOUR0 + 30 * MINUTE) as reader:
        rows = {row.key: row for row in reader.usage(HOUR0, HOUR0 + 3600, "user")}
        gpus = {row.key: row for row in reader.usage(HOUR0, HOUR0 + 3600, "gpu")}
    assert rows["alice"].gpu_hours_held == pytest.approx(0.5)  # not 1.0: one GPU
    assert rows["alice"].gpu_hours_used == pytest.approx(0.5 * 0.7)  # 30 % + 40 %
    assert rows["alice"].processes == 2
    assert rows["alice"].peak_memory_bytes == 2 * GIB
    # bob and carol share GPU 1: each held it half an hour, and the GPU was held half an hour.
    assert rows["bob"].gpu_hours_held == rows["carol"].gpu_hours_held == pytest.approx(0.5)
    assert gpus[make_gpu(1).uuid].gpu_hours_held == pytest.approx(0.5)
    assert gpus[make_gpu(1).uuid].processes == 2
    assert make_gpu(2).uuid not in gpus  # nobody held it


def test_idle_held_follows_the_live_views_rule(tmp_path: Path) -> None:
    """bob's 4 GiB at 0 % is IDLE from minute 10 (quiet since minute 0); carol's small quiet
    helper beside it does not keep the GPU from being held idle, and is never idle itself."""
    database = tmp_path / "history.db"
    record(database, range(31))
    with reader_at(database, HOUR0 + 30 * MINUTE) as reader:
        users = {row.key: row for row in reader.usage(HOUR0, HOUR0 + 3600, "user")}
        gpus = {row.key: row for row in reader.usage(HOUR0, HOUR0 + 3600, "gpu")}
        jobs = {row.key: row for row in reader.usage(HOUR0, HOUR0 + 3600, "job")}
        holders = reader.idle_holders(HOUR0 + 30 * MINUTE)
        since = reader.idle_since(make_gpu(1).uuid or "", 21, HOUR0 - 5)
    idle_hours = 21 / 60  # minutes 10 to 30, each crediting one minute
    assert users["bob"].idle_held_hours == pytest.approx(idle_hours)
    assert jobs["7"].idle_held_hours == pytest.approx(idle_hours)
    assert gpus[make_gpu(1).uuid].idle_held_hours == pytest.approx(idle_hours)
    assert users["carol"].idle_held_hours == 0
    assert users["alice"].idle_held_hours == 0
    assert jobs[None].gpu_hours_held == pytest.approx(0.5)  # carol's helper: no job
    assert [(holder.user, holder.pid, holder.idle_since_s) for holder in holders] == [
        ("bob", 21, HOUR0)
    ]
    assert holders[0].memory_bytes == 4 * GIB and holders[0].gpu_index == 1
    assert since == HOUR0


def test_a_busy_process_is_never_idle(tmp_path: Path) -> None:
    database = tmp_path / "history.db"
    record(database, range(31), bob_sm=60)
    with reader_at(database, HOUR0 + 30 * MINUTE) as reader:
        users = {row.key: row for row in reader.usage(HOUR0, HOUR0 + 3600, "user")}
        assert reader.idle_holders(HOUR0 + 30 * MINUTE) == []
        assert reader.idle_since(make_gpu(1).uuid or "", 21, HOUR0 - 5) is None
    assert users["bob"].idle_held_hours == 0
    assert users["bob"].gpu_hours_used == pytest.approx(0.5 * 0.6)


def test_sessions_keep_who_what_and_how_much(tmp_path: Path) -> None:
    database = tmp_path / "history.db"
    record(database, range(31))
    connection = sqlite3.connect(database)
    row = connection.execute(
        "SELECT user, job_id, container_id, command, first_seen_s, last_seen_s, "
        "peak_memory_bytes, memory_byte_s, sm_s, held_s, idle_held_s FROM sessions WHERE pid = 21"
    ).fetchone()
    connection.close()
    assert row == (
        "bob",
        "7",
        None,
        "python job_21.py",
        HOUR0,
        HOUR0 + 1800,
        4 * GIB,
        pytest.approx(4 * GIB * 1800),
        0,
        1800,
        21 * MINUTE,
    )


def test_a_restarted_recorder_carries_on_the_same_sessions_and_idle_spell(
    tmp_path: Path,
) -> None:
    """Stopped at minute 5 and started again at minute 6: bob's session is the same row, and
    his quiet spell still began at minute 0 (a fresh tracker would say minute 6)."""
    database = tmp_path / "history.db"
    record(database, range(6))
    record(database, range(6, 31))
    connection = sqlite3.connect(database)
    sessions = connection.execute("SELECT pid, count(*) FROM sessions GROUP BY pid").fetchall()
    connection.close()
    assert sessions == [(11, 1), (12, 1), (21, 1), (22, 1)]
    with reader_at(database, HOUR0 + 30 * MINUTE) as reader:
        assert reader.idle_since(make_gpu(1).uuid or "", 21, HOUR0 - 5) == HOUR0
        users = {row.key: row for row in reader.usage(HOUR0, HOUR0 + 3600, "user")}
    # The first sample after the restart credits its minute too (within the gap).
    assert users["alice"].gpu_hours_held == pytest.approx(0.5)
    assert users["bob"].idle_held_hours == pytest.approx(21 / 60)


def job_at(seconds: float, *, running: bool = True) -> Sample:
    gpu = make_gpu(0, utilization_gpu_pct=100)
    job = make_process(gpu, 100, user="alice", sm_utilization_pct=100, create_time_s=HOUR0 - 10)
    return make_sample((gpu,), (job,) if running else (), timestamp_s=HOUR0 + seconds)


def test_a_long_interval_books_each_part_to_its_own_hour(tmp_path: Path) -> None:
    """record --interval 600, a job from 10:00 to 11:00 exactly: one GPU-hour in its hour,
    none in the next (the 10:50-11:00 interval ends at 11:00 but is 10:xx time)."""
    database = tmp_path / "history.db"
    writer = HistoryWriter(str(database), rule=RULE, interval_s=600.0, history_days=90)
    for step in range(9):
        writer.record(job_at(600.0 * step, running=step <= 6))
    writer.close()
    with reader_at(database, HOUR0 + 5400) as reader:
        (job_hour,) = reader.usage(HOUR0, HOUR0 + 3600, "user")
        next_hour = reader.usage(HOUR0 + 3600, HOUR0 + 7200, "user")
    assert job_hour.gpu_hours_held == pytest.approx(1.0)
    assert sum(row.gpu_hours_held for row in next_hour) == pytest.approx(0.0)
    # Seen last at 11:00 exactly: its process counts in its hour, not in the next one too.
    assert job_hour.processes == 1
    assert sum(row.processes for row in next_hour) == 0


def test_time_while_nobody_watched_is_not_credited(tmp_path: Path) -> None:
    database = tmp_path / "history.db"
    writer = writer_at(database)
    for minute in (*range(11), *range(40, 51)):  # stopped from minute 10 to minute 40
        writer.record(server(minute))
    writer.close()
    with reader_at(database, HOUR0 + 50 * MINUTE) as reader:
        users = {row.key: row for row in reader.usage(HOUR0, HOUR0 + 3600, "user")}
    assert users["alice"].gpu_hours_held == pytest.approx(20 / 60)


@pytest.mark.parametrize("gap", ["recorder up", "driver not answering", "recorder restarted"])
def test_a_quiet_spell_does_not_carry_over_time_nobody_saw(
    tmp_path: Path, gap: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """bob's job is quiet before and after two hours with no sample (the driver hung, the
    clock stepped, the recorder was stopped): ``gpumon report`` holds it idle from the first
    sample after the gap, not across the two hours nobody saw, however the gap came."""
    database = tmp_path / "history.db"
    writer = writer_at(database)
    for minute in range(11):  # quiet from minute 0, IDLE from minute 10
        writer.record(server(minute))
    if gap == "driver not answering":
        not_answering = GpuUnavailable(
            UnavailableReason.NOT_ANSWERING, "NVML is not answering.", "NVML: timeout"
        )
        writer.record(make_sample((), timestamp_s=HOUR0 + 11 * MINUTE, unavailable=not_answering))
    if gap == "recorder restarted":
        writer.close()
        writer = writer_at(database)
    for minute in range(130, 141):  # quiet again from minute 130: IDLE at minute 140
        writer.record(server(minute))
    writer.close()
    with reader_at(database, HOUR0 + 140 * MINUTE) as reader:
        since = reader.idle_since(make_gpu(1).uuid or "", 21, HOUR0 - 5)
    assert since == HOUR0 + 130 * MINUTE
    monkeypatch.setattr("time.time", lambda: HOUR0 + 140 * MINUTE)
    assert main(["report", "--db", str(database), "--since", "3h"]) == 0
    out = capsys.readouterr().out
    (bob,) = [line for line in out.split("Holding GPU memory idle now:\n", 1)[1].splitlines()
              if "PID 21" in line]  # fmt: skip
    assert "idle 10m" in bob


def test_gpu_minutes_hold_means_maxima_and_the_energy_used(tmp_path: Path) -> None:
    database = tmp_path / "history.db"
    writer = writer_at(database)
    for second in range(0, 120, 10):  # every 10 s for two minutes: 10, 11, 12, 10, ... %
        sample = server(0)
        gpus = tuple(replace(gpu, utilization_gpu_pct=10 + second // 10 % 3) for gpu in sample.gpus)
        writer.record(make_sample(gpus, sample.processes, timestamp_s=HOUR0 + second))
    writer.record(server(2))  # a minute later: the energy counter rose 1200 J since
    writer.close()
    uuid = make_gpu(0).uuid or ""
    with reader_at(database, HOUR0 + 180) as reader:
        utilization = reader.gpu_series(uuid, "utilization_gpu_pct", HOUR0, HOUR0 + 180)
        energy = reader.gpu_series(uuid, "energy_j", HOUR0, HOUR0 + 180)
        hourly = reader.gpu_series(uuid, "energy_j", HOUR0, HOUR0 + 180, bucket_s=3600)
        power = reader.gpu_series(uuid, "power_draw_w", HOUR0, HOUR0 + 180)
    assert utilization == [(HOUR0, 11.0, 12.0), (HOUR0 + 60, 11.0, 12.0), (HOUR0 + 120, 10, 10)]
    assert [point[1] for point in power] == [100.0, 100.0, 100.0]
    # Same counter for two minutes: nothing used; then 1200 J in the third minute.
    assert [point[1] for point in energy] == [0.0, 0.0, 1200.0]
    assert hourly == [(HOUR0, 1200.0, 1200.0)]


def test_graphs_beyond_the_minute_rows_read_the_hours(tmp_path: Path) -> None:
    """history_days = 1: three days later, after a day of recording (pruning trusts a clock
    that jumped only then), the minutes of the first hour are gone, its hour row is still
    there."""
    database = tmp_path / "history.db"
    writer = HistoryWriter(str(database), rule=RULE, interval_s=MINUTE, history_days=1)
    for minute in range(31):
        writer.record(server(minute))
    later = 3 * 86400
    for minute in range(0, 24 * 60 + 3, 3):  # every 3 minutes: the longest gap still counted
        sample = server(minute)
        writer.record(
            make_sample(sample.gpus, sample.processes, timestamp_s=sample.timestamp_s + later)
        )
    writer.close()
    uuid = make_gpu(0).uuid or ""
    with reader_at(database, HOUR0 + later) as reader:
        points = reader.gpu_series(uuid, "utilization_gpu_pct", HOUR0, HOUR0 + later + 540)
    assert points[0][0] == HOUR0  # one point for the first hour, from its hour row
    assert points[0][1] == pytest.approx((16 * 10 + 15 * 11) / 31)
    assert points[0][2] == 11.0
    assert [point[0] for point in points[1:]] == [HOUR0 + later + 180 * m for m in range(3)]


def test_simulated_and_real_samples_never_share_a_database(tmp_path: Path) -> None:
    database = tmp_path / "history.db"
    record(database, range(2))
    writer = writer_at(database)
    sample = server(3)
    with pytest.raises(Exception) as raised:
        writer.record(
            make_sample(
                sample.gpus, sample.processes, timestamp_s=sample.timestamp_s, simulated=True
            )
        )
    writer.close()
    assert "holds real GPU history" in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_file_of_an_older_recorder_is_read_and_then_gets_the_idleness_unknown_column(
    tmp_path: Path,
) -> None:
    """sessions.idle_unknown was added without a new schema version: a file an older
    recorder writes (no such column) is still read (no count: None), an older gpumon still
    uses a file that has it, and this recorder adds it when it opens the file."""
    database = tmp_path / "history.db"
    record(database, range(31))
    with reader_at(database, HOUR0 + 30 * MINUTE) as reader:
        assert reader.idle_unknown_count(HOUR0 + 30 * MINUTE) == 0
    connection = sqlite3.connect(database, isolation_level=None)
    connection.execute("ALTER TABLE sessions DROP COLUMN idle_unknown")  # an older recorder's
    version = connection.execute("PRAGMA user_version").fetchone()[0]
    connection.close()
    with reader_at(database, HOUR0 + 30 * MINUTE) as reader:
        assert reader.idle_unknown_count(HOUR0 + 30 * MINUTE) is None
        assert reader.usage(HOUR0, HOUR0 + 3600, "user")  # read as before
    record(database, range(31, 33))
    connection = sqlite3.connect(database, isolation_level=None)
    columns = [row[1] for row in connection.execute("PRAGMA table_info(sessions)")]
    assert "idle_unknown" in columns
    assert connection.execute("PRAGMA user_version").fetchone()[0] == version  # unchanged
    connection.close()
    with reader_at(database, HOUR0 + 32 * MINUTE) as reader:
        assert reader.idle_unknown_count(HOUR0 + 32 * MINUTE) == 0
    # An older recorder records the next sample: it moves last_sample_s but neither sets
    # nor clears the flags, so this sample's count is unknown, not the newer one's 0.
    connection = sqlite3.connect(database, isolation_level=None)
    connection.execute(
        "UPDATE meta SET value = value + 60 WHERE key = 'last_sample_s'"
    )  # what an older recorder's next write does to meta
    connection.execute("UPDATE sessions SET last_seen_s = last_seen_s + 60")
    connection.close()
    with reader_at(database, HOUR0 + 33 * MINUTE) as reader:
        assert reader.idle_unknown_count(HOUR0 + 33 * MINUTE) is None
