"""`gpumon report` on a history database the recorder's own writer filled with an hour a person
can check by hand (tests/support/history_fill.py): the text with its bars, JSON that the published
schema accepts, CSV a spreadsheet reads safely; the period's arguments; and one line, exit 1,
where there is no database or one gpumon cannot read.
"""

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
from gpumon.commands.report_output import render_csv, render_text, report_to_dict
from gpumon.data.periods import Period, PeriodError, moment, period, span_seconds
from gpumon.data.report import UsageReport
from gpumon.data.usage import UsageRow
from tests.support.history_fill import EXPECTED, fill

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "gpumon" / "schema" / "report.schema.json").read_text())
#: 2026-11-02 00:00 UTC: the filled hour starts here.
START = 1_793_577_600.0
FROM, TO = "2026-11-02T00:00Z", "2026-11-02T02:00Z"


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fill(tmp_path_factory.mktemp("history") / "history.db", START)


def report(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["report", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_the_json_has_each_users_hours_as_counted_by_hand(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, err = report(capsys, "--db", str(database), "--from", FROM, "--to", TO, "--json")
    assert (status, err) == (0, "")
    document = json.loads(out)
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    assert document["source"] == "history" and document["database"] == str(database)
    assert (document["from"], document["to"]) == (
        "2026-11-02T00:00:00.000Z",
        "2026-11-02T02:00:00.000Z",
    )
    rows = {row["user"]: row for row in document["rows"]}
    assert [row["user"] for row in document["rows"]] == ["alice", "bob"]  # most held first
    for user, (held, used, idle, peak, processes) in EXPECTED.items():
        row = rows[user]
        assert row["gpu_hours_held"] == pytest.approx(held)
        assert row["gpu_hours_used"] == pytest.approx(used)
        assert row["idle_held_hours"] == pytest.approx(idle)
        assert (row["peak_memory_bytes"], row["processes"], row["node"]) == (peak, processes, None)
    # Recorded long ago, the recorder stopped: who is idle now is unknown, not "nobody".
    assert document["idle_holders"] is None and document["recording"] is False
    assert (document["recorded_from"], document["recorded_to"]) == (
        "2026-11-02T00:00:00.000Z",
        "2026-11-02T01:00:00.000Z",
    )


@pytest.mark.parametrize(
    ("by", "expected"),
    [
        ("job", {"81234": 1.0, None: 1.5}),
        ("container", {"c0ffee": 0.5, None: 2.0}),
        ("gpu", {f"GPU-{n:08x}-aaaa-bbbb-cccc-dddddddddddd": h for n, h in enumerate((1, 1, 0.5))}),
    ],
)
def test_other_groupings_key_each_row_by_their_own_name(
    database: Path, capsys: pytest.CaptureFixture[str], by: str, expected: dict[Any, float]
) -> None:
    argv = ["--db", str(database), "--from", FROM, "--to", TO, "--by", by, "--json"]
    status, out, _ = report(capsys, *argv)
    assert status == 0
    document = json.loads(out)
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    held = {row[by]: row["gpu_hours_held"] for row in document["rows"]}
    assert held == pytest.approx(expected)


def test_the_text_has_a_bar_per_row_on_one_scale(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = report(capsys, "--db", str(database), "--from", FROM, "--to", TO)
    assert status == 0
    lines = out.splitlines()
    assert lines[0] == "GPU usage by user, 2026-11-02 00:00 to 2026-11-02 02:00 (2h00m, local time)"
    assert lines[1] == f"from the history database {database}"
    alice = next(line for line in lines if line.startswith("alice"))
    bob = next(line for line in lines if line.startswith("bob"))
    assert alice.split()[1:6] == ["2.00", "0.50", "0.77", "20.0G", "3"]
    # 24 cells piped: alice's 2 GPU-hours fill them (6 used, 9 idle); bob's half hour, 6 used.
    assert alice.endswith("  " + "█" * 6 + "▒" * 9 + "░" * 9)
    assert bob.endswith("  " + "█" * 6)
    assert lines[2].startswith("recorded from ") and lines[2].endswith("; the recorder is stopped")
    assert "Who holds GPU memory idle now is unknown: the recorder has not written since " in out
    assert "Nobody holds GPU memory idle now." not in lines
    assert "\x1b[" not in out  # piped: no colours


def test_colours_follow_the_color_option_and_mark_your_own_row(
    database: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["--db", str(database), "--from", FROM, "--to", TO]
    monkeypatch.setattr("getpass.getuser", lambda: "alice")
    _, out, _ = report(capsys, *argv, "--color", "always")
    alice = next(line for line in out.splitlines() if "alice" in line)
    assert alice.startswith("\x1b[1malice") and "\x1b[32m" + "█" * 6 + "\x1b[0m" in alice
    monkeypatch.setenv("FORCE_COLOR", "1")
    _, out, _ = report(capsys, *argv, "--color", "never")
    assert "\x1b[" not in out


def test_a_narrow_terminal_cuts_names_and_keeps_every_line_within_it() -> None:
    rows = tuple(
        UsageRow(f"a-very-long-user-name-{n}", 10.0 - n, 1.0, 2.0, 1024**3, 1) for n in range(3)
    )
    text = render_text(
        UsageReport(Period(START, START + 3600), "user", rows, (), "history", "/h.db"),
        width=60,
        ascii_only=True,
    )
    table = [line for line in text.splitlines() if line.startswith("a-very")]
    assert len(table) == 3 and all(len(line) <= 60 for line in table)
    assert all("~" in line and "#" in line for line in table)  # cut, with an ASCII bar


def test_the_csv_is_a_plain_table_with_formulas_defused(
    database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = report(capsys, "--db", str(database), "--from", FROM, "--to", TO, "--csv")
    assert status == 0
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == [
        "user", "gpu_hours_held", "gpu_hours_used", "idle_held_hours", "peak_memory_bytes",
        "processes", "simulated",
    ]  # fmt: skip
    assert rows[1] == ["alice", "2.0000", "0.5000", "0.7667", str(20 * 1024**3), "3", "0"]
    assert rows[2] == ["bob", "0.5000", "0.5000", "0.0000", str(8 * 1024**3), "1", "0"]
    hostile = (
        UsageRow('=HYPERLINK("http://x")', 1.0, 0.0, 0.0, None, 1),
        UsageRow("-2+3", 1.0, 0.0, 0.0, None, 1),
        UsageRow("@SUM(A1)", 1.0, 0.0, 0.0, None, 1),
        UsageRow(None, 1.0, 0.0, 0.0, None, 1),
    )
    text = render_csv(UsageReport(Period(0, 3600), "user", hostile, (), "history", "/h.db"))
    cells = [row[0] for row in csv.reader(io.StringIO(text))][1:]
    assert cells == ['\'=HYPERLINK("http://x")', "'-2+3", "'@SUM(A1)", ""]


def test_current_idle_holders_follow_the_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Recorded up to now: alice's notebook has been quiet since the hour began."""
    start = time.time() - 3600
    database = fill(tmp_path / "history.db", start)
    status, out, _ = report(capsys, "--db", str(database), "--since", "2h")
    assert status == 0
    holders = out.split("Holding GPU memory idle now:\n", 1)[1].splitlines()
    assert len(holders) == 1
    assert holders[0].startswith("  alice  GPU 1  PID 101  10.0G  idle 1h00m")
    _, out, _ = report(capsys, "--db", str(database), "--since", "2h", "--json")
    document = json.loads(out)
    jsonschema.Draft202012Validator(SCHEMA).validate(document)
    (holder,) = document["idle_holders"]
    assert (holder["user"], holder["gpu"], holder["pid"]) == ("alice", 1, 101)
    assert holder["idle_s"] == pytest.approx(time.time() - start, abs=60)


def test_no_database_is_one_line_on_how_to_start_recording(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "none.db"
    status, out, err = report(capsys, "--db", str(missing))
    assert (status, out) == (1, "")
    assert err.count("\n") == 1
    assert str(missing) in err and "gpumon record" in err


def test_a_database_of_a_newer_gpumon_is_one_line(
    database: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    newer = tmp_path / "newer.db"
    newer.write_bytes(database.read_bytes())
    with sqlite3.connect(newer) as connection:
        connection.execute("PRAGMA user_version = 999")
    status, out, err = report(capsys, "--db", str(newer))
    assert (status, out) == (1, "")
    assert err.count("\n") == 1 and err.startswith("gpumon: error: ") and str(newer) in err


def test_a_history_of_simulated_gpus_is_labelled_in_every_output(
    database: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``gpumon record --demo`` marks its database; a report read from it says DEMO."""
    demo = tmp_path / "demo.db"
    demo.write_bytes(database.read_bytes())
    with sqlite3.connect(demo) as connection:
        connection.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('simulated', 1)")
    window = ("--db", str(demo), "--from", FROM, "--to", TO)
    status, text, _ = report(capsys, *window)
    assert status == 0 and "DEMO (simulated data)" in text.splitlines()[0]
    status, out, _ = report(capsys, *window, "--json")
    assert status == 0 and json.loads(out)["simulated"] is True
    status, out, _ = report(capsys, *window, "--csv")
    assert {row[-1] for row in csv.reader(io.StringIO(out))} == {"simulated", "1"}
    status, out, _ = report(capsys, "--db", str(database), "--from", FROM, "--to", TO, "--json")
    assert json.loads(out)["simulated"] is False
    status, text, _ = report(capsys, "--db", str(database), "--from", FROM, "--to", TO)
    assert "DEMO" not in text


def test_a_file_that_is_no_database_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"not a database at all" * 100)
    status, out, err = report(capsys, "--db", str(broken), "--csv")
    assert (status, out) == (1, "")
    assert err.count("\n") == 1 and "Traceback" not in err


# --- the period ------------------------------------------------------------------------------


def test_spans_read_as_seconds() -> None:
    assert [span_seconds(t) for t in ("90s", "30m", "12h", "7d", "2w")] == [
        90, 1800, 43200, 604800, 1209600,
    ]  # fmt: skip
    for bad in ("", "7", "d", "-1d", "1.5h", "7 days", "0s", "999w"):
        with pytest.raises(PeriodError):
            span_seconds(bad)


def test_times_are_local_unless_they_say_otherwise(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "EST+5")  # five hours behind UTC, no summer time
    time.tzset()
    assert moment("2026-11-01") == moment("2026-11-01T05:00Z")
    assert moment("2026-11-01T08:00") == moment("2026-11-01T13:00Z")
    assert moment("2026-11-01T08:00+02:00") == moment("2026-11-01T06:00Z")
    assert moment("2026-11-01 08:00:30z") == 1_793_520_030.0
    for bad in ("yesterday", "2026-13-01", "01/11/2026", "2026-11-01T25:00", "\uff12026-11-01"):
        with pytest.raises(PeriodError):
            moment(bad)


def test_the_period_of_each_way_to_give_it() -> None:
    now = moment("2026-11-08T12:00Z")
    assert period(now) == Period(now - 7 * 86400, now)
    assert period(now, since="12h") == Period(now - 43200, now)
    assert period(now, start="2026-11-01T12:00Z") == Period(now - 7 * 86400, now)
    assert period(now, start="2026-11-01Z", end="2026-11-02Z").seconds == 86400
    assert period(now, end="2026-11-02Z", since="1d").end_s == moment("2026-11-02Z")
    assert period(now, start="2026-11-08Z", end="2027-01-01Z").end_s == now  # never the future
    for wrong in (
        {"since": "1d", "start": "2026-11-01"},
        {"start": "2026-11-02Z", "end": "2026-11-01Z"},
        {"start": "2026-11-09Z"},
        {"start": "2024-01-01Z"},
    ):
        with pytest.raises(PeriodError):
            period(now, **wrong)


def test_a_bad_period_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = report(capsys, "--since", "forever")
    assert (status, out) == (2, "")
    assert "90s, 30m, 12h or 7d" in err and err.count("\n") == 1


def test_the_documented_example_is_what_the_schema_accepts() -> None:
    """docs/json-schema.md's report example validates, and has every field of a row."""
    import re

    docs = (ROOT / "docs" / "json-schema.md").read_text()
    match = re.search(r"## `gpumon report --json`.*?```json\n(.*?)\n```", docs, re.DOTALL)
    assert match is not None, "docs/json-schema.md has no report example"
    example = json.loads(match.group(1))
    jsonschema.Draft202012Validator(SCHEMA).validate(example)
    fields = set(report_to_dict(UsageReport(Period(0, 1), "user", (), (), "history", "x")))
    assert set(example) == fields
