"""On a narrow terminal (down to the 40x10 minimum) every number on screen is shown whole or
not at all: a line gives up whole fields, in a fixed order, instead of being cut at the
edge (``CPU% 123`` never reads ``12``, ``Swap 12.3/64.0G`` never ``Swap 12.3/64``)."""

from __future__ import annotations

import dataclasses
import itertools
import re

import pytest

from gpumon.config import Settings
from gpumon.data import format as fmt
from gpumon.data.model import GpuProcess, HostStats
from gpumon.ui.dashboard.app import GpumonApp, create_app
from gpumon.ui.dashboard.gpu_detail import GpuDetailScreen
from gpumon.ui.dashboard.process_detail import ProcessDetailScreen
from gpumon.ui.widgets.process_table import ProcessTable
from gpumon.ui.widgets.text_lines import TextLines
from tests.support.ui_helpers import (
    GIB,
    MIB,
    StaticSource,
    app_for,
    demo_app,
    make_gpu,
    make_process,
    make_sample,
    push,
    screen_text,
)


@pytest.mark.parametrize("width", [40, 41, 44, 48, 49, 50, 51, 60])
async def test_process_rows_fit_the_table_with_whole_cells(width: int) -> None:
    """More rows than fit (a scrollbar): each row's cells are whole; CPU% shows only where it
    fits in full, and COMMAND ends with an ellipsis when cut."""
    gpu = make_gpu(0)
    processes = tuple(make_process(gpu, 4000 + i, cpu_pct=123.0) for i in range(30))
    sample = make_sample((gpu,), processes)
    app = app_for(sample)
    async with app.run_test(size=(width, 10)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        table = app.dashboard.query_one(ProcessTable)
        lines = screen_text(app).splitlines()
        header = next(line for line in lines if "PID" in line)[: table._width]
        row = next(line for line in lines if " 4000 " in line)[: table._width]
    titles = [title.rstrip("▲▼") for title in header.split()]
    cells = row.split()
    assert titles[:4] == ["GPU", "PID", "USER", "GPU-MEM"]
    assert cells[:4] == ["0", "4000", "bob", "2.0G"]
    if "CPU%" in titles:
        assert cells[4] == "123"
    assert width < 50 or "CPU%" in titles
    command = row[header.index(titles[-1]) :].rstrip() if titles[-1].startswith("COMMA") else ""
    assert command and ("python job_4000.py".startswith(command) or command.endswith("…"))
    assert command == "python job_4000.py" or command.endswith("…")


def overflowing_lines(app: GpumonApp, selector: str) -> list[str]:
    """The lines of a detail screen's text that are wider than the widget showing them (cut
    at its right edge: the end of a number, a chart's newest columns)."""
    widget = app.screen.query_one(selector, TextLines)
    lines = widget.content.plain.splitlines()
    return [line for line in lines if fmt.cell_len(line) > widget.size.width]


@pytest.mark.parametrize("width", [40, 43, 50, 60])
async def test_gpu_detail_lines_fit_the_screen(width: int) -> None:
    """Enter on a GPU at 40 columns: the charts are drawn for the width the scroll area has
    (their newest columns, on the right, show), and a title line gives up ``min``, ``max``
    and the span whole (``max 190M`` never reads ``max 19``)."""
    app, source = demo_app(1)
    async with app.run_test(size=(width, 24)) as pilot:
        await push(pilot, source, 3)
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, GpuDetailScreen)
        graphs = app.screen.query_one("#gpu-detail-graphs", TextLines).content.plain
        assert overflowing_lines(app, "#gpu-detail-graphs") == []
        assert overflowing_lines(app, "#gpu-detail-processes") == []
        # A chart's last column is the newest sample: there are 3, so it is drawn.
        rows = graphs.splitlines()[1:4]
        assert any(row.rstrip()[-1:] in "▁▂▃▄▅▆▇█" and row.rstrip() for row in rows)
        memory = next(line for line in graphs.splitlines() if line.startswith("Memory used"))
        assert re.fullmatch(r"Memory used  \S+(   min \S+)?(  max \S+)?(   \(.*\))?", memory)


@pytest.mark.parametrize("width", [40, 46, 60])
async def test_process_detail_lines_fit_the_screen(width: int) -> None:
    """Enter on a process at 40 columns: its charts and their titles fit, and the identity's
    fields (user, PID, GPU, Slurm job, container) go to the next line whole rather than
    being cut at the edge."""
    app, source = demo_app(1)
    async with app.run_test(size=(width, 30)) as pilot:
        await push(pilot, source, 3)
        await pilot.press("tab", "enter")
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, ProcessDetailScreen)
        assert overflowing_lines(app, "#process-detail-history") == []
        assert overflowing_lines(app, "#process-detail-identity") == []
        identity = app.screen.query_one("#process-detail-identity", TextLines).content.plain
        assert f"PID {app.screen.key[1]}" in identity and "Container " in identity


BIG_HOST = HostStats(
    "gpu-node-07", 45.0, (112.45, 110.2, 98.33), int(456.7 * GIB), int(2015.6 * GIB),
    int(12.3 * GIB), 64 * GIB, 256,
)  # fmt: skip


@pytest.mark.parametrize(
    ("width", "shown", "gone"),
    [
        (120, ["load 112.45 110.20 98.33", "[", "RAM", "Swap 12.3/64.0G"], []),
        (80, ["RAM [", "Swap 12.3/64.0G"], ["load"]),
        (60, ["RAM 456.7/2015.6G", "Swap 12.3/64.0G"], ["load", "["]),
        (40, ["CPU   45%", "RAM 456.7/2015.6G"], ["load", "[", "Swap"]),
    ],
)
async def test_host_strip_drops_whole_fields(width: int, shown: list[str], gone: list[str]) -> None:
    """A big server's host strip: the load goes first, then the bars, then Swap, whole;
    what stays ends with its unit (``Swap 12.3/64.0G``, not ``Swap 12.3/64``)."""
    sample = make_sample((make_gpu(0),), host=BIG_HOST)
    app = app_for(sample)
    async with app.run_test(size=(width, 24)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        strip = screen_text(app).splitlines()[-2].rstrip()
    assert strip.endswith("G"), strip
    assert all(text in strip for text in shown), strip
    assert not any(text in strip for text in gone), strip


@pytest.mark.parametrize("width", [70, 72, 74, 76, 78, 80, 90])
@pytest.mark.parametrize("pstate", [2, 12])
async def test_two_line_gpu_row_drops_whole_flags(width: int, pstate: int) -> None:
    """The two-line GPU row's first line: MIG goes first, then ECC, Pers, the P-state, each
    whole (at 70 columns ``ECC 12345`` read ``ECC 1234``; ``MIG Off`` read ``MIG O``)."""
    gpu = make_gpu(0, ecc_errors_uncorrected_volatile=12345, performance_state=pstate)
    sample = make_sample((gpu,))
    app = app_for(sample)
    async with app.run_test(size=(width, 24)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        line = screen_text(app).splitlines()[1].rstrip()
    flags = [f" P{pstate}", " Pers On", " ECC 12345", " MIG Off"]
    shown = [flag for flag in flags if flag in line]
    assert shown == flags[: len(shown)], line  # the first ones, in order
    assert line.endswith(shown[-1] if shown else "%"), line
    assert width < 90 or len(shown) == len(flags)


@pytest.mark.parametrize("width", [40, 50, 60, 69])
async def test_one_line_gpu_rows_keep_the_memory_whole(width: int) -> None:
    """One line per GPU (a short terminal): a FREE GPU's and a big GPU's memory end with
    their unit; where the bars leave no room, the bars go."""
    big = make_gpu(0, memory_used_bytes=int(139.8 * GIB), memory_total_bytes=int(140.4 * GIB))
    free = make_gpu(1, memory_used_bytes=3 * MIB, utilization_gpu_pct=0,
                    memory_total_bytes=int(140.4 * GIB))  # fmt: skip
    sample = make_sample((big, free))
    app = app_for(sample)
    async with app.run_test(size=(width, 10)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        lines = screen_text(app).splitlines()
    assert lines[1].rstrip().endswith(" 139.8/140.4G"), lines[1]
    assert "FREE" in lines[2] and lines[2].rstrip().endswith(" 0.0/140.4G"), lines[2]


async def users_screen(width: int, *processes: GpuProcess) -> list[str]:
    """The users screen (``u``) at ``width`` columns after 20 samples a second apart: a
    process at 0 % SM is held idle after 6 s."""
    gpus = tuple(make_gpu(index) for index in range(8))
    base = make_sample(gpus, processes)
    app = create_app(StaticSource(base), autostart=False, ascii_only=False,
                     settings=Settings(idle_after_minutes=0.1))  # fmt: skip
    ticks = itertools.count()
    app.pipeline.idle.clock = lambda: float(next(ticks))
    async with app.run_test(size=(width, 20)) as pilot:
        for step in range(20):
            app.receive_sample(dataclasses.replace(base, timestamp_s=base.timestamp_s + step))
        await pilot.pause()
        await pilot.press("u")
        await pilot.pause()
        return screen_text(app).splitlines()


@pytest.mark.parametrize("width", [80, 64, 62, 60, 50, 40])
async def test_users_screen_columns_fit_whole(width: int) -> None:
    """IDLE-MEM ``12.3G`` never reads ``12.`` (the README's 60x15 tmux pane): the columns are
    as wide as what they hold, and where they still do not fit the last ones go, whole,
    with a line saying which."""
    gpu = make_gpu(0)
    alice = make_process(gpu, 4242, user="alice", gpu_memory_bytes=int(12.3 * GIB),
                         sm_utilization_pct=0)  # fmt: skip
    lines = await users_screen(width, alice)
    header = next(line for line in lines if line.startswith("USER"))
    row = next(line for line in lines if line.startswith("alice"))
    titles, cells = header.split(), row.split()
    assert titles[:3] == ["USER", "GPUS", "GPU-MEM"]
    assert cells[: len(titles)] == ["alice", "0", "12.3G", "1", "12.3G"][: len(titles)]
    if len(titles) < 5:
        dropped = ", ".join(["PROCS", "IDLE-MEM"][len(titles) - 3 :])
        assert any(f"Not shown here (a wider terminal shows them): {dropped}." in line
                   for line in lines)  # fmt: skip
    assert width < 60 or titles == ["USER", "GPUS", "GPU-MEM", "PROCS", "IDLE-MEM"]


async def test_users_screen_long_names_and_many_gpus_at_40_columns() -> None:
    """A 30-letter user name is cut (with an ellipsis) before a number would be; eight
    GPUs in a row read ``0-7``."""
    gpus = [make_gpu(index) for index in range(8)]
    name = "a-very-long-user-name-from-ldap"
    processes = [
        make_process(gpu, 5000 + gpu.index, user=name, gpu_memory_bytes=int(1.5 * GIB))
        for gpu in gpus
    ]
    lines = await users_screen(40, *processes)
    row = next(line for line in lines if line.startswith("a-very"))
    user, gpus_text, memory = row.split()[:3]
    assert user.endswith("…") and name.startswith(user[:-1])
    assert (gpus_text, memory) == ("0-7", "12.0G")


async def test_users_screen_notes_wrap_at_50_columns() -> None:
    """The note under the table wraps: its ``6s`` is not cut off at the edge."""
    gpu = make_gpu(0)
    alice = make_process(gpu, 4242, user="alice", gpu_memory_bytes=int(12.3 * GIB),
                         sm_utilization_pct=0)  # fmt: skip
    lines = await users_screen(50, alice)
    start = next(number for number, line in enumerate(lines) if line.startswith("IDLE-MEM:"))
    note = " ".join(line.strip() for line in lines[start : start + 2])
    assert "at or below 5 % SM for 6s or more." in note


@pytest.mark.parametrize("width", [80, 82, 84, 86, 88])
async def test_two_line_gpu_row_note_comes_before_whole_flags(width: int) -> None:
    """A note (``watching``) goes before the P-state and flags; the flags that no longer fit
    after it go whole."""
    gpu = make_gpu(0, ecc_errors_uncorrected_volatile=12345)
    sample = make_sample((gpu,))
    app = app_for(sample)
    async with app.run_test(size=(width, 24)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        await pilot.press("w")
        await pilot.pause()
        line = screen_text(app).splitlines()[1].rstrip()
    assert "watch" in line, line
    flags = [" P2", " Pers On", " ECC 12345", " MIG Off"]
    shown = [flag for flag in flags if flag in line]
    assert shown == flags[: len(shown)], line
    if shown:
        assert line.endswith(shown[-1]), line
