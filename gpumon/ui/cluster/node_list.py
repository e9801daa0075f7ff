"""The node list: one row per node of the cluster, sortable and filterable.

Built like the process table, on the same base
(:class:`~gpumon.ui.widgets.scrolled_table.ScrolledTable`): a ScrollView that draws only
the lines on screen (``render_line``), keyed by node name so the cursor stays on its node
across refreshes, and that marks only the cells that changed dirty. A hundred nodes cost what
the forty rows on screen cost. The title line counts the nodes shown (``Nodes 12 of 100``)
and names the filter.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.strip import Strip

from gpumon.data.cluster import NodeState
from gpumon.ui.cluster.node_columns import (
    COLUMN_KEYS,
    COLUMNS,
    EMPTY_WAITING,
    NodeColumn,
    NodeFilter,
    NodeRow,
    cell_text,
    sort_rows,
)
from gpumon.ui.widgets.lines import Glyphs, Line
from gpumon.ui.widgets.scrolled_table import ScrolledTable

__all__ = ["NodeFilter", "NodeList", "NodeRow"]

# The component style of each state's STATE cell.
_STATE_STYLES = {NodeState.UP: "up", NodeState.DOWN: "down", NodeState.STALE: "stale"}


@functools.lru_cache(maxsize=16)
def _layout(width: int, full_width: int) -> list[tuple[NodeColumn, int]]:
    """Each shown column and its width in ``width`` cells (left of the scrollbar); which
    columns show follows the full width, so they do not come and go with the
    scrollbar."""
    columns = [c for c in COLUMNS if max(width, full_width) >= c.min_terminal_width]
    fixed = sum(c.width + 1 for c in columns if c.width)
    return [(c, c.width or max(8, width - fixed)) for c in columns]


class NodeList(ScrolledTable, can_focus=True):
    """Scrollable, sortable node list with a row cursor that follows its node."""

    STYLE_PREFIX = "node-list"

    COMPONENT_CLASSES = {
        "node-list--header",
        "node-list--sorted",
        "node-list--title",
        "node-list--filter",
        "node-list--cursor",
        "node-list--empty",
        "node-list--up",
        "node-list--down",
        "node-list--stale",
        "node-list--old",
        "node-list--free",
        "node-list--name",
    }

    DEFAULT_CSS = """
    NodeList {
        height: 1fr;
        min-height: 3;
        scrollbar-size-vertical: 1;
        overflow-x: hidden;
    }
    NodeList > .node-list--header { color: $text; background: $panel; text-style: bold; }
    NodeList > .node-list--sorted { color: $accent; background: $panel; text-style: bold; }
    NodeList > .node-list--title { color: $text; text-style: bold; }
    NodeList > .node-list--filter { color: $warning; text-style: bold; }
    NodeList > .node-list--cursor { background: $surface-lighten-2; }
    NodeList:focus > .node-list--cursor {
        background: $block-cursor-blurred-background;
        text-style: bold;
    }
    NodeList > .node-list--empty { color: $text-muted; }
    NodeList > .node-list--up { color: $success; }
    NodeList > .node-list--down { color: $text-error; background: $error-muted; text-style: bold; }
    NodeList > .node-list--stale { color: $text-warning; background: $warning-muted; }
    NodeList > .node-list--old { color: $text-muted; text-style: italic; }
    NodeList > .node-list--free { color: $success; text-style: bold; }
    NodeList > .node-list--name { text-style: bold; }
    """

    BINDINGS = [
        Binding("up,k", "cursor(-1)", "Up", show=False, tooltip="previous node"),
        Binding("down,j", "cursor(1)", "Down", show=False, tooltip="next node"),
        Binding("pageup", "page(-1)", "Page up", show=False, tooltip="a page up"),
        Binding("pagedown", "page(1)", "Page down", show=False, tooltip="a page down"),
        Binding("home,g", "edge(-1)", "First", show=False, tooltip="first node"),
        Binding("end,G", "edge(1)", "Last", show=False, tooltip="last node"),
        Binding("enter", "open", "Open", tooltip="the node under the cursor: GPUs, processes"),
    ]  # fmt: skip

    class Opened(Message):
        """Enter (or a double click) on a node: show it."""

        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

    def __init__(self, glyphs: Glyphs, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.glyphs = glyphs
        self.rows: list[NodeRow] = []
        self.cursor_name: str | None = None
        self.sort_key = "node"
        self.sort_reverse = False
        self.node_filter = NodeFilter()
        self.empty_text = EMPTY_WAITING
        #: Prometheus did not answer: every row is as last read (dimmed).
        self.stale = False
        self.now_s = 0.0
        self._all: tuple[NodeRow, ...] = ()
        # Until the user moves the cursor it stays on the top row, whichever node that is.
        self.cursor_chosen = False
        # Node name -> (what its line shows, the line): an unchanged node is not redrawn.
        self._lines: dict[str, tuple[tuple[object, ...], Strip]] = {}

    # -- data in ---------------------------------------------------------------------

    def show(
        self, rows: Sequence[NodeRow], now_s: float, *, stale: bool = False, empty_text: str = ""
    ) -> None:
        """Attributes down: every node's row, the time the data is from (for "DOWN since"),
        whether Prometheus stopped answering. Repaints only what changed; a cursor row on
        screen stays on screen when its node moves."""
        self._all = tuple(rows)
        self.now_s = now_s
        self.stale = stale
        self.empty_text = empty_text or EMPTY_WAITING
        if len(self._lines) > len(self._all):
            self._forget_gone_nodes()
        old_row = self.cursor_row
        self._resort(old_row, follow=self._row_on_screen(old_row))

    def set_filter(self, node_filter: NodeFilter) -> None:
        """Show only the nodes ``node_filter`` passes; the cursor stays on its node when it
        still passes, else goes to the top."""
        if node_filter == self.node_filter:
            return
        self.node_filter = node_filter
        self._resort(0, follow=True)

    @property
    def total(self) -> int:
        """Nodes before filtering."""
        return len(self._all)

    def title_text(self) -> str:
        """``Nodes 12 of 100  filter: free GPUs · "alice"``."""
        if self.node_filter.active:
            text = f" Nodes {len(self.rows)} of {len(self._all)}"
            return text + f"  filter: {self.node_filter.describe()}"
        return f" Nodes {len(self._all)}"

    @property
    def cursor_row(self) -> int:
        for index, row in enumerate(self.rows):
            if row.name == self.cursor_name:
                return index
        return 0

    @property
    def cursor_node(self) -> NodeRow | None:
        return self.rows[self.cursor_row] if self.rows else None

    def _resort(self, old_row: int, *, follow: bool) -> None:
        shown = [row for row in self._all if self.node_filter.matches(row)]
        self.rows = sort_rows(shown, self.sort_key, self.sort_reverse)
        names = [row.name for row in self.rows]
        row = self._follow(names, old_row, self.cursor_name, self.cursor_chosen)
        self.cursor_name = names[row] if names else None
        if follow and names:
            self._scroll_to_row(row)
        self._repaint_changes()

    @property
    def _content_height(self) -> int:
        return self.TOP_LINES + max(1, len(self.rows))

    # -- keys and mouse --------------------------------------------------------------

    def cycle_sort(self) -> None:
        keys = [c.key for c, _ in _layout(self._width or 200, self.size.width or 200)]
        index = keys.index(self.sort_key) if self.sort_key in keys else -1
        self.sort_by(keys[(index + 1) % len(keys)])

    def sort_by(self, key: str, reverse: bool = False) -> None:
        """Sort as asked: the view goes to the top, the cursor to the first row."""
        if key not in COLUMN_KEYS:
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

    def action_open(self) -> None:
        node = self.cursor_node
        if node is not None:
            self.post_message(self.Opened(node.name))

    def _move_to(self, row: int) -> None:
        self.cursor_chosen = True
        self.cursor_name = self.rows[row].name
        self._scroll_to_row(row)
        self._repaint_changes()

    def on_click(self, event: events.Click) -> None:
        if event.y == self.TOP_LINES - 1:
            column = self._column_at(event.x)
            if column is not None:
                if column == self.sort_key:
                    self.reverse_sort()
                else:
                    self.sort_by(column)
            return
        row = int(self.scroll_y) + event.y - self.TOP_LINES
        if event.y >= self.TOP_LINES and 0 <= row < len(self.rows):
            self._move_to(row)
            if event.chain == 2:
                self.action_open()

    # -- drawing ---------------------------------------------------------------------

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._lines.clear()

    def _columns(self, width: int) -> list[tuple[NodeColumn, int]]:
        return _layout(width, self.size.width)

    def _line(self, y: int) -> Strip:
        width = self._width
        if y == 0:
            style = self.style("filter" if self.node_filter.active else "title")
            text = self.glyphs.truncate(self.title_text(), width)
            return Line().add(text, style).strip(width, style)
        if y == 1:
            return self._header(width)
        row = int(self.scroll_y) + y - self.TOP_LINES
        if not self.rows and row == 0:
            text = self.glyphs.truncate(" " + self._empty_line(), width)
            return Line().add(text, self.style("empty")).strip(width)
        if not 0 <= row < len(self.rows):
            return Strip.blank(width, Style())
        return self._row_line(self.rows[row], width)

    def _row_line(self, row: NodeRow, width: int) -> Strip:
        cursor = row.name == self.cursor_name
        key = (row, cursor, width, self.size.width, self.stale, self.now_s)
        cached = self._lines.get(row.name)
        if cached is not None and cached[0] == key:
            return cached[1]
        base = self.style("cursor") if cursor else Style()
        if self.stale or not row.current:
            base = self.style("old") + base
        line = Line()
        layout = self._columns(width)
        for index, (column, column_width) in enumerate(layout):
            text = cell_text(column.key, row, self.now_s, self.glyphs.ascii_only)
            text = self.glyphs.fit(text, column_width, column.right)
            line.add(text, self._cell_style(column.key, row, base))
            if index < len(layout) - 1:
                line.add(" ", base)
        strip = line.strip(width, base)
        self._lines[row.name] = (key, strip)
        return strip

    def _cell_style(self, key: str, row: NodeRow, base: Style) -> Style:
        if key == "state":
            return self.style(_STATE_STYLES[row.summary.state]) + base
        if key == "node":
            return self.style("name") + base
        if key == "free" and row.current and not self.stale and (row.summary.free_gpus or 0):
            return self.style("free") + base
        return base

    def _empty_line(self) -> str:
        if not self._all or not self.node_filter.active:
            return self.empty_text
        return f"No node matches the filter ({self.node_filter.describe()}): 0 of {len(self._all)}."

    def _forget_gone_nodes(self) -> None:
        """Drop the lines of nodes no longer listed (a cluster whose nodes change)."""
        names = {row.name for row in self._all}
        for name in [name for name in self._lines if name not in names]:
            del self._lines[name]
