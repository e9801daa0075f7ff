"""The node list: one row per node of the cluster, sortable and filterable, keyed by node
name (a :class:`~gpumon.ui.widgets.keyed_table.KeyedTable`): a hundred nodes cost what the
forty rows on screen cost. The title counts the nodes shown (``Nodes 12 of 100``) and names
the filter.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from rich.style import Style
from textual.binding import Binding
from textual.message import Message
from textual.strip import Strip

from gpumon.data.cluster import NodeState, NodeSummary
from gpumon.ui.cluster.node_columns import (
    COLUMNS,
    EMPTY_WAITING,
    NodeFilter,
    cell_text,
    sort_rows,
)
from gpumon.ui.widgets.keyed_table import Column, KeyedTable, row_bindings
from gpumon.ui.widgets.lines import Glyphs, Line

__all__ = ["NodeFilter", "NodeList"]

# The component style of each state's STATE cell.
_STATE_STYLES = {NodeState.UP: "up", NodeState.DOWN: "down", NodeState.STALE: "stale"}


@functools.lru_cache(maxsize=16)
def _layout(width: int, full_width: int) -> list[tuple[Column[NodeSummary], int]]:
    """Each shown column and its width in ``width`` cells (left of the scrollbar); which
    columns show follows the full width, so they do not come and go with the scrollbar."""
    columns = [c for c in COLUMNS if max(width, full_width) >= c.min_terminal_width]
    fixed = sum(c.width + 1 for c in columns if c.width)
    return [(c, c.width or max(8, width - fixed)) for c in columns]


class NodeList(KeyedTable[NodeSummary, NodeFilter]):
    """Scrollable, sortable node list with a row cursor that follows its node."""

    COLUMNS = COLUMNS
    COMPONENT_CLASSES = {
        "keyed-table--up",
        "keyed-table--down",
        "keyed-table--stale",
        "keyed-table--old",
        "keyed-table--free",
        "keyed-table--name",
    }

    DEFAULT_CSS = """
    NodeList > .keyed-table--up { color: $success; }
    NodeList > .keyed-table--down {
        color: $text-error; background: $error-muted; text-style: bold;
    }
    NodeList > .keyed-table--stale { color: $text-warning; background: $warning-muted; }
    NodeList > .keyed-table--old { color: $text-muted; text-style: italic; }
    NodeList > .keyed-table--free { color: $success; text-style: bold; }
    NodeList > .keyed-table--name { text-style: bold; }
    """

    BINDINGS = [
        *row_bindings("node"),
        Binding("enter", "open", "Open", tooltip="the node under the cursor: GPUs, processes"),
    ]

    class Opened(Message):
        """Enter (or a double click) on a node: show it."""

        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

    def __init__(self, glyphs: Glyphs, *, id: str | None = None) -> None:
        super().__init__(glyphs, NodeFilter(), "node", id=id)
        self.empty_text = EMPTY_WAITING
        #: Prometheus did not answer: every row is as last read (dimmed).
        self.stale = False
        self.now_s = 0.0
        self._all: tuple[NodeSummary, ...] = ()
        self._shown: tuple[object, ...] = ()
        # Every row sorted, and by what: a filter's key filters them again, in their order.
        self._sorted: tuple[tuple[NodeSummary, ...], tuple[str, bool], list[NodeSummary]]
        self._sorted = ((), ("", False), [])
        # Node name -> (what its line shows, the line): an unchanged node is not redrawn.
        self._lines: dict[str, tuple[tuple[object, ...], Strip]] = {}

    def show(
        self,
        rows: Sequence[NodeSummary],
        now_s: float,
        *,
        stale: bool = False,
        empty_text: str = "",
    ) -> None:
        """Attributes down: every node's row, the time the data is from (for "DOWN since"),
        whether Prometheus stopped answering. Repaints only what changed; the same rows
        again (a key that changed nothing here) are not filtered and sorted again."""
        if (rows, now_s, stale, empty_text) == self._shown:
            return
        self._shown = (rows, now_s, stale, empty_text)
        self._all = tuple(rows)
        self.now_s = now_s
        self.stale = stale
        self.empty_text = empty_text or EMPTY_WAITING
        if len(self._lines) > len(self._all):  # nodes left the cluster: forget their lines
            names = {row.name for row in self._all}
            self._lines = {name: line for name, line in self._lines.items() if name in names}
        self._show_rows()

    @property
    def node_filter(self) -> NodeFilter:
        return self.row_filter

    @property
    def total(self) -> int:
        """Nodes before filtering."""
        return len(self._all)

    def title_text(self) -> str:
        """``Nodes 12 of 100  filter: free GPUs · "alice"``."""
        if self.row_filter.active:
            text = f" Nodes {len(self.rows)} of {len(self._all)}"
            return text + f"  filter: {self.row_filter.describe()}"
        return f" Nodes {len(self._all)}"

    def action_open(self) -> None:
        node = self.cursor
        if node is not None:
            self.post_message(self.Opened(node.name))

    def _row_clicked(self, chain: int) -> None:
        if chain == 2:
            self.action_open()

    # -- the keyed table -------------------------------------------------------------

    def _key(self, row: NodeSummary) -> str:
        return row.name

    def _sorted_rows(self) -> list[NodeSummary]:
        """The rows that pass the filter, sorted: every row is sorted once per answer and
        sort (a filter keeps their order), so a key that filters 5,000 rows sorts none."""
        order = (self.sort_key, self.sort_reverse)
        all_rows, sorted_by, rows = self._sorted
        if all_rows is not self._all or sorted_by != order:
            rows = sort_rows(self._all, *order)
            self._sorted = (self._all, order, rows)
        if not self.row_filter.active:
            return list(rows)
        return [row for row in rows if self.row_filter.matches(row)]

    def _columns(self, width: int) -> list[tuple[Column[NodeSummary], int]]:
        return _layout(width, self.size.width)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._lines.clear()

    def _row_line(self, row: NodeSummary, width: int) -> Strip:
        cursor = row.name == self.cursor_key
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

    def _cell_style(self, key: str, row: NodeSummary, base: Style) -> Style:
        if key == "state":
            return self.style(_STATE_STYLES[row.state]) + base
        if key == "node":
            return self.style("name") + base
        if key == "free" and row.current and not self.stale and (row.free_gpus or 0):
            return self.style("free") + base
        return base

    def _empty_line(self) -> str:
        if not self._all or not self.row_filter.active:
            return self.empty_text
        return f"No node matches the filter ({self.row_filter.describe()}): 0 of {len(self._all)}."
