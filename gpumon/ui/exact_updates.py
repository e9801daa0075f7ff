"""Write only the changed cells of a partial screen update.

Textual's ``ChopsUpdate.render_segments`` crops a dirty span on the right only (its sibling
method carries a ``TODO: crop to x extents``): a process row whose CPU % changed is re-sent
from the first cell of the widget, because Textual merges same-style segments. Over SSH,
for a monitor that runs for days, that multiplies the bytes per refresh several times.

This module replaces that one method with an exact, cell-accurate crop. It is applied only to
the Textual version it was written against (pinned exactly in pyproject.toml); with any other
version Textual's own method stays, and ``tests/test_exact_updates.py`` fails loudly so the
override is reviewed, not silently dropped.
"""

from __future__ import annotations

from typing import Any

import textual
from rich.console import Console
from textual._compositor import ChopsUpdate

TEXTUAL_VERSION = "8.2.8"


def _render_exact(self: Any, console: Console) -> str:
    """``ChopsUpdate.render_segments``, cropping each dirty span to its exact cells.

    Also: a later span on the same line is reached with a column-only move (``CSI n G``,
    4-6 bytes) instead of a full row;column move, and no newline is sent between lines
    (every span starts with an absolute move anyway).
    """
    sequences: list[str] = []
    append = sequences.append
    chops = self.chops
    chop_ends = self.chop_ends
    cursor_x, cursor_y = -1, -1  # where the last write left the cursor
    for y, x1, x2 in self.spans:
        line = chops[y]
        ends = chop_ends[y]
        for end, (x, strip) in zip(ends, line.items(), strict=False):
            if strip is None or x >= x2 or end <= x1:
                continue
            start = max(x, x1)
            stop = min(end, x2)
            if start != x or stop != end:
                strip = strip.crop(start - x, stop - x)
            if cursor_y != y:
                append(f"\x1b[{y + 1};{start + 1}H")
            elif start != cursor_x:
                append(f"\x1b[{start + 1}G")
            append(strip.render(console))
            cursor_x, cursor_y = stop, y
    return "".join(sequences)


def install() -> bool:
    """Use the exact crop; return False (and change nothing) on an unknown Textual."""
    if textual.__version__ != TEXTUAL_VERSION:
        return False
    ChopsUpdate.render_segments = _render_exact  # type: ignore[method-assign]
    return True
