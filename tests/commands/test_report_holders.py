"""`gpumon report` rows and idle holders a person can act on: ``--by gpu`` rows carry the GPU's
index and name in index order, and whoever holds memory idle is named with the command (made
safe) and the Slurm job.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import jsonschema
import pytest

from gpumon.cli import main
from gpumon.commands.report_output import render_text
from gpumon.data.periods import Period
from gpumon.data.report import IdleHolder, UsageReport
from tests.support.history_fill import fill

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "gpumon" / "schema" / "report.schema.json").read_text())


@pytest.fixture
def database(tmp_path: Path) -> Path:
    """Recorded up to now: alice's notebook (PID 101, GPU 1) has been idle for an hour."""
    return fill(tmp_path / "history.db", time.time() - 3600)


def report(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["report", *args]) == 0
    return capsys.readouterr().out


def test_gpu_rows_are_named_by_index_and_name_in_index_order(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The GPU held least (2) first in the database's order of hours: index order wins.
    with sqlite3.connect(database) as connection:
        connection.execute("UPDATE gpus SET gpu_index = 2 - gpu_index")
    out = report(capsys, "--db", str(database), "--since", "2h", "--by", "gpu")
    rows = [line for line in out.splitlines() if line[:2] in ("0 ", "1 ", "2 ")]
    assert [row.split("  ")[0] for row in rows] == [f"{n} NVIDIA Test Board" for n in range(3)]
    assert rows[0].split()[4:6] == ["0.50", "0.50"]  # the half-hour GPU, now index 0
    assert "GPU-0000" not in out.split("Holding")[0]
    document = json.loads(
        report(capsys, "--db", str(database), "--since", "2h", "--by", "gpu", "--json")
    )
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    assert [row["gpu_index"] for row in document["rows"]] == [0, 1, 2]
    assert document["rows"][0]["gpu"] == "GPU-00000002-aaaa-bbbb-cccc-dddddddddddd"


def test_an_idle_holder_is_named_with_its_command_made_safe_and_its_job(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with sqlite3.connect(database) as connection:
        connection.execute(
            "UPDATE sessions SET command = ?, job_id = '4242' WHERE pid = 101",
            ("/opt/conda/envs/x/bin/python notebook.py \x1b]52;c;evil\x07",),
        )
    out = report(capsys, "--db", str(database), "--since", "2h")
    holder = out.split("Holding GPU memory idle now:\n", 1)[1].splitlines()[0]
    assert holder.startswith("  alice  GPU 1  PID 101  10.0G  idle 1h00m  job 4242  ")
    assert holder.endswith("python notebook.py ?]52;c;evil?") and "\x1b" not in out
    document = json.loads(report(capsys, "--db", str(database), "--since", "2h", "--json"))
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    (found,) = document["idle_holders"]
    command = "/opt/conda/envs/x/bin/python notebook.py ?]52;c;evil?"  # whole in JSON
    assert (found["job"], found["command"]) == ("4242", command)


def test_a_holder_without_job_or_command_says_neither() -> None:
    holder = IdleHolder("bob", 7, 3, None, 7200.0, 1024**3)
    text = render_text(
        UsageReport(Period(0, 3600), "user", (), (holder,), "history", "/h.db", recording=True),
        ascii_only=True,
    )
    assert "  bob  GPU 3  PID 7  1.0G  idle 2h00m\n" in text
