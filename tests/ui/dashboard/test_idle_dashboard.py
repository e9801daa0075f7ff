"""On the dashboard: each process's SM%, ``idle 2h13m`` where it holds memory idle, ``held idle
by alice 2h13m`` on a GPU whose holders are all idle, and the idle memory of each user (``u``).

The app's idle tracker runs on a fake clock the tests move between samples.
"""

from __future__ import annotations

import dataclasses
import itertools
import re

from textual.pilot import Pilot

from gpumon.config import Settings
from gpumon.data.model import ProcessKind, Sample
from gpumon.data.notes import GpuNote
from gpumon.sources.demo import QUIET_FROM_TICK, DemoSource
from gpumon.ui.dashboard.app import GpumonApp, create_app
from gpumon.ui.dashboard.user_summary import UserSummaryScreen
from gpumon.ui.widgets.gpu_panel import GpuPanel
from gpumon.ui.widgets.process_table import ProcessTable
from tests.sources.nvml.test_nvml_source import FakeClock
from tests.support.ui_helpers import (
    FIXED_TIME,
    GIB,
    MIB,
    app_for,
    make_gpu,
    make_process,
    make_sample,
    screen_text,
)

MINUTE = 60.0
GPUS = tuple(
    make_gpu(index, memory_used_bytes=used, utilization_gpu_pct=util)
    for index, (used, util) in enumerate([(13 * GIB, 88), (20 * GIB, 0), (22 * GIB, 61), (0, 0)])
)


def server(alice_sm: int, dana_sm: int) -> Sample:
    """GPU 0: bob trains beside a display server; GPU 1: alice's notebook (20 GiB); GPU 2:
    chen trains beside dana's forgotten job (6 GiB); GPU 3: free."""
    gpu0, gpu1, gpu2, _ = GPUS
    processes = (
        make_process(gpu0, 2113, user="root", kind=ProcessKind.GRAPHICS,
                     gpu_memory_bytes=186 * MIB, command="/usr/lib/xorg/Xorg vt1"),
        make_process(gpu0, 4100, user="bob", gpu_memory_bytes=12 * GIB, sm_utilization_pct=85,
                     command="python train.py --epochs 90"),
        make_process(gpu1, 4200, user="alice", gpu_memory_bytes=20 * GIB,
                     sm_utilization_pct=alice_sm,
                     command="python -m ipykernel_launcher -f kernel-3f2a.json"),
        make_process(gpu2, 4300, user="chen", gpu_memory_bytes=16 * GIB, sm_utilization_pct=61,
                     command="python sweep.py --trial 17"),
        make_process(gpu2, 4400, user="dana", gpu_memory_bytes=6 * GIB,
                     sm_utilization_pct=dana_sm, command="python eval.py --checkpoint last.pt"),
    )  # fmt: skip
    return make_sample(GPUS, processes)


#: (seconds since the previous sample, sample): everyone busy; alice quiet from 1 minute on,
#: dana from an hour later; the last sample 2h13m after alice went quiet.
TIMELINE = (
    (0.0, server(40, 30)),
    (MINUTE, server(0, 30)),
    (3600.0, server(0, 2)),
    (2 * 3600 + 13 * MINUTE - 3600, server(1, 0)),
)


async def replay(
    pilot: Pilot[object], timeline: tuple[tuple[float, Sample], ...] = TIMELINE
) -> None:
    """Hand the app the timeline's samples, moving its idle tracker's clock between them.
    Each step stands for the app polling throughout, every sample in between alike: the
    tracker is told no gap is too long (unlike a pause, see test_a_pause_is_not_idle_time)."""
    app = pilot.app
    assert isinstance(app, GpumonApp)
    clock = FakeClock(0.0)
    app.pipeline.idle.clock = clock
    app.pipeline.idle.interval_s = None
    for wait, sample in timeline:
        clock.advance(wait)
        app.receive_sample(sample)
    await pilot.pause()


def row_of(app: GpumonApp, pid: int) -> str:
    return next(line for line in screen_text(app).splitlines() if f" {pid} " in line)


def header(app: GpumonApp) -> str:
    return next(line for line in screen_text(app).splitlines() if "PID" in line and "GPU" in line)


# -- the SM% column -------------------------------------------------------------------------------


async def test_sm_column_shows_each_processs_utilisation_where_the_width_allows() -> None:
    app = app_for(server(40, 30))
    async with app.run_test(size=(120, 40)) as pilot:
        await replay(pilot, TIMELINE[:1])
        assert "SM%" in header(app)
        assert re.search(r"12\.0G\s+85\s", row_of(app, 4100))
        assert re.search(r"186M\s+N/A\s", row_of(app, 2113))  # graphics, no sample: N/A
        await pilot.resize_terminal(80, 40)
        await pilot.pause()
        assert "SM%" not in header(app)
        assert "python train.py" in row_of(app, 4100)


async def test_sm_column_is_left_out_when_no_process_has_one() -> None:
    """MIG GPUs and cluster nodes: every SM% would read N/A."""
    sample = server(40, 30)
    blank = tuple(dataclasses.replace(p, sm_utilization_pct=None) for p in sample.processes)
    app = app_for(sample)
    async with app.run_test(size=(120, 40)) as pilot:
        await replay(pilot, ((0.0, dataclasses.replace(sample, processes=blank)),))
        assert "SM%" not in header(app)
        assert "CPU%" in header(app)


async def test_s_sorts_by_sm_busiest_first() -> None:
    app = app_for(server(40, 30))
    async with app.run_test(size=(120, 40)) as pilot:
        await replay(pilot, TIMELINE[:1])
        table = app.query_one(ProcessTable)
        for _ in range(12):
            if table.sort_key == "sm":
                break
            await pilot.press("s")
        await pilot.pause()
        assert table.sort_key == "sm" and "SM%▼" in header(app)
        assert [p.pid for p in table.rows] == [4100, 4300, 4200, 4400, 2113]  # N/A last
        await pilot.press("r")
        await pilot.pause()
        assert [p.pid for p in table.rows][:2] == [2113, 4400]  # N/A, then the quietest


# -- idle processes and GPUs held idle ------------------------------------------------------------


async def test_an_idle_process_reads_idle_and_its_gpu_reads_held_idle() -> None:
    app = app_for(server(40, 30))
    async with app.run_test(size=(120, 40)) as pilot:
        await replay(pilot)
        assert re.search(r"20\.0G\s+idle 2h13m\s", row_of(app, 4200))
        assert re.search(r"6\.0G\s+idle 1h13m\s", row_of(app, 4400))
        assert re.search(r"16\.0G\s+61\s", row_of(app, 4300))
        notes = [line for line in screen_text(app).splitlines() if "held idle" in line]
        assert len(notes) == 1 and "held idle by alice 2h13m" in notes[0]  # GPU 2 is in use
        panel_notes = app.dashboard.query_one(GpuPanel).notes
        assert panel_notes == {1: (GpuNote("held idle by alice 2h13m", "note-warn"),)}


async def test_at_80_and_60_columns_an_idle_process_beside_a_busy_one_still_reads_idle() -> None:
    """Below 100 columns SM% gives way, except while some process is idle: then it takes
    CPU%'s place as ``idle 1h``, in the zoomed table too (GPU 2: chen busy, dana idle)."""
    app = app_for(server(40, 30))
    async with app.run_test(size=(80, 24)) as pilot:
        await replay(pilot)
        for size in ((80, 24), (60, 15)):
            await pilot.resize_terminal(*size)
            for _zoom in range(2):
                await pilot.pause()
                assert "SM%" in header(app) and "CPU%" not in header(app)
                assert re.search(r"6\.0G\s+idle 1h .*python eval\.py", row_of(app, 4400))
                assert re.search(r"16\.0G\s+61 ", row_of(app, 4300))
                assert re.search(r"20\.0G\s+idle 2h ", row_of(app, 4200))
                await pilot.press("z")
        await pilot.resize_terminal(40, 15)  # too narrow for both: COMMAND stays, as before
        await pilot.pause()
        assert "SM%" not in header(app) and "pytho" in row_of(app, 4400)
        await pilot.resize_terminal(80, 24)
        await replay(pilot, ((MINUTE, server(70, 50)),))  # everyone busy: CPU% is back
        assert "CPU%" in header(app) and "SM%" not in header(app)


async def test_a_narrow_idle_mark_says_at_least_in_ascii_too() -> None:
    quiet = server(0, 0)
    for ascii_only, mark in ((False, "≥"), (True, ">=")):
        app = app_for(quiet, ascii_only=ascii_only)
        async with app.run_test(size=(80, 24)) as pilot:
            await replay(pilot, ((0.0, quiet), (20 * MINUTE, quiet)))
            assert f" idle{mark}20m " in row_of(app, 4200)


async def test_a_process_gets_busy_again_and_is_no_longer_idle() -> None:
    app = app_for(server(40, 30))
    async with app.run_test(size=(120, 40)) as pilot:
        await replay(pilot, (*TIMELINE, (MINUTE, server(70, 0))))
        assert re.search(r"20\.0G\s+70\s", row_of(app, 4200))
        assert "held idle" not in screen_text(app)


async def test_idleness_from_before_gpumon_started_says_at_least_in_ascii_too() -> None:
    quiet = server(0, 0)
    for ascii_only, mark in ((False, "≥ "), (True, ">=")):
        app = app_for(quiet, ascii_only=ascii_only)
        async with app.run_test(size=(120, 40)) as pilot:
            await replay(pilot, ((0.0, quiet), (20 * MINUTE, quiet)))
            assert f"idle {mark}20m" in row_of(app, 4200)
            assert f"held idle by alice {mark}20m" in screen_text(app)


async def test_a_pause_is_not_idle_time() -> None:
    """Polling every minute, alice's notebook goes quiet, then the dashboard is paused for
    20 minutes: nobody saw those, so it is not held idle at once when resumed (it was 22m
    before the fix), and 15 minutes on it reads "≥ 15m", counted from the resume."""
    app = app_for(server(40, 30))
    async with app.run_test(size=(120, 40)) as pilot:
        app.poller.interval_s = MINUTE
        clock = FakeClock(0.0)
        app.pipeline.idle.clock = clock

        async def sample_after(wait: float, sample: Sample) -> None:
            clock.advance(wait)
            app.receive_sample(sample)
            await pilot.pause()

        await sample_after(0.0, server(40, 30))
        for _ in range(2):
            await sample_after(MINUTE, server(0, 30))  # alice quiet from minute 1
        await pilot.press("space")  # paused for 20 minutes
        clock.advance(20 * MINUTE)
        await pilot.press("space")
        await sample_after(MINUTE, server(0, 30))
        assert "held idle" not in screen_text(app)
        assert "idle" not in row_of(app, 4200)
        for _ in range(15):
            await sample_after(MINUTE, server(0, 30))
        assert "idle ≥ 15m" in row_of(app, 4200)
        assert "held idle by alice ≥ 15m" in screen_text(app)


async def test_the_idle_rule_follows_the_settings() -> None:
    settings = Settings(idle_min_memory_mib=32 * 1024, idle_after_minutes=0.1)
    app = app_for(server(40, 30), settings=settings)
    async with app.run_test(size=(120, 40)) as pilot:
        await replay(pilot)
        assert "idle" not in row_of(app, 4200)  # 20 GiB is below 32 GiB: never idle
        assert "held idle" not in screen_text(app)


async def test_user_summary_shows_the_memory_each_user_holds_idle() -> None:
    app = app_for(server(40, 30))
    async with app.run_test(size=(120, 40)) as pilot:
        await replay(pilot)
        await pilot.press("u")
        await pilot.pause()
        assert isinstance(app.screen, UserSummaryScreen)
        text = screen_text(app)
        assert re.search(r"USER\s+GPUS\s+GPU-MEM\s+PROCS\s+IDLE-MEM", text)
        rows = {
            line.split()[0]: line.split()
            for line in text.splitlines()
            if line.split()[:1] in (["alice"], ["bob"], ["dana"], ["chen"])
        }
        assert rows["alice"][-1] == "20.0G"
        assert rows["dana"][-1] == "6.0G"
        assert rows["bob"][-1] == rows["chen"][-1] == "-"
        assert "IDLE-MEM: held by processes at or below 5 % SM for 15m or more." in text


async def test_the_demo_server_shows_an_idle_holder_with_a_short_idle_after() -> None:
    """`gpumon --demo --idle-after 0.1`: one GPU's jobs go quiet and are held idle."""
    ticks = itertools.count()
    source = DemoSource(4, seed=0, current_user="alice", clock=lambda: FIXED_TIME + next(ticks))
    settings = Settings(idle_after_minutes=0.1)
    app = create_app(source, autostart=False, ascii_only=False, settings=settings)
    async with app.run_test(size=(120, 40)) as pilot:
        clock = FakeClock(0.0)
        app.pipeline.idle.clock = clock
        for _ in range(QUIET_FROM_TICK + 10):
            clock.advance(1.0)
            app.receive_sample(source.sample())
        await pilot.pause()
        (index,) = app.pipeline.idle.view.gpus  # one GPU held idle, not GPU 0 (the display's)
        assert index > 0
        lines = screen_text(app).splitlines()
        assert len([line for line in lines if "held idle by" in line]) == 1
        assert app.sample is not None
        quiet = app.sample.processes_on(index)
        idle_rows = [line for line in lines if re.search(r"\sidle \d+s\s", line)]
        assert quiet and len(idle_rows) == len(quiet)
