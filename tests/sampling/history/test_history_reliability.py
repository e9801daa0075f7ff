"""The history survives what a server does to it: a recorder killed while writing, readers
while it writes, a full disk, a locked, damaged or newer database. Each problem is one line
(the path and what to do); the recorder retries what may pass, and readers keep working."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gpumon.data.idle import IdleRule
from gpumon.sampling.history import live, writer
from gpumon.sampling.history.reader import HistoryError, open_history
from gpumon.sampling.history.recorder import Recorder
from gpumon.sampling.history.writer import HistoryWriter
from tests.sampling.history.test_history_writer import HOUR0, server

ROOT = Path(__file__).resolve().parents[3]
DEMO = ["--demo", "--demo-gpus", "8", "--demo-processes", "512", "--interval", "0.25"]

#: `gpumon record`, saying on stdout when a batch's transaction has begun writing and when it
#: has been committed.
MARKED = textwrap.dedent(
    """
    import sys
    from gpumon.sampling.history import rows, writer

    write_sessions, write = rows.write_sessions, writer.HistoryWriter.write

    def marked_sessions(*args, **kwargs):
        print("writing", flush=True)
        return write_sessions(*args, **kwargs)

    def marked_write(self):
        write(self)
        print("committed", flush=True)

    rows.write_sessions = marked_sessions
    writer.HistoryWriter.write = marked_write
    from gpumon.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


def samples_of_first_gpu(path: Path) -> int:
    """What the recorder has committed: its live database's, not the snapshot's."""
    connection = sqlite3.connect(f"file:{path}.live/history.db?mode=ro", uri=True)
    try:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        (count,) = connection.execute(
            "SELECT coalesce(sum(samples), 0) FROM gpu_minutes WHERE gpu_id = 1"
        ).fetchone()
        return int(count)
    finally:
        connection.close()


@pytest.mark.slow
def test_a_recorder_killed_while_writing_loses_at_most_that_batch(tmp_path: Path) -> None:
    """Ten times: `gpumon record` killed with SIGKILL inside a transaction (at a different
    point of it each time). Each time the file passes integrity_check, holds every batch
    committed before the kill (and at most the one being committed), and the next recorder
    carries on: the same process sessions, not new ones."""
    path = tmp_path / "history.db"
    committed_before = 0
    for attempt in range(10):
        process = subprocess.Popen(
            [sys.executable, "-c", MARKED, "record", *DEMO, "--db", str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert process.stdout is not None
        committed = writings = 0
        try:
            for line in process.stdout:
                committed += line == "committed\n"
                writings += line == "writing\n"
                if writings == 2 + attempt % 3:
                    break
            time.sleep(attempt * 0.0007)  # somewhere inside the transaction's few ms
            process.kill()
        finally:
            process.kill()
            rest, errors = process.communicate(timeout=30)
        committed += rest.count("committed\n")
        assert "Traceback" not in errors
        found = samples_of_first_gpu(path)
        assert committed_before + committed <= found <= committed_before + committed + 1
        committed_before = found
    assert committed_before >= 10
    connection = sqlite3.connect(f"{path}.live/history.db")
    (sessions,) = connection.execute("SELECT count(*) FROM sessions").fetchone()
    connection.close()
    assert 512 <= sessions < 600  # the demo's 512, and the few that came and went
    # A clean stop after all that: exit 0, the snapshot published, nothing left over.
    process = subprocess.Popen(
        [sys.executable, "-c", MARKED, "record", *DEMO, "--db", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == "writing\n"
    process.send_signal(signal.SIGTERM)
    _, errors = process.communicate(timeout=30)
    assert process.returncode == 0, errors
    assert sorted(os.listdir(tmp_path)) == ["history.db", "history.db.live"]
    assert samples_of_first_gpu(path) > committed_before
    with open_history(str(path)) as reader:  # type: ignore[union-attr]
        assert reader.span() is not None


READER = textwrap.dedent(
    """
    import json, sys, time
    from gpumon.sampling.history.reader import open_history

    path, seconds = sys.argv[1], float(sys.argv[2])
    reads, errors, spans = 0, [], []
    started = time.monotonic()
    # At least `seconds`, and until the recorder's progress was seen (a loaded machine).
    while time.monotonic() < started + seconds or (
        len(set(spans)) < 2 and time.monotonic() < started + 30
    ):
        try:
            reader = open_history(path)
            if reader is None:
                time.sleep(0.01)
                continue
            with reader:
                for _ in range(5):
                    span = reader.span()
                    now = time.time()
                    reader.usage(now - 3600, now, "user")
                    for gpu in reader.gpus()[:2]:
                        reader.gpu_series(gpu.uuid, "power_draw_w", now - 600, now)
                    reader.idle_holders(now)
                    reads += 1
                    if span:
                        spans.append(span[1])
        except Exception as error:  # HistoryError, or anything else: all are failures here
            errors.append(f"{type(error).__name__}: {error}")
    summary = {"reads": reads, "errors": errors[:5], "first": spans[:1], "last": spans[-1:]}
    print(json.dumps(summary))
    """
)


#: `gpumon record`, publishing what readers read every half second (not every minute).
PUBLISHING = textwrap.dedent(
    """
    import sys
    from gpumon.sampling.history import live

    live.PUBLISH_S = 0.5
    from gpumon.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.slow
def test_readers_never_see_a_locked_database_while_the_recorder_writes(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    recorder = subprocess.Popen(
        [sys.executable, "-c", PUBLISHING, "record", *DEMO, "--db", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        readers = [
            subprocess.Popen(
                [sys.executable, "-c", READER, str(path), "3"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=ROOT,
            )
            for _ in range(3)
        ]
        results = []
        for reader in readers:
            out, errors = reader.communicate(timeout=60)
            assert reader.returncode == 0, errors
            results.append(json.loads(out))
    finally:
        recorder.send_signal(signal.SIGTERM)
        _, recorder_errors = recorder.communicate(timeout=30)
    assert recorder.returncode == 0, recorder_errors
    for result in results:
        assert result["errors"] == []
        assert result["reads"] >= 10
        assert result["last"][0] > result["first"][0]  # it saw the recorder's new samples


def writer_at(path: Path) -> HistoryWriter:
    return HistoryWriter(str(path), rule=IdleRule(), interval_s=60, history_days=90)


def lines_of(path: Path) -> tuple[Recorder, list[str]]:
    lines: list[str] = []
    return Recorder(writer_at(path), lines.append), lines


def held_hours(path: Path) -> float:
    with open_history(str(path)) as reader:  # type: ignore[union-attr]
        return sum(row.gpu_hours_held for row in reader.usage(HOUR0, HOUR0 + 3600, "gpu"))


def test_a_full_disk_is_one_line_and_nothing_is_lost_once_there_is_room(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    recorder, lines = lines_of(path)
    recorder.sampled(server(0))
    database = recorder.writer._database
    assert database is not None
    # As a full disk: the file may not grow by a page.
    (pages,) = database.connection.execute("PRAGMA page_count").fetchone()
    database.connection.execute(f"PRAGMA max_page_count = {pages}")
    for minute in range(1, 40):
        recorder.sampled(server(minute))
        assert open_history(str(path)) is not None  # readers keep working
    assert len(lines) == 1, lines
    assert lines[0] == (
        f"warning: {path}: the disk is full (database or disk is full): free some space "
        "(or lower --history-days); retrying"
    )
    database.connection.execute("PRAGMA max_page_count = 1000000")
    recorder.sampled(server(40))
    recorder.close()
    assert lines[1:] == [f"recording to {path} again"]
    assert held_hours(path) == pytest.approx(2 * 40 / 60)  # GPUs 0 and 1, all 40 minutes


def test_a_locked_database_is_one_line_and_the_recorder_carries_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A program of the recorder's own user (or root) that locks the live database; other
    users cannot reach it."""
    monkeypatch.setattr(live, "BUSY_TIMEOUT_S", 0.05)
    path = tmp_path / "history.db"
    recorder, lines = lines_of(path)
    recorder.sampled(server(0))
    other = sqlite3.connect(f"{path}.live/history.db", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    for minute in range(1, 4):
        recorder.sampled(server(minute))
    assert held_hours(path) == 0  # readers read what was committed, without waiting
    other.execute("ROLLBACK")
    other.close()
    recorder.sampled(server(4))
    recorder.close()
    assert lines == [
        f"warning: {path} is locked by another program (database is locked): retrying",
        f"recording to {path} again",
    ]
    assert held_hours(path) == pytest.approx(2 * 4 / 60)


def test_a_damaged_file_stops_the_recorder_and_is_one_line_for_readers(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    path.write_bytes(b"this is not SQLite, " * 500)
    recorder, lines = lines_of(path)
    assert not recorder.open()
    advice = f"move it aside (mv {path} {path}.broken)"
    assert lines == [
        f"error: {path} is damaged or not a gpumon history database (file is not a database): "
        f"{advice}; gpumon record starts a new one"
    ]
    assert recorder.failed is not None and not recorder.failed.retry
    with pytest.raises(HistoryError) as raised:
        open_history(str(path))
    assert advice in str(raised.value) and "\n" not in str(raised.value)


def test_a_file_damaged_under_a_reader_is_a_history_error(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    writer = writer_at(path)
    for minute in range(3):
        writer.record(server(minute))
    writer.close()
    reader = open_history(str(path))
    assert reader is not None
    data = bytearray(path.read_bytes())
    data[4096:] = b"\xff" * (len(data) - 4096)  # every page but the first
    path.write_bytes(bytes(data))
    with reader, pytest.raises(HistoryError, match="is damaged or not a gpumon history database"):
        reader.usage(HOUR0, HOUR0 + 3600, "user")


def test_a_wal_that_cannot_be_reset_is_one_line_and_stays_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process of the recorder's own user (or root) holding a read transaction open on
    the live database: the write-ahead log cannot be reset; it grows to a bound, then the
    samples wait in memory, and all of it is back in the history once the reader lets go."""
    monkeypatch.setattr(writer, "WAL_MAX_BYTES", 256 * 1024)
    path = tmp_path / "history.db"
    lines: list[str] = []
    recorder = Recorder(
        HistoryWriter(str(path), rule=IdleRule(), interval_s=60, history_days=90, publish_s=0),
        lines.append,
    )
    recorder.sampled(server(0))
    reader = sqlite3.connect(f"file:{path}.live/history.db?mode=ro", uri=True, isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM sessions").fetchone()
    wal = Path(f"{path}.live/history.db-wal")
    largest = 0
    for minute in range(1, 200):
        recorder.sampled(server(minute))
        largest = max(largest, wal.stat().st_size)
    assert largest < 2 * 256 * 1024
    assert lines[0].startswith(f"warning: the write-ahead log of {path} cannot be reset")
    assert lines[1].startswith(f"warning: {path}: the write-ahead log of the live database is")
    assert lines[1].endswith("the samples wait in memory; retrying")
    assert len(lines) == 2, lines
    reader.close()
    recorder.sampled(server(200))
    recorder.close()
    assert lines[2:] == [f"recording to {path} again", "the write-ahead log is reset again"]
    assert held_hours(path) == pytest.approx(2 * 60 / 60)  # nothing of the hour lost
