"""Pilot tests of the detail screens (``Enter`` on a GPU or a process): they open on what was
selected, their graphs move with new samples, they say what they cannot know, and ``Escape``
goes back to the dashboard as it was."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from textual.containers import VerticalScroll
from textual.pilot import Pilot

from gpumon.data.fields import FIELDS
from gpumon.data.model import GpuStats, Sample
from gpumon.sources.host import details as process_details
from gpumon.ui.dashboard.app import GpumonApp
from gpumon.ui.dashboard.gpu_detail import GpuDetailScreen
from gpumon.ui.dashboard.process_detail import ProcessDetailScreen
from gpumon.ui.widgets.gpu_panel import GpuPanel
from gpumon.ui.widgets.process_table import ProcessTable
from gpumon.ui.widgets.text_lines import TextLines
from tests.support.ui_helpers import (
    app_for,
    demo_app,
    make_gpu,
    make_process,
    make_sample,
    push,
    screen_text,
)

SIZE = (120, 40)
LOST_REASON = "GPU has fallen off the bus"


def lose(sample: Sample, index: int) -> Sample:
    """``sample`` with GPU ``index`` lost, as the NVML source reports it (identity only)."""
    gpus = tuple(
        GpuStats(
            index=gpu.index,
            uuid=gpu.uuid,
            name=gpu.name,
            pci_bus_id=gpu.pci_bus_id,
            lost=True,
            lost_reason=LOST_REASON,
        )
        if gpu.index == index
        else gpu
        for gpu in sample.gpus
    )
    processes = tuple(p for p in sample.processes if p.gpu_index != index)
    return dataclasses.replace(sample, gpus=gpus, processes=processes)


def static_text(app: GpumonApp, selector: str) -> str:
    content = app.screen.query_one(selector, TextLines).content
    return content if isinstance(content, str) else content.plain  # type: ignore[union-attr]


def unwrapped(text: str) -> str:
    """Text without its whitespace: a long command line is wrapped over several lines."""
    return "".join(text.split())


def title(app: GpumonApp) -> str:
    return screen_text(app).splitlines()[0]


def chart_rows(graphs: str, name: str) -> list[str]:
    """The three rows of the chart under the graph titled ``name``."""
    lines = graphs.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{name}  "))
    return lines[start + 1 : start + 4]


def own_text(app: GpumonApp) -> str:
    """The screen without Textual's own chrome: the footer (its key glyphs) and the
    scroll area's vertical scrollbar (its thumb's partial-block glyphs)."""
    scrollbar = app.screen.query_one(VerticalScroll).vertical_scrollbar.region
    lines = screen_text(app).splitlines()[:-1]
    return "\n".join(
        line[: scrollbar.x] + line[scrollbar.right :]
        if scrollbar.y <= y < scrollbar.bottom
        else line
        for y, line in enumerate(lines)
    )


async def scroll_through(pilot: Pilot[Any]) -> str:
    """Page down to the end of a detail screen: every line it showed on the way."""
    app = pilot.app
    scroll = app.screen.query_one(VerticalScroll)
    seen = [screen_text(app)]
    for _ in range(20):
        if scroll.scroll_y >= scroll.max_scroll_y:
            break
        await pilot.press("pagedown")
        await pilot.pause()
        seen.append(screen_text(app))
    assert scroll.scroll_y >= scroll.max_scroll_y, "never reached the end"
    return "\n".join(seen)


# -- GPU detail ------------------------------------------------------------------------------


async def test_enter_opens_the_selected_gpu_and_escape_goes_back_to_it() -> None:
    app, source = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await push(pilot, source, 30)
        await pilot.press("right", "right")  # two steps: GPU 2
        panel = app.query_one(GpuPanel)
        assert panel.selected_gpu is not None and panel.selected_gpu.index == 2
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, GpuDetailScreen)
        assert app.screen.index == 2
        head = title(app)
        assert head.startswith(" GPU 2  DEMO (simulated)  NVIDIA RTX A6000  GPU-")
        assert "LOST" not in head
        assert "esc Back" in screen_text(app).splitlines()[-1]  # the footer says how back
        graphs = static_text(app, "#gpu-detail-graphs")
        for name in ("Utilisation", "Memory used", "Power", "Temperature", "SM clock"):
            assert f"{name}  " in graphs, name
        assert "PCIe rx" in graphs and "PCIe tx" in graphs
        assert "(last 29s)" in graphs  # 30 samples a second apart
        assert "slowdown 93°C" in graphs  # the temperature graph's threshold line

        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, GpuDetailScreen)
        assert app.query_one(GpuPanel).selected == 2  # still selected
        assert app.focused is app.query_one(GpuPanel)
        assert "GPU 2" in screen_text(app) and "GPU▲" in screen_text(app)  # the dashboard


@pytest.mark.slow
async def test_gpu_graphs_move_with_new_samples_and_stop_after_escape() -> None:
    app, source = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await push(pilot, source, 30)
        await pilot.press("down", "enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, GpuDetailScreen)
        before = static_text(app, "#gpu-detail-graphs")
        on_screen_before = screen_text(app)
        await push(pilot, source, 5)
        after = static_text(app, "#gpu-detail-graphs")
        assert after != before
        assert screen_text(app) != on_screen_before  # redrawn, not only re-computed
        assert "(last 34s)" in after
        # GPU 2 idles at 25 W: its power chart grows from the right, one column per bucket of
        # samples (a fixed time axis: the whole width is the whole history).
        filled = [row.count("▂") for row in chart_rows(before, "Power")]
        grown = [row.count("▂") for row in chart_rows(after, "Power")]
        assert 0 < filled[-1] < grown[-1] <= filled[-1] + 2

        graphs = screen.query_one("#gpu-detail-graphs", TextLines)
        await pilot.press("escape")
        await pilot.pause()
        frozen = graphs.content
        await push(pilot, source, 3)
        # Closed, the screen is not redrawn by later samples.
        assert graphs.content is frozen
        assert not screen.is_attached


async def test_busy_gpu_utilisation_chart_scrolls_left() -> None:
    """GPU 0 is busy: its utilisation chart is drawn, newest on the right, and it grows one
    column per bucket of samples (the whole width is the whole history: a fixed time axis)."""
    app, source = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        screen_capacity = app.store.capacity
        await push(pilot, source, 60)
        await pilot.press("enter")
        await pilot.pause()
        first = chart_rows(static_text(app, "#gpu-detail-graphs"), "Utilisation")
        columns = first[-1].rstrip().count("█")
        width = len(first[-1]) - 9  # the scale's labels take 9 cells
        per_column = -(-screen_capacity // width)
        assert abs(columns - 60 / per_column) <= 1  # right-aligned, one column per bucket
        await push(pilot, source, per_column)
        second = chart_rows(static_text(app, "#gpu-detail-graphs"), "Utilisation")
        assert second[-1].rstrip().count("█") == columns + 1
        assert len(first[0]) == len(second[0])  # the chart keeps its width


async def test_every_field_of_the_field_table_is_shown_with_its_value() -> None:
    app, source = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        sample = await push(pilot, source, 3)
        await pilot.press("down", "enter")
        await pilot.pause()
        gpu = next(gpu for gpu in sample.gpus if gpu.index == 2)
        fields = static_text(app, "#gpu-detail-fields")
        seen = await scroll_through(pilot)
    for field in FIELDS:
        row = f"  {field.label:<10} {field.show(gpu):<16} {field.help}"
        assert row in fields, field.key
        # Labelled and valued as a user reads it once scrolled there.
        assert f"{field.label:<10} {field.show(gpu)}" in seen, field.key
    assert "Processes" in seen


@pytest.mark.slow
async def test_a_gpus_processes_are_listed_biggest_first() -> None:
    app, source = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        sample = await push(pilot, source, 3)
        await pilot.press("enter")  # GPU 0: the display server and two jobs
        await pilot.pause()
        text = static_text(app, "#gpu-detail-processes")
        on_gpu = sorted(sample.processes_on(0), key=lambda p: -(p.gpu_memory_bytes or 0))
        assert len(on_gpu) >= 2
        pids = [int(line.split()[0]) for line in text.splitlines()[1:]]
        assert pids == [p.pid for p in on_gpu]
        for process in on_gpu:
            assert process.command is not None and process.command[:30] in text
        await pilot.press("escape", "right")  # GPU 1: one of its jobs runs in a container
        await pilot.press("enter")
        await pilot.pause()
        text = static_text(app, "#gpu-detail-processes")
        hidden = [p for p in sample.processes_on(1) if not p.visible]
        assert hidden and str(hidden[0].pid) in text
        assert f"{hidden[0].pid} not visible" in text  # not a user, nor a blank
        await pilot.press("escape", "right")  # GPU 2 is idle: none, said so
        await pilot.press("enter")
        await pilot.pause()
        assert not sample.processes_on(2)
        assert static_text(app, "#gpu-detail-processes") == "Processes\n  none\n"


async def test_a_gpu_lost_while_its_detail_is_open_reads_lost() -> None:
    app, source = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await push(pilot, source, 20)
        await pilot.press("down", "enter")
        await pilot.pause()
        app.receive_sample(lose(source.sample(), 2))
        await pilot.pause()
        head = title(app)
        assert f"LOST: {LOST_REASON}" in head and "GPU 2" in head
        graphs = static_text(app, "#gpu-detail-graphs")
        assert "Utilisation  N/A" in graphs and "Power  N/A" in graphs  # N/A, never 0
        assert "min 25W  max 25W" in graphs  # its history is kept
        assert "  GPU        N/A" in static_text(app, "#gpu-detail-fields")
        assert "unknown: the GPU is lost" in static_text(app, "#gpu-detail-processes")
        await push(pilot, source, 1)  # back again
        assert "LOST" not in title(app)
        await pilot.press("escape")
        await pilot.pause()
        assert app.query_one(GpuPanel).selected == 2
        assert app.is_running


async def test_a_lost_gpus_graphs_keep_their_scale() -> None:
    """A lost GPU's graphs keep the scale of its last readings: 25 W of 300 W is not drawn
    as a full-height chart labelled 25W (a bug found here, fixed in 02553c7)."""
    app, source = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await push(pilot, source, 20)
        await pilot.press("down", "enter")
        await pilot.pause()
        before = static_text(app, "#gpu-detail-graphs")
        assert chart_rows(before, "Power")[0].lstrip().startswith("300W")
        app.receive_sample(lose(source.sample(), 2))
        await pilot.pause()
        after = static_text(app, "#gpu-detail-graphs")
        assert chart_rows(after, "Power")[0].lstrip().startswith("300W")
        assert chart_rows(after, "Memory used")[0].lstrip().startswith("47.5G")


async def test_lost_is_visible_in_the_title_at_80_columns() -> None:
    """LOST comes first in the title: a narrow terminal cuts the title's end, not LOST
    (it was appended last and hidden at 80 columns; fixed in 02553c7)."""
    app, source = demo_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await push(pilot, source, 5)
        await pilot.press("down", "down", "enter")
        await pilot.pause()
        app.receive_sample(lose(source.sample(), 2))
        await pilot.pause()
        assert "LOST" in title(app)


async def test_gpu_detail_redraws_for_a_new_terminal_width() -> None:
    """A resize redraws the charts for the new width at once (before the next sample, which
    may be 60 s away or paused); a chart row never wraps (fixed in 02553c7)."""
    app, source = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await push(pilot, source, 120)
        await pilot.press("enter")
        await pilot.pause()
        await pilot.resize_terminal(80, 30)
        await pilot.pause()
        await pilot.pause()
        lines = screen_text(app).splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith(" Utilisation  "))
        assert lines[at + 1].startswith("     100% ")
        assert lines[at + 3].startswith("        0 ")  # three rows, not six half rows


async def test_process_detail_redraws_for_a_new_terminal_width() -> None:
    app, source = demo_app()
    async with app.run_test(size=SIZE) as pilot:
        await push(pilot, source, 120)
        await pilot.press("tab", "down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, ProcessDetailScreen)
        await pilot.resize_terminal(80, 30)
        await pilot.pause()
        await pilot.pause()
        lines = screen_text(app).splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith(" Host CPU  "))
        assert lines[at + 2].startswith("        0 ")  # two rows, not four half rows
        assert lines[at + 1].rstrip().endswith("█") or lines[at + 2].rstrip().endswith("█")


async def test_ascii_mode_gpu_detail_is_pure_ascii() -> None:
    app, source = demo_app(ascii_only=True)
    async with app.run_test(size=SIZE) as pilot:
        await push(pilot, source, 30)
        await pilot.press("enter")  # GPU 0: busy, with processes
        await pilot.pause()
        for selector in ("#gpu-detail-graphs", "#gpu-detail-fields", "#gpu-detail-processes"):
            assert static_text(app, selector).isascii(), selector
        assert title(app).isascii()
        assert own_text(app).isascii()
        assert "#" in static_text(app, "#gpu-detail-graphs")  # charts, drawn in ASCII
        assert "slowdown 93C" in static_text(app, "#gpu-detail-graphs")
        pages = await scroll_through(pilot)
        assert own_text(app).isascii()
        assert "Temp       " in pages and "C " in pages


# -- process detail --------------------------------------------------------------------------


def no_host_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make every host read of a PID fail loudly; return the PIDs asked for."""
    asked: list[int] = []

    def refuse(pid: int, expected_start_s: float | None = None) -> process_details.ProcessDetails:
        asked.append(pid)
        raise AssertionError(f"read /proc for simulated PID {pid}")

    def no_process(pid: int | None = None) -> psutil.Process:
        asked.append(-1 if pid is None else pid)
        raise AssertionError("psutil.Process() called")

    monkeypatch.setattr(process_details, "read_process_details", refuse)
    monkeypatch.setattr(psutil, "Process", no_process)
    return asked


async def test_simulated_process_detail_reads_nothing_from_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked = no_host_reads(monkeypatch)
    app, source = demo_app()
    async with app.run_test(size=(100, 30)) as pilot:
        sample = await push(pilot, source, 10)
        await pilot.press("tab", "down")
        table = app.query_one(ProcessTable)
        assert app.focused is table and table.cursor_key is not None
        key = table.cursor_key
        process = next(p for p in sample.processes if p.key == key)
        await pilot.press("enter")
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, ProcessDetailScreen) and screen.key == key
        head = title(app)
        assert f"Process {key[1]} on GPU {key[0]}" in head and "DEMO (simulated)" in head
        identity = static_text(app, "#process-detail-identity")
        assert "A simulated process (DEMO): there is no host process to read." in identity
        assert process.command is not None and process.command in identity
        assert f"User     {process.user}" in identity
        assert "Launched by" not in identity and "CUDA" not in identity  # nothing invented
        assert "Reading /proc" not in identity
        history = static_text(app, "#process-detail-history")
        assert "GPU memory" in history and "(10 samples)" in history
        assert "SM utilisation" in history and "Host CPU" in history

        await push(pilot, source, 2)
        assert "(12 samples)" in static_text(app, "#process-detail-history")  # it moves

        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ProcessDetailScreen)
        assert app.focused is table and table.cursor_key == key
    assert asked == []


@pytest.fixture
def me() -> psutil.Process:
    return psutil.Process()


def own_sample(me: psutil.Process, now: float, *, present: bool = True) -> Sample:
    """A real (not simulated) sample whose one process is this test process."""
    gpu = make_gpu(0)
    process = make_process(
        gpu,
        os.getpid(),
        command="python job_from_nvml.py",  # what the table had; the detail reads /proc
        elapsed_s=now - me.create_time(),
        sm_utilization_pct=40,
    )
    return make_sample((gpu,), (process,) if present else (), timestamp_s=now)


async def open_own_process(pilot: Pilot[Any], me: psutil.Process) -> float:
    app = pilot.app
    assert isinstance(app, GpumonApp)
    now = time.time()
    for offset in range(3):
        app.receive_sample(own_sample(me, now + offset))
    await pilot.pause()
    await pilot.press("tab", "enter")
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()
    assert isinstance(app.screen, ProcessDetailScreen)
    assert app.screen.details is not None and app.screen.details.visible
    return now


async def test_real_process_detail_shows_this_process_its_launcher_and_cuda(
    me: psutil.Process,
) -> None:
    app = app_for(own_sample(me, time.time()))
    async with app.run_test(size=(120, 40)) as pilot:
        await open_own_process(pilot, me)
        head = title(app)
        assert f"Process {os.getpid()} on GPU 0" in head
        assert "DEMO" not in head and "no longer" not in head
        identity = static_text(app, "#process-detail-identity")
        text = screen_text(app)
    command = " ".join(me.cmdline())
    assert unwrapped(command) in unwrapped(identity)  # the full command line, from the host
    assert "job_from_nvml" not in identity
    assert command[:40] in text
    assert f"User     {me.username()}" in identity
    assert "Started  " in text and " ago)" in text
    assert "Launched by" in text
    parent = me.parent()
    if parent is None or parent.pid <= 1:  # run straight under a container's init
        assert "(no parent but init)" in identity
    else:
        assert f"  {parent.pid} ({parent.username()}) " in identity
    assert f"{os.getpid()}: this process" in identity
    environment = me.environ()
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER"):
        assert f"{name}={environment.get(name, '(not set)')}" in identity
    assert "CUDA     CUDA_VISIBLE_DEVICES=" in text


async def test_a_process_that_leaves_the_gpu_keeps_its_last_data(me: psutil.Process) -> None:
    app = app_for(own_sample(me, time.time()))
    async with app.run_test(size=(120, 40)) as pilot:
        now = await open_own_process(pilot, me)
        history = static_text(app, "#process-detail-history")
        identity = static_text(app, "#process-detail-identity")
        assert "(3 samples)" in history and "SM utilisation  40%" in history
        app.receive_sample(own_sample(me, now + 5, present=False))
        await pilot.pause()
        assert "(no longer on the GPU: last data kept)" in title(app)
        assert static_text(app, "#process-detail-history") == history  # kept, not emptied
        assert unwrapped(" ".join(me.cmdline())) in unwrapped(
            static_text(app, "#process-detail-identity")
        )
        assert "Launched by" in static_text(app, "#process-detail-identity")
        kept = static_text(app, "#process-detail-identity")
        assert kept.splitlines()[:3] == identity.splitlines()[:3]  # command, user, PID
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, ProcessDetailScreen)
        assert str(os.getpid()) not in screen_text(app)  # gone from the table too


async def test_a_process_that_comes_back_is_on_the_gpu_again() -> None:
    """A process missing from one sample and listed again is on the GPU again: the title
    no longer says it left, and its history moves (it stuck as ended; fixed in 02553c7)."""
    gpu = make_gpu(0)
    present = make_sample((gpu,), (make_process(gpu, 4242),), simulated=True)
    missing = make_sample((gpu,), (), simulated=True)
    app = app_for(present)
    async with app.run_test(size=(100, 30)) as pilot:
        app.receive_sample(present)
        await pilot.pause()
        await pilot.press("tab", "enter")
        await pilot.pause()
        app.receive_sample(missing)
        await pilot.pause()
        assert "no longer on the GPU" in title(app)
        app.receive_sample(present)
        app.receive_sample(present)
        await pilot.pause()
        assert "no longer on the GPU" not in title(app)
        assert "(2 samples)" in static_text(app, "#process-detail-history")


async def test_a_new_process_on_the_same_pid_is_not_the_one_shown() -> None:
    """The process ends and another takes its PID on the same GPU while its screen is open:
    the screen says so and keeps the old process's data, not the newcomer's."""
    gpu = make_gpu(0)

    def sample(started_s: float, sm_pct: int, user: str) -> Sample:
        process = make_process(gpu, 4242, user=user, sm_utilization_pct=sm_pct)
        process = dataclasses.replace(process, create_time_s=started_s, command=f"job-{user}")
        return make_sample((gpu,), (process,), simulated=True)

    app = app_for(sample(1000.0, 40, "alice"))
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(2):
            app.receive_sample(sample(1000.0, 40, "alice"))
        await pilot.pause()
        await pilot.press("tab", "enter")
        await pilot.pause()
        assert isinstance(app.screen, ProcessDetailScreen)
        history = static_text(app, "#process-detail-history")
        assert "SM utilisation  40%" in history
        app.receive_sample(sample(2000.0, 99, "mallory"))  # PID 4242 again: another process
        await pilot.pause()
        assert "its PID is another process's now" in title(app)
        assert static_text(app, "#process-detail-history") == history
        identity = static_text(app, "#process-detail-identity")
        assert "alice" in identity and "mallory" not in identity
        app.receive_sample(sample(2000.0, 99, "mallory"))
        await pilot.pause()
        assert "its PID is another process's now" in title(app)
        assert static_text(app, "#process-detail-history") == history


async def test_the_process_shown_is_the_row_chosen_even_if_its_pid_was_reused_since() -> None:
    """Enter on alice's row; by the time the screen opens the latest sample lists another
    process on that PID: the screen keeps to alice's (its host details are asked for with
    her start time, so the newcomer reads as gone) and says the PID is another's."""
    from gpumon.sources.host.details import ProcessDetails

    gpu = make_gpu(0)
    newcomer = dataclasses.replace(
        make_process(gpu, 4242, user="mallory", sm_utilization_pct=99), create_time_s=2000.0
    )
    sample = make_sample((gpu,), (newcomer,))
    asked: list[tuple[int, float | None]] = []

    def read(pid: int, started: float | None) -> ProcessDetails:
        asked.append((pid, started))
        return ProcessDetails(pid, visible=False)

    app = app_for(sample)
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        alice = dataclasses.replace(newcomer, user="alice", create_time_s=1000.0)
        screen = ProcessDetailScreen(app.store, (0, 4242), read_details=read, chosen=alice)
        await app.push_screen(screen)
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert asked == [(4242, 1000.0)]
        assert "its PID is another process's now" in title(app)
        identity = static_text(app, "#process-detail-identity")
        assert "mallory" not in identity and "alice" in identity  # her row, as it was listed


@pytest.fixture
def launcher_with_a_long_command() -> Iterator[int]:
    """A child with a command line over 200 characters that starts a grandchild: the
    grandchild's PID (its parent's command is shortened with an ellipsis)."""
    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
        "print(p.pid, flush=True); time.sleep(60)"
    )
    launcher = subprocess.Popen(
        [sys.executable, "-c", code, "--config", "x" * 300], stdout=subprocess.PIPE, text=True
    )
    assert launcher.stdout is not None
    grandchild = int(launcher.stdout.readline())
    yield grandchild
    for pid in (grandchild, launcher.pid):
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass
    launcher.wait()


async def test_ascii_mode_process_detail_is_pure_ascii(launcher_with_a_long_command: int) -> None:
    """ASCII mode: a parent command over 200 characters is cut with '...', not '…'
    (fixed in 02553c7)."""
    pid = launcher_with_a_long_command
    child = psutil.Process(pid)
    now = time.time()
    gpu = make_gpu(0)
    sample = make_sample(
        (gpu,),
        (make_process(gpu, pid, elapsed_s=now - child.create_time()),),
        timestamp_s=now,
    )
    app = app_for(sample, ascii_only=True)
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        await pilot.press("tab", "enter")
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        identity = static_text(app, "#process-detail-identity")
        # The launcher's command is cut (how much of it shows depends on the interpreter's
        # path, which differs between machines), with ASCII dots.
        assert "Launched by" in identity and "..." in identity
        assert identity.isascii()


def test_the_full_command_line_is_wrapped_never_cut() -> None:
    from gpumon.ui.dashboard.process_detail import render_identity, wrap_cells

    command = (
        "python -m torch.distributed.run --nproc_per_node 8 train.py --config "
        + ("c" * 150)
        + " --lr 3e-4 界面"
    )
    process = dataclasses.replace(make_process_for_wrap(), command=command)
    text = render_identity((0, process.pid), process, None, 0.0, simulated=True, width=40)
    lines = text.plain.splitlines()
    start = lines.index("Command") + 1
    shown = [line.removeprefix("  ") for line in lines[start : lines.index(next(
        line for line in lines[start:] if line.startswith("User")
    ))]]  # fmt: skip
    assert "".join(shown).replace(" ", "") == command.replace(" ", "")
    assert all(len(line) <= 40 for line in lines[start : start + len(shown)])
    assert wrap_cells("", 10) == [""]


def make_process_for_wrap() -> Any:
    from gpumon.data.model import GpuProcess, ProcessKind

    return GpuProcess(0, None, 4242, ProcessKind.COMPUTE, 1024, "alice", "python x.py")
