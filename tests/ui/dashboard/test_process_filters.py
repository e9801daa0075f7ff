"""Pilot tests of "who uses what" on the dashboard: the process filters (f, m, /, Escape)
with their title line and counts, command shortening and scrolling, sorting, the optional
JOB and CONTAINER columns, moving through a grid of GPU cards, zoom, the share of the
screen the table keeps, FREE marks, MIG instance lines and the per-user summary (u)."""

from __future__ import annotations

import dataclasses
import itertools
import re
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from gpumon.config import Settings
from gpumon.data.model import GpuStats, MigInstance, Sample
from gpumon.sources.demo import DemoSource
from gpumon.ui.dashboard.app import GpumonApp, create_app
from gpumon.ui.dashboard.screen import DashboardScreen
from gpumon.ui.dashboard.user_summary import UserSummaryScreen
from gpumon.ui.widgets.gpu_panel import GpuPanel
from gpumon.ui.widgets.process_table import ProcessTable
from tests.support.ui_helpers import (
    FIXED_TIME,
    GIB,
    MIB,
    app_for,
    make_gpu,
    make_process,
    make_sample,
    push,
    screen_text,
)

SIZE = (120, 40)
IDLE = {"memory_used_bytes": 3 * MIB, "utilization_gpu_pct": 0}

# alice is the current user; each of the four GPUs runs one process of alice, bob and chen.
COMMANDS = {
    "alice": "/opt/conda/bin/python3 train.py --steps 90",
    "bob": "python eval.py",
    "chen": "/usr/local/bin/server --port 8080",
}


def shared_server() -> Sample:
    """4 GPUs, 12 processes: PIDs 100-111, GPU n has PIDs 100+3n (alice), 101+3n (bob) and
    102+3n (chen)."""
    gpus = tuple(make_gpu(index) for index in range(4))
    processes = []
    pid = 100
    for gpu in gpus:
        for user, command in COMMANDS.items():
            current = user == "alice"
            processes.append(
                make_process(gpu, pid, user=user, command=command, is_current_user=current)
            )
            pid += 1
    return make_sample(gpus, tuple(processes))


def table_lines(app: GpumonApp) -> list[str]:
    """The process table as drawn on the screen: title line, column headers, rows."""
    region = app.query_one(ProcessTable).region
    lines = screen_text(app).splitlines()[region.y : region.bottom]
    return [line[region.x : region.right] for line in lines]


def title(app: GpumonApp) -> str:
    return table_lines(app)[0].strip()


def header(app: GpumonApp) -> str:
    return table_lines(app)[1]


def row_pids(app: GpumonApp) -> list[int]:
    """PIDs of the process rows on screen, top to bottom."""
    pids = []
    for line in table_lines(app)[ProcessTable.TOP_LINES :]:
        fields = line.split()
        if len(fields) > 1 and fields[0].replace("/", "").isdigit() and fields[1].isdigit():
            pids.append(int(fields[1]))
    return pids


def selected_card(app: GpumonApp) -> int | None:
    """The GPU whose card title is drawn highlighted (reversed), as a user sees it."""
    panel = app.query_one(GpuPanel)
    for y in range(panel.size.height):
        for segment in panel.render_line(y):
            match = re.fullmatch(r" GPU (\d+) ", segment.text)
            if match and segment.style is not None and segment.style.reverse:
                return int(match.group(1))
    return None


async def start(app: GpumonApp, pilot: Pilot[Any], sample: Sample) -> None:
    """Hand ``sample`` to the app and let it draw."""
    app.receive_sample(sample)
    await pilot.pause()


# -- f: the selected GPU's processes -------------------------------------------------------


async def test_f_shows_only_the_selected_gpus_processes_and_again_all() -> None:
    sample = shared_server()
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        assert title(app) == "Processes 12"
        await pilot.press("f")
        assert title(app) == "Processes 3 of 12  filter: GPU 0"
        assert row_pids(app) == [100, 101, 102]
        await pilot.press("f")
        assert title(app) == "Processes 12"
        assert "filter" not in title(app)
        assert row_pids(app) == list(range(100, 112))


async def test_gpu_filter_follows_the_gpu_selection() -> None:
    sample = shared_server()
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        await pilot.press("right")  # no filter yet: selecting a GPU filters nothing
        assert title(app) == "Processes 12"
        await pilot.press("f")
        assert title(app) == "Processes 3 of 12  filter: GPU 1"
        assert row_pids(app) == [103, 104, 105]
        await pilot.press("down")  # cards two abreast: GPU 3 is below GPU 1
        assert title(app) == "Processes 3 of 12  filter: GPU 3"
        assert row_pids(app) == [109, 110, 111]
        await pilot.press("left")
        assert title(app) == "Processes 3 of 12  filter: GPU 2"
        assert row_pids(app) == [106, 107, 108]


async def test_selected_gpus_processes_stand_out_without_a_filter() -> None:
    """The rows of the GPU selected in the panel get their own background; the others not."""
    sample = shared_server()
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        await pilot.press("right", "right")  # GPU 2
        await pilot.pause()
        table = app.query_one(ProcessTable)
        marked = table.style("selected-gpu").bgcolor
        assert marked is not None
        highlighted = []
        for y in range(ProcessTable.TOP_LINES, ProcessTable.TOP_LINES + 12):
            strip = table.render_line(y)
            if any(s.style is not None and s.style.bgcolor == marked for s in strip):
                highlighted.append(int("".join(s.text for s in strip).split()[1]))
        assert highlighted == [106, 107, 108]


async def test_the_cursor_stands_out_among_the_selected_gpus_rows() -> None:
    """GPU 1 selected, the table focused, the cursor on one of GPU 1's rows: the cursor row,
    GPU 1's other rows and GPU 0's row are three different backgrounds."""
    gpus = (make_gpu(0), make_gpu(1))
    processes = (make_process(gpus[0], 1), *(make_process(gpus[1], pid) for pid in (2, 3, 4)))
    sample = make_sample(gpus, processes)
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        await pilot.press("right", "tab", "down", "down")  # the cursor on PID 3
        table = app.query_one(ProcessTable)
        assert table.has_focus and table.cursor_process is not None
        assert table.cursor_process.pid == 3

        def background(pid: int) -> object:
            y = ProcessTable.TOP_LINES + row_pids(app).index(pid)
            first = next(iter(table.render_line(y)))
            return None if first.style is None else first.style.bgcolor

        cursor, same_gpu, other_gpu = background(3), background(2), background(1)
        assert background(4) == same_gpu
        assert len({cursor, same_gpu, other_gpu}) == 3


# -- m: mine -------------------------------------------------------------------------------


async def test_m_shows_only_my_processes_and_again_everyones() -> None:
    sample = shared_server()
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        await pilot.press("m")
        assert title(app) == "Processes 4 of 12  filter: mine"
        assert row_pids(app) == [100, 103, 106, 109]
        assert {line.split()[2] for line in table_lines(app)[2:6]} == {"alice"}
        await pilot.press("m")
        assert title(app) == "Processes 12"


async def test_mine_when_i_run_nothing_says_no_process_matches() -> None:
    gpu = make_gpu(0)
    sample = make_sample((gpu,), tuple(make_process(gpu, pid) for pid in (1, 2, 3)))
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        await pilot.press("m")
        text = "\n".join(table_lines(app))
        assert title(app) == "Processes 0 of 3  filter: mine"
        assert "No process matches the filter (mine): 0 of 3." in text
        assert "No processes" not in text


async def test_filters_combine_in_the_title() -> None:
    sample = shared_server()
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        await pilot.press("right", "f", "m", "slash", *"train", "enter")
        assert title(app) == 'Processes 1 of 12  filter: GPU 1 · mine · "train"'
        assert row_pids(app) == [103]


# -- /: search as you type -----------------------------------------------------------------


async def test_search_filters_as_you_type_and_enter_keeps_it() -> None:
    sample = shared_server()
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        search = app.query_one("#process-search", Input)
        assert not search.display
        await pilot.press("slash")
        assert search.display and app.focused is search
        await pilot.press("e")
        assert title(app).endswith('filter: "e"')
        await pilot.press(*"val")
        assert title(app) == 'Processes 4 of 12  filter: "eval"'
        assert row_pids(app) == [101, 104, 107, 110]
        await pilot.press("enter")
        # The box closes, the filter stays, the table has the keys.
        assert not search.display
        assert app.focused is app.query_one(ProcessTable)
        assert title(app) == 'Processes 4 of 12  filter: "eval"'
        # "/" again: the box opens with the text to edit.
        await pilot.press("slash")
        assert search.display and search.value == "eval"


async def test_search_matches_user_and_pid_in_any_case() -> None:
    sample = shared_server()
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        await pilot.press("slash", *"CHEN")
        assert row_pids(app) == [102, 105, 108, 111]
        await pilot.press(*["backspace"] * 4, *"107")
        assert title(app) == 'Processes 1 of 12  filter: "107"'
        assert row_pids(app) == [107]


async def test_search_follows_new_samples() -> None:
    sample = shared_server()
    gpu = sample.gpus[0]
    later = make_sample(
        sample.gpus, (*sample.processes, make_process(gpu, 999, command="python eval.py"))
    )
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        await pilot.press("slash", *"eval", "enter")
        assert title(app) == 'Processes 4 of 12  filter: "eval"'
        await start(app, pilot, later)
        assert title(app) == 'Processes 5 of 13  filter: "eval"'
        assert 999 in row_pids(app)


async def test_letters_typed_in_the_search_box_are_text_not_keys() -> None:
    """f, m, u, z, s and q are dashboard keys; in the search box they are only letters."""
    sample = shared_server()
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        await pilot.press("slash", *"fumzsq")
        assert title(app) == 'Processes 0 of 12  filter: "fumzsq"'
        assert app.is_running
        assert isinstance(app.screen, DashboardScreen)
        assert app.query_one(GpuPanel).display  # not zoomed
        assert app.query_one(ProcessTable).sort_key == "gpu"


async def test_escape_in_the_search_box_clears_only_the_text() -> None:
    sample = shared_server()
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        await pilot.press("f", "m", "slash", *"train")
        assert title(app) == 'Processes 1 of 12  filter: GPU 0 · mine · "train"'
        await pilot.press("escape")
        search = app.query_one("#process-search", Input)
        assert not search.display
        assert title(app) == "Processes 1 of 12  filter: GPU 0 · mine"
        await pilot.press("slash")
        assert search.value == ""


async def test_escape_on_the_dashboard_clears_every_filter() -> None:
    sample = shared_server()
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        await pilot.press("f", "m", "slash", *"train", "enter")
        assert title(app) == 'Processes 1 of 12  filter: GPU 0 · mine · "train"'
        await pilot.press("escape")  # the table has the focus after Enter
        assert title(app) == "Processes 12"
        assert len(row_pids(app)) == 12
        # And from the GPU panel.
        await pilot.press("shift+tab")
        assert app.focused is app.query_one(GpuPanel)
        await pilot.press("m", "f")
        assert "filter" in title(app)
        await pilot.press("escape")
        assert title(app) == "Processes 12"
        # With no filter on, Escape does nothing else.
        await pilot.press("escape")
        assert app.is_running and title(app) == "Processes 12"


async def test_a_filter_that_matches_nothing_says_so_not_no_processes() -> None:
    sample = shared_server()
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        await pilot.press("slash", *"nobody", "enter")
        text = "\n".join(table_lines(app))
        assert title(app) == 'Processes 0 of 12  filter: "nobody"'
        assert 'No process matches the filter ("nobody"): 0 of 12.' in text
        assert "No processes" not in text
        assert row_pids(app) == []


@pytest.mark.parametrize("gpu_index", [1, 2], ids=["refused", "lost"])
async def test_gpu_filter_on_a_gpu_whose_processes_are_unknown_says_unknown(
    gpu_index: int,
) -> None:
    """f on a GPU whose process list NVML refused, or on a lost GPU: the table must not
    claim that no process matches there; it cannot know."""
    gpus = (
        make_gpu(0),
        make_gpu(1, processes_error="NVML: Insufficient Permissions"),
        GpuStats(index=2, uuid=None, name="NVIDIA Test Board", lost=True),
    )
    sample = make_sample(gpus, (make_process(gpus[0], 100),))
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        await pilot.press(*["right"] * gpu_index, "f")
        assert title(app).endswith(f"filter: GPU {gpu_index}")
        first_row = table_lines(app)[ProcessTable.TOP_LINES]
        assert "No process matches" not in first_row
        assert re.search(r"unknown|N/A|lost", first_row, re.IGNORECASE)


# -- commands: shortened, scrolled ---------------------------------------------------------


async def test_program_paths_are_shortened_to_their_name() -> None:
    sample = shared_server()
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        text = "\n".join(table_lines(app))
        assert "python3 train.py --steps 90" in text
        assert "server --port 8080" in text
        assert "python eval.py" in text
        assert "/opt/conda" not in text and "/usr/local/bin" not in text


@pytest.mark.slow
async def test_left_right_scroll_the_command_column() -> None:
    gpu = make_gpu(0)
    command = "python train.py " + " ".join(f"--option-{n} {n}" for n in range(30))
    sample = make_sample((gpu,), (make_process(gpu, 4242, command=command),))
    app = app_for(sample)
    async with app.run_test(size=(100, 30)) as pilot:
        await start(app, pilot, sample)
        await pilot.press("tab")  # the process table
        assert app.query_one(ProcessTable).has_focus

        def command_cell() -> str:
            line = table_lines(app)[2]
            return line[line.index("python") if "python" in line else line.index("…") :]

        assert command_cell().startswith("python train.py --option-0")
        await pilot.press("right")
        assert title(app) == "Processes 1  commands scrolled 8 cells (left/right)"
        assert command_cell().startswith("…" + command[9:20])
        await pilot.press("right")
        assert "commands scrolled 16 cells" in title(app)
        assert command_cell().startswith("…" + command[17:28])
        await pilot.press("left")
        assert "commands scrolled 8 cells" in title(app)
        await pilot.press("left")
        assert title(app) == "Processes 1"
        assert command_cell().startswith("python train.py --option-0")
        await pilot.press("left")  # not before the start
        assert title(app) == "Processes 1"
        # Not past the end either: the end of the command stays in view.
        await pilot.press(*["right"] * 80)
        end = command_cell().rstrip()
        assert end.startswith("…") and command.endswith(end[1:]) and len(end) > 1
        await pilot.press("right")
        assert command_cell().rstrip() == end
        assert table_lines(app)[2].split()[1] == "4242"  # the other columns stay


async def test_left_right_on_the_gpu_panel_still_select_gpus() -> None:
    sample = shared_server()
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        await pilot.press("right")
        assert selected_card(app) == 1
        assert "scrolled" not in title(app)


# -- sorting -------------------------------------------------------------------------------


async def test_clicking_a_column_title_sorts_and_goes_to_the_top() -> None:
    gpu = make_gpu(0)
    processes = tuple(make_process(gpu, pid, cpu_pct=float(pid % 7)) for pid in range(1, 101))
    sample = make_sample((gpu,), processes)
    app = app_for(sample)
    async with app.run_test(size=(100, 30)) as pilot:
        await start(app, pilot, sample)
        await pilot.press("tab", "end")
        table = app.query_one(ProcessTable)
        assert int(table.scroll_y) > 0
        pid_x = header(app).index("PID")
        await pilot.click(ProcessTable, offset=(pid_x, 1))  # the PID title
        await pilot.pause()
        assert "PID▲" in header(app)
        assert int(table.scroll_y) == 0 and table.cursor_row == 0
        assert row_pids(app)[:3] == [1, 2, 3]
        await pilot.press("end")
        await pilot.click(ProcessTable, offset=(pid_x, 1))  # again: reversed, at the top
        await pilot.pause()
        assert "PID▼" in header(app)
        assert int(table.scroll_y) == 0 and table.cursor_row == 0
        assert row_pids(app)[:3] == [100, 99, 98]


@pytest.mark.slow
async def test_every_sort_title_keeps_its_arrow_uncut() -> None:
    """Cycle through every column with s, both ways with r: each title reads whole with its
    arrow (``GPU▲`` by default), including JOB and CONTAINER."""
    gpu = make_gpu(0)
    sample = make_sample(
        (gpu,), (make_process(gpu, 1, job_id="4242", container_id="0123456789ab"),)
    )
    app = app_for(sample)
    async with app.run_test(size=(160, 30)) as pilot:
        await start(app, pilot, sample)
        assert header(app).startswith("GPU▲ ")
        titles = ["GPU", "PID", "USER", "JOB", "CONTAINER", "TYPE", "GPU-MEM"]
        titles += ["CPU%", "RSS", "TIME", "COMMAND"]
        assert header(app).split() == ["GPU▲", *titles[1:]]
        seen = []
        for _ in titles:
            sorted_title = next(word for word in header(app).split() if word[-1] in "▲▼")
            assert sorted_title[:-1] in titles
            seen.append(sorted_title[:-1])
            await pilot.press("r")
            reversed_title = next(word for word in header(app).split() if word[-1] in "▲▼")
            assert reversed_title[:-1] == sorted_title[:-1]
            assert reversed_title[-1] != sorted_title[-1]
            await pilot.press("s")
        assert seen == titles


@pytest.mark.parametrize("size", [(60, 15), (80, 24)])
async def test_sort_arrow_never_cuts_a_title_on_a_narrow_terminal(size: tuple[int, int]) -> None:
    sample = shared_server()
    app = app_for(sample)
    async with app.run_test(size=size) as pilot:
        await start(app, pilot, sample)
        shown = [word.rstrip("▲▼") for word in header(app).split()]
        assert shown[0] == "GPU" and shown[-1] == "COMMAND"
        for _ in shown:  # every visible column in turn
            words = header(app).split()
            assert [word.rstrip("▲▼") for word in words] == shown
            assert sum(word[-1] in "▲▼" for word in words) == 1
            await pilot.press("s")


# -- JOB and CONTAINER ---------------------------------------------------------------------


def with_placement(count: int = 3, **fields: object) -> Sample:
    gpu = make_gpu(0)
    return make_sample((gpu,), tuple(make_process(gpu, 100 + n, **fields) for n in range(count)))


async def test_no_job_or_container_columns_without_jobs_or_containers() -> None:
    sample = with_placement()
    app = app_for(sample)
    async with app.run_test(size=(160, 30)) as pilot:
        await start(app, pilot, sample)
        assert "JOB" not in header(app) and "CONTAINER" not in header(app)


async def test_job_column_from_100_columns_when_a_process_has_a_job() -> None:
    sample = with_placement(job_id="4801864")
    for width, shown in ((100, True), (99, False), (160, True)):
        app = app_for(sample)
        async with app.run_test(size=(width, 30)) as pilot:
            await start(app, pilot, sample)
            assert ("JOB" in header(app)) is shown, width
            assert "CONTAINER" not in header(app)
            if shown:
                assert "4801864" in table_lines(app)[2]


async def test_container_column_from_130_columns_when_a_process_has_one() -> None:
    sample = with_placement(container_id="3f2a9c1b7d4e")
    for width, shown in ((130, True), (129, False)):
        app = app_for(sample)
        async with app.run_test(size=(width, 30)) as pilot:
            await start(app, pilot, sample)
            assert ("CONTAINER" in header(app)) is shown, width
            assert "JOB" not in header(app)
            if shown:
                assert "3f2a9c1b7d4e" in table_lines(app)[2]


async def test_job_column_goes_when_no_shown_process_has_a_job() -> None:
    gpus = (make_gpu(0), make_gpu(1))
    sample = make_sample(
        gpus,
        (
            make_process(gpus[0], 1, job_id="4242"),
            make_process(gpus[1], 2, job_id=None, user="alice", is_current_user=True),
        ),
    )
    app = app_for(sample)
    async with app.run_test(size=(140, 30)) as pilot:
        await start(app, pilot, sample)
        assert "JOB" in header(app)
        await pilot.press("m")  # only alice's process: no job
        assert "JOB" not in header(app)
        await pilot.press("m")
        assert "JOB" in header(app)


async def test_job_column_stays_at_100_columns_when_the_table_scrolls() -> None:
    """Whether JOB shows must not depend on how many processes there are: one more process
    (a scrollbar) should not make a column come and go at the same terminal width."""
    sample = with_placement(60, job_id="4801864")
    app = app_for(sample)
    async with app.run_test(size=(100, 30)) as pilot:
        await start(app, pilot, sample)
        assert "JOB" in header(app)


# -- the GPU panel: moving through a grid of cards -----------------------------------------


async def test_arrow_keys_move_through_a_grid_of_cards() -> None:
    """200x50, six GPUs: cards three abreast. Up/Down go along a column, Left/Right along
    the GPUs; the selected card is drawn highlighted."""
    sample = make_sample(tuple(make_gpu(index) for index in range(6)))
    app = app_for(sample)
    async with app.run_test(size=(200, 50)) as pilot:
        await start(app, pilot, sample)
        assert app.focused is app.query_one(GpuPanel)
        assert selected_card(app) == 0
        # The grid, as on screen: 0 1 2 / 3 4 5.
        card_rows = [line for line in screen_text(app).splitlines() if "─ GPU " in line]
        assert [re.findall(r"─ GPU (\d)", line) for line in card_rows] == [
            ["0", "1", "2"],
            ["3", "4", "5"],
        ]
        for key, expected in (
            ("down", 3),
            ("right", 4),
            ("up", 1),
            ("up", 4),  # no row above: the bottom of the column
            ("k", 1),
            ("right", 2),
            ("right", 3),  # Right goes on to the next row
            ("left", 2),
            ("j", 5),
            ("h", 4),
            ("l", 5),
        ):
            await pilot.press(key)
            assert selected_card(app) == expected, key
        await pilot.press("down")  # no row below: on to the process table
        assert isinstance(app.focused, ProcessTable)
        assert selected_card(app) == 5


async def test_down_from_a_short_column_goes_to_the_last_card() -> None:
    """Five GPUs three abreast: nothing below GPU 2, Down goes to the last card (a key that
    changed nothing would seem lost)."""
    sample = make_sample(tuple(make_gpu(index) for index in range(5)))
    app = app_for(sample)
    async with app.run_test(size=(200, 50)) as pilot:
        await start(app, pilot, sample)
        await pilot.press("right", "right", "down")
        assert selected_card(app) == 4
        await pilot.press("up")
        assert selected_card(app) == 1
        await pilot.press("down")  # a card below: GPU 4
        assert selected_card(app) == 4


async def test_up_down_go_gpu_by_gpu_in_the_line_layouts() -> None:
    sample = make_sample(tuple(make_gpu(index) for index in range(6)))
    app = app_for(sample)
    async with app.run_test(size=(100, 30)) as pilot:
        await start(app, pilot, sample)
        assert app.query_one(GpuPanel).layout_mode.value == "two-lines"
        await pilot.press("down", "down")
        assert app.query_one(GpuPanel).selected == 2
        await pilot.press("up")
        assert app.query_one(GpuPanel).selected == 1


# -- zoom and the table's share of the screen ----------------------------------------------


def demo_app(gpus: int, processes: int) -> tuple[GpumonApp, DemoSource]:
    ticks = itertools.count()
    source = DemoSource(
        gpus,
        seed=0,
        process_count=processes,
        current_user="alice",
        clock=lambda: FIXED_TIME + next(ticks),
    )
    return create_app(source=source, autostart=False, ascii_only=False), source


SHORT_GPU_UUID = r"GPU-[0-9a-f]{8}\b"


async def test_z_zooms_the_table_over_the_gpu_panel_and_back() -> None:
    app, source = demo_app(8, 64)
    async with app.run_test(size=SIZE) as pilot:
        await push(pilot, source, 1)
        table = app.query_one(ProcessTable)
        before = table.region.height
        rows_before = len(row_pids(app))
        assert re.search(SHORT_GPU_UUID, screen_text(app))  # the GPU panel is on screen
        await pilot.press("z")
        await pilot.pause()
        assert not app.query_one(GpuPanel).display
        assert not re.search(SHORT_GPU_UUID, screen_text(app))
        # Everything between the header line and the host strip and footer.
        assert table.region.height == SIZE[1] - 3
        assert len(row_pids(app)) == SIZE[1] - 3 - ProcessTable.TOP_LINES > rows_before
        assert title(app) == "Processes 64"
        assert app.focused is table
        await push(pilot, source, 1)  # a sample while zoomed does not bring the panel back
        assert not app.query_one(GpuPanel).display
        await pilot.press("z")
        await pilot.pause()
        assert app.query_one(GpuPanel).display
        assert re.search(SHORT_GPU_UUID, screen_text(app))
        assert table.region.height == before


@pytest.mark.parametrize("size", [(120, 40), (200, 50), (80, 24), (120, 30), (100, 20)])
async def test_the_table_keeps_a_third_of_the_screen_with_8_gpus(size: tuple[int, int]) -> None:
    app, source = demo_app(8, 64)
    async with app.run_test(size=size) as pilot:
        await push(pilot, source, 1)
        table = app.query_one(ProcessTable)
        assert table.region.height >= size[1] // 3
        assert len(row_pids(app)) >= size[1] // 3 - ProcessTable.TOP_LINES
        # The GPU panel gave way, and still says how to reach every GPU.
        text = screen_text(app)
        assert re.search(r"GPUs 0-\d of 8 shown", text) or all(
            re.search(rf"(GPU {n} |^ ?{n} )", text, re.M) for n in range(8)
        )


async def test_the_table_keeps_a_third_when_mig_lines_would_fill_the_panel() -> None:
    """Eight MIG GPUs with three instances each: 32 lines of GPUs even one line per GPU;
    the table still gets a third of a 120x40 terminal and the panel scrolls."""
    gpus = tuple(
        make_gpu(index, mig_mode=True, mig_instances=mig_instances(index)) for index in range(8)
    )
    sample = make_sample(gpus, tuple(make_process(gpus[n % 8], 100 + n) for n in range(64)))
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        assert app.query_one(ProcessTable).region.height >= SIZE[1] // 3
        assert re.search(r"GPUs 0-\d of 8 shown", screen_text(app))


# -- FREE ----------------------------------------------------------------------------------


def free_server() -> Sample:
    """GPU 0 busy, 1 idle, 2 idle with its process list refused, 3 lost, 4 idle but holding
    2 GiB nobody lists, 5 idle."""
    gpus = (
        make_gpu(0),
        make_gpu(1, **IDLE),
        make_gpu(2, **IDLE, processes_error="NVML: Insufficient Permissions"),
        GpuStats(index=3, uuid="GPU-00000003-lost", name="NVIDIA Test Board", lost=True),
        make_gpu(4, memory_used_bytes=2 * GIB, utilization_gpu_pct=0),
        make_gpu(5, **IDLE),
    )
    return make_sample(gpus, (make_process(gpus[0], 4242),))


def free_on_cards(text: str) -> set[int]:
    return {int(index) for index in re.findall(r"─ GPU (\d+)  FREE ", text)}


def free_on_rows(text: str) -> set[int]:
    return {int(index) for index in re.findall(r"^ ?(\d+) FREE ", text, re.M)}


async def test_free_marks_only_idle_gpus_whose_processes_are_known() -> None:
    sample = free_server()
    app = app_for(sample)
    async with app.run_test(size=(200, 50)) as pilot:
        await start(app, pilot, sample)
        text = screen_text(app)
        assert re.findall(r"─ GPU (\d+) ", text) == [str(n) for n in range(6)]  # all cards
        assert free_on_cards(text) == {1, 5}


async def test_free_marks_in_the_line_layouts_too() -> None:
    sample = free_server()
    app = app_for(sample)
    async with app.run_test(size=(80, 24)) as pilot:
        await start(app, pilot, sample)
        assert free_on_rows(screen_text(app)) == {1, 5}


async def test_free_follows_the_threshold_setting_and_new_samples() -> None:
    sample = free_server()
    busy_again = make_sample(
        sample.gpus, (*sample.processes, make_process(sample.gpus[1], 77, gpu_memory_bytes=MIB))
    )
    app = app_for(sample, settings=Settings(free_threshold_mib=4096))
    async with app.run_test(size=(200, 50)) as pilot:
        await start(app, pilot, sample)
        assert free_on_cards(screen_text(app)) == {1, 4, 5}  # 2 GiB < 4 GiB
        await start(app, pilot, busy_again)  # a process starts on GPU 1
        assert free_on_cards(screen_text(app)) == {4, 5}


async def test_free_card_with_a_long_name_keeps_its_corners() -> None:
    """An idle RTX 6000 Ada at 120x40: the FREE mark fits in the card title, which still
    ends in its corner, as every card's does."""
    gpus = tuple(
        make_gpu(index, name="NVIDIA RTX 6000 Ada Generation", **IDLE) for index in range(2)
    )
    sample = make_sample(gpus)
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        top = next(line for line in screen_text(app).splitlines() if "─ GPU 0 " in line)
        assert free_on_cards(top) == {0, 1}
        assert top.count("╭") == top.count("╮") == 2
        assert top.rstrip().endswith("─╮")


# -- MIG -----------------------------------------------------------------------------------


def mig_instances(gpu_index: int) -> tuple[MigInstance, ...]:
    return (
        MigInstance(gpu_index, 0, 1, 0, "3g.40gb", f"MIG-1111111{gpu_index}-aaaa", 30 * GIB,
                    40 * GIB),
        MigInstance(gpu_index, 1, 5, 0, "2g.20gb", f"MIG-2222222{gpu_index}-bbbb", 5 * GIB,
                    20 * GIB),
        MigInstance(gpu_index, 2, 13, 0, "1g.10gb", f"MIG-3333333{gpu_index}-cccc", 0,
                    10 * GIB),
    )  # fmt: skip


def mig_server(**second_gpu: object) -> Sample:
    """GPU 0 in MIG mode with three instances (two processes in GI 1, one in GI 5), GPU 1 in
    MIG mode with its instances unreadable."""
    gpu0 = make_gpu(0, name="NVIDIA A100-SXM4-80GB", mig_mode=True, mig_instances=mig_instances(0),
                    utilization_gpu_pct=None, memory_total_bytes=80 * GIB)  # fmt: skip
    fields: dict[str, object] = dict(
        name="NVIDIA A100-SXM4-80GB", mig_mode=True, mig_instances=None, **IDLE
    )
    fields.update(second_gpu)
    gpu1 = make_gpu(1, **fields)
    processes = (
        make_process(gpu0, 100, gpu_instance_id=1, compute_instance_id=0),
        make_process(gpu0, 101, gpu_instance_id=1, compute_instance_id=0),
        make_process(gpu0, 102, gpu_instance_id=5, compute_instance_id=0),
    )
    return make_sample((gpu0, gpu1), processes)


async def test_mig_gpu_lists_its_instances_in_its_card() -> None:
    sample = mig_server()
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        lines = screen_text(app).splitlines()
        mig = [line for line in lines if "│ MIG " in line[:8]]
        assert len(mig) == 3
        assert re.search(r"MIG 3g\.40gb\s+GI 1 CI 0 .*30\.0/40\.0G\s+2 proc MIG-", mig[0])
        assert re.search(r"MIG 2g\.20gb\s+GI 5 CI 0 .*5\.0/20\.0G\s+1 proc MIG-", mig[1])
        assert re.search(r"MIG 1g\.10gb\s+GI 13 CI 0 .*0\.0/10\.0G\s+0 proc MIG-", mig[2])
        # The card grows to hold them: every MIG line is inside its border.
        assert all(line.startswith("│") and line.rstrip().endswith("│") for line in mig)
        # The unreadable GPU says so in one line, in the same row of cards.
        assert "MIG on: instances not readable here" in mig[0]
        assert sum("MIG on: instances not readable here" in line for line in lines) == 1
        # Not FREE: unknown memory per instance.
        assert not free_on_cards("\n".join(lines))
        # The processes read GPU / GPU instance.
        assert [line.split()[0] for line in table_lines(app)[2:5]] == ["0/1", "0/1", "0/5"]


@pytest.mark.parametrize(
    "size",
    [
        (120, 40),
        (200, 50),
        (100, 30),
    ],
)
async def test_each_mig_instance_shows_its_short_uuid_whole(size: tuple[int, int]) -> None:
    """The MIG UUID is what CUDA_VISIBLE_DEVICES takes: each instance line shows its short
    form whole, at the usual 120x40 too."""
    sample = mig_server()
    app = app_for(sample)
    async with app.run_test(size=size) as pilot:
        await start(app, pilot, sample)
        text = screen_text(app)
        for short in ("MIG-11111110", "MIG-22222220", "MIG-33333330"):
            assert short in text


async def test_mig_instances_show_no_process_count_when_processes_are_unknown() -> None:
    """A MIG GPU whose process list was refused: its instances show no "0 proc"."""
    refused = make_sample(
        (
            make_gpu(
                0,
                mig_mode=True,
                mig_instances=mig_instances(0),
                processes_error="NVML: Insufficient Permissions",
            ),
        )
    )
    app = app_for(refused)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, refused)
        mig = [line for line in screen_text(app).splitlines() if "│ MIG " in line[:8]]
        assert len(mig) == 3
        assert not any("proc" in line for line in mig)


async def test_mig_lines_in_the_two_line_layout() -> None:
    sample = mig_server()
    app = app_for(sample)
    async with app.run_test(size=(100, 30)) as pilot:
        await start(app, pilot, sample)
        text = screen_text(app)
        assert "─ GPU" not in text  # no cards below 120 columns
        assert re.search(r"^ +MIG 3g\.40gb +GI 1 CI 0", text, re.M)
        assert "MIG on: instances not readable here" in text


# -- u: the per-user summary ---------------------------------------------------------------


def users_server() -> Sample:
    """alice (me) on GPUs 0 and 1 with 6 GiB, bob on 1 with 10 GiB and one process whose
    memory is N/A, an owner that cannot be read on 0, another namespace's process on 1;
    GPU 2's process list refused."""
    gpus = (make_gpu(0), make_gpu(1), make_gpu(2, processes_error="NVML: Insufficient Permissions"))
    processes = (
        make_process(gpus[0], 100, user="alice", gpu_memory_bytes=2 * GIB, is_current_user=True),
        make_process(gpus[1], 101, user="alice", gpu_memory_bytes=4 * GIB, is_current_user=True),
        make_process(gpus[1], 200, user="bob", gpu_memory_bytes=10 * GIB),
        make_process(gpus[1], 201, user="bob", gpu_memory_bytes=None),
        make_process(gpus[0], 300, user=None, gpu_memory_bytes=GIB),
        make_process(gpus[1], 400, user=None, command=None, visible=False,
                     gpu_memory_bytes=3 * GIB),
    )  # fmt: skip
    # Read as NVML reads them without MIG, with an SM utilisation: whether each is idle
    # is known (the users screen's IDLE-MEM reads "-", not N/A).
    processes = tuple(dataclasses.replace(p, sm_utilization_pct=0) for p in processes)
    return make_sample(gpus, processes)


def summary_rows(app: GpumonApp) -> list[list[str]]:
    lines = screen_text(app).splitlines()
    start = next(n for n, line in enumerate(lines) if line.split()[:1] == ["USER"])
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


async def test_u_opens_the_user_summary_and_escape_goes_back() -> None:
    sample = users_server()
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        await pilot.press("u")
        await pilot.pause()
        assert isinstance(app.screen, UserSummaryScreen)
        text = screen_text(app)
        assert "Users of the GPUs" in text
        assert re.search(r"USER\s+GPUS\s+GPU-MEM\s+PROCS\s+IDLE-MEM", text)
        assert summary_rows(app) == [  # no process idle yet: IDLE-MEM reads "-"
            ["bob", "1", ">=10.0G", "2", "-"],
            ["alice", "0,1", "6.0G", "2", "-"],
            ["(other namespace)", "1", "3.0G", "1", "-"],
            ["?", "0", "1.0G", "1", "-"],
        ]
        assert "Not counted: GPU 2" in text
        assert ">=: some of the user's processes have GPU memory N/A." in text
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, DashboardScreen)
        assert title(app) == "Processes >= 6"  # GPU 2's list refused


async def test_user_summary_updates_with_new_samples() -> None:
    sample = users_server()
    gpu = sample.gpus[0]
    later = make_sample(
        sample.gpus,
        (
            *sample.processes,
            make_process(gpu, 500, user="chen", gpu_memory_bytes=20 * GIB, sm_utilization_pct=0),
        ),
    )
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        await pilot.press("u")
        await pilot.pause()
        assert "chen" not in screen_text(app)
        await start(app, pilot, later)
        assert summary_rows(app)[0] == ["chen", "0", "20.0G", "1", "-"]


async def test_user_summary_counts_every_process_whatever_the_table_filter() -> None:
    sample = users_server()
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        await pilot.press("m")
        assert title(app) == "Processes >= 2 of >= 6  filter: mine"
        await pilot.press("u")
        await pilot.pause()
        assert [row[0] for row in summary_rows(app)] == [
            "bob",
            "alice",
            "(other namespace)",
            "?",
        ]
        await pilot.press("escape")
        await pilot.pause()
        assert title(app) == "Processes >= 2 of >= 6  filter: mine"  # the filter is kept


async def test_user_summary_title_counts_the_rows_it_lists() -> None:
    sample = users_server()
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        await pilot.press("u")
        await pilot.pause()
        rows = summary_rows(app)
        assert f"Users of the GPUs: >= {len(rows)} " in screen_text(app)  # GPU 2 refused


async def test_a_filter_on_a_gpu_whose_list_is_known_counts_it_exactly() -> None:
    """GPU 2's list is refused: the total is ">= 6", but GPU 0's rows are all there is."""
    sample = users_server()
    on_gpu_0 = sum(process.gpu_index == 0 for process in sample.processes)
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        await pilot.press("f")
        assert title(app) == f"Processes {on_gpu_0} of >= 6  filter: GPU 0"


async def test_a_filter_that_leaves_no_row_keeps_the_column_titles() -> None:
    """JOB and SM% stay in the header when the filter matches nothing (no jumping titles)."""
    gpu = make_gpu(0)
    sample = make_sample((gpu,), (make_process(gpu, 4000, job_id="1234", sm_utilization_pct=50),))
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await start(app, pilot, sample)
        before = next(line for line in screen_text(app).splitlines() if " PID " in line)
        assert "JOB" in before and "SM%" in before
        await pilot.press("slash", *"nothing-matches", "enter")
        await pilot.pause()
        text = screen_text(app)
        assert "No process matches the filter" in text
        assert next(line for line in text.splitlines() if " PID " in line) == before
