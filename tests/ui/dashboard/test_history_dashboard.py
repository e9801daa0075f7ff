"""The dashboard with a history database (tests/support/history_fill.py, recorded up to now): idle
durations as recorded, ``U``'s GPU-hours per user, ``[`` and ``]`` through the GPU detail's
spans; and without one (or with one gpumon cannot read) everything as before, the help saying
how to start recording, at most one notice.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sqlite3
import time
from pathlib import Path

import pytest
from textual.pilot import Pilot

from gpumon.config import Settings
from gpumon.data.model import Sample
from gpumon.ui.dashboard.app import GpumonApp
from gpumon.ui.dashboard.gpu_detail import GpuDetailScreen
from gpumon.ui.dashboard.help import DashboardHelpScreen
from gpumon.ui.dashboard.usage_screen import UsageScreen
from tests.sources.nvml.test_nvml_source import FakeClock
from tests.support.history_fill import MINUTE, fill, sample_at
from tests.support.ui_helpers import app_for, screen_text


@pytest.fixture
def recorded(tmp_path: Path) -> tuple[Path, float]:
    """A database recorded until now (so the recorder counts as writing); when it started
    (alice's notebook went quiet then)."""
    start = time.time() - 3600
    return fill(tmp_path / "history.db", start), start


def now_sample(start: float, later_s: float = 0.0) -> Sample:
    """The server as recorded in its last minute, at the real time plus ``later_s``."""
    return dataclasses.replace(sample_at(start, 60), timestamp_s=time.time() + later_s)


def app_with(database: Path, start: float) -> GpumonApp:
    return app_for(now_sample(start), settings=Settings(history_db=str(database)))


async def settle(pilot: Pilot[object]) -> None:
    """Let the workers read the database, and their messages arrive."""
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


async def replay(pilot: Pilot[object], start: float, minutes: list[float]) -> None:
    """Hand the app the server at each of ``minutes`` (tracker minutes since the first).
    Each step stands for the app polling throughout: the tracker is told no gap is too long."""
    app = pilot.app
    assert isinstance(app, GpumonApp)
    clock = FakeClock(0.0)
    app.pipeline.idle.clock = clock
    app.pipeline.idle.interval_s = None
    app.history.clock = clock
    elapsed = 0.0
    for minute in minutes:
        clock.advance(minute * MINUTE - elapsed)
        elapsed = minute * MINUTE
        app.receive_sample(now_sample(start, elapsed))
        await settle(pilot)


def row_of(app: GpumonApp, pid: int) -> str:
    return next(line for line in screen_text(app).splitlines() if f" {pid} " in line)


def notices(app: GpumonApp) -> list[str]:
    return [str(notification.message) for notification in app._notifications]


# -- idle since ---------------------------------------------------------------------------------


async def test_idle_time_comes_from_the_database_when_it_knows_an_earlier_start(
    recorded: tuple[Path, float],
) -> None:
    """Alice's notebook went quiet an hour before the dashboard started: it reads idle 1h00m
    (exact), not idle >= 20m."""
    database, start = recorded
    app = app_with(database, start)
    async with app.run_test(size=(160, 40)) as pilot:
        await replay(pilot, start, [0, 1, 1.1, 20])
        assert re.search(r"10\.0G\s+idle 1h2\dm\s", row_of(app, 101))
        assert "≥" not in row_of(app, 101)
        assert "idle" not in row_of(app, 102)  # quiet, but too small to be idle
        assert notices(app) == []


async def test_without_a_database_idle_time_is_at_least_what_the_dashboard_saw(
    tmp_path: Path, recorded: tuple[Path, float]
) -> None:
    _, start = recorded
    app = app_with(tmp_path / "none.db", start)
    async with app.run_test(size=(160, 40)) as pilot:
        await replay(pilot, start, [0, 1, 20])
        assert "idle ≥ 20m" in row_of(app, 101)
        assert app.history.present is False and notices(app) == []


def a_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """Root's default database is the system's: run as a user, whose is under $XDG_STATE_HOME
    (root's files stay readable to them)."""
    if os.geteuid() == 0:
        monkeypatch.setattr(os, "geteuid", lambda: 4321)


async def test_the_default_database_is_read_without_db(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `gpumon record` writes by default ($XDG_STATE_HOME/gpumon/history.db) times idle
    processes without --db, at 80 columns too."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (tmp_path / "state" / "gpumon").mkdir(parents=True, mode=0o700)
    start = time.time() - 3600
    fill(tmp_path / "state" / "gpumon" / "history.db", start)
    a_user(monkeypatch)
    app = app_for(now_sample(start), settings=Settings())
    async with app.run_test(size=(80, 24)) as pilot:
        await replay(pilot, start, [0, 1, 1.1, 20])
        assert re.search(r"10\.0G\s+idle 1h\s", row_of(app, 101))
        assert "≥" not in row_of(app, 101) and notices(app) == []


async def test_a_refused_default_database_is_one_notice_and_idle_reads_at_least(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A default database others may write is refused as --db's is: one notice, no crash."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (tmp_path / "state" / "gpumon").mkdir(parents=True, mode=0o700)
    start = time.time() - 3600
    database = tmp_path / "state" / "gpumon" / "history.db"
    fill(database, start)
    database.chmod(0o666)
    a_user(monkeypatch)
    app = app_for(now_sample(start), settings=Settings())
    async with app.run_test(size=(160, 40)) as pilot:
        await replay(pilot, start, [0, 1, 2, 20])
        assert "idle ≥ 20m" in row_of(app, 101)
        (notice,) = notices(app)
        assert notice.startswith("History database: ") and str(database) in notice


async def test_a_broken_database_is_one_notice_and_the_dashboard_goes_on(tmp_path: Path) -> None:
    broken = tmp_path / "broken.db"
    broken.write_bytes(b"this is no database" * 200)
    start = time.time() - 3600
    app = app_with(broken, start)
    async with app.run_test(size=(160, 40)) as pilot:
        await replay(pilot, start, [0, 1, 2, 20])
        await pilot.press("U")
        await settle(pilot)
        assert str(broken) in screen_text(app)
        await pilot.press("escape")
        await pilot.pause()
        assert "idle ≥ 20m" in row_of(app, 101)
        (notice,) = notices(app)
        assert notice.startswith("History database: ") and str(broken) in notice


async def test_the_notice_shows_brackets_and_escapes_in_its_text_as_text(tmp_path: Path) -> None:
    """A path (or SQLite's text) holding what looks like markup, or an escape sequence, is
    shown as it is written, made visible: not restyled, not dropped, not sent to the
    terminal."""
    directory = tmp_path / "[red]gpu[on blue] \x1b]0;pwned\x07"
    directory.mkdir()
    broken = directory / "broken.db"
    broken.write_bytes(b"this is no database" * 200)
    start = time.time() - 3600
    app = app_with(broken, start)
    async with app.run_test(size=(200, 40), notifications=True) as pilot:
        await replay(pilot, start, [0, 1])
        (notice,) = notices(app)
        assert "[red]gpu[on blue] ?]0;pwned?/broken.db" in notice
        await pilot.pause(0.3)
        (toast,) = app.screen.query("Toast")
        assert "[red]gpu[on blue] ?]0;pwned?/broken.db" in str(toast.render())


# -- U: usage per user --------------------------------------------------------------------------


async def test_u_shows_each_users_gpu_hours_over_a_day_and_a_week(
    recorded: tuple[Path, float],
) -> None:
    database, start = recorded
    app = app_with(database, start)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("U")
        await settle(pilot)
        assert isinstance(app.screen, UsageScreen)
        text = screen_text(app)
        assert "Last 24 hours" in text and "Last 7 days" in text
        alice = [line for line in text.splitlines() if line.lstrip("│ ").startswith("alice")]
        bob = [line for line in text.splitlines() if line.lstrip("│ ").startswith("bob")]
        assert len(alice) == len(bob) == 2  # one row in each table
        assert alice[0].split()[1:4] == ["2.00", "0.50", "0.77"]
        assert bob[0].split()[1:4] == ["0.50", "0.50", "0.00"]
        # One scale: alice's 2 GPU-hours fill 40 cells (10 used, 15 held idle), bob's a quarter.
        assert "█" * 10 + "▒" * 15 + "░" * 15 in alice[0]
        assert "█" * 10 + "▒" not in bob[0] and "█" * 10 in bob[0]
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, UsageScreen)


async def test_u_without_a_database_says_how_to_start_recording(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    app = app_with(missing, time.time())
    async with app.run_test(size=(140, 30)) as pilot:
        await pilot.press("U")
        await settle(pilot)
        text = " ".join(screen_text(app).split())
        assert f"no history database at {missing}: start recording with `gpumon record`" in text
        assert "times idle processes from when they went quiet, from the dashboard's first" in text
        assert notices(app) == []


# -- [ and ]: the GPU detail's spans ------------------------------------------------------------


def graph_titles(app: GpumonApp) -> list[str]:
    return [line for line in screen_text(app).splitlines() if "Utilisation" in line]


async def test_brackets_step_the_graphs_through_the_recorded_spans(
    recorded: tuple[Path, float],
) -> None:
    database, start = recorded
    app = app_with(database, start)
    async with app.run_test(size=(120, 50)) as pilot:
        app.receive_sample(now_sample(start))
        await settle(pilot)
        app.push_screen(GpuDetailScreen(app.store, 1))
        await pilot.pause()
        assert "(waiting for history)" in graph_titles(app)[0]
        for span in ("1 h", "24 h", "7 days", "7 days"):
            await pilot.press("right_square_bracket")
            await settle(pilot)
            (title,) = graph_titles(app)
            assert f"(last {span}, recorded)" in title
            assert "mean 60%  max 60%" in title  # every recorded minute read 60 %
        text = screen_text(app)
        assert "SM clock, PCIe rx, PCIe tx: not recorded" in text
        for _ in range(3):
            await pilot.press("left_square_bracket")
            await settle(pilot)
        assert "(last 24 h, recorded)" not in graph_titles(app)[0]
        assert "recorded" not in graph_titles(app)[0]


async def test_brackets_without_a_database_stay_on_the_last_minutes(tmp_path: Path) -> None:
    app = app_with(tmp_path / "none.db", time.time())
    async with app.run_test(size=(120, 50)) as pilot:
        app.receive_sample(now_sample(time.time()))
        await settle(pilot)
        app.push_screen(GpuDetailScreen(app.store, 0))
        await pilot.pause()
        await pilot.press("right_square_bracket")
        await settle(pilot)
        assert "recorded" not in graph_titles(app)[0]
        (notice,) = notices(app)
        assert "Only the last minutes: no history database" in notice
        assert "gpumon record" in notice


# -- the help -----------------------------------------------------------------------------------


async def test_the_help_says_how_to_start_recording_without_a_database(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    app = app_with(missing, time.time())
    async with app.run_test(size=(100, 60)) as pilot:
        app.receive_sample(now_sample(time.time()))
        await settle(pilot)
        app.push_screen(DashboardHelpScreen())
        await pilot.pause()
        help_text = app.screen.build_text()  # type: ignore[attr-defined]
        flat = " ".join(help_text.split())
        said = f"No history database yet ({missing}): start recording with `gpumon record`"
        assert "".join(said.split()) in "".join(flat.split())  # a long path wraps anywhere
        assert "U GPU-hours per user, 24 h and 7 days (the history database)" in flat
        assert "[ / ] in a GPU's detail (Enter)" in flat
        assert "A recorder that runs as a service times idle processes from when they went" in flat
        assert "contrib/systemd/gpumon-record.service" in "".join(flat.split())
        assert (
            'Below 100 columns SM% shows while some process is idle, in CPU%\'s place: "idle 2h"'
            in flat
        )
        assert max(len(line) for line in help_text.splitlines()) <= 76


async def test_the_help_names_the_database_it_reads(recorded: tuple[Path, float]) -> None:
    database, start = recorded
    app = app_with(database, start)
    async with app.run_test(size=(100, 60)) as pilot:
        app.receive_sample(now_sample(start))
        await settle(pilot)
        app.push_screen(DashboardHelpScreen())
        await pilot.pause()
        flat = "".join(app.screen.build_text().split())  # type: ignore[attr-defined]
        assert f"Historydatabase:{database}" in flat


# -- a simulated history (gpumon record --demo) is labelled DEMO --------------------------------


def simulated(database: Path) -> Path:
    connection = sqlite3.connect(database, isolation_level=None)
    connection.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('simulated', 1)")
    connection.close()
    return database


@pytest.mark.parametrize("demo", [True, False])
async def test_u_and_the_recorded_spans_say_demo_for_a_simulated_history(
    recorded: tuple[Path, float], demo: bool
) -> None:
    database, start = recorded
    if demo:
        simulated(database)
    app = app_with(database, start)
    async with app.run_test(size=(120, 50)) as pilot:
        await pilot.press("U")
        await settle(pilot)
        assert isinstance(app.screen, UsageScreen)
        text = screen_text(app)
        assert ("DEMO: simulated history (gpumon record --demo)" in text) is demo
        assert "alice" in text
        await pilot.press("escape")
        await pilot.pause()
        app.receive_sample(now_sample(start))
        await settle(pilot)
        app.push_screen(GpuDetailScreen(app.store, 1))
        await pilot.pause()
        await pilot.press("right_square_bracket")
        await settle(pilot)
        (title,) = graph_titles(app)
        assert ("(last 1 h, recorded, DEMO)" in title) is demo
        assert ("DEMO: simulated history" in screen_text(app)) is demo


async def test_u_says_what_the_history_covers_and_wraps_its_hints_at_80_columns(
    recorded: tuple[Path, float],
) -> None:
    """An hour recorded: each table says the rest of its period is not in the database."""
    database, start = recorded
    app = app_with(database, start)
    async with app.run_test(size=(80, 40)) as pilot:
        await pilot.press("U")
        await settle(pilot)
        text = screen_text(app)
        first = time.strftime("%Y-%m-%d %H:%M", time.localtime(start))
        assert text.count(f"recorded only from {first}") == 2  # under each title
        joined = " ".join(text.replace("│", " ").split())
        assert re.search(
            r"the 2\dh\d\dm before it are not in the database \(counted as nothing\)", joined
        )
        assert "one GPU held for an hour is one GPU-hour" in joined  # wrapped, not cut


async def test_u_without_a_database_wraps_how_to_start_recording_at_80_columns(
    tmp_path: Path,
) -> None:
    app = app_with(tmp_path / "none.db", time.time())
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("U")
        await settle(pilot)
        joined = " ".join(screen_text(app).replace("│", " ").split())
        assert "contrib/systemd/gpumon-record.service (README: History)." in joined
