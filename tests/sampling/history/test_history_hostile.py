"""A history database that someone else made: what its strings, its owner or its schema can
do to a reader (``gpumon report``, the dashboard) is one line of refusal, or text with no
escape sequence, and never a reader that spins for ever."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import time
from pathlib import Path

import pytest

from gpumon.cli import main
from gpumon.data.idle import IdleRule
from gpumon.sampling.history import files, reader
from gpumon.sampling.history.reader import HistoryError, open_history
from gpumon.sampling.history.writer import HistoryWriter
from tests.support.ui_helpers import GIB, make_gpu, make_process, make_sample

NOBODY = 65534
#: A user name made to drive the terminal: set its title, reorder the line, open a C1 CSI.
EVIL = "ev\x1b]0;pwned\x07il\u202eusr\x9b31m"
START = 1_793_577_600.0  # 2026-11-02 00:00 UTC
FROM, TO = "2026-11-02T00:00Z", "2026-11-02T01:00Z"
LOOPING_VIEW = (
    "CREATE VIEW usage_hours AS WITH RECURSIVE r(n) AS (SELECT 0 UNION ALL SELECT n + 1 "
    "FROM r) SELECT 0 AS grouping, n AS start_s, 1 AS gpu_id, 'x' AS key, 1.0 AS held_s, "
    "0.0 AS used_s, 0.0 AS known_s, 0.0 AS idle_held_s, 0 AS peak_memory_bytes FROM r"
)


def planted(path: Path) -> Path:
    """An hour in which a user with a hostile name (and job ID) held memory on GPU 1."""
    writer = HistoryWriter(str(path), rule=IdleRule(), interval_s=60.0, history_days=90)
    try:
        for minute in range(60):
            gpus = (make_gpu(0), make_gpu(1))
            process = make_process(
                gpus[1],
                101,
                user=EVIL,
                gpu_memory_bytes=10 * GIB,
                sm_utilization_pct=0,
                create_time_s=START - 10,
                job_id="\x1b[2J\x1b]8;;http://x\x07",
            )
            writer.record(make_sample(gpus, (process,), timestamp_s=START + minute * 60))
    finally:
        writer.close()
    return path


def looping(path: Path) -> Path:
    """The planted database with its hour table swapped for a view that never ends."""
    planted(path)
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("DROP TABLE usage_hours")
    connection.execute(LOOPING_VIEW)
    connection.close()
    return path


def report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["report", *args])
    out, err = capsys.readouterr()
    return status, out, err


def has_control(text: str) -> bool:
    return any(
        (ord(c) < 0x20 and c not in "\r\n") or 0x7F <= ord(c) < 0xA0 or c == "\u202e" for c in text
    )


@pytest.mark.parametrize("output", [[], ["--json"], ["--csv"], ["--by", "job", "--json"]])
def test_a_planted_user_name_prints_no_escape_sequence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output: list[str]
) -> None:
    database = planted(tmp_path / "history.db")
    status, out, err = report(capsys, "--db", str(database), "--from", FROM, "--to", TO, *output)
    assert (status, err) == (0, "")
    assert not has_control(out), repr(out)
    assert "pwned" in out or "--by" in output  # the row is there, made harmless
    if output == ["--json"]:
        # json.dumps would have escaped ESC as \u001b: the decoded text holds none either.
        rows = json.loads(out)["rows"]
        assert all(not has_control(row["user"] or "") for row in rows)


def test_the_readers_idle_holders_and_gpus_hold_safe_text(tmp_path: Path) -> None:
    database = planted(tmp_path / "history.db")
    with open_history(str(database)) as history:  # type: ignore[union-attr]
        holders = history.idle_holders(START + 3600)
        assert holders and all(not has_control(h.user or "") for h in holders)
        assert all(not has_control(h.job_id or "") for h in holders)
        for row in history.usage(START, START + 3600, "job"):
            assert not has_control(row.key or "")


def test_a_database_another_user_owns_is_refused_naming_the_owner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = planted(tmp_path / "history.db")
    os.chown(database, NOBODY, NOBODY)
    if os.geteuid() == NOBODY:  # pragma: no cover - the test runs as root or a user
        pytest.skip("runs as nobody")
    with pytest.raises(HistoryError, match=r"refused: it belongs to nobody \(uid 65534\)"):
        open_history(str(database))
    status, out, err = report(capsys, "--db", str(database), "--from", FROM, "--to", TO)
    assert (status, out) == (1, "")
    assert err.count("\n") == 1 and "belongs to nobody" in err


def test_a_database_others_can_write_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = planted(tmp_path / "history.db")
    os.chmod(database, 0o666)
    status, out, err = report(capsys, "--db", str(database), "--from", FROM, "--to", TO)
    assert (status, out) == (1, "")
    assert err.count("\n") == 1 and "other users can write it" in err


def test_a_recursive_view_is_one_line_and_exit_1_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = looping(tmp_path / "history.db")
    began = time.monotonic()
    status, out, err = report(capsys, "--db", str(database), "--from", FROM, "--to", TO)
    assert time.monotonic() - began < 5
    assert (status, out) == (1, "")
    assert err.count("\n") == 1 and "refused: not a gpumon history database" in err
    assert "view 'usage_hours'" in err


def test_a_read_that_runs_past_the_deadline_gives_up_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever gets past the schema check (a loop, a file far too large) is given up on."""
    database = looping(tmp_path / "history.db")
    monkeypatch.setattr(reader, "check_objects", lambda connection, path: None)
    monkeypatch.setattr(files, "READ_DEADLINE_S", 0.5)
    began = time.monotonic()
    status, out, err = report(capsys, "--db", str(database), "--from", FROM, "--to", TO)
    assert time.monotonic() - began < 5
    assert (status, out) == (1, "")
    assert err.count("\n") == 1 and "gave up reading it after 0.5 s" in err


def test_the_schema_runs_no_function_with_side_effects(tmp_path: Path) -> None:
    database = planted(tmp_path / "history.db")
    history = open_history(str(database))
    assert history is not None
    try:
        connection = history._connection
        assert connection.execute("PRAGMA trusted_schema").fetchone()[0] == 0
    finally:
        history.close()


#: A table name made to set the terminal's title, clear the screen and reverse the line.
HOSTILE_NAME = "\x1b]0;pwned\x07\x1b[2J\u202eevil"


def malformed(path: Path) -> Path:
    """The planted database with a schema row SQLite cannot parse, named ``HOSTILE_NAME``:
    SQLite's own error quotes the name ("malformed database schema (...)")."""
    planted(path)
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA writable_schema = ON")
    connection.execute(
        "INSERT INTO sqlite_master VALUES ('table', ?, ?, 0, 'CREATE TABLE x(')",
        (HOSTILE_NAME, HOSTILE_NAME),
    )
    connection.close()
    return path


def test_a_schema_error_naming_a_hostile_object_prints_no_escape_sequence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The name reaches stderr visibly escaped, and the suggested mv is quoted for the shell
    (the directory has a space)."""
    directory = tmp_path / "gpu history"
    directory.mkdir()
    database = malformed(directory / "history.db")
    status, out, err = report(capsys, "--db", str(database), "--from", FROM, "--to", TO)
    assert (status, out) == (1, "")
    assert err.count("\n") == 1 and not has_control(err), repr(err)
    assert "malformed database schema (?]0;pwned??[2J\\u202eevil)" in err
    assert f"(mv '{database}' '{database}.broken')" in err
    shutil.rmtree(f"{database}.live")  # as an older recorder left it: the recorder takes it in
    writer = HistoryWriter(str(database), rule=IdleRule(), interval_s=60.0, history_days=90)
    with pytest.raises(HistoryError) as raised:
        writer.open()
    assert "malformed database schema" in str(raised.value)
    assert not has_control(str(raised.value)) and not raised.value.retry


def test_a_path_with_escape_sequences_is_shown_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = tmp_path / "x\x1b[31mred\u202e"
    directory.mkdir()
    status, out, err = report(capsys, "--db", str(directory / "none.db"))
    assert (status, out) == (1, "")
    assert not has_control(err) and "x?[31mred\\u202e/none.db: start recording" in err
    broken = directory / "history.db"
    broken.write_bytes(b"this is no database" * 200)
    status, out, err = report(capsys, "--db", str(broken))
    assert (status, out) == (1, "")
    assert err.count("\n") == 1 and not has_control(err), repr(err)
    assert f"{tmp_path}/x?[31mred\\u202e/history.db is damaged" in err
