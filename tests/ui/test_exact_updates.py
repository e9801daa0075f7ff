"""Partial repaints: few bytes on the wire, and a terminal that still shows the right screen.

A terminal emulator (pyte) replays everything the app writes; after many refreshes its screen
must equal what the app rendered. That is what makes writing only changed cells safe.
"""

from __future__ import annotations

import itertools

import pyte
import pytest
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from gpumon.data.model import Sample
from gpumon.sources.demo import DemoSource
from gpumon.ui import exact_updates
from gpumon.ui.dashboard.app import create_app
from gpumon.ui.widgets.lines import changed_runs
from tests.support.ui_helpers import (
    FIXED_TIME,
    app_for,
    make_gpu,
    make_process,
    make_sample,
    record_terminal_writes,
    screen_text,
)


def test_the_override_follows_the_installed_textual(monkeypatch: pytest.MonkeyPatch) -> None:
    """If this fails, Textual changed a function EXACT_UPDATES lists: review exact_updates.py
    against it, then accept its digest. Until then another Textual's code is kept."""
    from textual._compositor import ChopsUpdate

    from gpumon.ui.textual_source import EXACT_UPDATES, changed

    assert not changed(EXACT_UPDATES), "review exact_updates.py against Textual's change"
    assert exact_updates.install()
    original = lambda self, console: ""  # noqa: E731  # stands for Textual's own
    monkeypatch.setattr(ChopsUpdate, "render_segments", original)
    monkeypatch.setitem(EXACT_UPDATES.follows, "textual.strip:Strip.crop", frozenset({"other"}))
    assert exact_updates.install() is False
    assert ChopsUpdate.render_segments is original


def strip(*parts: tuple[str, Style | None]) -> Strip:
    return Strip([Segment(text, style) for text, style in parts])


def test_changed_runs_finds_each_changed_cell_group() -> None:
    bold = Style(bold=True)
    old = strip(("  0   1234 bob  ", None), ("  97 ", bold), ("  1h02m python x.py", None))
    new = strip(("  0   1234 bob  ", None), ("  98 ", bold), ("  1h03m python x.py", None))
    # Two separate runs: the CPU digit and the minutes digit, not one span across.
    assert changed_runs(old, new) == [(19, 20), (26, 27)]
    assert changed_runs(old, old) == []


def test_changed_runs_handles_a_bar_that_grew() -> None:
    red = Style(color="red")
    old = strip(("GPU ", None), ("████▌", red), ("░░░░░", None), (" 45%", None))
    new = strip(("GPU ", None), ("██████", red), ("░░░░", None), (" 50%", None))
    # The changed bar cells and the value's digits, never the label. The unchanged cells
    # between are re-sent only where the terminal writer finds that shorter than a move.
    assert changed_runs(old, new) == [(8, 10), (15, 17)]


@pytest.mark.parametrize("width, height", [(80, 24), (120, 40), (200, 50)])
@pytest.mark.slow
async def test_terminal_shows_exactly_the_rendered_screen_after_partial_updates(
    width: int, height: int
) -> None:
    """Text, colours and attributes of every cell, after the refreshes of a busy server whose
    clock runs (so young processes' TIME ticks) and after keys, at the benchmark's sizes."""
    exact_updates.install()
    ticks = itertools.count()
    source = DemoSource(
        8,
        seed=3,
        process_count=64,
        current_user="alice",
        clock=lambda: FIXED_TIME + next(ticks),
    )
    app = create_app(source, autostart=False, ascii_only=False)
    async with app.run_test(size=(width, height)) as pilot:
        written = record_terminal_writes(app)
        app.refresh()  # a full frame first, as a real terminal would get
        await pilot.pause()
        for _ in range(25):
            app.receive_sample(source.sample())
            await pilot.pause()
        await pilot.press("tab", "down", "down", "s")  # cursor moves and a re-sort
        for _ in range(5):
            app.receive_sample(source.sample())
            await pilot.pause()
        expected_text = screen_text(app).splitlines()
        full_repaint = "".join(
            f"\x1b[{y + 1};1H" + strip.render(app.console)
            for y, strip in enumerate(app.screen._compositor.render_strips())
        )

    terminal = _replay(width, height, "".join(written))
    shown = [line.rstrip() for line in terminal.display]
    assert shown == [line.rstrip() for line in expected_text]
    expected = _replay(width, height, full_repaint)
    for y in range(height):
        assert terminal.buffer[y] == expected.buffer[y], y


def _replay(width: int, height: int, text: str) -> pyte.Screen:
    terminal = pyte.Screen(width, height)
    pyte.Stream(terminal).feed(text)
    return terminal


async def test_steady_state_refresh_is_small() -> None:
    """Bytes per refresh of an 8-GPU, 64-process demo at 200x50 (the benchmark's setup)."""
    assert exact_updates.install(), "exact updates are off: `gpumon --version` says why"
    source = DemoSource(8, seed=0, process_count=64, current_user="alice")
    app = create_app(source, autostart=False, ascii_only=False)
    async with app.run_test(size=(200, 50)) as pilot:
        for _ in range(5):
            app.receive_sample(source.sample())
            await pilot.pause()
        written = record_terminal_writes(app)
        for _ in range(10):
            app.receive_sample(source.sample())
            await pilot.pause()
    per_refresh = len("".join(written).encode()) / 10
    # A full repaint of this screen is about 30 kB; Textual's own partial updates about 5.5 kB.
    assert per_refresh < 1500, per_refresh


async def test_young_processes_show_under_a_minute_and_their_time_does_not_tick() -> None:
    """A job seconds old reads ``<1m``; a refresh where it is a second older writes nothing
    (nvitop re-sends every young job's TIME each second)."""
    exact_updates.install()
    gpu = make_gpu(0)

    def sample(age: float) -> Sample:
        processes = tuple(
            make_process(gpu, 4000 + n, elapsed_s=age + n, cpu_pct=0.0) for n in range(12)
        )
        return make_sample((gpu,), processes, timestamp_s=FIXED_TIME + age)

    app = app_for(sample(5.0), sample(6.0))
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_sample(sample(5.0))
        await pilot.pause()
        lines = screen_text(app).splitlines()
        rows = [line for line in lines if "job_40" in line]
        row_numbers = {y for y, line in enumerate(lines) if "job_40" in line}
        written = record_terminal_writes(app)
        app.receive_sample(sample(6.0))
        await pilot.pause()
    assert len(rows) == 12 and all("<1m" in row for row in rows), rows
    assert not any(f"{5 + n}s" in row for n, row in enumerate(rows))
    # The clock and the GPU's graphs may change; no process row is written to.
    terminal = pyte.Screen(120, 40)
    terminal.dirty.clear()
    pyte.Stream(terminal).feed("".join(written))
    assert terminal.dirty and not terminal.dirty & row_numbers, (terminal.dirty, written)
