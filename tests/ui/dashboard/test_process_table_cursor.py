"""The process table's cursor stays where the user can see it (as in htop).

After a sort the user asked for, the view scrolls to wherever the cursor's process went.
On a refresh that reorders the rows, a cursor that was on screen stays on screen (the view
follows it); one the user scrolled out of view with the mouse wheel is left alone.
"""

from __future__ import annotations

import pytest
from textual import events
from textual.pilot import Pilot

from gpumon.data.model import GpuProcess, Sample
from gpumon.ui.dashboard.app import GpumonApp
from gpumon.ui.widgets.process_table import ProcessTable
from tests.support.ui_helpers import app_for, make_gpu, make_process, make_sample, screen_text

SIZE = (100, 30)
GPU = make_gpu(0)


def sample_of(processes: list[GpuProcess]) -> Sample:
    return make_sample((GPU,), tuple(processes))


def by_cpu(cpu_of_pid: dict[int, float]) -> Sample:
    return sample_of([make_process(GPU, pid, cpu_pct=cpu) for pid, cpu in cpu_of_pid.items()])


def shown_pids(app: GpumonApp) -> list[int]:
    """PIDs of the process rows on screen, top to bottom (commands are ``python job_<pid>.py``)."""
    pids = []
    for line in screen_text(app).splitlines():
        if "python job_" in line:
            pids.append(int(line.split("python job_")[1].split(".py")[0]))
    return pids


def cursor_pid_on_screen(app: GpumonApp) -> int | None:
    """The PID of the highlighted row as drawn, or None when no drawn row has the cursor."""
    table = app.query_one(ProcessTable)
    cursor = table.style("cursor")
    for y in range(1, table.size.height):
        strip = table.render_line(y)
        text = "".join(segment.text for segment in strip)
        if "python job_" not in text:
            continue
        if any(segment.style and segment.style.bgcolor == cursor.bgcolor for segment in strip):
            return int(text.split("python job_")[1].split(".py")[0])
    return None


async def start(pilot: Pilot[object], app: GpumonApp, sample: Sample) -> ProcessTable:
    app.receive_sample(sample)
    await pilot.pause()
    await pilot.press("tab")  # focus the process table
    table = app.query_one(ProcessTable)
    assert app.focused is table
    return table


async def wheel_down(pilot: Pilot[object], notches: int) -> None:
    """Turn the mouse wheel over the table as a terminal reports it (Pilot has no wheel of
    its own; _post_mouse_events is how its click() sends events, through the screen)."""
    for _ in range(notches):
        await pilot._post_mouse_events([events.MouseScrollDown], ProcessTable, offset=(10, 5))
    await pilot.pause()


async def refresh(pilot: Pilot[object], app: GpumonApp, sample: Sample) -> None:
    app.receive_sample(sample)
    await pilot.pause()
    await pilot.pause()


async def test_reverse_sort_goes_to_the_top() -> None:
    """A new sort is for seeing what is now first: the view goes to the top and the cursor
    to the first row, wherever the cursor's process went."""
    sample = by_cpu({pid: float(pid) for pid in range(1, 101)})
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        table = await start(pilot, app, sample)
        await pilot.press("down", "up")  # the user puts the cursor on PID 1
        assert table.cursor_process is not None and table.cursor_process.pid == 1
        await pilot.press("r")  # reverse: PID 100 is now first
        await pilot.pause()
        assert table.cursor_row == 0
        assert shown_pids(app)[0] == 100
        assert cursor_pid_on_screen(app) == 100
        await pilot.press("r")  # and back: PID 1 first again, the view at the top
        await pilot.pause()
        assert shown_pids(app)[0] == 1
        assert cursor_pid_on_screen(app) == 1


async def test_sorting_by_another_column_goes_to_the_top() -> None:
    # Most CPU first by default for CPU%: PID 1 (most CPU) is first.
    sample = by_cpu({pid: float(200 - pid) if pid != 3 else 0.0 for pid in range(1, 101)})
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        table = await start(pilot, app, sample)
        await pilot.press("end")  # the cursor far down, the view scrolled
        assert int(table.scroll_y) > 0
        for _ in range(5):  # gpu -> pid -> user -> type -> gpu_memory -> cpu
            await pilot.press("s")
        await pilot.pause()
        assert table.sort_key == "cpu"
        assert table.cursor_row == 0 and int(table.scroll_y) == 0
        assert shown_pids(app)[0] == 1
        assert cursor_pid_on_screen(app) == 1


async def test_refresh_that_reorders_rows_follows_a_visible_cursor() -> None:
    # Sorted by PID the cursor (PID 5) is near the top; the refresh is sorted by CPU%
    # and puts PID 5 far down, out of the first screenful.
    before = by_cpu({pid: float(200 - pid) for pid in range(1, 101)})
    after = by_cpu({pid: float(200 - pid) if pid != 5 else 0.0 for pid in range(1, 101)})
    app = app_for(before)
    async with app.run_test(size=SIZE) as pilot:
        table = await start(pilot, app, before)
        for _ in range(5):  # sort by CPU%, biggest first: PID 1, 2, 3, ...
            await pilot.press("s")
        assert table.sort_key == "cpu"
        await pilot.press("down", "down", "down", "down")
        assert table.cursor_process is not None and table.cursor_process.pid == 5
        assert cursor_pid_on_screen(app) == 5
        await refresh(pilot, app, after)  # PID 5 drops to the last row
        assert table.cursor_process is not None and table.cursor_process.pid == 5
        assert table.cursor_row == 99
        assert cursor_pid_on_screen(app) == 5  # the view followed it
        await refresh(pilot, app, before)  # and climbs back to the fifth row
        assert table.cursor_row == 4
        assert cursor_pid_on_screen(app) == 5


@pytest.mark.slow
async def test_refresh_keeps_the_scroll_position_when_nothing_moves() -> None:
    sample = by_cpu({pid: 1.0 for pid in range(1, 101)})
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(pilot, app, sample)
        for _ in range(40):
            await pilot.press("down")
        top_before = shown_pids(app)[0]
        assert top_before > 1
        assert cursor_pid_on_screen(app) == 41
        await refresh(pilot, app, sample)
        assert shown_pids(app)[0] == top_before
        assert cursor_pid_on_screen(app) == 41


async def test_a_view_scrolled_away_from_the_cursor_is_not_yanked_back() -> None:
    before = by_cpu({pid: float(200 - pid) for pid in range(1, 101)})
    after = by_cpu({pid: float(200 - pid) if pid != 2 else 0.0 for pid in range(1, 101)})
    app = app_for(before)
    async with app.run_test(size=SIZE) as pilot:
        table = await start(pilot, app, before)
        for _ in range(5):
            await pilot.press("s")
        await pilot.press("down")
        assert table.cursor_process is not None and table.cursor_process.pid == 2
        await wheel_down(pilot, notches=10)  # scrolls the view, not the cursor
        top = shown_pids(app)[0]
        assert top > 20, "the wheel did not scroll the table"
        assert cursor_pid_on_screen(app) is None  # the cursor is above the view
        await refresh(pilot, app, before)  # nothing moves
        assert shown_pids(app)[0] == top
        await refresh(pilot, app, after)  # the cursor's process moves to the bottom
        assert table.cursor_process is not None and table.cursor_process.pid == 2
        assert table.cursor_row == 99
        # Rows shift up by one under the view (PID 2 left the top), the view stays put.
        assert shown_pids(app)[0] == top + 1
        assert cursor_pid_on_screen(app) is None


async def test_cursor_stays_on_its_process_and_rows_can_vanish_while_scrolled() -> None:
    many = by_cpu({pid: 1.0 for pid in range(1, 101)})
    few = by_cpu({pid: 1.0 for pid in range(1, 6)})
    app = app_for(many)
    async with app.run_test(size=SIZE) as pilot:
        table = await start(pilot, app, many)
        await pilot.press("end")
        assert cursor_pid_on_screen(app) == 100
        await refresh(pilot, app, few)  # the cursor's process ended with 95 others
        assert shown_pids(app) == [1, 2, 3, 4, 5]
        assert table.cursor_process is not None and table.cursor_process.pid == 5
        assert cursor_pid_on_screen(app) == 5


async def test_an_untouched_cursor_stays_on_the_top_row() -> None:
    """Before the user moves it, the cursor marks the top row, not the process that
    happened to be first: the table keeps showing the top of the list."""
    sample = by_cpu({pid: float(pid) for pid in range(1, 101)})
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        table = await start(pilot, app, sample)
        await pilot.press("r")
        await pilot.pause()
        assert table.cursor_row == 0 and table.cursor_process is not None
        assert table.cursor_process.pid == 100
        assert shown_pids(app)[0] == 100
        app.receive_sample(by_cpu({pid: float(1000 - pid) for pid in range(1, 101)}))
        await pilot.pause()
        assert table.cursor_row == 0 and shown_pids(app)[0] == cursor_pid_on_screen(app)


async def test_a_smaller_pane_scrolls_the_cursor_row_back_into_view() -> None:
    """Cursor paged down, then a tmux split halves the pane: the highlighted row is still on
    screen (Enter, T and K act on it), also after the next sample."""
    sample = by_cpu({pid: 1.0 for pid in range(1000, 1060)})
    app = app_for(sample)
    async with app.run_test(size=(100, 50)) as pilot:
        table = await start(pilot, app, sample)
        await pilot.press("pagedown", "pagedown")
        await pilot.pause()
        chosen = cursor_pid_on_screen(app)
        assert chosen is not None and chosen > 1030
        await pilot.resize_terminal(100, 24)
        await pilot.pause()
        await pilot.pause()
        assert cursor_pid_on_screen(app) == chosen
        app.receive_sample(sample)
        await pilot.pause()
        assert cursor_pid_on_screen(app) == chosen
        assert table.cursor_process is not None and table.cursor_process.pid == chosen


async def test_the_titles_never_count_processes_that_were_not_read() -> None:
    """Before the first sample, or with every list refused: "unknown", not "Processes 0";
    one list refused of two: a lower bound."""
    refused = make_gpu(1, processes_error="NVML: Insufficient Permissions")
    app = app_for(None)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert "Processes unknown" in screen_text(app)
        app.receive_sample(make_sample((refused,), ()))
        await pilot.pause()
        assert "Processes unknown" in screen_text(app)
        app.receive_sample(make_sample((GPU, refused), (make_process(GPU, 7),)))
        await pilot.pause()
        assert "Processes >= 1" in screen_text(app)
        await pilot.press("u")
        await pilot.pause()
        assert "Users of the GPUs: >= 1" in screen_text(app)


async def test_a_sort_whose_column_a_narrower_pane_hides_is_named_in_the_title() -> None:
    sample = by_cpu({1000: 1.0, 1001: 2.0})
    app = app_for(sample)
    async with app.run_test(size=(120, 30)) as pilot:
        table = await start(pilot, app, sample)
        table.sort_by("rss")
        await pilot.pause()
        assert "sorted by" not in screen_text(app)  # its column shows the arrow
        await pilot.resize_terminal(80, 30)  # RSS needs 90 columns
        await pilot.pause()
        assert "sorted by RSS ▼" in screen_text(app)
