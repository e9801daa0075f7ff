"""Write only the changed cells of a partial screen update, in the fewest bytes.

Replaces Textual's ``ChopsUpdate.render_segments``, which crops a dirty span on the right
only and so re-sends whole rows, with a cell-exact crop that carries colours over between
runs and takes the shortest cursor moves. :func:`install` uses it only where the Textual
functions it relies on are ones it was tested with
(:data:`gpumon.ui.textual_source.EXACT_UPDATES`); docs/textual-replacements.md says why.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from rich.cells import cell_len
from rich.color import ColorSystem
from rich.console import Console
from rich.style import Style
from textual.strip import Strip

from gpumon.ui.textual_source import EXACT_UPDATES, is_on

# Gaps wider than this are never re-sent: a move costs at most 6 bytes up to column 999.
_MAX_BRIDGE_CELLS = 6

Piece = tuple[str, Style | None]

# A character outside gpumon's own glyphs (an emoji in a command) may be drawn wider or
# narrower than Textual counts it: after it the cursor's column is not known for sure.
_UNSURE_WIDTH = re.compile("[^\x00-\x7f\u2500-\u259f\u2800-\u28ff▲▼…●°·]")


def _render_exact(self: Any, console: Console) -> str:
    """``ChopsUpdate.render_segments``, cropping each dirty span to its exact cells: the
    pieces are written grouped by style (the default first), each group row by row or, when
    shorter, column by column (the cells are disjoint: the order changes nothing shown)."""
    color_system = console._color_system or ColorSystem.TRUECOLOR
    chops: Sequence[Mapping[int, Strip | None]] = self.chops
    chop_ends: Sequence[Sequence[int]] = self.chop_ends
    groups: dict[str, list[_Unit]] = {}
    for y, x1, x2 in self.spans:
        line = chops[y]
        ends = chop_ends[y]
        for end, (x, strip) in zip(ends, line.items(), strict=False):
            if strip is None or x >= x2 or end <= x1:
                continue
            start = max(x, x1)
            for text, style in _pieces(strip, start - x, min(end, x2) - x):
                sgr, link = _style_codes(style, color_system)
                width = len(text) if text.isascii() else cell_len(text)
                groups.setdefault(sgr, []).append((y, start, width, text, link))
                start += width
    writer = _Writer(color_system, chops, chop_ends)
    for sgr in sorted(groups):  # "" (the default style) first
        units = groups[sgr]  # row by row already: spans come sorted by (y, x)
        if len({unit[0] for unit in units}) < 2:
            writer.write_all(sgr, units)
            continue
        state = writer.state()
        writer.write_all(sgr, units)
        by_rows = writer.take(state)
        writer.write_all(sgr, sorted(units, key=_by_column))
        if writer.cost(state) >= _bytes(by_rows[0]):
            writer.restore(by_rows)
    return writer.finish()


# (y, x, width in cells, text, (link id, link) or None): cells of one style
_Unit = tuple[int, int, int, str, "tuple[str, str] | None"]


def _by_column(unit: _Unit) -> tuple[int, int]:
    return unit[1], unit[0]


def _bytes(parts: list[str]) -> int:
    return len("".join(parts).encode())


_State = tuple[int, int, int, int, bool, str, bool]


class _Writer:
    """Terminal output with the cursor and colours tracked between pieces. The cursor
    starts unknown and the colours reset; a relative move is used only while the cursor's
    column is known for sure (not after a glyph of :data:`_UNSURE_WIDTH`, nor at the right
    edge, where a terminal holds the cursor until the next character wraps)."""

    def __init__(
        self,
        color_system: ColorSystem,
        chops: Sequence[Mapping[int, Strip | None]],
        chop_ends: Sequence[Sequence[int]],
    ) -> None:
        self.color_system = color_system
        self.chops = chops
        self.chop_ends = chop_ends
        self.parts: list[str] = []
        self.x = -1
        self.y = -1
        self.width = 0
        self.exact = False  # self.x is where the terminal's cursor is, to the cell
        self.sgr = ""  # the SGR parameters in effect on the terminal
        self.joined = False  # the last text ran up to the next piece: no move needed

    def write_all(self, sgr: str, units: list[_Unit]) -> None:
        """Write pieces of one style in this order, re-sending a small gap where shorter."""
        for y, x, width, text, link in units:
            if self.y == y and 0 < x - self.x <= _MAX_BRIDGE_CELLS:
                gap = _line_pieces(self.chops[y], self.chop_ends[y], self.x, x)
                if gap is not None:
                    self.bridge(gap, sgr)
            self.move(x, y, self.chop_ends[y][-1])
            self.write(text, width, sgr, link)

    def state(self) -> _State:
        return len(self.parts), self.x, self.y, self.width, self.exact, self.sgr, self.joined

    def take(self, state: _State) -> tuple[list[str], _State]:
        """Undo the writes since ``state``; return them and the state they ended in."""
        written = self.parts[state[0] :]
        end = self.state()
        self.restore(([], state))
        return written, end

    def restore(self, taken: tuple[list[str], _State]) -> None:
        """Drop the writes since the state ``taken`` ends in, and redo those."""
        written, state = taken
        count = state[0] - len(written)
        del self.parts[count:]
        self.parts.extend(written)
        _, self.x, self.y, self.width, self.exact, self.sgr, self.joined = state

    def cost(self, state: _State) -> int:
        return _bytes(self.parts[state[0] :])

    def move(self, x: int, y: int, width: int) -> None:
        if y == self.y and x == self.x and (self.exact or self.joined):
            self.joined = False
            return
        self.joined = False
        self.parts.append(_shortest_move(self.x, self.y, x, y, self.exact))
        self.x, self.y, self.width, self.exact = x, y, width, True

    def write(self, text: str, width: int, sgr: str, link: tuple[str, str] | None) -> None:
        append = self.parts.append
        if sgr != self.sgr:
            append(_sgr_change(self.sgr, sgr))
            self.sgr = sgr
        if link:
            append(f"\x1b]8;id={link[0]};{link[1]}\x1b\\{text}\x1b]8;;\x1b\\")
        else:
            append(text)
        self.x += width
        if self.x >= self.width or (not text.isascii() and _UNSURE_WIDTH.search(text)):
            self.exact = False

    def bridge(self, gap: list[Piece], sgr: str) -> None:
        """Re-send the unchanged ``gap`` cells up to the next piece (in ``sgr``) when that is
        shorter than moving there; the piece then follows on, as the cells of a span do."""
        current = self.sgr
        resend = 0
        cells: list[tuple[str, int, str]] = []
        for text, style in gap:
            codes, link = _style_codes(style, self.color_system)
            if link or (not text.isascii() and _UNSURE_WIDTH.search(text)):
                return  # a link's cells or a glyph of uncertain width: move instead
            resend += len(_sgr_change(current, codes)) + len(text.encode())
            current = codes
            cells.append((text, len(text) if text.isascii() else cell_len(text), codes))
        resend += len(_sgr_change(current, sgr))
        x = self.x + sum(width for _, width, _ in cells)
        move = len(_shortest_move(self.x, self.y, x, self.y, self.exact))
        if resend < move + len(_sgr_change(self.sgr, sgr)):
            exact = self.exact
            for text, width, codes in cells:
                self.write(text, width, codes, None)
            self.exact = exact and self.x < self.width
            self.joined = True

    def finish(self) -> str:
        if self.sgr:
            self.parts.append("\x1b[m")
        return "".join(self.parts)


@lru_cache(maxsize=4096)
def _shortest_move(from_x: int, from_y: int, x: int, y: int, exact: bool) -> str:
    """The fewest bytes that take the cursor from (from_x, from_y) to (x, y)."""
    best = f"\x1b[{y + 1}H" if x == 0 else f"\x1b[{y + 1};{x + 1}H"
    if from_y < 0:
        return best
    dy = y - from_y
    vertical = "" if dy == 0 else _relative(dy, "B", "A")
    if x == 0:
        horizontal = "\r"
    else:
        horizontal = f"\x1b[{x + 1}G"
        if exact:
            dx = x - from_x
            if dx == 0:
                horizontal = ""
            elif dx == -1:
                horizontal = "\b"
            else:
                relative = _relative(dx, "C", "D")
                if len(relative) < len(horizontal):
                    horizontal = relative
    move = vertical + horizontal
    return move if len(move) < len(best) else best


def _relative(delta: int, forward: str, back: str) -> str:
    final = forward if delta > 0 else back
    count = abs(delta)
    return f"\x1b[{final}" if count == 1 else f"\x1b[{count}{final}"


def _style_codes(
    style: Style | None, color_system: ColorSystem
) -> tuple[str, tuple[str, str] | None]:
    """(SGR parameters, (link id, link) or None) as Textual's ``Strip.render_style``."""
    if style is None:
        return "", None
    ansi = style._ansi
    if ansi is None:
        ansi = Strip.render_ansi(style, color_system)
    link = style._link
    return ansi, ((style._link_id, link) if link else None)


@lru_cache(maxsize=1024)
def _sgr_change(old: str, new: str) -> str:
    """The shortest SGR sequence that turns Textual's parameters ``old`` into ``new``:
    attributes are only added without a reset; a changed colour is set again (``39``/``49``:
    the terminal's default)."""
    if old == new:
        return ""
    if not new:
        return "\x1b[m"
    full = f"\x1b[0;{new}m" if old else f"\x1b[{new}m"
    if not old:
        return full
    old_attributes, old_fg, old_bg = _split_sgr(old)
    new_attributes, new_fg, new_bg = _split_sgr(new)
    if not set(old_attributes) <= set(new_attributes):
        return full
    params = [code for code in new_attributes if code not in old_attributes]
    if new_fg != old_fg:
        params.append(new_fg or "39")
    if new_bg != old_bg:
        params.append(new_bg or "49")
    change = f"\x1b[{';'.join(params)}m"
    return change if len(change) < len(full) else full


def _split_sgr(params: str) -> tuple[tuple[str, ...], str, str]:
    """(attribute codes, foreground, background) of an SGR parameter string."""
    codes = params.split(";")
    attributes: list[str] = []
    fg = bg = ""
    index = 0
    while index < len(codes):
        code = codes[index]
        length = 1
        if code in ("38", "48", "58") and index + 1 < len(codes):
            length = 3 if codes[index + 1] == "5" else 5
        whole = ";".join(codes[index : index + length])
        number = int(code) if code.isdigit() else -1
        if code == "38" or 30 <= number <= 37 or 90 <= number <= 97 or number == 39:
            fg = whole
        elif code == "48" or 40 <= number <= 47 or 100 <= number <= 107 or number == 49:
            bg = whole
        else:
            attributes.append(whole)
        index += length
    return tuple(attributes), fg, bg


def _line_pieces(
    line: Mapping[int, Strip | None], ends: Sequence[int], start: int, stop: int
) -> list[Piece] | None:
    """The cells [start, stop) of a rendered line, or None if a part of it is not at hand."""
    pieces: list[Piece] = []
    for end, (x, strip) in zip(ends, line.items(), strict=False):
        if x >= stop or end <= start:
            continue
        if strip is None:
            return None
        pieces.extend(_pieces(strip, max(x, start) - x, min(end, stop) - x))
    return pieces


def _pieces(strip: Strip, start: int, stop: int) -> list[Piece]:
    """(text, style) for cells [start, stop) of ``strip``, as ``Strip.crop`` gives them (a
    wide character cut in half becomes spaces)."""
    parts: list[Piece] = []
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
        if segment.text:
            parts.append((segment.text, style))
        x = end
    return parts


def install() -> bool:
    """Use the exact crop; False (and nothing changed) where Textual's code is not one it was
    tested with."""
    if not is_on(EXACT_UPDATES):
        return False
    from textual._compositor import ChopsUpdate  # private: its source is checked by is_on

    ChopsUpdate.render_segments = _render_exact  # type: ignore[method-assign]
    return True
