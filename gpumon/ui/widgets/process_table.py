"""The process table: who uses which GPU, updated in place.

Rows are keyed by (GPU index, PID): the cursor stays on the same process across refreshes and
only the cells that changed are repainted (no clear-and-refill every tick). A title line says
how many processes are shown of how many and which filters are on (:class:`ProcessFilter`,
the same filter ``gpumon once`` could use); the selected GPU's processes are highlighted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.strip import Strip

from gpumon.data.idle import Activity
from gpumon.data.model import GpuProcess
from gpumon.data.views import ProcessFilter, filter_processes
from gpumon.ui.widgets.lines import Glyphs, Line
from gpumon.ui.widgets.process_columns import (
    COLUMNS,
    DESCENDING_FIRST,
    EMPTY_ALL_UNKNOWN,
    EMPTY_NONE,
    EMPTY_NONE_ON_THE_OTHERS,
    EMPTY_UNKNOWN,
    EMPTY_WAITING,
    Column,
    ProcessKey,
    cell_text,
    column_layout,
    optional_columns,
    table_messages,
    visible_columns,
)
from gpumon.ui.widgets.scrolled_table import ScrolledTable

__all__ = [
    "COLUMNS",
    "EMPTY_ALL_UNKNOWN",
    "EMPTY_NONE",
    "EMPTY_NONE_ON_THE_OTHERS",
    "EMPTY_UNKNOWN",
    "EMPTY_WAITING",
    "Column",
    "ProcessKey",
    "ProcessTable",
    "table_messages",
]


class ProcessTable(ScrolledTable, can_focus=True):
    """Scrollable, sortable process table with a row cursor that follows its process."""

    STYLE_PREFIX = "process-table"

    COMPONENT_CLASSES = {
        "process-table--header",
        "process-table--sorted",
        "process-table--mine",
        "process-table--hidden",
        "process-table--cursor",
        "process-table--probe",
        "process-table--empty",
        "process-table--title",
        "process-table--filter",
        "process-table--selected-gpu",
    }

    DEFAULT_CSS = """
    ProcessTable {
        height: 1fr;
        min-height: 3;
        scrollbar-size-vertical: 1;
        overflow-x: hidden;
    }
    ProcessTable > .process-table--header { color: $text; background: $panel; text-style: bold; }
    ProcessTable > .process-table--sorted { color: $accent; background: $panel; text-style: bold; }
    ProcessTable > .process-table--mine { color: $text-accent; text-style: bold; }
    ProcessTable > .process-table--hidden { color: $text-muted; text-style: italic; }
    ProcessTable > .process-table--cursor { background: $surface-lighten-2; }
    ProcessTable:focus > .process-table--cursor {
        background: $block-cursor-blurred-background;
        text-style: bold;
    }
    ProcessTable > .process-table--probe { background: $warning-muted; }
    ProcessTable > .process-table--empty { color: $text-muted; }
    ProcessTable > .process-table--title { color: $text; text-style: bold; }
    ProcessTable > .process-table--filter { color: $warning; text-style: bold; }
    ProcessTable > .process-table--selected-gpu { background: $primary-muted; }
    """

    BINDINGS = [
        Binding("up,k", "cursor(-1)", "Up", show=False, tooltip="previous process"),
        Binding("down,j", "cursor(1)", "Down", show=False, tooltip="next process"),
        Binding("pageup", "page(-1)", "Page up", show=False, tooltip="a page up"),
        Binding("pagedown", "page(1)", "Page down", show=False, tooltip="a page down"),
        Binding("home,g", "edge(-1)", "First", show=False, tooltip="first process"),
        Binding("end,G", "edge(1)", "Last", show=False, tooltip="last process"),
        Binding("left,h", "scroll_command(-1)", "Left", show=False, tooltip="scroll commands left"),
        Binding(
            "right,l", "scroll_command(1)", "Right", show=False, tooltip="scroll commands right"
        ),
    ]

    #: Cells Left/Right scroll the command column by.
    COMMAND_STEP = 8

    class SortChanged(Message):
        def __init__(self, column: str, reverse: bool) -> None:
            super().__init__()
            self.column = column
            self.reverse = reverse

    def __init__(self, glyphs: Glyphs, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.glyphs = glyphs
        self.rows: list[GpuProcess] = []
        self.cursor_key: ProcessKey | None = None
        self.sort_key = "gpu"
        self.sort_reverse = False
        self.highlighted_pids: frozenset[int] = frozenset()
        self.process_filter = ProcessFilter()
        #: The GPU selected in the GPU panel: its processes are highlighted.
        self.selected_gpu: int | None = None
        #: Cells cut off the start of every command (Left/Right).
        self.command_offset = 0
        self._processes: tuple[GpuProcess, ...] = ()
        # Until the user moves the cursor, it stays on the top row rather than following the
        # process that happened to be first: an untouched table shows the top of the list.
        self.cursor_chosen = False
        self.notices: tuple[str, ...] = ()
        #: GPU index -> why its processes are unknown (refused list, lost GPU).
        self.unknown_gpus: dict[int, str] = {}
        self.empty_text = EMPTY_WAITING
        #: What gpumon has seen of each process's SM utilisation (its idleness), by key: set
        #: before :meth:`show` (the cluster's tables have none).
        self.activity: Mapping[ProcessKey, Activity] = {}
        self._optional: frozenset[str] = frozenset()

    # -- data in ---------------------------------------------------------------------

    def show(
        self,
        processes: Sequence[GpuProcess],
        notices: Sequence[str] = (),
        empty_text: str = EMPTY_NONE,
        unknown_gpus: Mapping[int, str] | None = None,
    ) -> None:
        """Attributes down: the new processes, notice lines shown below them (a GPU whose
        process list could not be read), and what to say when no process is listed: "none"
        only when every GPU's list was read. Repaints only what changed.

        A cursor row on screen stays on screen when its process moves (the view follows
        it); one the user scrolled out of view (mouse wheel) is left there.
        """
        self._processes = tuple(processes)
        self.notices = tuple(notices)
        self.empty_text = empty_text
        self.unknown_gpus = dict(unknown_gpus or {})
        old_row = self.cursor_row
        self._resort(old_row, follow=self._row_on_screen(old_row))

    def set_filter(self, process_filter: ProcessFilter) -> None:
        """Show only the processes ``process_filter`` passes; the cursor stays on its process
        when it still passes, else goes to the top."""
        if process_filter == self.process_filter:
            return
        self.process_filter = process_filter
        self._resort(0, follow=True)

    def select_gpu(self, gpu_index: int | None) -> None:
        if gpu_index != self.selected_gpu:
            self.selected_gpu = gpu_index
            self._repaint_changes()

    @property
    def total(self) -> int:
        """Processes listed before filtering."""
        return len(self._processes)

    def title_text(self) -> str:
        """The title line's words: ``Processes 12 of 64  filter: GPU 3 · mine``; ``unknown``
        when no GPU's list is known, ``>= 12`` when some GPU's list is not (never a count of
        what was not read)."""
        at_least = ">= " if self.unknown_gpus else ""
        count = f"{at_least}{len(self._processes)}"
        if self.process_filter.active:
            count = f"{at_least}{len(self.rows)} of {count}"
        if self.empty_text in (EMPTY_WAITING, EMPTY_UNKNOWN, EMPTY_ALL_UNKNOWN):
            count = "unknown"
        text = f" Processes {count}"
        if self.process_filter.active:
            text += f"  filter: {self.process_filter.describe()}"
        shown = {column.key for column, _ in self._columns(self._width)}
        if self.sort_key not in shown:  # a narrower pane dropped it: say what the order is
            column = next(c for c in COLUMNS if c.key == self.sort_key)
            descending = self.sort_reverse != column.descending_first
            arrow = self.glyphs.down if descending else self.glyphs.up
            text += f"  sorted by {column.title} {arrow}"
        if self.command_offset:
            text += f"  commands scrolled {self.command_offset} cells (left/right)"
        return text

    def highlight(self, pids: frozenset[int]) -> None:
        if pids != self.highlighted_pids:
            self.highlighted_pids = pids
            self._repaint_changes()

    @property
    def cursor_row(self) -> int:
        if self.cursor_key is None:
            return 0
        for index, process in enumerate(self.rows):
            if process.key == self.cursor_key:
                return index
        return 0

    @property
    def cursor_process(self) -> GpuProcess | None:
        if not self.rows:
            return None
        return self.rows[self.cursor_row]

    def _resort(self, old_row: int, *, follow: bool) -> None:
        """Sort the rows again, the cursor on the same process (or, if that one ended, at
        ``old_row``); ``follow`` scrolls the view, as little as it can, to show it."""
        column = next(c for c in COLUMNS if c.key == self.sort_key)
        reverse = self.sort_reverse != (self.sort_key in DESCENDING_FIRST)
        shown = filter_processes(self._processes, self.process_filter)
        self.rows = sorted(shown, key=column.sort, reverse=reverse)
        self.command_offset = min(self.command_offset, self._command_scroll_limit())
        self._optional = optional_columns(self.rows, self.activity)
        keys = [p.key for p in self.rows]
        row = self._follow(keys, old_row, self.cursor_key, self.cursor_chosen)
        self.cursor_key = keys[row] if keys else None
        if follow and keys:
            self._scroll_to_row(row)
        self._repaint_changes()

    @property
    def _content_height(self) -> int:
        return self.TOP_LINES + max(1, len(self.rows)) + len(self.notices)

    # -- keys and mouse --------------------------------------------------------------

    def cycle_sort(self) -> None:
        keys = [c.key for c in visible_columns(self.size.width or 200, self._optional)]
        index = keys.index(self.sort_key) if self.sort_key in keys else -1
        self.sort_by(keys[(index + 1) % len(keys)])

    def sort_by(self, key: str, reverse: bool = False) -> None:
        """Sort as the user asked; the view goes to the top, the cursor to the first row
        (what a new sort is for: the biggest, the oldest, the first GPU's)."""
        self.sort_key = key
        self.sort_reverse = reverse
        self.cursor_chosen = False
        self._resort(0, follow=True)
        if self.is_mounted:
            self.scroll_to(y=0, animate=False)
        self.refresh()
        self.post_message(self.SortChanged(key, reverse))

    def reverse_sort(self) -> None:
        self.sort_by(self.sort_key, not self.sort_reverse)

    def action_cursor(self, step: int) -> None:
        if not self.rows:
            return
        row = max(0, min(len(self.rows) - 1, self.cursor_row + step))
        self._move_to(row)

    def action_page(self, direction: int) -> None:
        self.action_cursor(direction * max(1, self.size.height - 2))

    def action_edge(self, direction: int) -> None:
        if self.rows:
            self._move_to(0 if direction < 0 else len(self.rows) - 1)

    def action_scroll_command(self, direction: int) -> None:
        """Left/Right: see the rest of long command lines."""
        limit = self._command_scroll_limit()
        offset = max(0, min(limit, self.command_offset + direction * self.COMMAND_STEP))
        if offset != self.command_offset:
            self.command_offset = offset
            self._repaint_changes()

    def _command_scroll_limit(self) -> int:
        longest = max((len(cell_text(COLUMNS[-1], p)) for p in self.rows), default=0)
        return max(0, longest - self.COMMAND_STEP)

    def _move_to(self, row: int) -> None:
        self.cursor_chosen = True
        self.cursor_key = self.rows[row].key
        self._scroll_to_row(row)
        self._repaint_changes()

    def on_click(self, event: events.Click) -> None:
        if event.y < self.TOP_LINES - 1:
            return
        if event.y == self.TOP_LINES - 1:
            column = self._column_at(event.x)
            if column is not None:
                if column == self.sort_key:
                    self.reverse_sort()
                else:
                    self.sort_by(column)
            return
        row = int(self.scroll_y) + event.y - self.TOP_LINES
        if 0 <= row < len(self.rows):
            self._move_to(row)

    # -- drawing ---------------------------------------------------------------------

    def _columns(self, width: int) -> list[tuple[Column, int]]:
        return column_layout(width, self.size.width, self._optional)

    def _line(self, y: int) -> Strip:
        width = self._width
        if y == 0:
            return self._title(width)
        if y == 1:
            return self._header(width)
        row = int(self.scroll_y) + y - self.TOP_LINES
        if not self.rows and row == 0:
            text = self._empty_line()
            text = self.glyphs.truncate(" " + text, width)
            return Line().add(text, self.style("empty")).strip(width)
        notice = row - max(1, len(self.rows))
        if 0 <= notice < len(self.notices):
            text = self.glyphs.truncate(" " + self.notices[notice], width)
            return Line().add(text, self.style("empty")).strip(width)
        if not 0 <= row < len(self.rows):
            # Style(), not None: Textual's NO_COLOR filter cannot handle a style of None.
            return Strip.blank(width, Style())
        process = self.rows[row]
        style = Style()
        if not process.visible:
            style = self.style("hidden")
        elif process.is_current_user:
            style = self.style("mine")
        if (
            self.selected_gpu is not None
            and process.gpu_index == self.selected_gpu
            and self.process_filter.gpu_index is None
        ):
            style = style + self.style("selected-gpu")
        if process.pid in self.highlighted_pids:
            style = style + self.style("probe")
        if process.key == self.cursor_key:
            style = style + self.style("cursor")
        line = Line()
        fit = self.glyphs.fit
        layout = self._columns(width)
        activity = self.activity.get(process.key)
        for index, (column, column_width) in enumerate(layout):
            # In terminal cells: a wide user name or command keeps the columns aligned.
            text = cell_text(column, process, activity, self.glyphs.ascii_only)
            if self.command_offset and column.key == "command":
                text = self.glyphs.ellipsis + text[self.command_offset + 1 :]
            text = fit(text, column_width, column.right)
            # A space between columns, none after the last: the row is exactly as wide as
            # the table, so nothing has to be cropped off it on every refresh.
            line.add(text + " " if index < len(layout) - 1 else text, style)
        return line.strip(width, style)

    def _empty_line(self) -> str:
        """What an empty table says: never "none" where the processes are unknown."""
        wanted = self.process_filter.gpu_index
        if wanted is not None and wanted in self.unknown_gpus:
            return f"GPU {wanted}: processes unknown ({self.unknown_gpus[wanted]})."
        if not self._processes or not self.process_filter.active:
            return self.empty_text
        text = (
            f"No process matches the filter ({self.process_filter.describe()}): "
            f"0 of {len(self._processes)}"
        )
        if self.unknown_gpus and wanted is None:
            unknown = ", ".join(str(index) for index in sorted(self.unknown_gpus))
            text += f" listed (GPU {unknown}: processes unknown)"
        return text + "."

    def _title(self, width: int) -> Strip:
        style = self.style("filter" if self.process_filter.active else "title")
        return Line().add(self.glyphs.truncate(self.title_text(), width), style).strip(width, style)
