"""`gpumon report` says what it does not know: USED where no SM utilisation was known (MIG
instances, boards that do not report it) is N/A, never 0; the history database's coverage
against the period asked for; and the granularity of what it sums."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpumon.cli import main
from gpumon.data.idle import IdleRule
from gpumon.data.model import GpuProcess
from gpumon.sampling.history.writer import HistoryWriter
from tests.support.ui_helpers import GIB, make_gpu, make_process, make_sample

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "gpumon" / "schema" / "report.schema.json").read_text())
#: 2026-11-02 00:00 UTC.
START = 1_793_577_600.0
MINUTE = 60.0
FROM, TO = "2026-11-02T00:00Z", "2026-11-02T02:00Z"


def record_mig_hour(path: Path) -> Path:
    """An hour, a sample a minute: carol on a MIG slice (SM utilisation N/A all along),
    dave at N/A for the first 30 minutes, then 40 %; erin at 50 % all along."""
    gpus = tuple(make_gpu(index) for index in range(3))
    writer = HistoryWriter(str(path), rule=IdleRule(), interval_s=MINUTE, history_days=90)
    try:
        for minute in range(61):
            processes = (
                make_process(gpus[0], 10, user="carol", gpu_memory_bytes=4 * GIB,
                             sm_utilization_pct=None, create_time_s=START - 60),
                make_process(gpus[1], 20, user="dave", gpu_memory_bytes=4 * GIB,
                             sm_utilization_pct=None if minute <= 30 else 40,
                             create_time_s=START - 60),
                make_process(gpus[2], 30, user="erin", gpu_memory_bytes=4 * GIB,
                             sm_utilization_pct=50, create_time_s=START - 60),
            )  # fmt: skip
            writer.record(make_sample(gpus, processes, timestamp_s=START + minute * MINUTE))
    finally:
        writer.close()
    return path


@pytest.fixture(scope="module")
def mig_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record_mig_hour(tmp_path_factory.mktemp("mig") / "history.db")


def report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["report", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_unknown_sm_utilisation_is_never_zero_used(
    mig_database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    period = ("--db", str(mig_database), "--from", FROM, "--to", TO)
    status, out, err = report(capsys, *period, "--json")
    assert (status, err) == (0, "")
    document = json.loads(out)
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    rows = {row["user"]: row for row in document["rows"]}
    assert rows["carol"]["gpu_hours_held"] == pytest.approx(1.0)
    assert rows["carol"]["gpu_hours_used"] is None  # not 0.0
    assert rows["carol"]["idle_held_hours"] is None  # judged from it: not 0.0 either
    assert rows["erin"]["idle_held_hours"] == 0.0  # known, and busy
    assert rows["carol"]["used_known_hours"] == 0.0
    assert rows["dave"]["gpu_hours_used"] == pytest.approx(0.5 * 0.4)  # the known half
    assert rows["dave"]["used_known_hours"] == pytest.approx(0.5)
    assert rows["erin"]["gpu_hours_used"] == pytest.approx(0.5)
    notes = " ".join(document["notes"])
    assert "USED is N/A for carol" in notes and "dave (0.50 of 1.00)" in notes
    assert "erin" not in notes

    status, out, _ = report(capsys, *period, "--color", "never")
    assert status == 0
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line}
    assert lines["carol"][1:4] == ["1.00", "N/A", "N/A"]
    assert lines["dave"][1:3] == ["1.00", "0.20"]
    assert "USED is N/A for carol: the SM utilisation of their processes was never known" in out
    assert "USED counts only the GPU-hours whose SM utilisation was known" in out

    status, out, _ = report(capsys, *period, "--csv")
    assert status == 0
    table = {row["user"]: row for row in csv.DictReader(io.StringIO(out))}
    assert table["carol"]["gpu_hours_used"] == "" and table["carol"]["idle_held_hours"] == ""
    assert table["dave"]["gpu_hours_used"] == "0.2000"


def test_a_period_with_nothing_recorded_is_one_line_and_exit_1(
    mig_database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A week before recording began: not "nobody used the GPUs" (exit 0, no rows), but one
    line that says what the database covers, exit 1, nothing on stdout (JSON included)."""
    for output in ((), ("--json",), ("--csv",)):
        status, out, err = report(
            capsys, "--db", str(mig_database), "--from", "2026-10-01T00:00Z",
            "--to", "2026-10-08T00:00Z", *output,
        )  # fmt: skip
        assert (status, out) == (1, "")
        assert err.startswith("gpumon: nothing recorded from ") and err.count("\n") == 1
        assert f"the history database {mig_database} covers " in err and err.endswith(" only\n")


def test_a_period_covered_in_part_says_which_part(
    mig_database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = report(
        capsys, "--db", str(mig_database), "--from", "2026-11-01T22:00Z", "--to", TO, "--json"
    )
    assert status == 0
    document = json.loads(out)
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    assert document["recorded_from_s"] == START and document["recorded_to_s"] == START + 3600
    notes = "\n".join(document["notes"])
    assert "the 2h00m before it are not in the database (counted as nothing)" in notes
    assert "the 1h00m after it are not in the database" in notes


def record_recently(path: Path, now: float, *processes: GpuProcess) -> None:
    """A recorder at a 10 s interval that wrote ``processes`` on GPU 0 over the last 30 s."""
    writer = HistoryWriter(str(path), rule=IdleRule(), interval_s=10.0, history_days=90)
    try:
        for back in (30, 20, 10, 0):
            writer.record(make_sample((make_gpu(0),), processes, timestamp_s=now - back))
    finally:
        writer.close()


def test_nobody_idle_now_only_while_the_recorder_writes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A recorder that wrote a moment ago: "Nobody holds GPU memory idle now." (JSON [] and
    recording true); the same file read after it stopped: unknown since its last sample."""
    path = tmp_path / "history.db"
    now = time.time()
    gpu = make_gpu(0)
    busy = make_process(gpu, 10, user="erin", sm_utilization_pct=90, create_time_s=now - 99)
    record_recently(path, now, busy)
    status, out, _ = report(capsys, "--db", str(path), "--since", "1h")
    assert status == 0 and "Nobody holds GPU memory idle now." in out
    assert "; the recorder is writing" in out
    status, out, _ = report(capsys, "--db", str(path), "--since", "1h", "--json")
    assert status == 0
    document = json.loads(out)
    assert document["idle_holders"] == [] and document["recording"] is True

    later = now + 600  # ten minutes on, the recorder stopped
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "time", lambda: later)
        status, out, _ = report(capsys, "--db", str(path), "--since", "1h")
    assert status == 0 and "Nobody holds GPU memory idle now." not in out
    assert "Who holds GPU memory idle now is unknown: the recorder has not written since " in out


def test_memory_held_with_no_sm_reading_is_not_nobody_idle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A process on a MIG slice holds 8 GiB with no SM utilisation reading: whether it is
    idle is unknown, so the report does not say that nobody holds memory idle."""
    path = tmp_path / "history.db"
    now = time.time()
    busy = make_process(make_gpu(0), 11, user="finn", sm_utilization_pct=80, create_time_s=now)
    record_mig_holder(path, now, busy)
    out, document = text_and_json_reports(capsys, path)
    assert (
        "Nobody is known to hold GPU memory idle now: 1 process holds GPU memory with no SM "
        "utilisation reading (MIG, or no sample from the driver), so whether it is idle is unknown."
    ) in out
    assert document["idle_holders"] == [] and document["idle_unknown_processes"] == 1
    later = now + 600  # the recorder stopped: unknown altogether, not a count
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "time", lambda: later)
        _, out, _ = report(capsys, "--db", str(path), "--since", "1h", "--json")
    assert json.loads(out)["idle_unknown_processes"] is None


def test_a_database_an_older_recorder_writes_does_not_say_nobody_is_idle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The recorder is an older gpumon (no idle_unknown column): it does not mark processes
    with no SM reading, so the report cannot say that nobody holds memory idle, and its JSON
    count is null, not 0."""
    path = tmp_path / "history.db"
    record_mig_holder(path, time.time())
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("ALTER TABLE sessions DROP COLUMN idle_unknown")  # an older recorder's
    connection.close()
    out, document = text_and_json_reports(capsys, path)
    assert (
        "Nobody is known to hold GPU memory idle now: the recorder (an older gpumon) does not "
        "mark processes that hold GPU memory with no SM utilisation reading"
    ) in out
    assert document["idle_holders"] == [] and document["idle_unknown_processes"] is None


def record_mig_holder(path: Path, now: float, *others: GpuProcess) -> None:
    """Record, as the recorder would have just now, erin's process holding 8 GiB on a MIG
    slice (no SM utilisation reading), beside ``others``."""
    mig = make_process(
        make_gpu(0), 10, user="erin", sm_utilization_pct=None, gpu_memory_bytes=8 * 1024**3,
        create_time_s=now - 99,
    )  # fmt: skip
    record_recently(path, now, mig, *others)


def text_and_json_reports(
    capsys: pytest.CaptureFixture[str], path: Path
) -> tuple[str, dict[str, Any]]:
    """The last hour's report of ``path`` as text (which never says that nobody holds memory
    idle) and as JSON (valid by the schema)."""
    status, out, _ = report(capsys, "--db", str(path), "--since", "1h")
    assert status == 0 and "Nobody holds GPU memory idle now." not in out
    status, text, _ = report(capsys, "--db", str(path), "--since", "1h", "--json")
    document = json.loads(text)
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    return out, document


def test_a_period_inside_an_hour_counts_only_when_processes_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """alice ran 00:00 to 00:10 UTC, bob all the hour: a report of 00:30 to 00:35 does not
    credit alice a share of her hour (it did: 0.01 held, spread over the hour), and says 5
    minutes of it are estimated from a partly covered hour."""
    path = tmp_path / "history.db"
    gpus = (make_gpu(0), make_gpu(1))
    writer = HistoryWriter(str(path), rule=IdleRule(), interval_s=MINUTE, history_days=90)
    try:
        for minute in range(121):
            processes = [make_process(gpus[1], 20, user="bob", sm_utilization_pct=80,
                                      create_time_s=START - 60)]  # fmt: skip
            if minute <= 10:
                processes.append(make_process(gpus[0], 10, user="alice", sm_utilization_pct=90,
                                              create_time_s=START - 60))  # fmt: skip
            writer.record(make_sample(gpus, tuple(processes), timestamp_s=START + minute * MINUTE))
    finally:
        writer.close()
    since = ("--db", str(path), "--from", "2026-11-02T00:30Z", "--to", "2026-11-02T00:35Z")
    status, out, _ = report(capsys, *since, "--json")
    assert status == 0
    document = json.loads(out)
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    assert [row["user"] for row in document["rows"]] == ["bob"]
    # Bob held GPU 1 all of hour 0 (the sample at 01:00 closes its last minute): 5 minutes.
    assert document["rows"][0]["gpu_hours_held"] == pytest.approx(5 / 60)
    assert (document["bucket_s"], document["prorated_s"]) == (3600, 300.0)
    assert document["days_before_s"] < START  # days are kept before history_days only
    status, out, _ = report(capsys, *since)
    assert status == 0
    assert "counted in UTC hours; 5m of the period is in partly covered buckets" in out
    # Whole UTC hours: nothing estimated.
    status, out, _ = report(capsys, "--db", str(path), "--from", FROM, "--to", TO, "--json")
    assert status == 0
    assert json.loads(out)["prorated_s"] == 0.0
    status, out, _ = report(capsys, "--db", str(path), "--from", FROM, "--to", TO)
    assert status == 0
    assert "\ncounted in UTC hours\n" in out


def test_a_local_day_of_rolled_up_days_counts_the_job_not_a_share_of_utc_days(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An 8-hour job 09:00 to 17:00 at UTC-7 (16:00 to 24:00 UTC), rolled into a UTC day row
    100 days later: the report of that local day (07:00 UTC to 07:00 UTC) says 8 GPU-hours
    (it said 5.67: 17/24 of the UTC day) and that it is counted in UTC days there."""
    path = tmp_path / "history.db"
    gpu = make_gpu(0)
    begin = 1_784_131_200.0  # 2026-07-15 16:00 UTC
    writer = HistoryWriter(str(path), rule=IdleRule(), interval_s=MINUTE, history_days=90)
    try:
        for minute in range(8 * 60 + 1):
            job = make_process(gpu, 10, user="alice", sm_utilization_pct=100,
                               create_time_s=begin - 10)  # fmt: skip
            writer.record(make_sample((gpu,), (job,), timestamp_s=begin + minute * MINUTE))
        later = begin + 100 * 86400  # a day recorded there (a clock jump alone prunes nothing)
        for minute in range(0, 24 * 60 + 3, 3):  # rolls up
            writer.record(make_sample((gpu,), (), timestamp_s=later + minute * MINUTE))
    finally:
        writer.close()
    day = ("--db", str(path), "--from", "2026-07-15T00:00-07:00", "--to", "2026-07-16T00:00-07:00")
    status, out, _ = report(capsys, *day, "--json")
    assert status == 0
    document = json.loads(out)
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    (alice,) = document["rows"]
    assert alice["gpu_hours_held"] == pytest.approx(8.0, abs=0.02)
    assert document["bucket_s"] == 86400 and document["prorated_s"] == 86400.0
    assert document["days_before_s"] is not None and document["days_before_s"] > begin
    status, out, _ = report(capsys, *day)
    assert status == 0
    assert "counted in UTC hours (UTC days before " in out
