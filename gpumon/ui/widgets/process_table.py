"""The process table: who uses which GPU, updated in place (a
:class:`~gpumon.ui.widgets.keyed_table.KeyedTable` keyed by (GPU index, PID)).

The title says how many processes are shown of how many and which filters are on
(:class:`ProcessFilter`, the same filter ``gpumon once`` could use); the selected GPU's
processes are highlighted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.style import Style
from textual.binding import Binding
from textual.strip import Strip

from gpumon.data.idle import Activity
from gpumon.data.model import GpuProcess
from gpumon.data.views import ProcessFilter, filter_processes
from gpumon.ui.widgets.keyed_table import Column, KeyedTable, row_bindings
from gpumon.ui.widgets.lines import Glyphs, Line
from gpumon.ui.widgets.process_columns import (
    COLUMNS,
    EMPTY_ALL_UNKNOWN,
    EMPTY_NONE,
    EMPTY_UNKNOWN,
    EMPTY_WAITING,
    ProcessKey,
    cell_text,
    column_layout,
    optional_columns,
    table_messages,
    visible_columns,
)

__all__ = ["ProcessTable", "table_messages"]


class ProcessTable(KeyedTable[GpuProcess, ProcessFilter]):
    """Scrollable, sortable process table with a row cursor that follows its process."""

    COLUMNS = COLUMNS
    COMPONENT_CLASSES = {
        "keyed-table--mine",
        "keyed-table--hidden",
        "keyed-table--probe",
        "keyed-table--selected-gpu",
    }

    DEFAULT_CSS = """
    ProcessTable > .keyed-table--mine { color: $text-accent; text-style: bold; }
    ProcessTable > .keyed-table--hidden { color: $text-muted; text-style: italic; }
    ProcessTable > .keyed-table--probe { background: $warning-muted; }
    ProcessTable > .keyed-table--selected-gpu { background: $primary-muted; }
    """

    BINDINGS = [
        *row_bindings("process"),
        Binding("left,h", "scroll_command(-1)", "Left", show=False, tooltip="scroll commands left"),
        Binding(
            "right,l", "scroll_command(1)", "Right", show=False, tooltip="scroll commands right"
        ),
    ]

    #: Cells Left/Right scroll the command column by.
    COMMAND_STEP = 8

    cursor_key: ProcessKey | None

    def __init__(self, glyphs: Glyphs, *, id: str | None = None) -> None:
        super().__init__(glyphs, ProcessFilter(), "gpu", id=id)
        self.highlighted_pids: frozenset[int] = frozenset()
        #: The GPU selected in the GPU panel: its processes are highlighted.
        self.selected_gpu: int | None = None
        #: Cells cut off the start of every command (Left/Right).
        self.command_offset = 0
        self._processes: tuple[GpuProcess, ...] = ()
        #: GPU index -> why its processes are unknown (refused list, lost GPU).
        self.unknown_gpus: dict[int, str] = {}
        self.empty_text = EMPTY_WAITING
        #: What gpumon has seen of each process's SM utilisation (its idleness), by key: set
        #: before :meth:`show` (the cluster's tables have none).
        self.activity: Mapping[ProcessKey, Activity] = {}
        self._optional: frozenset[str] = frozenset()
        #: TIME to the second (the ``time_seconds`` setting), in a wider column.
        self.time_seconds = False

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
        only when every GPU's list was read. Repaints only what changed."""
        self._processes = tuple(processes)
        self.notices = tuple(notices)
        self.empty_text = empty_text
        self.unknown_gpus = dict(unknown_gpus or {})
        self._show_rows()

    @property
    def process_filter(self) -> ProcessFilter:
        return self.row_filter

    @property
    def cursor_process(self) -> GpuProcess | None:
        return self.cursor

    def select_gpu(self, gpu_index: int | None) -> None:
        if gpu_index != self.selected_gpu:
            self.selected_gpu = gpu_index
            self._repaint_changes()

    def highlight(self, pids: frozenset[int]) -> None:
        if pids != self.highlighted_pids:
            self.highlighted_pids = pids
            self._repaint_changes()

    @property
    def total(self) -> int:
        """Processes listed before filtering."""
        return len(self._processes)

    def title_text(self) -> str:
        """The title line's words: ``Processes 12 of 64  filter: GPU 3 · mine``; ``unknown``
        when no GPU's list is known, ``>= 12`` when some GPU's list is not (never a count of
        what was not read); a filter on one GPU whose list is known counts it exactly."""
        at_least = ">= " if self.unknown_gpus else ""
        count = f"{at_least}{len(self._processes)}"
        if self.row_filter.active:
            wanted = self.row_filter.gpu_index
            exact = wanted is not None and wanted not in self.unknown_gpus
            count = f"{'' if exact else at_least}{len(self.rows)} of {count}"
        if self.empty_text in (EMPTY_WAITING, EMPTY_UNKNOWN, EMPTY_ALL_UNKNOWN):
            count = "unknown"
        text = f" Processes {count}"
        if self.row_filter.active:
            text += f"  filter: {self.row_filter.describe()}"
        shown = {column.key for column, _ in self._columns(self._width)}
        if self.sort_key not in shown:  # a narrower pane dropped it: say what the order is
            column = next(c for c in COLUMNS if c.key == self.sort_key)
            text += f"  sorted by {column.title} {self.sort_arrow(column)}"
        if self.command_offset:
            text += f"  commands scrolled {self.command_offset} cells (left/right)"
        return text

    # -- the keyed table -------------------------------------------------------------

    def _key(self, row: GpuProcess) -> ProcessKey:
        return row.key

    def _sorted_rows(self) -> list[GpuProcess]:
        column = next(c for c in COLUMNS if c.key == self.sort_key)
        shown = filter_processes(self._processes, self.row_filter)
        return sorted(shown, key=column.sort, reverse=self.sort_reverse != column.descending_first)

    def _rows_changed(self) -> None:
        self.command_offset = min(self.command_offset, self._command_scroll_limit())
        # A filter that leaves no row keeps the columns the list has: the titles stay put.
        self._optional = optional_columns(self.rows or self._processes, self.activity)
        if self.time_seconds:
            self._optional |= {"seconds"}

    def cycle_sort(self) -> None:
        keys = [c.key for c in visible_columns(self.size.width or 200, self._optional)]
        index = keys.index(self.sort_key) if self.sort_key in keys else -1
        self.sort_by(keys[(index + 1) % len(keys)])

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

    # -- drawing ---------------------------------------------------------------------

    def _columns(self, width: int) -> list[tuple[Column[GpuProcess], int]]:
        return column_layout(width, self.size.width, self._optional)

    def _row_line(self, process: GpuProcess, width: int) -> Strip:
        style = Style()
        if not process.visible:
            style = self.style("hidden")
        elif process.is_current_user:
            style = self.style("mine")
        if (
            self.selected_gpu is not None
            and process.gpu_index == self.selected_gpu
            and self.row_filter.gpu_index is None
        ):
            style = style + self.style("selected-gpu")
        if process.pid in self.highlighted_pids:
            style = style + self.style("probe")
        if process.key == self.cursor_key:
            style = style + self.style("cursor")
        line = Line()
        layout = self._columns(width)
        activity = self.activity.get(process.key)
        for index, (column, column_width) in enumerate(layout):
            # In terminal cells: a wide user name or command keeps the columns aligned.
            text = cell_text(
                column, process, activity, self.glyphs.ascii_only, seconds=self.time_seconds
            )
            if self.command_offset and column.key == "command":
                text = self.glyphs.ellipsis + text[self.command_offset + 1 :]
            text = self.glyphs.fit(text, column_width, column.right)
            # A space between columns, none after the last: the row is exactly as wide as
            # the table, so nothing has to be cropped off it on every refresh.
            line.add(text + " " if index < len(layout) - 1 else text, style)
        return line.strip(width, style)

    def _empty_line(self) -> str:
        """What an empty table says: never "none" where the processes are unknown."""
        wanted = self.row_filter.gpu_index
        if wanted is not None and wanted in self.unknown_gpus:
            return f"GPU {wanted}: processes unknown ({self.unknown_gpus[wanted]})."
        if not self._processes or not self.row_filter.active:
            return self.empty_text
        text = (
            f"No process matches the filter ({self.row_filter.describe()}): "
            f"0 of {len(self._processes)}"
        )
        if self.unknown_gpus and wanted is None:
            unknown = ", ".join(str(index) for index in sorted(self.unknown_gpus))
            text += f" listed (GPU {unknown}: processes unknown)"
        return text + "."
