"""A scrolling table whose rows are keyed: the process table and the cluster's node list.

Only the lines on screen are drawn (``render_line``) and only the cells that changed are marked
dirty. The cursor stays on its row's key across refreshes, the sort cycles (``s``, ``r``, a
click on a header), PageUp/PageDown move by the rows on screen, Home/End go to the ends. A
subclass says what a row is (``_key``, ``_row_line``), its order (``_sorted_rows``), which
columns show at a width (``_columns``), and its title and empty line.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from gpumon.ui.widgets.lines import ComponentStyles, Glyphs, Line, changed_runs

RowT = TypeVar("RowT")


class RowFilter(Protocol):
    @property
    def active(self) -> bool: ...

    def describe(self) -> str: ...


FilterT = TypeVar("FilterT", bound=RowFilter)


@dataclass(frozen=True, slots=True)
class Column(Generic[RowT]):
    """A table column; every column is at least one cell wider than its title, so the sort
    arrow never cuts it."""

    key: str
    title: str
    width: int  # 0: takes the remaining width
    right: bool
    #: The sort value of a row.
    sort: Callable[[RowT], Any]
    descending_first: bool = False
    min_terminal_width: int = 0  # hidden below this table width
    #: Shown only while some row has a value for it (a Slurm job, a container, SM%).
    optional: bool = False


def row_bindings(noun: str) -> list[Binding]:
    """The cursor keys, with tooltips naming what a row is."""
    return [
        Binding("up,k", "cursor(-1)", "Up", show=False, tooltip=f"previous {noun}"),
        Binding("down,j", "cursor(1)", "Down", show=False, tooltip=f"next {noun}"),
        Binding("pageup", "page(-1)", "Page up", show=False, tooltip="a page up"),
        Binding("pagedown", "page(1)", "Page down", show=False, tooltip="a page down"),
        Binding("home,g", "edge(-1)", "First", show=False, tooltip=f"first {noun}"),
        Binding("end,G", "edge(1)", "Last", show=False, tooltip=f"last {noun}"),
    ]


class KeyedTable(ComponentStyles, ScrollView, Generic[RowT, FilterT], can_focus=True):
    """A title line, the column headers, then the rows (and notice lines) scrolling under
    the two."""

    STYLE_PREFIX = "keyed-table"
    COMPONENT_CLASSES = {
        "keyed-table--header",
        "keyed-table--sorted",
        "keyed-table--title",
        "keyed-table--filter",
        "keyed-table--cursor",
        "keyed-table--empty",
    }
    DEFAULT_CSS = """
    KeyedTable {
        height: 1fr;
        min-height: 3;
        scrollbar-size-vertical: 1;
        overflow-x: hidden;
    }
    KeyedTable > .keyed-table--header { color: $text; background: $panel; text-style: bold; }
    KeyedTable > .keyed-table--sorted { color: $accent; background: $panel; text-style: bold; }
    KeyedTable > .keyed-table--title { color: $text; text-style: bold; }
    KeyedTable > .keyed-table--filter { color: $warning; text-style: bold; }
    KeyedTable > .keyed-table--cursor { background: $surface-lighten-2; }
    KeyedTable:focus > .keyed-table--cursor {
        background: $block-cursor-blurred-background;
        text-style: bold;
    }
    KeyedTable > .keyed-table--empty { color: $text-muted; }
    """

    #: The title line and the column headers stay on top while the rows scroll.
    TOP_LINES = 2
    COLUMNS: tuple[Column[RowT], ...] = ()

    def __init__(
        self, glyphs: Glyphs, row_filter: FilterT, sort_key: str, *, id: str | None = None
    ) -> None:
        super().__init__(id=id)
        self.glyphs = glyphs
        self.row_filter = row_filter
        self.sort_key = sort_key
        self.sort_reverse = False
        self.rows: list[RowT] = []
        self.cursor_key: Hashable | None = None
        # Until the user moves the cursor it stays on the top row, whichever row that is.
        self.cursor_chosen = False
        #: Lines below the rows (a GPU whose process list could not be read).
        self.notices: tuple[str, ...] = ()
        self._painted: dict[int, Strip] = {}
        self._fresh: dict[int, Strip] = {}

    # -- what a subclass says --------------------------------------------------------

    def _key(self, row: RowT) -> Hashable:
        raise NotImplementedError

    def _sorted_rows(self) -> list[RowT]:
        """The rows the filter passes, in the sort order."""
        raise NotImplementedError

    def _columns(self, width: int) -> Sequence[tuple[Column[Any], int]]:
        """Each shown column and its width in ``width`` cells (left of the scrollbar)."""
        raise NotImplementedError

    def _row_line(self, row: RowT, width: int) -> Strip:
        raise NotImplementedError

    def title_text(self) -> str:
        raise NotImplementedError

    def _empty_line(self) -> str:
        raise NotImplementedError

    def _rows_changed(self) -> None:
        """Called after the rows were sorted again, before the cursor follows its row."""

    # -- rows and cursor -------------------------------------------------------------

    def set_filter(self, row_filter: FilterT) -> None:
        """Show only the rows ``row_filter`` passes; the cursor stays on its row when it
        still passes, else goes to the top."""
        if row_filter != self.row_filter:
            self.row_filter = row_filter
            self._resort(0, follow=True)

    @property
    def cursor_row(self) -> int:
        for index, row in enumerate(self.rows):
            if self._key(row) == self.cursor_key:
                return index
        return 0

    @property
    def cursor(self) -> RowT | None:
        """The row under the cursor."""
        return self.rows[self.cursor_row] if self.rows else None

    def _show_rows(self) -> None:
        """New rows: a cursor row on screen stays on screen when its row moves (the view
        follows it); one the user scrolled out of view (mouse wheel) is left there."""
        old_row = self.cursor_row
        self._resort(old_row, follow=self._row_on_screen(old_row))

    def _resort(self, old_row: int, *, follow: bool) -> None:
        """Sort the rows again, the cursor on the same key (or, if that row left, at
        ``old_row``; the top until the user moved it); ``follow`` scrolls to show it."""
        self.rows = self._sorted_rows()
        self._rows_changed()
        keys = [self._key(row) for row in self.rows]
        if not self.cursor_chosen:
            row = 0
        elif self.cursor_key is not None and self.cursor_key in keys:
            row = keys.index(self.cursor_key)
        else:
            row = min(old_row, len(keys) - 1)
        if self.virtual_size.height != self._content_height:
            self.virtual_size = Size(self._width, self._content_height)
        self.cursor_key = keys[row] if keys else None
        if follow and keys:
            self._scroll_to_row(row)
        self._repaint_changes()

    @property
    def _content_height(self) -> int:
        return self.TOP_LINES + max(1, len(self.rows)) + len(self.notices)

    # -- keys and mouse --------------------------------------------------------------

    def cycle_sort(self) -> None:
        keys = [column.key for column, _ in self._columns(self._width or 200)]
        index = keys.index(self.sort_key) if self.sort_key in keys else -1
        self.sort_by(keys[(index + 1) % len(keys)])

    def sort_by(self, key: str, reverse: bool = False) -> None:
        """Sort as the user asked; the view goes to the top, the cursor to the first row
        (what a new sort is for: the biggest, the oldest, the first)."""
        if all(column.key != key for column in self.COLUMNS):
            raise KeyError(key)
        self.sort_key = key
        self.sort_reverse = reverse
        self.cursor_chosen = False
        self._resort(0, follow=True)
        if self.is_mounted:
            self.scroll_to(y=0, animate=False)
        self.refresh()

    def reverse_sort(self) -> None:
        self.sort_by(self.sort_key, not self.sort_reverse)

    def action_cursor(self, step: int) -> None:
        if self.rows:
            self._move_to(max(0, min(len(self.rows) - 1, self.cursor_row + step)))

    def action_page(self, direction: int) -> None:
        self.action_cursor(direction * self._visible_rows)

    def action_edge(self, direction: int) -> None:
        if self.rows:
            self._move_to(0 if direction < 0 else len(self.rows) - 1)

    def _move_to(self, row: int) -> None:
        self.cursor_chosen = True
        self.cursor_key = self._key(self.rows[row])
        self._scroll_to_row(row)
        self._repaint_changes()

    def on_click(self, event: events.Click) -> None:
        if event.y == self.TOP_LINES - 1:
            column = self._column_at(event.x)
            if column == self.sort_key:
                self.reverse_sort()
            elif column is not None:
                self.sort_by(column)
            return
        row = int(self.scroll_y) + event.y - self.TOP_LINES
        if event.y >= self.TOP_LINES and 0 <= row < len(self.rows):
            self._move_to(row)
            self._row_clicked(event.chain)

    def _row_clicked(self, chain: int) -> None:
        """A click on the cursor's row (``chain``: 2 for a double click)."""

    def _column_at(self, x: int) -> str | None:
        position = 0
        for column, width in self._columns(self._width):
            if position <= x < position + width + 1:
                return column.key
            position += width + 1
        return None

    # -- scrolling -------------------------------------------------------------------

    @property
    def _visible_rows(self) -> int:
        """How many rows fit below the title and the header: a page."""
        return max(1, self.size.height - self.TOP_LINES)

    def _row_on_screen(self, row: int) -> bool:
        top = int(self.scroll_y)
        return top <= row < top + self._visible_rows

    def _scroll_to_row(self, row: int) -> None:
        """Scroll as little as needed to show ``row`` (ScrollView scrolls at once)."""
        if not self.is_mounted or not self.size.height:
            return
        top = int(self.scroll_y)
        if row < top:
            self.scroll_to(y=row, animate=False)
        elif row >= top + self._visible_rows:
            self.scroll_to(y=row - self._visible_rows + 1, animate=False)

    def on_resize(self) -> None:
        self._painted.clear()
        self._fresh.clear()
        self.virtual_size = Size(self._width, self._content_height)
        self.refresh()
        # A smaller pane must not hide the cursor's row: Enter, T, K act on it.
        self.call_after_refresh(lambda: self._scroll_to_row(self.cursor_row))

    def watch_scroll_y(self, old: float, new: float) -> None:
        self._painted.clear()
        self._fresh.clear()
        super().watch_scroll_y(old, new)

    # -- drawing ---------------------------------------------------------------------

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

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._fresh.clear()

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

    def _line(self, y: int) -> Strip:
        """Line ``y`` of the widget (0: the title, 1: the headers, then the rows)."""
        width = self._width
        if y == 0:
            style = self.style("filter" if self.row_filter.active else "title")
            text = self.glyphs.truncate(self.title_text(), width)
            return Line().add(text, style).strip(width, style)
        if y == 1:
            return self._header(width)
        row = int(self.scroll_y) + y - self.TOP_LINES
        notice = row - max(1, len(self.rows))
        if (not self.rows and row == 0) or 0 <= notice < len(self.notices):
            text = self._empty_line() if notice < 0 else self.notices[notice]
            text = self.glyphs.truncate(" " + text, width)
            return Line().add(text, self.style("empty")).strip(width)
        if not 0 <= row < len(self.rows):
            # Style(), not None: Textual's NO_COLOR filter cannot handle a style of None.
            return Strip.blank(width, Style())
        return self._row_line(self.rows[row], width)

    def _header(self, width: int) -> Strip:
        line = Line()
        header = self.style("header")
        layout = self._columns(width)
        for index, (column, column_width) in enumerate(layout):
            title = column.title[:column_width]
            style = header
            if column.key == self.sort_key:
                # The arrow always shows, even when the title must give up a letter for it.
                title = column.title[: column_width - 1] + self.sort_arrow(column)
                style = self.style("sorted")
            line.add(
                title.rjust(column_width) if column.right else title.ljust(column_width), style
            )
            if index < len(layout) - 1:
                line.add(" ", header)
        return line.strip(width, header)

    def sort_arrow(self, column: Column[Any]) -> str:
        descending = self.sort_reverse != column.descending_first
        return self.glyphs.down if descending else self.glyphs.up
