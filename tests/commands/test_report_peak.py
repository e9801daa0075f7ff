"""`gpumon report`'s PEAK-MEM from the history database is the peak of what ran in the period:
an hour bucket's peak belongs to the whole hour, so in a bucket the period covers in part it
is taken from the processes seen in the period, and the report says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpumon.cli import main
from gpumon.data.idle import IdleRule
from gpumon.sampling.history.writer import HistoryWriter
from tests.commands.test_report_coverage import MINUTE, START
from tests.support.ui_helpers import GIB, make_gpu, make_process, make_sample


@pytest.fixture(scope="module")
def two_jobs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """alice's first job holds 40 GiB from 00:00 to 00:10 UTC; her second 4 GiB from 00:12
    to 01:00 (a sample a minute)."""
    path = tmp_path_factory.mktemp("peak") / "history.db"
    gpu = make_gpu(0)
    writer = HistoryWriter(str(path), rule=IdleRule(), interval_s=MINUTE, history_days=90)
    try:
        for minute in range(61):
            if minute <= 10:
                job = make_process(gpu, 10, user="alice", gpu_memory_bytes=40 * GIB,
                                   sm_utilization_pct=90, create_time_s=START - 60)  # fmt: skip
            elif minute >= 12:
                job = make_process(gpu, 20, user="alice", gpu_memory_bytes=4 * GIB,
                                   sm_utilization_pct=90, create_time_s=START + 700)  # fmt: skip
            else:
                writer.record(make_sample((gpu,), (), timestamp_s=START + minute * MINUTE))
                continue
            writer.record(make_sample((gpu,), (job,), timestamp_s=START + minute * MINUTE))
    finally:
        writer.close()
    return path


def peak(capsys: pytest.CaptureFixture[str], database: Path, start: str, end: str) -> int:
    assert main(["report", "--db", str(database), "--from", start, "--to", end, "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    return int(row["peak_memory_bytes"])


def test_a_peak_from_a_job_that_ended_before_the_period_is_not_its_peak(
    two_jobs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """90 seconds from 00:17: the 40 GiB job ended 7 minutes before; what ran held 4 GiB."""
    assert peak(capsys, two_jobs, "2026-11-02T00:17:00Z", "2026-11-02T00:18:30Z") == 4 * GIB
    # Both jobs in the period, or the whole hour: the 40 GiB are the period's.
    assert peak(capsys, two_jobs, "2026-11-02T00:05:00Z", "2026-11-02T00:20:00Z") == 40 * GIB
    assert peak(capsys, two_jobs, "2026-11-02T00:00:00Z", "2026-11-02T01:00:00Z") == 40 * GIB


def test_the_report_says_where_the_peak_comes_from(
    two_jobs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "--db", str(two_jobs), "--from", "2026-11-02T00:17:00Z",
                 "--to", "2026-11-02T00:18:30Z"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "4.0G" in out and "40.0G" not in out
    assert "PEAK-MEM there: of the processes seen in the period" in out
