"""No other user can stop, stall or grow the recorder's storage: its live database, the files
beside it and its one-recorder lock are in a directory only it may enter, and readers read a
snapshot it publishes (`history.db`), which they may lock all they like.

The other user is `nobody`, in a forked child that keeps what it opened until the test lets
it go; run as an ordinary user, these tests are skipped.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import select
import shutil
import sqlite3
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpumon.data.idle import IdleRule
from gpumon.data.model import Sample
from gpumon.sampling.history import live
from gpumon.sampling.history.reader import open_history
from gpumon.sampling.history.recorder import Recorder
from gpumon.sampling.history.schema import HistoryError
from gpumon.sampling.history.writer import WAL_LIMIT_BYTES, HistoryWriter
from gpumon.sources.demo import DemoSource
from tests.support import history_synthetic

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="acting as another user (nobody) needs root"
)
NOBODY = 65534
START_S = 1_790_100_000.0  # after the older recorder's day
#: What `nobody` opened, kept open in its process until the test ends.
_KEPT: list[object] = []


@contextlib.contextmanager
def held_by_nobody(hold: Callable[[], object]) -> Iterator[object]:
    """``hold()`` run as nobody in a forked child, which keeps what it opened (in ``_KEPT``)
    until the block ends; yields what it returned (an exception: its text)."""
    ready_read, ready_write = os.pipe()
    done_read, done_write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        try:
            os.close(ready_read)
            os.close(done_write)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                result: object = hold()
            except BaseException as error:
                result = f"{type(error).__name__}: {error}"
            os.write(ready_write, pickle.dumps(result))
            os.close(ready_write)
            select.select([done_read], [], [], 120)
        finally:
            os._exit(0)
    os.close(ready_write)
    os.close(done_read)
    try:
        with os.fdopen(ready_read, "rb") as pipe:
            ready, _, _ = select.select([pipe], [], [], 30)
            data = pipe.read() if ready else b""
        assert data, "the child running as nobody did not answer"
        yield pickle.loads(data)
    finally:
        os.close(done_write)
        os.waitpid(child, 0)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory every user may enter, as /var/lib/gpumon is (pytest's are private)."""
    directory = Path(tempfile.mkdtemp(prefix="gpumon-private-"))
    os.chmod(directory, 0o755)
    try:
        yield directory
    finally:
        shutil.rmtree(directory)


def busy_server() -> Iterator[Sample]:
    """Samples of an 8-GPU server with 512 processes, a minute apart."""
    now = [START_S]
    source = DemoSource(8, seed=5, process_count=512, clock=lambda: now[0], churn=2.0)
    while True:
        yield source.sample()
        now[0] += 60


def writer_at(path: Path, **kwargs: float) -> HistoryWriter:
    return HistoryWriter(str(path), rule=IdleRule(), interval_s=60, history_days=90, **kwargs)


def recorded(path: Path, samples: int = 3) -> None:
    writer = writer_at(path)
    server = busy_server()
    try:
        for _ in range(samples):
            writer.record(next(server))
    finally:
        writer.close()


def lock_everything(path: Path) -> list[str]:
    """What nobody can open and lock of the recorder's files: flock, and a POSIX read lock
    on every byte SQLite locks (the shared-memory file's WAL write lock, byte 120, too)."""
    locked = []
    live = Path(f"{path}.live")
    candidates = [path, live, *(live / name for name in ("history.db", "recorder.lock"))]
    candidates += [live / "history.db-wal", live / "history.db-shm"]
    for candidate in candidates:
        try:
            fd = os.open(candidate, os.O_RDONLY)
        except OSError:
            continue
        _KEPT.append(fd)
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        if candidate.is_file():
            fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 0, 0)  # every byte
        locked.append(candidate.name)
    return locked


def test_nobody_locking_every_file_it_can_open_does_not_stop_the_recorder(shared: Path) -> None:
    path = shared / "history.db"
    recorded(path)
    with held_by_nobody(lambda: lock_everything(path)) as locked:
        assert locked == ["history.db"]  # the snapshot only
        first = writer_at(path)
        first.open()  # not "another recorder is writing it"
        second = writer_at(path)
        with pytest.raises(Exception, match=r"another recorder .* is writing it"):
            second.open()  # a real second recorder is refused still
        first.close()


def test_nobody_cannot_open_the_live_directory(shared: Path) -> None:
    path = shared / "history.db"
    recorded(path)
    live = Path(f"{path}.live")
    assert stat.S_IMODE(live.stat().st_mode) == 0o700

    def look() -> list[str]:
        found = []
        for attempt in (lambda: os.listdir(live), lambda: os.open(live / "history.db", 0)):
            try:
                attempt()
                found.append("opened")
            except PermissionError:
                found.append("refused")
        return found

    with held_by_nobody(look) as found:
        assert found == ["refused", "refused"]


def hold_a_read_transaction(path: Path) -> str:
    """As ``sqlite3 'file:history.db?mode=ro'``, ``BEGIN; SELECT count(*) FROM sessions``
    and sleep; and a POSIX read lock on every byte of the file."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    connection.execute("BEGIN")
    (count,) = connection.execute("SELECT count(*) FROM sessions").fetchone()
    fd = os.open(path, os.O_RDONLY)
    fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 0, 0)
    _KEPT.extend((connection, fd))
    return f"{count} sessions"


def test_a_reader_holding_the_snapshot_neither_stalls_the_recorder_nor_grows_its_wal(
    shared: Path,
) -> None:
    path = shared / "history.db"
    recorded(path)
    live_wal = Path(f"{path}.live/history.db-wal")
    server = busy_server()
    with held_by_nobody(lambda: hold_a_read_transaction(path)) as held:
        assert str(held).endswith("sessions")
        lines: list[str] = []
        recorder = Recorder(writer_at(path, publish_s=0), lines.append)
        largest_wal = 0
        for _ in range(40):
            sample = next(server)
            recorder.sampled(sample)
            largest_wal = max(largest_wal, live_wal.stat().st_size if live_wal.exists() else 0)
            with open_history(str(path)) as reader:  # type: ignore[union-attr]
                span = reader.span()
            assert span is not None and span[1] == sample.timestamp_s  # republished
        recorder.close()
        assert lines == []  # no "database is locked", no WAL that cannot be reset
        assert largest_wal < WAL_LIMIT_BYTES


def test_a_reader_sees_a_sample_within_the_publish_interval(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    now = [0.0]
    writer = writer_at(path, publish_s=60, clock=lambda: now[0])
    server = busy_server()

    def latest() -> float:
        with open_history(str(path)) as reader:  # type: ignore[union-attr]
            span = reader.span()
        assert span is not None
        return span[1]

    first = next(server)
    writer.record(first)
    assert latest() == first.timestamp_s  # the first batch is published at once
    for _ in range(5):
        now[0] += 10
        sample = next(server)
        writer.record(sample)
    assert latest() == first.timestamp_s  # 50 s: readers may see data up to a minute old
    now[0] += 10
    writer.record(later := next(server))
    assert latest() == later.timestamp_s
    writer.close()


def older_recorders_database(path: Path) -> int:
    """A database as an older gpumon's recorder left it when killed: WAL mode, its last
    rows only in the -wal file (beside it, readable by everyone). Returns its sessions."""
    work = path.parent / "work"
    work.mkdir()
    connection = sqlite3.connect(work / "history.db", isolation_level=None)
    history_synthetic.fill(connection, 1_789_948_800, 1, expected=False)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("PRAGMA wal_autocheckpoint = 0")
    connection.execute(
        "INSERT INTO sessions (gpu_id, pid, create_time_s, user, first_seen_s, last_seen_s) "
        "VALUES (1, 4242, 0.0, 'late', 1789990000, 1789990000)"
    )
    (sessions,) = connection.execute("SELECT count(*) FROM sessions").fetchone()
    for name in os.listdir(work):  # as kill -9 leaves them
        shutil.copyfile(work / name, path.parent / name)
        os.chmod(path.parent / name, 0o644)
    connection.close()
    return int(sessions)


def test_an_older_recorders_database_is_taken_in_with_all_its_rows(shared: Path) -> None:
    path = shared / "history.db"
    sessions = older_recorders_database(path)
    assert Path(f"{path}-wal").stat().st_size > 0

    def count() -> int:
        with open_history(str(path)) as reader:  # type: ignore[union-attr]
            return len(reader.usage(1_789_948_800, 1_790_035_200, "job"))

    jobs = count()  # read as it is, through its WAL
    assert jobs > 0

    def lock_the_write_byte() -> str:  # before the upgrade, on the world-readable -shm
        fd = os.open(f"{path}-shm", os.O_RDONLY)
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, 120)
        _KEPT.append(fd)
        return "locked"

    with held_by_nobody(lock_the_write_byte) as held:
        assert held == "locked"
        lines: list[str] = []
        recorder = Recorder(writer_at(path), lines.append)
        assert recorder.open(), lines
        server = busy_server()
        for _ in range(3):
            recorder.sampled(next(server))
        recorder.close()
        assert lines == []
    assert sorted(os.listdir(shared)) == ["history.db", "history.db.live", "work"]
    live = sqlite3.connect(f"{path}.live/history.db")
    try:
        (late,) = live.execute("SELECT count(*) FROM sessions WHERE pid = 4242").fetchone()
        (after,) = live.execute("SELECT count(*) FROM sessions").fetchone()
    finally:
        live.close()
    assert late == 1 and after >= sessions
    assert count() == jobs  # the snapshot holds the older recorder's rows


def test_a_history_too_large_to_copy_every_minute_is_published_less_often(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each publication is a whole copy: past what the hourly write budget allows once a
    minute, publications stretch (and readers are told how far, in the snapshot)."""
    path = tmp_path / "history.db"
    now = [0.0]
    writer = writer_at(path, publish_s=60, clock=lambda: now[0])
    server = busy_server()
    writer.record(next(server))
    size = path.stat().st_size
    assert writer.publish_s == 60  # the default budget copies this every minute
    monkeypatch.setattr(live, "PUBLISH_BYTES_PER_HOUR", size * 4)  # 4 copies an hour
    for _ in range(7):
        now[0] += 10
        writer.record(next(server))  # published at 60 s, then stretched
    assert writer.publish_s >= 12 * 60
    published = path.stat().st_mtime_ns
    for _ in range(60):  # ten more minutes: no publication
        now[0] += 10
        writer.record(next(server))
    assert path.stat().st_mtime_ns == published
    writer.close()


def test_a_failed_first_publication_keeps_what_pruning_goes_by(
    shared: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk right after an older database is taken in: the recorder still knows the
    newest sample the history had, so a clock ahead prunes nothing."""
    path = shared / "history.db"
    older_recorders_database(path)

    def full(self: object) -> None:
        raise HistoryError("no space left", retry=True)

    monkeypatch.setattr(live.WritableHistory, "publish", full)
    writer = writer_at(path)
    with pytest.raises(HistoryError):
        writer.open()
    assert writer.horizon.trusted_s is not None
    monkeypatch.undo()
    writer.close()
