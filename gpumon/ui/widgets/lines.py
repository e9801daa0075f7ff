"""Line-based widgets that repaint only what changed.

gpumon stays open for days in tmux panes over SSH, so the bytes written per refresh matter.
Textual repaints a widget's whole region on ``refresh()``; these widgets instead compare each
new line with the one on screen, segment by segment, and mark only the changed span dirty.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from rich.cells import cell_len as _rich_cell_len
from rich.cells import set_cell_size
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

from gpumon.data.format import truncate

BLANK = Style()


class Glyphs:
    """Characters for bars and borders; ASCII when the terminal's locale is not UTF-8."""

    def __init__(self, ascii_only: bool) -> None:
        self.ascii_only = ascii_only
        if ascii_only:
            self.bar_full, self.bar_empty, self.bar_partials = "|", " ", ""
            self.h, self.v = "-", "|"
            self.tl, self.tr, self.bl, self.br = "+", "+", "+", "+"
            self.up, self.down, self.ellipsis, self.dot = "^", "v", "~", "*"
        else:
            # The empty part is plain spaces inside static brackets (see add_bar): a bar that
            # shrinks then costs a few blanks over SSH, not shaded cells and colour codes.
            self.bar_full, self.bar_empty, self.bar_partials = "█", " ", " ▏▎▍▌▋▊▉"
            self.h, self.v = "─", "│"
            self.tl, self.tr, self.bl, self.br = "╭", "╮", "╰", "╯"
            self.up, self.down, self.ellipsis, self.dot = "▲", "▼", "…", "●"

    def bar(self, fraction: float | None, width: int) -> tuple[str, str]:
        """Return (filled, empty) parts of a bar ``width`` cells wide."""
        if width <= 0:
            return "", ""
        if fraction is None:
            return "", self.bar_empty * width
        fraction = max(0.0, min(1.0, fraction))
        if not self.bar_partials:
            filled = round(fraction * width)
            return self.bar_full * filled, self.bar_empty * (width - filled)
        eighths = round(fraction * width * 8)
        full, part = divmod(eighths, 8)
        text = self.bar_full * full
        if part and full < width:
            text += self.bar_partials[part]
        return text, self.bar_empty * (width - len(text))

    def truncate(self, text: str, width: int) -> str:
        """:func:`gpumon.data.format.truncate` with these glyphs' ellipsis (``~`` in ASCII).

        In terminal cells as Textual measures them (rich): a wide character is never cut in
        half; when one would straddle the ellipsis it is dropped and a space pads its cell.
        """
        if text.isascii():
            return truncate(text, width, self.ellipsis)
        if width <= 0:
            return ""
        if _rich_cell_len(text) <= width:
            return text
        head = set_cell_size(text, width - 1)
        if text.startswith(head):
            return head + self.ellipsis
        # set_cell_size turned the wide character it cut into a space: the ellipsis goes
        # right after the text, the space after the ellipsis.
        return head[:-1] + self.ellipsis + " "

    def fit(self, text: str, width: int, right: bool = False) -> str:
        """``text`` cut (see :meth:`truncate`) or padded to exactly ``width`` cells."""
        if text.isascii():
            text = truncate(text, width, self.ellipsis)
            return text.rjust(width) if right else text.ljust(width)
        text = self.truncate(text, width)
        gap = " " * (width - _rich_cell_len(text))
        return gap + text if right else text + gap


def add_bar(
    line: Line, glyphs: Glyphs, fraction: float | None, width: int, fill: Style, frame: Style
) -> None:
    """Append ``[████▌    ]``, ``width`` cells in all; ``None`` draws an empty frame."""
    filled, empty = glyphs.bar(fraction, max(0, width - 2))
    line.add("[", frame).add(filled, fill).add(empty).add("]", frame)


class Line:
    """Builds one line of styled segments, then pads or crops it to a width (in cells)."""

    __slots__ = ("_segments", "width")

    def __init__(self) -> None:
        self._segments: list[Segment] = []
        self.width = 0

    def add(self, text: str, style: Style = BLANK) -> Line:
        if text:
            segments = self._segments
            if segments and segments[-1].style == style:
                # One segment per style run: fewer escape codes on the wire.
                segments[-1] = Segment(segments[-1].text + text, style)
            else:
                segments.append(Segment(text, style))
            # Cells, as Textual measures them; len() for ASCII, the common case.
            self.width += len(text) if text.isascii() else _rich_cell_len(text)
        return self

    def extend(self, other: Line, width: int) -> Line:
        """Append ``other`` padded or cropped to exactly ``width`` cells."""
        if other.width > width:
            for segment in other.strip(width):
                self.add(segment.text, segment.style or BLANK)
            return self
        for segment in other._segments:
            self.add(segment.text, segment.style or BLANK)
        if other.width < width:
            self.add(" " * (width - other.width))
        return self

    def strip(self, width: int, style: Style = BLANK) -> Strip:
        strip = Strip(self._segments, self.width)
        if self.width > width:
            return strip.crop(0, width)
        if self.width < width:
            return Strip([*self._segments, Segment(" " * (width - self.width), style)], width)
        return strip


# Only touching runs are joined here: whether re-sending a few unchanged cells between two
# runs is shorter than moving over them depends on their colours and on the move, and the
# terminal writer (gpumon.ui.exact_updates) decides that with the real costs.
_MERGE_GAP_CELLS = 1


def changed_runs(old: Strip, new: Strip) -> list[tuple[int, int]]:
    """The cell ranges [start, end) where ``new`` differs from ``old``; empty if identical.

    Lines are built the same way every time, so their segments usually line up one to one:
    then unchanged segments are skipped and changed ones are compared cell by cell. When the
    structure differs (a bar grew a segment), the run spans from the first to the last
    differing segment.
    """
    if old.cell_length != new.cell_length:
        return [(0, max(old.cell_length, new.cell_length))]
    old_segments = list(old)
    new_segments = list(new)
    if old_segments == new_segments:
        return []
    runs: list[tuple[int, int]] = []
    if len(old_segments) == len(new_segments) and all(
        len(a.text) == len(b.text) for a, b in zip(old_segments, new_segments, strict=True)
    ):
        x = 0
        for before, after in zip(old_segments, new_segments, strict=True):
            width = after.cell_length
            if before != after:
                if before.style != after.style or width != len(after.text):
                    runs.append((x, x + width))
                else:
                    runs.extend(_difference_runs(before.text, after.text, x))
            x += width
    else:
        start, end = _outer_span(old_segments, new_segments, new.cell_length)
        runs.extend(_cell_runs(old_segments, new_segments, start, end))
    return _merge(runs)


def _cells(segments: list[Segment], start: int, end: int) -> list[tuple[str, Style | None]]:
    """(character, style) per cell in [start, end); wide characters count once per cell."""
    cells: list[tuple[str, Style | None]] = []
    x = 0
    for segment in segments:
        width = segment.cell_length
        if x + width > start and x < end:
            if width == len(segment.text):
                lo, hi = max(0, start - x), min(width, end - x)
                cells.extend((char, segment.style) for char in segment.text[lo:hi])
            else:  # wide characters: compare the segment as a whole, cell by cell
                cells.extend((segment.text, segment.style) for _ in range(width))
        x += width
        if x >= end:
            break
    return cells


def _cell_runs(
    old_segments: list[Segment], new_segments: list[Segment], start: int, end: int
) -> list[tuple[int, int]]:
    before = _cells(old_segments, start, end)
    after = _cells(new_segments, start, end)
    if len(before) != len(after):
        return [(start, end)]
    return _difference_runs(before, after, start)


def _difference_runs(
    before: Sequence[object], after: Sequence[object], offset: int
) -> list[tuple[int, int]]:
    """[start, end) ranges, shifted by ``offset``, where two equal-length sequences differ."""
    runs: list[tuple[int, int]] = []
    start = -1
    for index, (a, b) in enumerate(zip(before, after, strict=True)):
        if a != b:
            if start < 0:
                start = index
        elif start >= 0:
            runs.append((offset + start, offset + index))
            start = -1
    if start >= 0:
        runs.append((offset + start, offset + len(after)))
    return runs


def _outer_span(
    old_segments: list[Segment], new_segments: list[Segment], length: int
) -> tuple[int, int]:
    head = 0
    start = 0
    limit = min(len(old_segments), len(new_segments))
    while head < limit and old_segments[head] == new_segments[head]:
        start += old_segments[head].cell_length
        head += 1
    tail = 0
    end = length
    while tail < limit - head and old_segments[-1 - tail] == new_segments[-1 - tail]:
        end -= new_segments[-1 - tail].cell_length
        tail += 1
    return start, max(end, start + 1)


def _merge(runs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(runs):
        if merged and start - merged[-1][1] < _MERGE_GAP_CELLS:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


if TYPE_CHECKING:
    _WidgetMixin = Widget
else:
    # A plain mixin at run time: as a Widget subclass it would add Widget's default CSS
    # again, above ScrollView's, and the process table would lose its scrollbar.
    _WidgetMixin = object


class ComponentStyles(_WidgetMixin):
    """``self.style("ok")``: the rich style of component class ``<STYLE_PREFIX>--ok``,
    cached, and dropped when the theme or CSS changes. Mix in before the Widget base."""

    STYLE_PREFIX = ""

    def style(self, name: str) -> Style:
        cache: dict[str, Style] = self.__dict__.setdefault("_gpumon_styles", {})
        if name not in cache:
            cache[name] = self.get_component_rich_style(
                f"{self.STYLE_PREFIX}--{name}", partial=True
            )
        return cache[name]

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self.__dict__.pop("_gpumon_styles", None)


class LinesWidget(Widget):
    """A widget showing a list of prepared lines, repainting only changed spans."""

    DEFAULT_CSS = """
    LinesWidget {
        height: auto;
    }
    """

    def __init__(
        self, *, name: str | None = None, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._lines: list[Strip] = []

    def set_lines(self, lines: Sequence[Strip]) -> None:
        """Replace the content; mark only changed spans dirty."""
        old = self._lines
        self._lines = list(lines)
        if len(old) != len(self._lines):
            if self.styles.height is not None and self.styles.height.is_auto:
                self.refresh(layout=True)
            else:
                self.refresh()
            return
        regions = list(self._changed_regions(old, self._lines))
        if regions:
            self.refresh(*regions)

    @staticmethod
    def _changed_regions(old: Sequence[Strip], new: Sequence[Strip]) -> Iterable[Region]:
        for y, (before, after) in enumerate(zip(old, new, strict=True)):
            for start, end in changed_runs(before, after):
                yield Region(start, y, end - start, 1)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._lines)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if 0 <= y < len(self._lines):
            strip = self._lines[y]
            if strip.cell_length != width:
                strip = strip.crop_extend(0, width, self.rich_style)
            return strip
        return Strip.blank(width, self.rich_style)
