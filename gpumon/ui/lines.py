"""Line-based widgets that repaint only what changed.

gpumon stays open for days in tmux panes over SSH, so the bytes written per refresh matter.
Textual repaints a widget's whole region on ``refresh()``; these widgets instead compare each
new line with the one on screen, segment by segment, and mark only the changed span dirty.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget

BLANK = Style()


class Glyphs:
    """Characters for bars and borders; ASCII when the terminal's locale is not UTF-8."""

    def __init__(self, ascii_only: bool) -> None:
        self.ascii_only = ascii_only
        if ascii_only:
            self.bar_full, self.bar_empty, self.bar_partials = "|", ".", ""
            self.h, self.v = "-", "|"
            self.tl, self.tr, self.bl, self.br = "+", "+", "+", "+"
            self.up, self.down, self.ellipsis, self.dot = "^", "v", "~", "*"
        else:
            self.bar_full, self.bar_empty, self.bar_partials = "█", "░", " ▏▎▍▌▋▊▉"
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
        if width <= 0:
            return ""
        if len(text) <= width:
            return text
        return text[: width - 1] + self.ellipsis


class Line:
    """Builds one line of styled segments, then pads or crops it to a width."""

    __slots__ = ("_segments", "width")

    def __init__(self) -> None:
        self._segments: list[Segment] = []
        self.width = 0

    def add(self, text: str, style: Style = BLANK) -> Line:
        if text:
            self._segments.append(Segment(text, style))
            self.width += len(text)
        return self

    def pad_to(self, width: int, style: Style = BLANK) -> Line:
        if self.width < width:
            self.add(" " * (width - self.width), style)
        return self

    def strip(self, width: int, style: Style = BLANK) -> Strip:
        strip = Strip(self._segments, self.width)
        if self.width > width:
            return strip.crop(0, width)
        if self.width < width:
            return Strip([*self._segments, Segment(" " * (width - self.width), style)], width)
        return strip


def changed_span(old: Strip, new: Strip) -> tuple[int, int] | None:
    """The cell range [start, end) where ``new`` differs from ``old``; None if identical."""
    old_segments = list(old)
    new_segments = list(new)
    if old.cell_length != new.cell_length:
        return 0, max(old.cell_length, new.cell_length)
    if old_segments == new_segments:
        return None
    head = 0
    start = 0
    limit = min(len(old_segments), len(new_segments))
    while head < limit and old_segments[head] == new_segments[head]:
        start += old_segments[head].cell_length
        head += 1
    tail = 0
    end = new.cell_length
    while tail < limit - head and old_segments[-1 - tail] == new_segments[-1 - tail]:
        end -= new_segments[-1 - tail].cell_length
        tail += 1
    return start, max(end, start + 1)


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
            span = changed_span(before, after)
            if span is not None:
                start, end = span
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
