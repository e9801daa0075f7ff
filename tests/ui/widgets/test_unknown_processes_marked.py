"""A GPU whose processes are unknown never reads as idle: its card and row say ``procs ?``,
``gpumon status`` marks it ``?``, ``w`` on it says no FREE can come while they stay unknown,
a LOST GPU has its own line in the process table, and ``--only`` naming no GPU here says so
instead of "No processes on any GPU."."""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot

from gpumon.config import Settings
from gpumon.data.model import Sample
from gpumon.ui.widgets.process_columns import EMPTY_NONE
from tests.commands.test_status import run_status
from tests.support.ui_helpers import GIB, app_for, make_gpu, make_process, make_sample, screen_text
from tests.ui.test_watch import notices, select_gpu

REFUSED = "NVML: Not Supported"


def server() -> Sample:
    """GPU 0 busy (PID 100), GPU 1 idle-looking with its process list refused, GPU 2 LOST,
    GPU 3 FREE."""
    gpus = (
        make_gpu(0),
        make_gpu(1, processes_error=REFUSED, memory_used_bytes=0, utilization_gpu_pct=0),
        make_gpu(2, lost=True, lost_reason="fell off the bus"),
        make_gpu(3, memory_used_bytes=0, utilization_gpu_pct=0),
    )
    return make_sample(gpus, (make_process(gpus[0], 100),))


async def shown(size: tuple[int, int], **settings: Any) -> str:
    app = app_for(server(), settings=Settings(**settings))
    async with app.run_test(size=size) as pilot:
        app.receive_sample(server())
        await pilot.pause()
        return screen_text(app)


def lines_of(text: str, gpu: str) -> list[str]:
    return [line for line in text.splitlines() if gpu in line]


@pytest.mark.parametrize("size", [(150, 40), (100, 40)], ids=["cards", "rows"])
async def test_a_gpu_whose_processes_are_unknown_says_procs_question_mark(
    size: tuple[int, int],
) -> None:
    text = await shown(size)
    assert text.count("procs ?") == 1
    # On the refused GPU's card (its bottom border, two cards side by side) or row.
    marked = next(line for line in text.splitlines() if "procs ?" in line)
    if size[0] == 150:
        assert marked.index("procs ?") > marked.index("╰") and marked.index("procs ?") > 75
    else:
        assert marked.startswith(" 1 ")


async def test_a_lost_gpu_has_its_own_line_in_the_process_table() -> None:
    text = await shown((150, 40))
    assert "GPU 1: processes N/A (NVML: Not Supported)" in text
    assert "GPU 2: processes N/A (LOST: no readings)" in text


async def test_only_naming_no_gpu_here_says_so_not_no_processes() -> None:
    text = await shown((150, 40), only_gpus=("12",))
    assert EMPTY_NONE not in text
    assert "No GPU shown: --only 12: no such GPU here (GPUs here: 0-3)." in text


def test_status_marks_a_gpu_whose_processes_are_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    code, line = run_status(monkeypatch, [], server())
    assert (code, line) == (0, "GPU 0:73/50% 1:0/0%? 2:LOST 3:FREE\n")


def test_eight_unknown_gpus_still_leave_room_for_a_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    gpus = tuple(
        make_gpu(
            index, processes_error=REFUSED, utilization_gpu_pct=100, memory_used_bytes=24 * GIB
        )
        for index in range(8)
    )
    code, line = run_status(monkeypatch, [], make_sample(gpus))
    assert code == 0 and line.count("?") == 8 and len(line.rstrip("\n")) < 100


async def watch_gpu(pilot: Pilot[Any], index: int) -> list[str]:
    await select_gpu(pilot, index)
    await pilot.press("w")
    await pilot.pause()
    return [notice for notice in notices(pilot.app) if "Watching" in notice]


@pytest.mark.parametrize(("index", "why"), [(1, REFUSED), (2, "LOST")])
async def test_w_on_a_gpu_whose_processes_are_unknown_promises_no_free(
    index: int, why: str
) -> None:
    app = app_for(server())
    async with app.run_test(size=(150, 40)) as pilot:
        app.receive_sample(server())
        await pilot.pause()
        (said,) = await watch_gpu(pilot, index)
        assert f"Watching GPU {index}" in said
        assert f"its processes are unknown ({why})" in said
        assert "cannot be told FREE" in said and "you will be told" not in said
        assert "watching" in screen_text(app)  # it still watches


async def test_w_on_a_known_gpu_still_promises_the_notice() -> None:
    app = app_for(server())
    async with app.run_test(size=(150, 40)) as pilot:
        app.receive_sample(server())
        await pilot.pause()
        (said,) = await watch_gpu(pilot, 0)
        assert "you will be told when it is FREE" in said
