"""`gpumon report` says what it does not know: USED where no SM utilisation was known (MIG
instances, boards that do not report it) is N/A, never 0; the history database's coverage
against the period asked for; and the granularity of what it sums."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import jsonschema
import pytest

from gpumon.cli import main
from gpumon.data.idle import IdleRule
from gpumon.sampling.history.writer import HistoryWriter
from tests.ui_helpers import GIB, make_gpu, make_process, make_sample

ROOT = Path(__file__).resolve().parent.parent
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
    assert rows["carol"]["used_known_hours"] == 0.0
    assert rows["dave"]["gpu_hours_used"] == pytest.approx(0.5 * 0.4)  # the known half
    assert rows["dave"]["used_known_hours"] == pytest.approx(0.5)
    assert rows["erin"]["gpu_hours_used"] == pytest.approx(0.5)
    notes = " ".join(document["notes"])
    assert "USED is N/A for carol" in notes and "dave (0.50 of 1.00)" in notes
    assert "erin" not in notes

    status, out, _ = report(capsys, *period, "--color", "never")
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line}
    assert lines["carol"][1:3] == ["1.00", "N/A"]
    assert lines["dave"][1:3] == ["1.00", "0.20"]
    assert "USED is N/A for carol: the SM utilisation of their processes was never known" in out
    assert "USED counts only the GPU-hours whose SM utilisation was known" in out

    status, out, _ = report(capsys, *period, "--csv")
    table = {row["user"]: row for row in csv.DictReader(io.StringIO(out))}
    assert table["carol"]["gpu_hours_used"] == ""
    assert table["dave"]["gpu_hours_used"] == "0.2000"
