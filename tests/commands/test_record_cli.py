"""`gpumon record` and `gpumon export --record` from the command line: start-up, signals, and
a database that cannot be used (one line, the right exit status; the exporter serves on)."""

from __future__ import annotations

import configparser
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from gpumon.sampling.history import schema
from tests.commands.export.test_export import scrape

ROOT = Path(__file__).resolve().parents[2]


def gpumon(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "gpumon", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )


def stop(process: subprocess.Popen[str]) -> tuple[int, str]:
    process.send_signal(signal.SIGTERM)
    _, errors = process.communicate(timeout=30)
    return process.returncode, errors


def recorded_samples(path: Path) -> tuple[int, int]:
    """(samples of the first GPU, whether the history is simulated)."""
    connection = sqlite3.connect(path)
    try:
        (samples,) = connection.execute(
            "SELECT sum(samples) FROM gpu_minutes WHERE gpu_id = 1"
        ).fetchone()
        (simulated,) = connection.execute(
            "SELECT value FROM meta WHERE key = 'simulated'"
        ).fetchone()
        return int(samples), int(simulated)
    finally:
        connection.close()


def newer_database(path: Path) -> Path:
    connection = sqlite3.connect(path, isolation_level=None)
    schema.create(connection)
    connection.execute(f"PRAGMA user_version = {schema.SCHEMA_VERSION + 1}")
    connection.close()
    return path


@pytest.mark.parametrize(("flags", "every"), [((), "10 s"), (("--interval", "0.5"), "0.5 s")])
def test_record_says_where_and_how_often_and_stops_on_sigterm(
    tmp_path: Path, flags: tuple[str, ...], every: str
) -> None:
    path = tmp_path / "history.db"
    process = gpumon("record", "--demo", "--db", str(path), *flags)
    assert process.stderr is not None
    banner = process.stderr.readline()
    assert banner == (
        f"gpumon record: recording to {path} every {every} (DEMO: simulated data), minute "
        "rows kept 90 days; Ctrl-C to stop\n"
    )
    assert stop(process) == (0, "")
    samples, simulated = recorded_samples(path)
    assert simulated == 1
    if every == "10 s":
        assert samples == 1  # the first sample at once, the next one not yet


def test_record_demo_needs_its_own_file() -> None:
    process = gpumon("record", "--demo")
    assert process.wait(timeout=30) == 2
    assert process.communicate()[1] == (
        "gpumon record: error: --demo records simulated samples: give them their own file "
        "with --db PATH\n"
    )


@pytest.mark.parametrize("problem", ["damaged", "newer"])
def test_a_database_record_cannot_use_is_one_line_and_exit_1(tmp_path: Path, problem: str) -> None:
    path = tmp_path / "history.db"
    if problem == "damaged":
        path.write_bytes(b"\x00garbage" * 1000)
        expected = f"{path} is damaged or not a gpumon history database"
    else:
        newer_database(path)
        expected = f"{path} was written by a newer gpumon"
    process = gpumon("record", "--demo", "--db", str(path))
    assert process.wait(timeout=30) == 1
    errors = process.communicate()[1]
    assert errors.startswith(f"gpumon record: error: {expected}")
    assert errors.count("\n") == 1 and "Traceback" not in errors


def test_export_record_writes_the_exporters_own_samples(tmp_path: Path) -> None:
    path = tmp_path / "history.db"
    process = gpumon(
        "export",
        "--demo",
        "--demo-gpus",
        "2",
        "--record",
        "--db",
        str(path),
        "--listen",
        "127.0.0.1:0",
        "--interval",
        "0.25",
    )
    assert process.stderr is not None
    banner = process.stderr.readline()
    match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics \(DEMO", banner)
    assert match, banner
    scraped = scrape(int(match.group(1)))
    assert len(scraped["gpumon_gpu_up"]) == 2
    assert scraped["gpumon_history_recording"] == {(): 1.0}
    assert stop(process) == (0, "")
    samples, simulated = recorded_samples(path)  # the last batch is written as it stops
    assert samples >= 1 and simulated == 1


def damaged_database(path: Path, damage: str) -> Path:
    """A history whose version is one no gpumon writes, or whose schema is not UTF-8."""
    newer_database(path)
    connection = sqlite3.connect(path, isolation_level=None)
    if damage == "version":
        connection.execute("PRAGMA user_version = -80124291")
    else:
        connection.execute("PRAGMA user_version = 2")
        connection.execute("PRAGMA writable_schema = ON")
        connection.execute(
            "UPDATE sqlite_master SET name = CAST(x'ff' || CAST(name AS BLOB) AS TEXT) "
            "WHERE name = 'meta'"
        )
    connection.close()
    return path


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("newer", "was written by a newer gpumon"),
        ("version", "is not a gpumon history database (its version is -80124291"),
        ("utf8", "is damaged or not a gpumon history database (its schema is not UTF-8"),
    ],
)
def test_export_serves_on_when_the_history_cannot_be_written(
    tmp_path: Path, damage: str, expected: str
) -> None:
    path = tmp_path / "history.db"
    if damage == "newer":
        newer_database(path)
    else:
        damaged_database(path, damage)
    process = gpumon(
        "export",
        "--demo",
        "--record",
        "--db",
        str(path),
        "--listen",
        "127.0.0.1:0",
    )
    assert process.stderr is not None
    assert process.stderr.readline().startswith(f"gpumon export: error: {path} {expected}")
    assert process.stderr.readline() == "gpumon export: serving without recording\n"
    match = re.search(r"http://127\.0\.0\.1:(\d+)/metrics", process.stderr.readline())
    assert match
    scraped = scrape(int(match.group(1)))
    assert scraped["gpumon_simulated"] == {(): 1.0}
    assert scraped["gpumon_history_recording"] == {(): 0.0}  # what an alert can watch
    assert stop(process) == (0, "")


def test_export_record_demo_needs_its_own_file() -> None:
    process = gpumon("export", "--demo", "--record", "--listen", "127.0.0.1:0")
    assert process.wait(timeout=30) == 2
    assert "--record: --demo records simulated samples" in process.communicate()[1]


def test_the_systemd_unit_records_hardened_into_its_state_directory() -> None:
    """The file system read-only but its state directory (/var/lib/gpumon, root's default
    --db), no new privileges; systemd-analyze finds nothing wrong with it, where it is."""
    unit = ROOT / "contrib" / "systemd" / "gpumon-record.service"
    parser = configparser.ConfigParser(interpolation=None, strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(unit.read_text())
    service = parser["Service"]
    assert service["ExecStart"].split()[1:] == ["record"]
    assert (service["ProtectSystem"], service["NoNewPrivileges"]) == ("strict", "yes")
    assert (service["StateDirectory"], service["StateDirectoryMode"]) == ("gpumon", "0755")
    assert parser["Install"]["WantedBy"] == "multi-user.target"
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        return
    result = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    problems = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if line.strip() and "is not executable" not in line  # gpumon is not installed here
    ]
    assert problems == []


@pytest.mark.slow
def test_sigterm_stops_record_at_once_while_another_program_holds_the_database_locked(
    tmp_path: Path,
) -> None:
    """The writes are on the recorder's own thread: a lock held elsewhere (here BEGIN
    EXCLUSIVE, longer than SQLite's 5 s busy timeout) delays neither the stop nor the
    samples (it was 17 s to stop when the loop itself wrote)."""
    import time

    path = tmp_path / "history.db"
    process = gpumon("record", "--demo", "--db", str(path), "--interval", "0.25")
    assert process.stderr is not None
    assert process.stderr.readline().startswith("gpumon record: recording to")
    time.sleep(0.5)
    # Only the recorder's own user (or root) can reach its live database.
    other = sqlite3.connect(f"{path}.live/history.db", isolation_level=None, timeout=10)
    try:
        other.execute("BEGIN EXCLUSIVE")
        time.sleep(1.5)  # the writer now waits on the lock, with samples queued behind it
        began = time.monotonic()
        status, errors = stop(process)
        took = time.monotonic() - began
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert status == 0
    assert took < 3.0, f"took {took:.1f} s to stop"
    assert errors.endswith(
        f"gpumon record: warning: stopped before the last sample was written: {path} is "
        "busy (another program holds it locked?)\n"
    )
    assert "Traceback" not in errors


def test_record_demo_is_refused_into_the_default_path_given_with_db(tmp_path: Path) -> None:
    """--db naming the system's database (the one every reader falls back to) is the real
    history too."""
    import os

    from gpumon.config.files import default_history_path

    system = default_history_path({}, 0)
    existed = os.path.exists(system)
    process = gpumon("record", "--demo", "--db", system)
    assert process.wait(timeout=30) == 2
    assert process.communicate()[1] == (
        "gpumon record: error: --demo records simulated samples: give them their own file "
        "with --db PATH\n"
    )
    assert os.path.exists(system) is existed  # nothing created there
