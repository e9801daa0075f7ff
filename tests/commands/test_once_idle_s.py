"""`gpumon once --json` gives each process's ``idle_s`` from the history database: how long
it has held its memory idle as recorded (tests/support/history_fill.py, recorded until now), 0
when it is not idle, null without a database or where nobody can tell; the schema accepts both.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpumon.cli import main
from gpumon.data.model import Sample
from tests.support.history_fill import fill, sample_at

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "gpumon" / "schema" / "once.schema.json").read_text())


def once_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], sample: Sample, db: Path
) -> tuple[dict[int, Any], str]:
    """``once --json --db DB`` on ``sample``: idle_s by PID, and stderr."""
    import gpumon.sampling.snapshot as snapshot

    monkeypatch.setattr(snapshot, "take_sample", lambda *args, **kwargs: sample)
    assert main(["once", "--json", "--db", str(db)]) == 0
    out, err = capsys.readouterr()
    document = json.loads(out)
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    found = {p["pid"]: p["idle_s"] for gpu in document["gpus"] for p in gpu["processes"]}
    return found, err


def test_idle_s_is_how_long_the_recorder_has_seen_it_quiet(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    start = time.time() - 3600
    database = fill(tmp_path / "history.db", start)
    sample = dataclasses.replace(sample_at(start, 60), timestamp_s=time.time())
    found, err = once_json(monkeypatch, capsys, sample, database)
    assert err == ""
    assert found[101] == pytest.approx(sample.timestamp_s - start)  # quiet since minute 0
    assert found[100] == 0  # busy at 50 %
    assert found[102] == 0  # quiet, but too small to be IDLE


def test_idle_s_is_null_where_nobody_can_tell(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    start = time.time() - 3600
    sample = dataclasses.replace(sample_at(start, 60), timestamp_s=time.time())
    found, _ = once_json(monkeypatch, capsys, sample, tmp_path / "none.db")
    assert set(found.values()) == {None}  # no database
    stopped = fill(tmp_path / "stopped.db", start - 86400)  # the recorder stopped a day ago
    found, _ = once_json(monkeypatch, capsys, sample, stopped)
    assert found == {100: 0, 101: None, 102: None}  # busy now is not idle, whatever was recorded
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"no database here" * 100)
    found, err = once_json(monkeypatch, capsys, sample, broken)
    assert set(found.values()) == {None}
    assert err.count("\n") == 1 and err.startswith("gpumon: warning: idle_s is null: ")
