"""Partial repaints: few bytes on the wire, and a terminal that still shows the right screen.

A terminal emulator (pyte) replays everything the app writes; after many refreshes its screen
must equal what the app rendered. That is what makes writing only changed cells safe.
"""

from __future__ import annotations

import pyte
import textual
from rich.segment import Segment
from rich.style import Style
from textual.strip import Strip

from gpumon.sources.demo import DemoSource
from gpumon.ui import exact_updates
from gpumon.ui.dashboard.app import create_app
from gpumon.ui.widgets.lines import changed_runs
from tests.ui_helpers import FIXED_TIME, record_terminal_writes, screen_text


def test_the_override_matches_the_pinned_textual() -> None:
    """If this fails, Textual was upgraded: review exact_updates.py against its new code."""
    assert textual.__version__ == exact_updates.TEXTUAL_VERSION
    assert exact_updates.install()


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
    # From the first changed bar cell to the value, never from the label.
    assert changed_runs(old, new) == [(8, 17)]


async def test_terminal_shows_exactly_the_rendered_screen_after_partial_updates() -> None:
    exact_updates.install()
    width, height = 200, 50
    source = DemoSource(8, seed=3, process_count=64, current_user="alice", clock=lambda: FIXED_TIME)
    app = create_app(source, autostart=False, ascii_only=False)
    async with app.run_test(size=(width, height)) as pilot:
        written = record_terminal_writes(app)
        app.refresh()  # a full frame first, as a real terminal would get
        await pilot.pause()
        for _ in range(25):
            app.receive_sample(source.sample())
            await pilot.pause()
        await pilot.press("tab", "down", "down", "s")  # cursor moves and a re-sort
        app.receive_sample(source.sample())
        await pilot.pause()
        expected = screen_text(app).splitlines()

    terminal = pyte.Screen(width, height)
    stream = pyte.Stream(terminal)
    stream.feed("".join(written))
    shown = [line.rstrip() for line in terminal.display]
    assert shown == [line.rstrip() for line in expected]


async def test_steady_state_refresh_is_small() -> None:
    """Bytes per refresh of an 8-GPU, 64-process demo at 200x50 (the benchmark's setup)."""
    exact_updates.install()
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
