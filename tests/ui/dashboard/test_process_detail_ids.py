"""Pilot tests: the process detail screen says which Slurm job and which container a
process runs in, ``none`` when it is in none, N/A when its cgroup is not here to read."""

from __future__ import annotations

from typing import Any

import pytest
from textual.pilot import Pilot

from gpumon.data.model import GpuProcess, Sample
from gpumon.ui.dashboard.app import GpumonApp
from gpumon.ui.dashboard.process_detail import ProcessDetailScreen
from gpumon.ui.widgets.process_table import ProcessTable
from gpumon.ui.widgets.text_lines import TextLines
from tests.support.ui_helpers import app_for, demo_app, make_gpu, make_process, make_sample, push

SIZE = (120, 40)
GPU = make_gpu(0)


def identity(app: GpumonApp) -> str:
    content = app.screen.query_one("#process-detail-identity", TextLines).content
    return content if isinstance(content, str) else content.plain  # type: ignore[union-attr]


def placement_line(app: GpumonApp) -> str:
    return next(line for line in identity(app).splitlines() if line.startswith("Slurm job"))


def one_process(process: GpuProcess | None) -> Sample:
    # Simulated: the screen reads nothing of these made-up PIDs from this host.
    return make_sample((GPU,), (process,) if process else (), simulated=True)


async def open_the_process(pilot: Pilot[Any], sample: Sample) -> None:
    app = pilot.app
    assert isinstance(app, GpumonApp)
    app.receive_sample(sample)
    await pilot.pause()
    await pilot.press("tab", "enter")
    await pilot.pause()
    assert isinstance(app.screen, ProcessDetailScreen)


async def test_a_process_in_a_slurm_job_and_a_container_shows_both() -> None:
    sample = one_process(make_process(GPU, 4242, job_id="4812345", container_id="3f2a9c1b7d4e"))
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await open_the_process(pilot, sample)
        assert placement_line(app) == "Slurm job 4812345    Container 3f2a9c1b7d4e"
        lines = identity(app).splitlines()
        # Right under "User ... PID ... GPU".
        assert (
            lines.index(placement_line(app))
            == lines.index(next(line for line in lines if line.startswith("User "))) + 1
        )


async def test_a_process_in_neither_says_none() -> None:
    sample = one_process(make_process(GPU, 4243))
    app = app_for(sample)
    async with app.run_test(size=SIZE) as pilot:
        await open_the_process(pilot, sample)
        assert placement_line(app) == "Slurm job none    Container none"


async def test_a_process_outside_this_pid_namespace_is_na_not_none() -> None:
    """Its cgroup cannot be read from here: unknown, which is not "in no job"."""
    hidden = make_process(
        GPU, 4244, visible=False, user=None, command=None, cpu_pct=None, rss_bytes=None
    )
    app = app_for(one_process(hidden))
    async with app.run_test(size=SIZE) as pilot:
        await open_the_process(pilot, one_process(hidden))
        assert placement_line(app) == "Slurm job N/A    Container N/A"


async def test_the_ids_stay_once_the_process_leaves_the_gpu() -> None:
    present = one_process(make_process(GPU, 4245, job_id="77", container_id="abcdef012345"))
    app = app_for(present)
    async with app.run_test(size=SIZE) as pilot:
        await open_the_process(pilot, present)
        app.receive_sample(one_process(None))
        await pilot.pause()
        assert isinstance(app.screen, ProcessDetailScreen) and app.screen.ended
        assert placement_line(app) == "Slurm job 77    Container abcdef012345"


@pytest.mark.slow
async def test_demo_processes_show_their_simulated_ids() -> None:
    """``--demo``: the selected process's ids, as the demo source made them."""
    app, source = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        shown: list[str] = []
        sample = await push(pilot, source, 3)
        await pilot.press("tab")
        table = app.query_one(ProcessTable)
        for _ in sample.processes:
            key = table.cursor_key
            process = next(p for p in sample.processes if p.key == key)
            await pilot.press("enter")
            await pilot.pause()
            line = placement_line(app)
            job = process.job_id or ("N/A" if not process.visible else "none")
            container = process.container_id or ("N/A" if not process.visible else "none")
            assert line == f"Slurm job {job}    Container {container}"
            shown.append(line)
            await pilot.press("escape", "down")
            await pilot.pause()
    assert any(line.startswith("Slurm job 48") for line in shown)
    assert any(not line.endswith("Container none") for line in shown)
