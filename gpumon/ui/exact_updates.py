"""Write only the changed cells of a partial screen update.

Textual's ``ChopsUpdate.render_segments`` crops a dirty span on the right only (its sibling
method carries a ``TODO: crop to x extents``): a process row whose CPU % changed is re-sent
from the first cell of the widget, because Textual merges same-style segments. Over SSH,
for a monitor that runs for days, that multiplies the bytes per refresh several times.

This module replaces that one method with an exact, cell-accurate crop. It is applied only to
the Textual version it was written against (the test extra's exact pin; gpumon itself takes a
range of Textual); with any other version Textual's own method stays, and
``tests/test_exact_updates.py`` fails loudly so the override is reviewed, not silently
dropped.
"""

from __future__ import annotations

from typing import Any

import textual
from rich.cells import cell_len
from rich.color import ColorSystem
from rich.console import Console
from textual.strip import Strip

TEXTUAL_VERSION = "8.2.8"


def _render_exact(self: Any, console: Console) -> str:
    """``ChopsUpdate.render_segments``, cropping each dirty span to its exact cells.

    Also: a later span on the same line is reached with a column-only move (``CSI n G``,
    4-6 bytes) instead of a full row;column move, and no newline is sent between lines
    (every span starts with an absolute move anyway). The cells of a span are rendered
    straight from the chop's segments (:func:`_render_cells`), without building a cropped
    ``Strip`` per span.
    """
    sequences: list[str] = []
    append = sequences.append
    chops = self.chops
    chop_ends = self.chop_ends
    color_system = console._color_system or ColorSystem.TRUECOLOR
    cursor_x, cursor_y = -1, -1  # where the last write left the cursor
    for y, x1, x2 in self.spans:
        line = chops[y]
        ends = chop_ends[y]
        for end, (x, strip) in zip(ends, line.items(), strict=False):
            if strip is None or x >= x2 or end <= x1:
                continue
            start = max(x, x1)
            stop = min(end, x2)
            if cursor_y != y:
                append(f"\x1b[{y + 1};{start + 1}H")
            elif start != cursor_x:
                append(f"\x1b[{start + 1}G")
            if start == x and stop == end:
                append(strip.render(console))  # the whole chop: Textual caches its render
            else:
                append(_render_cells(strip, start - x, stop - x, color_system))
            cursor_x, cursor_y = stop, y
    return "".join(sequences)


def _render_cells(strip: Strip, start: int, stop: int, color_system: ColorSystem) -> str:
    """The terminal sequences for cells [start, stop) of ``strip``, as ``Strip.crop`` then
    ``Strip.render`` would give them (a wide character cut in half becomes spaces)."""
    parts: list[str] = []
    render = Strip.render_style
    x = 0
    for segment in strip:
        text, style, _ = segment
        width = len(text) if text.isascii() else cell_len(text)
        end = x + width
        if end <= start:
            x = end
            continue
        if x >= stop:
            break
        if end > stop:
            segment = segment.split_cells(stop - x)[0]
        if x < start:
            segment = segment.split_cells(start - x)[1]
        text = segment.text
        if text:
            parts.append(text if style is None else render(style, text, color_system))
        x = end
    return "".join(parts)


def install() -> bool:
    """Use the exact crop; return False (and change nothing) on an unknown Textual."""
    if textual.__version__ != TEXTUAL_VERSION:
        return False
    # Private API: imported only for the version it was written against.
    from textual._compositor import ChopsUpdate

    ChopsUpdate.render_segments = _render_exact  # type: ignore[method-assign]
    return True
