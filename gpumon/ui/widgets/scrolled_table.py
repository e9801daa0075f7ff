"""What the process table and the cluster's node list share: a ScrollView that draws only the
lines on screen (``render_line``), keeps the cursor's row in view by scrolling as little as it
can, marks only the cells that changed dirty, and draws the column headers with the sort arrow.

A subclass says what each line is (``_line``), how many lines there are
(``_content_height``) and which columns show at a width (``_columns``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gpumon.ui.widgets.lines import ComponentStyles, Glyphs, Line, changed_runs


class TableColumn(Protocol):
    """A column as the header draws it."""

    @property
    def key(self) -> str: ...

    @property
    def title(self) -> str: ...

    @property
    def right(self) -> bool: ...

    @property
    def descending_first(self) -> bool: ...


class ScrolledTable(ComponentStyles, ScrollView):
    """A title line, the column headers, then the rows, scrolling under the two."""

    #: The title line and the column headers stay on top while the rows scroll.
    TOP_LINES = 2

    glyphs: Glyphs
    sort_key: str
    sort_reverse: bool

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._painted: dict[int, Strip] = {}
        self._fresh: dict[int, Strip] = {}

    # -- what a subclass says --------------------------------------------------------

    @property
    def _content_height(self) -> int:
        raise NotImplementedError

    def _line(self, y: int) -> Strip:
        """Line ``y`` of the widget (0: the title, 1: the headers, then the rows)."""
        raise NotImplementedError

    def _columns(self, width: int) -> Sequence[tuple[TableColumn, int]]:
        """Each shown column and its width in ``width`` cells (left of the scrollbar)."""
        raise NotImplementedError

    # -- the cursor across a refresh --------------------------------------------------

    @property
    def cursor_row(self) -> int:
        """The row under the cursor."""
        raise NotImplementedError

    def _follow(self, keys: Sequence[object], old_row: int, key: object, chosen: bool) -> int:
        """The cursor's row after the rows changed: the row of ``key`` (the row under the
        cursor before), else the same height when that row left; the top until the user
        moved the cursor. Resizes the scrolled area to the new rows."""
        if not chosen:
            row = 0
        elif key is not None and key in keys:
            row = keys.index(key)
        else:
            row = min(old_row, len(keys) - 1)  # the row under the cursor left
        if self.virtual_size.height != self._content_height:
            self.virtual_size = Size(self._width, self._content_height)
        return row

    # -- repainting ------------------------------------------------------------------

    def _repaint_changes(self) -> None:
        if not self.is_mounted:
            return
        regions: list[Region] = []
        self._fresh.clear()
        for y in range(self.size.height):
            new = self._fresh[y] = self._line(y)
            old = self._painted.get(y)
            if old is None:
                regions.append(Region(0, y, self._width, 1))
            elif old is not new:
                runs = changed_runs(old, new)
                regions.extend(Region(start, y, end - start, 1) for start, end in runs)
        if regions:
            self.refresh(*regions)

    # -- scrolling -------------------------------------------------------------------

    @property
    def _visible_rows(self) -> int:
        """How many rows fit below the title and the header."""
        return max(1, self.size.height - self.TOP_LINES)

    def _row_on_screen(self, row: int) -> bool:
        top = int(self.scroll_y)
        return top <= row < top + self._visible_rows

    def _scroll_to_row(self, row: int) -> None:
        """Scroll as little as needed to show ``row`` (ScrollView scrolls at once)."""
        if not self.is_mounted or not self.size.height:
            return
        visible = self._visible_rows
        top = int(self.scroll_y)
        if row < top:
            self.scroll_to(y=row, animate=False)
        elif row >= top + visible:
            self.scroll_to(y=row - visible + 1, animate=False)

    def _column_at(self, x: int) -> str | None:
        position = 0
        for column, width in self._columns(self._width):
            if position <= x < position + width + 1:
                return column.key
            position += width + 1
        return None

    # -- drawing ---------------------------------------------------------------------

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._fresh.clear()

    def on_resize(self) -> None:
        self._painted.clear()
        self._fresh.clear()
        self.virtual_size = Size(self._width, self._content_height)
        self.refresh()
        # A smaller pane must not hide the cursor's row: Enter, T, K act on it.
        self.call_after_refresh(self._cursor_into_view)

    def _cursor_into_view(self) -> None:
        self._scroll_to_row(self.cursor_row)

    def watch_scroll_y(self, old: float, new: float) -> None:
        self._painted.clear()
        self._fresh.clear()
        super().watch_scroll_y(old, new)

    def render_line(self, y: int) -> Strip:
        # Lines built for the diff in _repaint_changes are reused, not rendered twice.
        strip = self._fresh.pop(y, None)
        if strip is None or strip.cell_length != self._width:  # a scrollbar came or went
            strip = self._line(y)
        self._painted[y] = strip
        return strip

    @property
    def _width(self) -> int:
        """Columns left for the table: the vertical scrollbar takes the last one."""
        return self.scrollable_content_region.width

    def _header(self, width: int) -> Strip:
        line = Line()
        header = self.style("header")
        layout = self._columns(width)
        for index, (column, column_width) in enumerate(layout):
            title = column.title[:column_width]
            style = header
            if column.key == self.sort_key:
                descending = self.sort_reverse != column.descending_first
                arrow = self.glyphs.down if descending else self.glyphs.up
                # The arrow always shows, even when the title must give up a letter for it.
                title = column.title[: column_width - 1] + arrow
                style = self.style("sorted")
            line.add(
                title.rjust(column_width) if column.right else title.ljust(column_width), style
            )
            if index < len(layout) - 1:
                line.add(" ", header)
        return line.strip(width, header)
