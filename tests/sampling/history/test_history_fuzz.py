"""A damaged history is one line, never a traceback: `gpumon report` and `gpumon record` run
(as subprocesses) on copies of a small valid history with bytes or pages overwritten, odd
`user_version` values, bytes that are not UTF-8 in the schema, and values of the wrong kind
in `meta`. Seeded: the same files every run."""

from __future__ import annotations

import random
import shutil
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from gpumon.data.idle import IdleRule
from gpumon.sampling.history.writer import HistoryWriter
from gpumon.sources.demo import DemoSource
from tests.commands.test_record_cli import gpumon

SEED = 20261128
PAGE = 4096
#: One damage per file: the kinds the fuzzing of the command line found tracebacks with.
REPORT_DAMAGE = ("version", "version", "utf8", "utf8", "bytes", "bytes", "bytes", "bytes")
REPORT_DAMAGE += ("page", "page", "meta", "meta")
RECORD_DAMAGE = ("version", "utf8", "bytes", "page", "meta")


def small_history(path: Path) -> None:
    """Two minutes of a simulated 2-GPU server (``record --demo`` may write into it)."""
    clock = [1_790_000_000.0]
    source = DemoSource(2, seed=3, process_count=6, clock=lambda: clock[0])
    writer = HistoryWriter(str(path), rule=IdleRule(), interval_s=10, history_days=90)
    try:
        for _ in range(12):
            writer.record(source.sample())
            clock[0] += 10
    finally:
        writer.close()


def damage(path: Path, kind: str, rng: random.Random) -> None:
    if kind in ("bytes", "page"):
        data = bytearray(path.read_bytes())
        if kind == "bytes":
            for _ in range(rng.randint(1, 16)):
                data[rng.randrange(100, len(data))] = rng.randrange(256)
        else:
            page = rng.randrange(len(data) // PAGE)
            data[page * PAGE : (page + 1) * PAGE] = rng.randbytes(PAGE)
        path.write_bytes(bytes(data))
        return
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        if kind == "version":
            value = rng.choice([-80124291, -1, -(2**31), 2**31 - 1, 7])
            connection.execute(f"PRAGMA user_version = {value}")
        elif kind == "utf8":
            column = rng.choice(["sql", "name"])
            connection.execute("PRAGMA writable_schema = ON")
            connection.execute(
                f"UPDATE sqlite_master SET {column} = CAST(x'ff' || CAST({column} AS BLOB) "
                "AS TEXT) WHERE name = ?",
                (rng.choice(["meta", "gpus", "sessions", "usage_hours"]),),
            )
        else:
            value = rng.choice(["'x'", "1e999", "CAST(x'ff00fe' AS TEXT)", "-1"])
            key = rng.choice(["last_sample_s", "first_sample_s", "interval_s", "simulated"])
            connection.execute(f"UPDATE meta SET value = {value} WHERE key = ?", (key,))
    finally:
        connection.close()


@pytest.fixture(scope="module")
def damaged_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    directory = tmp_path_factory.mktemp("fuzz")
    valid = directory / "valid.db"
    small_history(valid)
    rng = random.Random(SEED)
    files: dict[str, list[Path]] = {}
    for command, kinds in (("report", REPORT_DAMAGE), ("record", RECORD_DAMAGE)):
        for number, kind in enumerate(kinds):
            path = directory / f"{command}-{number}-{kind}.db"
            shutil.copy(valid, path)
            damage(path, kind, rng)
            files.setdefault(command, []).append(path)
    return files


def assert_one_line_or_success(command: str, path: Path, status: int, errors: str) -> None:
    lines = [line for line in errors.splitlines() if "recording to" not in line]
    assert "Traceback" not in errors, f"{command} on {path.name}:\n{errors}"
    if status != 0:
        assert status == 1 and len(lines) == 1, f"{command} on {path.name}: {errors}"


def test_report_on_a_damaged_history_is_one_line_or_a_report(
    damaged_files: dict[str, list[Path]],
) -> None:
    runs = [(path, gpumon("report", "--db", str(path), "--since", "30d", "--json"))
            for path in damaged_files["report"]]  # fmt: skip
    for path, process in runs:
        _, errors = process.communicate(timeout=60)
        assert_one_line_or_success("report", path, process.returncode, errors)


@pytest.mark.slow
def test_record_on_a_damaged_history_is_one_line_or_records(
    damaged_files: dict[str, list[Path]],
) -> None:
    runs = [(path, gpumon("record", "--demo", "--db", str(path), "--interval", "0.5"))
            for path in damaged_files["record"]]  # fmt: skip
    time.sleep(3)  # a few samples written, or the one line said
    for path, process in runs:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        _, errors = process.communicate(timeout=60)
        assert_one_line_or_success("record", path, process.returncode, errors)
