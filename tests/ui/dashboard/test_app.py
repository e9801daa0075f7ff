"""Pilot tests of the dashboard: what a user sees and what the keys do."""

from __future__ import annotations

import dataclasses
import threading
import time

import pytest

from gpumon.data.model import GpuUnavailable, UnavailableReason
from gpumon.sources.demo import DemoSource
from gpumon.ui.app import wants_ascii
from gpumon.ui.dashboard.app import create_app
from gpumon.ui.widgets.gpu_layout import Layout, choose_layout
from gpumon.ui.widgets.help import HelpScreen
from gpumon.ui.widgets.process_table import ProcessTable
from tests.support.ui_helpers import (
    FIXED_TIME,
    GIB,
    StaticSource,
    app_for,
    make_gpu,
    make_process,
    make_sample,
    screen_text,
)


async def test_known_sample_values_appear_on_screen() -> None:
    gpu = make_gpu(0, name="NVIDIA Test Board", temperature_c=57, fan_pct=41)
    sample = make_sample((gpu,), (make_process(gpu, 4242, user="bob", command="python train.py"),))
    app = app_for(sample)
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        text = screen_text(app)
    for expected in (
        "GPU 0",
        "NVIDIA Test Board",
        "GPU-00000000",  # short UUID
        "10:00.0",  # PCI bus id
        "57°C",
        "41%",
        "73%",  # utilisation
        "31%",  # memory bandwidth utilisation
        "12.0/24.0G",  # memory used / total
        "123 / 250W",  # power draw / limit
        "1410MHz",
        "Persist On",
        "P2",
        "Driver 550.54.15",
        "CUDA 12.4",
        "NVML 12.550.54.15",
        "testhost",
        "22:13:20",
        "4242",
        "bob",
        "python train.py",
        "1h02m",  # elapsed (seconds dropped past an hour)
    ):
        assert expected in text, expected


async def test_unsupported_fields_read_na_never_zero() -> None:
    gpu = make_gpu(
        0,
        fan_pct=None,
        power_draw_w=None,
        power_limit_w=None,
        utilization_gpu_pct=None,
        ecc_errors_uncorrected_volatile=None,
        mig_mode=None,
    )
    sample = make_sample((gpu,))
    app = app_for(sample)
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        text = screen_text(app)
    assert "Fan  N/A" in text
    assert "GPU " in text and " N/A  MemBW" in text
    assert "ECC N/A" in text and "MIG N/A" in text
    assert "0/0W" not in text and " 0%  MemBW" not in text


async def test_demo_is_labelled() -> None:
    app = create_app(DemoSource(2, seed=1, current_user="alice"), autostart=False, ascii_only=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(app.source.sample())
        await pilot.pause()
        text = screen_text(app)
    assert "DEMO" in text
    assert "simulated" in text


async def test_lost_gpu_reads_lost_while_others_update() -> None:
    good = make_gpu(0, temperature_c=50)
    lost = make_gpu(1).__class__(
        index=1,
        uuid="GPU-lost",
        name="NVIDIA Test Board",
        lost=True,
        lost_reason="NVML cannot open this GPU: Insufficient Permissions",
    )
    first = make_sample((good, lost))
    second = make_sample((make_gpu(0, temperature_c=66), lost))
    app = app_for(first)
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(first)
        app.receive_sample(second)
        await pilot.pause()
        text = screen_text(app)
    assert "LOST" in text
    assert "Insufficient Permissions" in text  # why, not a guess
    assert "66°C" in text


async def test_a_gpu_whose_process_list_was_refused_says_so_in_the_table() -> None:
    readable = make_gpu(0)
    refused = make_gpu(1, processes_error="NVML: Insufficient Permissions")
    sample = make_sample((readable, refused), (make_process(readable, 4242),))
    app = app_for(sample)
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        text = screen_text(app)
    assert "4242" in text
    assert "GPU 1: processes N/A (NVML: Insufficient Permissions)" in text
    assert "No processes on any GPU" not in text


@pytest.mark.slow
async def test_every_gpu_stays_reachable_when_not_all_fit() -> None:
    """64 GPUs at 80x24: the panel scrolls to the selected GPU and says which are shown."""
    gpus = tuple(make_gpu(i, name=f"Board {i:02d}") for i in range(64))
    sample = make_sample(gpus)
    app = app_for(sample)
    async with app.run_test(size=(80, 24)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        first = screen_text(app)
        assert "GPUs 0-" in first and "of 64 shown" in first
        for _ in range(40):
            await pilot.press("down")
        await pilot.pause()
        text = screen_text(app)
        panel = app.query_one("#gpus")
        assert panel.selected == 40  # type: ignore[attr-defined]
        assert "40 Board 40" in text  # the selected GPU is drawn
        assert "-40 of 64 shown" in text
        # A click lands on the GPU drawn there, not on the one that would be without scrolling.
        await pilot.click("#gpus", offset=(10, 0))
        assert panel.selected == panel.top_row  # type: ignore[attr-defined]
        assert panel.top_row > 0  # type: ignore[attr-defined]


async def test_a_long_host_name_never_pushes_pause_and_clock_off_the_header() -> None:
    sample = make_sample((make_gpu(0),))
    sample = dataclasses.replace(
        sample,
        host=dataclasses.replace(
            sample.host, hostname="gpu-node-017.research-cluster.internal.example.org"
        ),
    )
    app = app_for(sample)
    async with app.run_test(size=(64, 20)) as pilot:
        app.receive_sample(sample)
        await pilot.press("space")
        await pilot.pause()
        header = screen_text(app).splitlines()[0]
    assert "PAUSED" in header and header.rstrip().endswith(":20")  # the clock, 22:13:20
    assert "gpu-node-017" in header and "…" in header


async def test_ascii_mode_draws_only_ascii_before_the_first_sample() -> None:
    app = create_app(StaticSource(make_sample(())), interval_s=1, ascii_only=True, autostart=False)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        text = screen_text(app)
    assert "host: waiting~" in text
    assert "…" not in text


async def test_sort_key_cycles_and_reverses() -> None:
    gpu = make_gpu(0)
    processes = (
        make_process(gpu, 300, gpu_memory_bytes=1 * GIB),
        make_process(gpu, 100, gpu_memory_bytes=9 * GIB),
        make_process(gpu, 200, gpu_memory_bytes=5 * GIB),
    )
    sample = make_sample((gpu,), processes)
    app = app_for(sample)
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        table = app.query_one(ProcessTable)
        assert [p.pid for p in table.rows] == [100, 200, 300]  # GPU, then PID
        assert "GPU▲" in screen_text(app)  # the default sort shows its arrow, title uncut
        for _ in range(4):  # gpu -> pid -> user -> type -> gpu_memory
            await pilot.press("s")
        assert table.sort_key == "gpu_memory"
        assert [p.pid for p in table.rows] == [100, 200, 300]  # biggest first
        assert "GPU-MEM▼" in screen_text(app)
        await pilot.press("r")
        assert [p.pid for p in table.rows] == [300, 200, 100]
        assert "GPU-MEM▲" in screen_text(app)


async def test_cursor_stays_on_the_same_process_across_updates() -> None:
    gpu = make_gpu(0)
    before = make_sample((gpu,), tuple(make_process(gpu, pid) for pid in (10, 20, 30, 40)))
    # New processes appear above the selected one and another ends.
    after = make_sample(
        (gpu,), tuple(make_process(gpu, pid, cpu_pct=5.0) for pid in (1, 2, 20, 30, 40))
    )
    app = app_for(before)
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(before)
        await pilot.pause()
        await pilot.press("tab")  # focus the process table
        table = app.query_one(ProcessTable)
        assert app.focused is table
        await pilot.press("down", "down")
        assert table.cursor_process is not None and table.cursor_process.pid == 30
        app.receive_sample(after)
        await pilot.pause()
        assert table.cursor_process is not None and table.cursor_process.pid == 30
        assert table.cursor_row == 3


async def test_current_users_processes_stand_out() -> None:
    gpu = make_gpu(0)
    sample = make_sample(
        (gpu,),
        (make_process(gpu, 1, user="me", is_current_user=True), make_process(gpu, 2, user="x")),
    )
    app = app_for(sample)
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        table = app.query_one(ProcessTable)
        first = ProcessTable.TOP_LINES  # below the title and the column titles
        mine = table.render_line(first + (1 if table.rows[0].pid == 2 else 0))
        other = table.render_line(first + (0 if table.rows[0].pid == 2 else 1))
        assert any(segment.style and segment.style.bold for segment in mine)
        assert not any(segment.style and segment.style.bold for segment in other)


async def test_process_outside_namespace_is_kept_and_explained() -> None:
    gpu = make_gpu(0)
    hidden = make_process(
        gpu, 999_999, user=None, command=None, cpu_pct=None, rss_bytes=None, visible=False
    )
    sample = make_sample((gpu,), (hidden,))
    app = app_for(sample)
    async with app.run_test(size=(140, 40)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        text = screen_text(app)
        assert "999999" in text and "2.0G" in text
        assert "not visible here" in text
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert "PID namespace" in str(app.screen.query_one("#help-text").render())


@pytest.mark.parametrize(
    ("size", "layout", "shown"),
    [
        ((60, 15), Layout.ONE_LINE, 6),
        ((80, 24), Layout.ONE_LINE, 8),
        ((120, 40), Layout.TWO_LINES, 8),
        ((200, 60), Layout.CARDS, 8),
    ],
)
async def test_resize_relays_out_live(size: tuple[int, int], layout: Layout, shown: int) -> None:
    """The GPU panel takes the richest layout that leaves the process table a third of the
    screen; where even one line per GPU does not fit, it scrolls and says which it shows."""
    source = DemoSource(8, seed=0, current_user="alice", clock=lambda: FIXED_TIME)
    app = create_app(source, autostart=False, ascii_only=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(source.sample())
        await pilot.pause()
        await pilot.resize_terminal(*size)
        await pilot.pause()
        panel = app.query_one("#gpus")
        assert panel.layout_mode is layout  # type: ignore[attr-defined]
        text = screen_text(app)
        # All 8 GPUs and the start of the process table are visible.
        lines = text.splitlines()
        assert len(lines) == size[1]
        assert "PID" in text
        table = app.query_one(ProcessTable)
        assert table.size.height >= size[1] // 3
        for index in range(shown):
            marker = f"GPU {index}" if layout is Layout.CARDS else f"{index:>2} "
            assert marker in text, (size, index)
        if shown < 8:
            assert f"GPUs 0-{shown - 1} of 8 shown" in text
        if size[0] == 60:
            # Cut commands end in an ellipsis left of the scrollbar, not under it.
            assert "…" in "\n".join(lines[-6:])


def test_layout_rules() -> None:
    assert choose_layout(8, 120, 40 - 3 - 8) == (Layout.CARDS, 2)
    assert choose_layout(8, 200, 60 - 3 - 8)[0] is Layout.CARDS
    assert choose_layout(8, 80, 24 - 3 - 4) == (Layout.TWO_LINES, 1)
    assert choose_layout(8, 60, 15 - 3 - 4) == (Layout.ONE_LINE, 1)


async def test_too_small_terminal_says_so() -> None:
    sample = make_sample((make_gpu(0),))
    app = app_for(sample)
    async with app.run_test(size=(39, 9)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        assert "Terminal too small (39x9)" in screen_text(app)
        # Nothing of the dashboard is on screen: its keys are off, and out of the footer.
        assert "Details" not in screen_text(app)
        await pilot.press("slash", "p", "y", "u", "enter")
        await pilot.pause()
        assert app.screen is app.dashboard and "Terminal too small" in screen_text(app)
        assert app.dashboard.process_filter.text == ""
        await pilot.resize_terminal(100, 30)
        await pilot.pause()
        assert "Terminal too small" not in screen_text(app)
        assert "Details" in screen_text(app)


async def test_help_screen_opens_and_closes() -> None:
    sample = make_sample((make_gpu(0),))
    app = app_for(sample)
    # Tall enough that the GPU panel's keys, below the app's, are on screen.
    async with app.run_test(size=(120, 50)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        text = screen_text(app)
        assert "Keys" in text and "the previous GPU" in text  # from the bindings
        await pilot.press("escape")
        assert not isinstance(app.screen, HelpScreen)


async def test_no_driver_screen_explains_and_keeps_host_strip() -> None:
    unavailable = GpuUnavailable(
        UnavailableReason.DRIVER_NOT_LOADED,
        "The NVIDIA kernel driver is not loaded.",
        "NVML: Driver Not Loaded",
        "Load it (`sudo modprobe nvidia`)",
    )
    sample = make_sample((), driver=None, unavailable=unavailable)
    app = app_for(sample)
    async with app.run_test(size=(100, 30)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        text = screen_text(app)
    assert "The NVIDIA kernel driver is not loaded." in text
    assert "NVML: Driver Not Loaded" in text
    assert "testhost" in text and "RAM" in text and "load 1.00 0.50 0.25" in text


async def test_real_no_driver_machine_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine has no NVIDIA driver: the real NVML source must say so, not crash."""
    from gpumon.sources.nvml.source import NvmlSource

    source = NvmlSource()
    if source.unavailable is None:
        pytest.skip("a driver is present")
    app = create_app(source, interval_s=60, ascii_only=False)
    async with app.run_test(size=(100, 30)) as pilot:
        deadline = time.monotonic() + 20
        while app.sample is None:
            assert time.monotonic() < deadline, "no sample"
            await pilot.pause(0.02)
        await pilot.pause()
        assert "No GPU data" in screen_text(app)


async def test_keys_pause_and_interval() -> None:
    sample = make_sample((make_gpu(0),))
    app = app_for(sample)
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(sample)
        await pilot.press("space")
        assert app.poller.paused
        assert "PAUSED" in screen_text(app)
        await pilot.press("space")
        assert not app.poller.paused
        await pilot.press("plus")
        assert app.poller.interval_s == 2.0
        await pilot.press("minus", "minus", "minus", "minus")
        assert app.poller.interval_s == 0.25  # the floor
        assert "every 0.25s" in screen_text(app)


async def test_up_and_down_on_the_cards_never_do_nothing() -> None:
    """Cards in columns: Down from a row above a shorter last row lands on its last card,
    Down on the last row takes the focus to the process table, Up on the first row goes to
    the bottom of the column; each press changes the screen at once."""
    gpus = tuple(make_gpu(i) for i in range(5))
    sample = make_sample(gpus, (make_process(gpus[0], 5),))
    app = app_for(sample)
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        panel = app.query_one("#gpus")
        columns = panel.columns  # type: ignore[attr-defined]
        assert panel.layout_mode is Layout.CARDS and columns == 2  # type: ignore[attr-defined]
        assert app.focused is panel
        await pilot.press("right", "right", "right")  # GPU 3: the right column, row 1
        await pilot.press("down")
        assert panel.selected == 4  # type: ignore[attr-defined]  # row 2 holds GPU 4 alone
        await pilot.press("up")
        assert panel.selected == 2  # type: ignore[attr-defined]
        await pilot.press("up", "up")
        assert panel.selected == 4  # type: ignore[attr-defined]  # from the top: the bottom
        await pilot.press("right", "right")  # GPU 4 -> 0 -> 1, the top of the right column
        await pilot.press("up")
        assert panel.selected == 3  # type: ignore[attr-defined]  # no GPU 5: the row above
        await pilot.press("down", "down")  # 3 -> 4 (last row) -> the process table
        assert isinstance(app.focused, ProcessTable)
        assert panel.selected == 4  # type: ignore[attr-defined]


@pytest.mark.parametrize("size", [(80, 24), (60, 15)])
async def test_down_on_the_last_gpu_of_a_line_layout_goes_to_the_process_table(
    size: tuple[int, int],
) -> None:
    """As the help says, in every layout: not round to GPU 0 (two-line and one-line rows)."""
    gpus = tuple(make_gpu(i) for i in range(3))
    sample = make_sample(gpus, (make_process(gpus[0], 5),))
    app = app_for(sample)
    async with app.run_test(size=size) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        panel = app.query_one("#gpus")
        assert panel.layout_mode is not Layout.CARDS  # type: ignore[attr-defined]
        await pilot.press("down", "down")
        assert panel.selected == 2  # type: ignore[attr-defined]
        await pilot.press("down")
        assert isinstance(app.focused, ProcessTable)
        assert panel.selected == 2  # type: ignore[attr-defined]
        await pilot.press("shift+tab")
        await pilot.press("up")
        assert panel.selected == 1  # type: ignore[attr-defined]


async def test_a_click_on_the_more_gpus_line_selects_no_hidden_gpu() -> None:
    gpus = tuple(make_gpu(i) for i in range(16))
    sample = make_sample(gpus, (make_process(gpus[0], 5),))
    app = app_for(sample)
    async with app.run_test(size=(80, 24)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        panel = app.query_one("#gpus")
        lines = [line for line in screen_text(app).splitlines() if " shown: " in line]
        assert lines, screen_text(app)
        row = screen_text(app).splitlines().index(lines[0]) - panel.region.y
        await pilot.click("#gpus", offset=(10, row))
        await pilot.pause()
        assert panel.selected == 0  # type: ignore[attr-defined]


async def test_mouse_selects_gpu_and_sorts_by_clicked_column() -> None:
    gpus = (make_gpu(0), make_gpu(1))
    sample = make_sample(gpus, (make_process(gpus[0], 5), make_process(gpus[1], 6)))
    app = app_for(sample)
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        panel = app.query_one("#gpus")
        await pilot.click("#gpus", offset=(70, 2))  # inside the second card
        assert panel.selected == 1  # type: ignore[attr-defined]
        await pilot.click("#processes", offset=(5, 1))  # the PID column title
        assert app.query_one(ProcessTable).sort_key == "pid"


async def test_a_blocked_source_does_not_freeze_the_keys() -> None:
    """NVML hanging (until released, at most 30 s) must not stop the app from handling keys."""
    release = threading.Event()

    class BlockingSource(StaticSource):
        def sample(self):  # type: ignore[no-untyped-def]
            release.wait(30)
            return super().sample()

    sample = make_sample((make_gpu(0),), (make_process(make_gpu(0), 1),))
    app = create_app(BlockingSource(sample), interval_s=1, ascii_only=False)
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            deadline = time.monotonic() + 20
            while not app.poller.in_flight:
                assert time.monotonic() < deadline, "the poll never started"
                await pilot.pause(0.01)
            await pilot.press("s")
            assert app.query_one(ProcessTable).sort_key == "pid"
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            # The sample is still hung: both keys were handled while NVML was blocked.
            assert app.poller.in_flight
            assert app.samples_received == 0
            release.set()
    finally:
        release.set()


async def test_a_sample_that_lands_while_the_app_quits_is_dropped_quietly() -> None:
    """A poll that finishes after quitting began must not raise (CI saw NoMatches here)."""
    sample = make_sample((make_gpu(0),), ())
    app = create_app(StaticSource(sample), interval_s=1, ascii_only=False, autostart=False)
    async with app.run_test(size=(120, 40)):
        app.receive_sample(sample)
        assert app.samples_received == 1
    # The widgets are gone now; a late sample or error is ignored, not a traceback.
    app.receive_sample(sample)
    app._on_poll_error(RuntimeError("late"))
    assert app.samples_received == 1


async def test_quit_key_exits_even_while_a_sample_hangs() -> None:
    class HangingSource(StaticSource):
        def sample(self):  # type: ignore[no-untyped-def]
            time.sleep(30)
            return super().sample()

    app = create_app(HangingSource(make_sample(())), interval_s=1, ascii_only=False)
    started = time.monotonic()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause(0.1)
        await pilot.press("q")
    assert time.monotonic() - started < 5


def test_ascii_fallback_follows_the_locale() -> None:
    assert wants_ascii({"LANG": "C"})
    assert wants_ascii({})
    assert not wants_ascii({"LANG": "en_US.UTF-8"})
    assert not wants_ascii({"LC_ALL": "C.utf8", "LANG": "C"})
    assert wants_ascii({"LC_ALL": "POSIX", "LANG": "en_US.UTF-8"})


async def test_ascii_mode_draws_no_unicode_bars_or_borders() -> None:
    source = DemoSource(4, seed=0, current_user="alice", clock=lambda: FIXED_TIME)
    app = create_app(source, autostart=False, ascii_only=True)
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(source.sample())
        await pilot.pause()
        text = "\n".join(screen_text(app).splitlines()[:-1])  # Textual's own footer aside
    assert not set("█░▏▎▍▌▋▊▉╭╮╰╯─│▲▼…") & set(text)
    assert "|" in text and "+-" in text


async def test_no_color_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    """NO_COLOR set: the whole dashboard draws, in monochrome, without crashing."""
    monkeypatch.setenv("NO_COLOR", "1")
    source = DemoSource(4, seed=0, process_count=3, current_user="alice", clock=lambda: FIXED_TIME)
    app = create_app(source, autostart=False, ascii_only=False)
    assert app.no_color
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(source.sample())
        await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        await pilot.press("escape")
        svg = app.export_screenshot()
        text = screen_text(app)
    assert "GPU 0" in text and "PID" in text
    # Monochrome: no hue in any colour of the rendered screen (greys have r == g == b).
    import re

    colours = set(re.findall(r"#([0-9a-f]{6})", svg))
    assert colours
    svg_chrome = {"ff5f57", "febc2e", "28c840", "c5c8c6"}  # window buttons, default text
    hues = {c for c in colours - svg_chrome if not (c[0:2] == c[2:4] == c[4:6])}
    assert not hues, hues


async def test_the_first_sample_started_before_the_app_is_the_first_one_shown() -> None:
    """The CLI starts the first sample before Textual is imported (gpumon.cli); the app
    shows that sample first, without taking another for it."""
    from gpumon.sampling.poller import EarlySample

    first = make_sample((make_gpu(0),), (make_process(make_gpu(0), 4242),))
    later = make_sample((make_gpu(0),), ())
    source = StaticSource(first, later)
    early = EarlySample(source)
    early.future.result(timeout=10)
    app = create_app(interval_s=60, ascii_only=False, early=early)
    assert app.source is source
    async with app.run_test(size=(120, 40)) as pilot:
        deadline = time.monotonic() + 20
        while app.samples_received == 0:
            assert time.monotonic() < deadline, "the early sample was never shown"
            await pilot.pause(0.01)
        assert app.store.latest is first and source.calls == 1
        await pilot.pause()
        assert "4242" in screen_text(app)


async def test_keys_that_used_to_do_nothing_say_or_show_something() -> None:
    """PgDn from the GPU panel pages the process table; Enter and f without a GPU, - at the
    shortest interval and space on a detail screen each say so."""
    gpus = (make_gpu(0),)
    sample = make_sample(gpus, tuple(make_process(gpus[0], pid) for pid in range(100, 160)))
    app = app_for(sample, interval_s=0.25)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("enter", "f")
        await pilot.pause()
        said = [str(n.message) for n in app._notifications]
        assert "No GPU to show yet." in said and "No GPU to filter by yet." in said
        app.receive_sample(sample)
        await pilot.pause()
        table = app.query_one(ProcessTable)
        await pilot.press("pagedown")
        assert app.focused is table and table.cursor_row > 0
        await pilot.press("minus")
        await pilot.press("enter")  # a process's detail
        await pilot.press("space")
        await pilot.pause()
        said = [str(n.message) for n in app._notifications]
        assert "Already every 0.25 s, the shortest interval." in said
        assert "Paused: no new readings (space resumes)" in said
