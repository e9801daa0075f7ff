"""Who may read and write the history: every user reads it, only the recorder writes it, and
a reader never creates or changes a file.

Run as root, the checks that need an ordinary user run in a forked child that has dropped to
``nobody`` (the modules are already loaded: the child needs no access to the interpreter's
files); run as an ordinary user, they run as that user.
"""

from __future__ import annotations

import os
import pickle
import select
import shutil
import signal
import sqlite3
import stat
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from gpumon.data.idle import IdleRule
from gpumon.sampling.history import files
from gpumon.sampling.history.reader import HistoryError, open_history
from gpumon.sampling.history.writer import HistoryWriter
from tests.sampling.history.test_history_writer import HOUR0, server

T = TypeVar("T")
NOBODY = 65534
#: What the recorder leaves in the history's directory: the snapshot readers read, and its
#: own private directory.
LAYOUT = ["history.db", "history.db.live"]


def as_other_user(call: Callable[[], T]) -> T:
    """``call()`` as a user who owns nothing here: ``nobody`` in a forked child when this is
    root, else this user. An exception comes back as its text, in a RuntimeError."""
    if os.geteuid() != 0:
        return call()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                result: object = ("ok", call())
            except BaseException as error:
                result = ("error", f"{type(error).__name__}: {error}")
            os.write(write, pickle.dumps(result))
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        ready, _, _ = select.select([pipe], [], [], 30)
        if not ready:  # a lock another thread held at the fork: never wait for ever
            os.kill(child, signal.SIGKILL)
        data = pipe.read()
    os.waitpid(child, 0)
    if not data:
        raise RuntimeError("the child running as another user did not answer")
    kind, value = pickle.loads(data)
    if kind == "error":
        raise RuntimeError(value)
    return value


def recorded(path: Path, minutes: int = 3) -> None:
    writer = HistoryWriter(str(path), rule=IdleRule(), interval_s=60, history_days=90)
    try:
        for minute in range(minutes):
            writer.record(server(minute))
    finally:
        writer.close()


def older_recorders(path: Path) -> None:
    """Make ``path`` a database as an older recorder left it: no live directory beside it."""
    shutil.rmtree(f"{path}.live")


def read_everything(path: Path) -> tuple[int, int]:
    """(users in a report, points in a graph), as a reader would."""
    reader = open_history(str(path))
    assert reader is not None
    with reader:
        users = reader.usage(HOUR0, HOUR0 + 3600, "user")
        gpu = reader.gpus()[0].uuid
        points = reader.gpu_series(gpu, "utilization_gpu_pct", HOUR0, HOUR0 + 3600)
    return len(users), len(points)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory every user may enter, as /var/lib/gpumon is (pytest's are private)."""
    directory = Path(tempfile.mkdtemp(prefix="gpumon-history-"))
    os.chmod(directory, 0o755)
    try:
        yield directory
    finally:
        for inside in directory.iterdir():
            if inside.is_dir():
                os.chmod(inside, 0o755)
        shutil.rmtree(directory)


def test_the_recorder_creates_a_directory_and_file_everyone_can_read(tmp_path: Path) -> None:
    path = tmp_path / "state" / "gpumon" / "history.db"
    old = os.umask(0o077)  # a strict umask must not make the history private
    try:
        recorded(path)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o755
    assert sorted(os.listdir(path.parent)) == LAYOUT  # a snapshot: never a -wal beside it
    live = Path(f"{path}.live")
    assert stat.S_IMODE(live.stat().st_mode) == 0o700
    assert sorted(os.listdir(live)) == ["history.db", "recorder.lock"]  # a clean stop


def test_another_user_reads_it_but_cannot_record_into_it(shared: Path) -> None:
    path = shared / "history.db"
    recorded(path)
    before = path.read_bytes()
    assert as_other_user(lambda: read_everything(path)) == (3, 3)
    with pytest.raises(
        RuntimeError,
        match=r"HistoryError: .*history.db: refused: its live directory .*history.db.live "
        r"belongs to root \(uid 0\)",
    ):
        as_other_user(
            lambda: HistoryWriter(str(path), rule=IdleRule(), interval_s=60, history_days=90).open()
        )
    assert path.read_bytes() == before
    assert sorted(os.listdir(shared)) == LAYOUT


def test_readers_read_while_the_recorder_runs_and_after_it_was_killed(shared: Path) -> None:
    """Readers read the snapshot while the recorder runs, and after it was killed: nothing
    of the live database is beside it."""
    path = shared / "history.db"
    writer = HistoryWriter(str(path), rule=IdleRule(), interval_s=60, history_days=90, publish_s=0)
    for minute in range(3):
        writer.record(server(minute))
    assert sorted(os.listdir(shared)) == LAYOUT
    assert as_other_user(lambda: read_everything(path)) == (3, 3)
    assert writer._database is not None
    writer._database.close()  # as after kill -9
    assert as_other_user(lambda: read_everything(path)) == (3, 3)
    assert sorted(os.listdir(shared)) == LAYOUT


def test_a_reader_never_creates_the_database_or_its_directory(tmp_path: Path) -> None:
    path = tmp_path / "nothing" / "history.db"
    assert open_history(str(path)) is None
    assert not path.parent.exists()


def test_a_reader_changes_nothing_and_cannot_write(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    recorded(path)
    before = (path.read_bytes(), path.stat().st_mtime_ns)
    assert read_everything(path) == (3, 3)
    reader = open_history(str(path))
    assert reader is not None
    with reader, pytest.raises(sqlite3.OperationalError, match=r"readonly|read-only|query_only"):
        reader._connection.execute("DELETE FROM meta")
    assert (path.read_bytes(), path.stat().st_mtime_ns) == before
    assert sorted(os.listdir(tmp_path)) == LAYOUT


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o1777])
def test_the_recorder_refuses_a_directory_others_can_write(tmp_path: Path, mode: int) -> None:
    """Sticky too (as /tmp): others cannot replace the database there, but they can put a
    -journal beside it, which SQLite rolls into the database when it opens it."""
    directory = tmp_path / "open"
    directory.mkdir()
    os.chmod(directory, mode)
    writer = HistoryWriter(str(directory / "h.db"), rule=IdleRule(), interval_s=60, history_days=9)
    with pytest.raises(HistoryError) as raised:
        writer.open()
    text = str(raised.value)
    assert text.startswith(
        f"{directory}/h.db: refused: its directory {directory} is writable by other users"
    )
    assert "\n" not in text
    if mode & stat.S_ISVTX:  # never "chmod go-w /tmp"
        assert "chmod" not in text and "a directory of your own" in text
    else:
        assert f"chmod go-w {directory}" in text
    assert not (directory / "h.db").exists()


def test_a_reader_refuses_a_database_in_a_directory_others_can_write(tmp_path: Path) -> None:
    """A database recorded elsewhere and moved to /tmp: what is beside it could be anyone's."""
    directory = tmp_path / "shared-tmp"
    directory.mkdir()
    recorded(directory / "history.db")
    os.chmod(directory, 0o1777)
    with pytest.raises(HistoryError) as raised:
        open_history(str(directory / "history.db"))
    text = str(raised.value)
    assert text.startswith(
        f"{directory}/history.db: refused: its directory {directory} is writable by other users"
    )
    assert "a directory of your own" in text and "\n" not in text
    os.chmod(directory, 0o755)
    assert read_everything(directory / "history.db") == (3, 3)


def hot_journal(database: bytes) -> bytes:
    """A rollback journal that makes SQLite write every page of ``database`` back into the
    file beside it the next time it opens it, as another user could plant one."""
    page_size = int.from_bytes(database[16:18], "big")
    pages = len(database) // page_size
    nonce = 0x5EED
    header = b"\xd9\xd5\x05\xf9\x20\xa1\x63\xd7" + b"".join(
        n.to_bytes(4, "big") for n in (pages, nonce, pages, 512, page_size)
    )
    journal = bytearray(header.ljust(512, b"\0"))
    for number in range(1, pages + 1):
        page = database[(number - 1) * page_size : number * page_size]
        checksum = nonce + sum(page[i] for i in range(page_size - 200, 0, -200))
        journal += number.to_bytes(4, "big") + page + (checksum & 0xFFFFFFFF).to_bytes(4, "big")
    return bytes(journal)


def gpu_names(path: Path) -> list[str]:
    connection = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        return [name for (name,) in connection.execute("SELECT name FROM gpus")]
    finally:
        connection.close()


@pytest.mark.parametrize("opener", ["recorder", "reader"])
def test_a_planted_journal_is_refused_and_never_rolled_into_the_history(
    tmp_path: Path, opener: str
) -> None:
    path = tmp_path / "history.db"
    recorded(path)
    older_recorders(path)  # the recorder reads the file at path only to take it in
    names = gpu_names(path)
    forged = tmp_path / "forged.db"
    shutil.copyfile(path, forged)
    with sqlite3.connect(forged) as connection:
        connection.execute("UPDATE gpus SET name = 'FORGED'")
    connection.close()
    journal = Path(f"{path}-journal")
    journal.write_bytes(hot_journal(forged.read_bytes()))
    os.chmod(journal, 0o666)  # as another user leaves it (root: theirs, too)
    if os.geteuid() == 0:
        os.chown(journal, NOBODY, NOBODY)
    with pytest.raises(HistoryError) as raised:
        if opener == "recorder":
            HistoryWriter(str(path), rule=IdleRule(), interval_s=60, history_days=90).open()
        else:
            open_history(str(path))
    text = str(raised.value)
    assert text.startswith(f"{path}: refused: ") and f"its file {journal}" in text
    assert "\n" not in text
    assert gpu_names(path) == names  # not FORGED


def test_the_recorder_refuses_a_trigger_put_in_the_file(tmp_path: Path) -> None:
    """A trigger would run inside every write the recorder makes (and a reader refuses the
    file anyway): the recorder stops with one line instead of recording into it."""
    path = tmp_path / "history.db"
    recorded(path)
    older_recorders(path)
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("CREATE TRIGGER evil AFTER INSERT ON meta BEGIN DELETE FROM gpus; END")
    connection.close()
    writer = HistoryWriter(str(path), rule=IdleRule(), interval_s=60, history_days=90)
    with pytest.raises(HistoryError) as raised:
        writer.open()
    assert str(raised.value) == (
        f"{path}: refused: not a gpumon history database (it holds the trigger 'evil', which "
        "gpumon never makes): --db chooses another database"
    )
    assert raised.value.retry is False
    assert gpu_names(path) != []
    assert not Path(f"{path}.live/history.db").exists()  # moving path aside starts anew


def test_the_recorder_refuses_a_file_others_can_write_or_own(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    recorded(path)
    older_recorders(path)
    os.chmod(path, 0o666)
    writer = HistoryWriter(str(path), rule=IdleRule(), interval_s=60, history_days=90)
    with pytest.raises(HistoryError, match="the file is writable by other users"):
        writer.open()
    os.chmod(path, 0o644)
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
        with pytest.raises(HistoryError, match=r"the file belongs to another user \(uid 65534\)"):
            writer.open()


@pytest.mark.parametrize("suffix", ["-journal", "-wal", "-shm"])
def test_a_planted_link_beside_the_database_is_refused(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / "history.db"
    recorded(path)
    older_recorders(path)
    os.symlink("/etc/passwd", f"{path}{suffix}")
    writer = HistoryWriter(str(path), rule=IdleRule(), interval_s=60, history_days=90)
    refusal = rf"history\.db: refused: its file .*history\.db{suffix} is a symbolic link"
    with pytest.raises(HistoryError, match=refusal):
        writer.open()
    with pytest.raises(HistoryError, match=refusal):
        open_history(str(path))


def test_one_recorder_per_database(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    first = HistoryWriter(str(path), rule=IdleRule(), interval_s=60, history_days=90)
    first.open()
    second = HistoryWriter(str(path), rule=IdleRule(), interval_s=60, history_days=90)
    with pytest.raises(HistoryError, match=r"another recorder .* is writing it"):
        second.open()
    first.close()
    second.open()  # free again once the first has stopped
    second.close()


def test_a_directory_that_cannot_be_written_is_one_line(shared: Path) -> None:
    """As a read-only file system: the recorder cannot create its file."""
    directory = shared / "mine"
    directory.mkdir()
    if os.geteuid() == 0:
        os.chown(directory, NOBODY, NOBODY)
    os.chmod(directory, 0o555)

    def start() -> None:
        HistoryWriter(
            str(directory / "history.db"), rule=IdleRule(), interval_s=60, history_days=90
        ).open()

    with pytest.raises(RuntimeError) as raised:
        try:
            as_other_user(start)
        except HistoryError as error:  # not root: raised here, not in a child
            raise RuntimeError(f"HistoryError: {error}") from None
    assert str(raised.value) == (
        f"HistoryError: {directory}/history.db.live: cannot create the recorder's directory: "
        "Permission denied (a read-only file system? --db chooses another place)"
    )


def test_history_path_follows_db_and_else_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpumon.config import Settings

    monkeypatch.setenv("XDG_STATE_HOME", "/somewhere/state")
    assert files.history_path(Settings(history_db="/data/h.db")) == "/data/h.db"
    expected = (
        "/var/lib/gpumon/history.db"
        if os.geteuid() == 0
        else ("/somewhere/state/gpumon/history.db")
    )
    assert files.history_path(Settings()) == expected


def test_root_refuses_a_directory_link_another_user_owns(tmp_path: Path) -> None:
    """nobody$ ln -s /root-owned/dir /tmp/lnk; root# gpumon record --db /tmp/lnk/history.db:
    the link's owner could point it at another directory of root's at any time."""
    target = tmp_path / "roots"
    target.mkdir()
    link = tmp_path / "lnk"
    link.symlink_to(target)
    if os.geteuid() == 0:
        os.lchown(link, NOBODY, NOBODY)
        writer = HistoryWriter(
            str(link / "history.db"), rule=IdleRule(), interval_s=60, history_days=9
        )
        with pytest.raises(HistoryError) as raised:
            writer.open()
        assert str(raised.value) == (
            f"{link}/history.db: refused: {link} is a symbolic link that nobody (uid 65534) "
            "owns, who could point it elsewhere (use the real path, or --db elsewhere)"
        )
        assert os.listdir(target) == []  # nothing written through it
        # The same link inside another link's target is found too.
        outer = tmp_path / "outer"
        outer.symlink_to(tmp_path)
        with pytest.raises(HistoryError, match=r"lnk is a symbolic link that nobody"):
            HistoryWriter(
                str(outer / "lnk" / "h.db"), rule=IdleRule(), interval_s=60, history_days=9
            ).open()
        os.lchown(link, 0, 0)
    # A link of root's or one's own is followed.
    recorded(link / "history.db")
    assert sorted(os.listdir(target)) == LAYOUT
