"""The process table's TIME: to the minute by default (``<1m``, ``17m``, ``5h17m``), so a cell
changes once a minute; to the second for a user who sets ``time_seconds`` (a wider column).
The process detail screen says how long ago a process started to the second either way."""

from __future__ import annotations

from rich.text import Text

from gpumon.config import Settings
from gpumon.sources.host.details import ProcessDetails
from gpumon.ui.dashboard.app import GpumonApp
from gpumon.ui.dashboard.process_detail import render_identity
from gpumon.ui.widgets.process_table import ProcessTable
from tests.support.ui_helpers import (
    FIXED_TIME,
    app_for,
    make_gpu,
    make_process,
    make_sample,
    screen_text,
)

GPU = make_gpu(0)
AGES_S = {101: 12.0, 102: 17 * 60 + 4.0, 103: 5 * 3600 + 17 * 60 + 4.0, 104: 3 * 86_400 + 3723.0}
SAMPLE = make_sample(
    (GPU,), tuple(make_process(GPU, pid, elapsed_s=age) for pid, age in AGES_S.items())
)


def rows(app: GpumonApp) -> dict[int, str]:
    """Each process row on the screen, by its PID."""
    region = app.query_one(ProcessTable).region
    lines = screen_text(app).splitlines()[region.y : region.bottom]
    found = {}
    for line in lines:
        words = line[region.x : region.right].split()
        if len(words) > 1 and words[1].isdigit() and int(words[1]) in AGES_S:
            found[int(words[1])] = " ".join(words)
    return found


async def table_rows(settings: Settings | None, size: tuple[int, int]) -> dict[int, str]:
    app = app_for(SAMPLE, settings=settings) if settings else app_for(SAMPLE)
    async with app.run_test(size=size) as pilot:
        app.receive_sample(SAMPLE)
        await pilot.pause()
        return rows(app)


async def test_time_reads_to_the_minute_by_default() -> None:
    shown = await table_rows(None, (120, 30))
    assert " <1m python job_101.py" in shown[101]
    assert " 17m python job_102.py" in shown[102]
    assert " 5h17m python job_103.py" in shown[103]
    assert " 3d01h python job_104.py" in shown[104]


async def test_time_seconds_setting_shows_every_second_at_80_columns() -> None:
    shown = await table_rows(Settings(time_seconds=True), (80, 24))
    assert " 12s python job_101.py" in shown[101]
    assert " 17m04s python job_102.py" in shown[102]
    assert " 5h17m04s python job_103.py" in shown[103]
    assert " 3d01h02m03s python job_104.py" in shown[104]  # whole: the column widens


def test_the_process_detail_says_when_a_process_started_to_the_second() -> None:
    started = FIXED_TIME - (5 * 3600 + 17 * 60 + 4)
    details = ProcessDetails(103, visible=True, command="python job_103.py", started_at_s=started)
    text: Text = render_identity((0, 103), SAMPLE.processes[2], details, FIXED_TIME)
    assert "(5h17m04s ago)" in text.plain
