"""A widget showing a rich ``Text`` line by line, repainting only the cells that changed.

``Static.update`` repaints the whole widget: a detail screen redrawn once a second sent all
its rows every second (30 kB/s over SSH). This one hands each line to
:class:`~gpumon.ui.widgets.lines.LinesWidget`, which marks only changed spans dirty.
"""

from __future__ import annotations

from rich.text import Text
from textual.strip import Strip

from gpumon.ui.widgets.lines import LinesWidget


class TextLines(LinesWidget):
    """Lines of a ``Text``, cropped (never wrapped) to the widget's width."""

    #: The last Text shown.
    content: Text = Text()

    def update(self, text: Text) -> None:
        self.content = text
        console = self.app.console
        width = max(1, self.size.width or console.width)
        lines = list(text.split("\n", allow_blank=True))
        if lines and not lines[-1].plain:
            lines = lines[:-1]  # a trailing newline is not a line
        strips = []
        for line in lines:
            line.no_wrap = True
            line.overflow = "crop"
            segments = list(line.render(console, end=""))
            strips.append(Strip(segments).crop_extend(0, width, None))
        self.set_lines(strips)

    def on_resize(self) -> None:
        self.refresh()
