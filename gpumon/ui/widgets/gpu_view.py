"""A machine's GPUs and processes: the GPU panel above the process table, for the dashboard and
a cluster node's screen.

The stylesheet shares the room: the panel may take ``max-height`` of the view, and never the
minimum height of what shows under it (the table's ``min-height``, a note's ``height``). The
view reads those sizes off the styles to pick the panel's layout (cards, two lines or one line
per GPU): the richest whose lines fit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.css.scalar import Unit
from textual.widget import Widget

from gpumon.data.free import processes_known
from gpumon.data.model import Sample
from gpumon.data.notes import GpuNote
from gpumon.ui.widgets.gpu_layout import choose_layout, mig_lines
from gpumon.ui.widgets.gpu_panel import GpuPanel
from gpumon.ui.widgets.lines import Glyphs
from gpumon.ui.widgets.process_table import ProcessTable, table_messages


class GpuView(Vertical):
    """The GPU panel (``#gpus``), the process table (``#processes``), then ``below``;
    ``fit_table``: the table keeps no more of its ``min-height`` than its rows need."""

    DEFAULT_CSS = """
    GpuView { height: 1fr; }
    GpuView > GpuPanel { min-height: 1; max-height: 66%; }
    GpuView > ProcessTable { min-height: 4; }
    """

    def __init__(
        self, glyphs: Glyphs, *below: Widget, fit_table: bool = False, id: str | None = None
    ) -> None:
        super().__init__(id=id)
        self.glyphs = glyphs
        self.fit_table = fit_table
        self._below = below
        self._sample: Sample | None = None

    def compose(self) -> ComposeResult:
        yield GpuPanel(self.glyphs, id="gpus")
        yield ProcessTable(self.glyphs, id="processes")
        yield from self._below

    @property
    def panel(self) -> GpuPanel:
        return self.query_one(GpuPanel)

    @property
    def table(self) -> ProcessTable:
        return self.query_one(ProcessTable)

    def show(
        self,
        sample: Sample | None,
        *,
        free: frozenset[int] = frozenset(),
        notes: Mapping[int, tuple[GpuNote, ...]] | None = None,
        processes: bool = True,
        notices: Sequence[str] = (),
        empty_text: str = "",
    ) -> None:
        """Attributes down: ``sample``'s GPUs (``free``: marked FREE; ``notes``: what else is
        said of them) and, with ``processes``, its processes, ``notices`` above the table's
        own, ``empty_text`` in place of its own when no process is listed."""
        panel = self.panel
        panel.free = free
        panel.notes = notes or {}
        panel.mig_process_counts = mig_process_counts(sample)
        self._sample = sample
        gpus = sample.gpus if sample else ()
        table = self.table
        if processes:
            own_notices, own_empty = table_messages(sample)
            unknown = {
                gpu.index: gpu.processes_error or ("lost" if gpu.lost else "not read")
                for gpu in gpus
                if sample is not None and not processes_known(gpu, sample)
            }
            rows = sample.processes if sample else ()
            table.show(rows, [*notices, *own_notices], empty_text or own_empty, unknown)
        self._show_gpus()
        selected = panel.selected_gpu
        table.select_gpu(None if selected is None or len(gpus) < 2 else selected.index)

    def on_resize(self) -> None:
        self._show_gpus()

    def on_gpu_panel_selected(self, message: GpuPanel.Selected) -> None:
        if len(self.panel.gpus) > 1:
            self.table.select_gpu(message.gpu_index)

    def _show_gpus(self) -> None:
        sample = self._sample
        gpus = sample.gpus if sample else ()
        budget = self._panel_lines()
        extra = [mig_lines(gpu) for gpu in gpus]
        layout, columns = choose_layout(len(gpus), self.size.width, budget, extra)
        self.panel.show(gpus, sample.unavailable if sample else None, layout, columns, budget)

    def _panel_lines(self) -> int:
        """The panel's share of the view (its ``max-height``), less what the widgets under
        it need at least: their fixed height, else their ``min-height`` (with ``fit_table``,
        the table's rows when they need less)."""
        panel = self.panel
        size, viewport = self.size, self.app.size
        below = 0
        for widget in self.children:
            if widget is panel or not widget.display:
                continue
            height = widget.styles.height
            if height is None or height.unit is not Unit.CELLS:
                height = widget.styles.min_height
            lines = 0 if height is None else int(height.resolve(size, viewport))
            if self.fit_table and isinstance(widget, ProcessTable):
                lines = min(lines, widget.virtual_size.height)
            below += lines
        share = panel.styles.max_height
        limit = size.height if share is None else int(share.resolve(size, viewport))
        return max(1, min(limit, size.height - below))


def mig_process_counts(sample: Sample | None) -> dict[tuple[int, int | None], int]:
    """Processes per MIG instance, (GPU index, GPU instance id) -> count; only for GPUs
    whose process lists were read (unknown is not zero)."""
    if sample is None:
        return {}
    known = {gpu.index for gpu in sample.gpus if processes_known(gpu, sample)}
    counts: dict[tuple[int, int | None], int] = {}
    for gpu in sample.gpus:
        if gpu.index in known and gpu.mig_instances:
            for instance in gpu.mig_instances:
                counts[(gpu.index, instance.gpu_instance_id)] = 0
    for process in sample.processes:
        key = (process.gpu_index, process.gpu_instance_id)
        if key in counts:
            counts[key] += 1
    return counts
