"""The bytes of one partial update: colours carried over, short moves, small gaps re-sent.

Hand-built screen updates (Textual's ``ChopsUpdate``) are rendered by gpumon's writer and
replayed in a terminal emulator (pyte) over the old screen; every cell, with its colours and
attributes, must then be what a full repaint of the new screen shows.
"""

from __future__ import annotations

import random

import pyte
import pytest
from rich.segment import Segment
from rich.style import Style
from textual._compositor import ChopsUpdate, Compositor
from textual.geometry import Region
from textual.strip import Strip

from gpumon.ui import exact_updates
from gpumon.ui.widgets.lines import changed_runs

WIDTH = 120
CUTS = (0, 37, 80, WIDTH)  # three widgets side by side on every line

PALETTE = (
    None,
    Style(),
    Style(bold=True, color="color(222)"),
    Style(bold=True, color="color(222)", bgcolor="color(23)"),
    Style(color="color(24)"),
    Style(color="color(71)"),
    Style(dim=True, color="color(71)"),
    Style(italic=True, underline=True, color="#102030", bgcolor="#405060"),
    Style(reverse=True),
    Style(bgcolor="color(237)"),
)


def render_full(lines: list[Strip]) -> str:
    """A full repaint: every line from its first cell, as Textual writes a new screen."""
    return "".join(f"\x1b[{y + 1};1H" + line.render(_console()) for y, line in enumerate(lines))


def _console():  # type: ignore[no-untyped-def]
    from rich.console import Console

    return Console(color_system="truecolor", force_terminal=True, width=WIDTH)


def update(old: list[Strip], new: list[Strip]) -> ChopsUpdate:
    """The update Textual's compositor would hand over for the changed cells of ``new``."""
    regions = [
        Region(start, y, end - start, 1)
        for y, (before, after) in enumerate(zip(old, new, strict=True))
        for start, end in changed_runs(before, after)
    ]
    spans = list(Compositor._regions_to_spans(regions))
    chops = [dict(zip(CUTS[:-1], line.divide(list(CUTS[1:])), strict=False)) for line in new]
    return ChopsUpdate(chops, spans, [list(CUTS[1:]) for _ in new])


def cells(screen: pyte.Screen) -> list[list[pyte.screens.Char]]:
    return [[screen.buffer[y][x] for x in range(screen.columns)] for y in range(screen.lines)]


def replay(*writes: str, lines: int) -> pyte.Screen:
    screen = pyte.Screen(WIDTH, lines)
    stream = pyte.Stream(screen)
    for text in writes:
        stream.feed(text)
    return screen


def written(old: list[Strip], new: list[Strip]) -> str:
    exact_updates.install()
    return update(old, new).render_segments(_console())


def random_line(rng: random.Random, alphabet: str) -> Strip:
    segments: list[Segment] = []
    width = 0
    while width < WIDTH:
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 9)))
        text = text[: WIDTH - width]
        segments.append(Segment(text, rng.choice(PALETTE)))
        width += len(text)
    return Strip(segments, WIDTH)


def mutate(line: Strip, rng: random.Random, alphabet: str) -> Strip:
    """A few cells of a line changed: new characters, sometimes a new style."""
    chars = [(segment.text[i], segment.style) for segment in line for i in range(len(segment.text))]
    for _ in range(rng.randint(0, 6)):
        x = rng.randrange(WIDTH)
        style = rng.choice(PALETTE) if rng.random() < 0.3 else chars[x][1]
        for offset in range(rng.randint(1, 4)):
            if x + offset < WIDTH:
                chars[x + offset] = (rng.choice(alphabet), style)
    segments = [Segment(text, style) for text, style in chars]
    return Strip(Segment.simplify(segments), WIDTH)


@pytest.mark.parametrize("alphabet", ["0123456789 ab:", "0123456789 ab:█▏▄▇"])
def test_random_partial_updates_leave_exactly_the_new_screen_with_its_colours(
    alphabet: str,
) -> None:
    rng = random.Random(21)
    rows = 30
    screen_lines = [random_line(rng, alphabet) for _ in range(rows)]
    writes = [render_full(screen_lines)]
    for _ in range(60):
        new_lines = [mutate(line, rng, alphabet) for line in screen_lines]
        writes.append(written(screen_lines, new_lines))
        # Textual puts the cursor back where the app wants it after every update.
        writes.append("\x1b[1;1H")
        screen_lines = new_lines
    shown = replay(*writes, lines=rows)
    expected = replay(render_full(screen_lines), lines=rows)
    assert cells(shown) == cells(expected)


def test_colours_are_set_once_for_a_column_of_changes_in_one_style() -> None:
    """Every row's TIME ticks: one colour code for all of them, and short moves."""
    busy = Style(bold=True, color="color(222)")
    rows = 20

    def row(seconds: int) -> Strip:
        return Strip(
            [
                Segment(f"  0  {1000 + seconds}  root   C  4.1G  ", busy),
                Segment(f"{seconds:>3}s", busy),
                Segment(" python job.py" + " " * 71),
            ]
        )

    old = [row(20 + y) for y in range(rows)]
    new = [row(21 + y) for y in range(rows)]
    out = written(old, new)
    assert out.count("\x1b[1;38;5;222m") == 1, repr(out)
    assert out.count("\x1b[0m") + out.count("\x1b[m") == 1  # one reset, at the end
    # Each row: its PID and TIME digits, each after a move of at most 6 bytes (it was 66
    # bytes a row with a colour code and a reset around every digit).
    assert len(out.encode()) < rows * 16, (len(out), repr(out))
    shown = replay(render_full(old), out, lines=rows)
    assert cells(shown) == cells(replay(render_full(new), lines=rows))


def test_a_small_gap_is_resent_when_that_is_shorter_than_a_move() -> None:
    plain = Strip([Segment("load 12.5 4.0 ok" + " " * (WIDTH - 16))])
    after = Strip([Segment("load 12.6 4.1 ok" + " " * (WIDTH - 16))])
    out = written([plain], [after])
    # "6 4.1" in one go: the three unchanged cells between cost less than a 4-byte move.
    assert out.endswith("6 4.1"), repr(out)
    far = Strip([Segment("load 12.6" + " " * 40 + "14.1 ok" + " " * (WIDTH - 56))])
    far_old = Strip([Segment("load 12.5" + " " * 40 + "14.0 ok" + " " * (WIDTH - 56))])
    out = written([far_old], [far])
    assert " " * 10 not in out  # a wide gap is jumped over
    shown = replay(render_full([far_old]), out, lines=1)
    assert cells(shown) == cells(replay(render_full([far]), lines=1))


def test_a_change_at_the_right_edge_is_followed_by_an_absolute_move() -> None:
    """After the last column a terminal holds the cursor there: no relative move from it."""
    style = Style(color="color(71)")
    old = [Strip([Segment(" " * (WIDTH - 1) + "1", style)]) for _ in range(3)]
    new = [Strip([Segment(" " * (WIDTH - 1) + "2", style)]) for _ in range(3)]
    new[2] = Strip([Segment("x" + " " * (WIDTH - 2) + "2", style)])
    out = written(old, new)
    shown = replay(render_full(old), out, lines=3)
    assert cells(shown) == cells(replay(render_full(new), lines=3))
    assert "\b" not in out and "\x1b[D" not in out
