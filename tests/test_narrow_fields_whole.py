"""On a narrow terminal (down to the 40x10 minimum) every number on screen is shown whole or
not at all: a line gives up whole fields, in a fixed order, instead of being cut at the
edge (``CPU% 123`` never reads ``12``, ``Swap 12.3/64.0G`` never ``Swap 12.3/64``)."""

from __future__ import annotations

import re

import pytest

from gpumon.data import format as fmt
from gpumon.ui.dashboard.app import GpumonApp
from gpumon.ui.dashboard.gpu_detail import GpuDetailScreen
from gpumon.ui.dashboard.process_detail import ProcessDetailScreen
from gpumon.ui.widgets.process_table import ProcessTable
from gpumon.ui.widgets.text_lines import TextLines
from tests.ui_helpers import (
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
