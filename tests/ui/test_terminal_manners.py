"""Terminal manners: a non-UTF-8 locale gets ASCII also in Textual's footer, and NO_COLOR gets
no colour codes at all (Textual's own NO_COLOR writes greys), only bold and reverse."""

from __future__ import annotations

import re

import pytest

from gpumon.sources.demo import DemoSource
from gpumon.ui.dashboard.app import create_app
from tests.support.ui_helpers import FIXED_TIME, push, record_terminal_writes, screen_text

#: SGR parameters that set a colour: 30-37, 40-47, 90-97, 100-107, and 38;/48; (256, RGB).
COLOUR = re.compile(r"^(3[0-8]|4[0-8]|9[0-7]|10[0-7])$")


def demo_source() -> DemoSource:
    return DemoSource(4, seed=0, current_user="alice", clock=lambda: FIXED_TIME)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_lang_c_footer_is_ascii(
    monkeypatch: pytest.MonkeyPatch, size: tuple[int, int]
) -> None:
    """LANG=C: the footer says "enter", not "⏎", and its palette key has no "▏"."""
    for name in ("LC_ALL", "LC_CTYPE", "GPUMON_ASCII"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANG", "C")
    source = demo_source()
    app = create_app(source=source, autostart=False)
    async with app.run_test(size=size) as pilot:
        await push(pilot, source, 2)
        footer = screen_text(app).splitlines()[-1]
    assert footer.isascii(), footer
    assert "enter Details" in footer and "^p palette" in footer


def sgr_parameters(written: str) -> set[str]:
    return {
        parameter
        for codes in re.findall(r"\x1b\[([0-9;]*)m", written)
        for parameter in codes.split(";")
    }


async def test_no_color_writes_no_colour_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    """NO_COLOR=1: the bytes sent to the terminal set no colour (only the terminal's default,
    39/49), the cursor row is told by reverse video."""
    monkeypatch.setenv("NO_COLOR", "1")
    source = demo_source()
    app = create_app(source=source, autostart=False, ascii_only=False)
    async with app.run_test(size=(80, 24)) as pilot:
        written = record_terminal_writes(app)
        await push(pilot, source, 2)
        await pilot.press("down")
        await pilot.pause()
    text = "".join(written)
    assert text
    assert not {p for p in sgr_parameters(text) if COLOUR.match(p)}
    assert re.search(r"\x1b\[[0-9;]*\b7\b[0-9;]*m +[0-9] +[0-9]+ ", text)  # a process row


async def test_without_no_color_the_screen_has_colours(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test above can fail: the same screen without NO_COLOR sets colours."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    source = demo_source()
    app = create_app(source=source, autostart=False, ascii_only=False)
    async with app.run_test(size=(80, 24)) as pilot:
        written = record_terminal_writes(app)
        await push(pilot, source, 2)
    assert {p for p in sgr_parameters("".join(written)) if COLOUR.match(p)}
