"""``Enter`` on a GPU: its history as graphs, every field, and its processes.

The screen redraws from the app's :class:`~gpumon.sampling.store.Store` on each new state
(the store keeps at least the last ten minutes); ``[`` and ``]`` step the graphs to
1 h, 24 h and 7 days from the history database (:mod:`gpumon.ui.dashboard.gpu_history`).
Graphs are drawn on a fixed scale by :mod:`gpumon.ui.widgets.graphs` (see there why not
Textual's ``Sparkline``).
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from gpumon.data import format as fmt
from gpumon.data.model import GpuStats
from gpumon.sampling.store import Store
from gpumon.ui.dashboard.gpu_history import SPAN_BINDINGS, GpuSpans, SeriesRead
from gpumon.ui.dashboard.store_screen import StoreScreen
from gpumon.ui.widgets.gpu_fields import (
    GRAPHS,
    Piece,
    append_chart,
    ascii_text,
    chart_width,
    fitted_line,
    render_fields,
    render_processes,
)
from gpumon.ui.widgets.graphs import bucketed, chart
from gpumon.ui.widgets.keys_footer import KeysFooter
from gpumon.ui.widgets.text_lines import TextLines

CHART_ROWS = 3


def _span(timestamps: list[float]) -> str:
    if len(timestamps) < 2:
        return "waiting for history"
    seconds = timestamps[-1] - timestamps[0]
    return f"last {fmt.duration(seconds)}"


def render_graphs(
    store: Store,
    index: int,
    gpu: GpuStats,
    width: int,
    ascii_only: bool = False,
    colors: tuple[str, str] = ("green", "yellow"),
) -> Text:
    """Every graph of GPU ``index`` at ``width`` cells; ``colors``: the charts' and the
    temperature chart's (the theme's success and warning colours)."""
    text = Text(no_wrap=True, overflow="crop")  # a chart row never wraps
    span = _span(store.timestamps())
    width_cells = chart_width(width)
    for graph in GRAPHS:
        values = store.gpu_history(index, graph.field)
        known = [value for value in values if value is not None]
        latest = known[-1] if known and values and values[-1] is not None else None
        top = graph.scale_top(gpu, known)
        threshold = graph.threshold(gpu)
        now = fmt.NA if latest is None else graph.text(latest)
        # On a narrow screen the span goes first, then min, the threshold, max: whole.
        pieces: list[Piece] = [(f"{graph.title}  ", "bold", 0), (now, "", 0)]
        if known:
            pieces.append((f"   min {graph.text(min(known))}", "dim", 3))
            pieces.append((f"  max {graph.text(max(known))}", "dim", 1))
        if threshold is not None:
            pieces.append((f"   {graph.threshold_name} {graph.text(threshold)}", "dim", 2))
        pieces.append((f"   ({span})", "dim", 4))
        text.append_text(ascii_text(fitted_line(pieces, width), ascii_only))
        text.append("\n")
        # Columns of whole buckets of samples, fixed to the sample numbers: the chart moves one
        # column per bucket, and in between only its newest column changes.
        per_column = max(1, -(-store.capacity // width_cells))
        columns = bucketed(values, store.sequence, per_column, width_cells)
        rows = chart(columns, width_cells, CHART_ROWS, 0.0, top, threshold=threshold,
                     ascii_only=ascii_only)  # fmt: skip
        style = colors[1] if graph.field == "temperature_c" else colors[0]
        append_chart(text, rows, graph.text(top), style, ascii_only)
    return text


class GpuDetailScreen(StoreScreen):
    """One GPU over time. ``Escape`` goes back; ``[`` and ``]`` change the graphs' span."""

    BINDINGS = [*StoreScreen.BINDINGS, *SPAN_BINDINGS]
    TITLE_ID = "gpu-detail-title"

    def __init__(self, store: Store, index: int, *, ascii_only: bool = False) -> None:
        super().__init__(store)
        self.index = index
        self.spans = GpuSpans(self)
        self.ascii_only = ascii_only
        #: The last readings of the GPU while it answered: a lost GPU's graphs keep their scale.
        self._last_known: GpuStats | None = None

    def before_first_draw(self) -> None:
        self._want_details(True)

    def on_unmount(self) -> None:
        self._want_details(False)

    def _want_details(self, wanted: bool) -> None:
        want = getattr(self.app, "want_details", None)  # the dashboard's (GpumonApp)
        if want is not None:
            want(wanted)

    def compose(self) -> ComposeResult:
        yield Static(id=self.TITLE_ID, markup=False)  # a GPU name is text, not markup
        with VerticalScroll():
            yield TextLines(id="gpu-detail-graphs")
            yield TextLines(id="gpu-detail-fields")
            yield TextLines(id="gpu-detail-processes")
        yield KeysFooter()

    def refresh_from_store(self) -> None:
        """Redraw everything from the store's history and latest sample."""
        sample = self.store.latest
        if sample is None:
            self.show_title(f" GPU {self.index}: waiting for the first sample")
            return
        gpu = next((gpu for gpu in sample.gpus if gpu.index == self.index), None)
        if gpu is None:
            self.show_title(f" GPU {self.index}: not in the latest sample")
            return
        # What matters first: a narrow terminal cuts the end of the title, never LOST or DEMO.
        lost = f"  LOST: {gpu.lost_reason or 'no readings'}" if gpu.lost else ""
        demo = "  DEMO (simulated)" if sample.simulated else ""
        self.show_title(
            f" GPU {gpu.index}{lost}{demo}  {gpu.name or fmt.NA}  {gpu.short_uuid}  "
            f"{gpu.pci_bus_id or ''}"
        )
        if not gpu.lost:
            self._last_known = gpu
        scale = gpu if not gpu.lost or self._last_known is None else self._last_known
        width = self.content_width()
        variables = self.app.get_css_variables()
        colors = (variables.get("success", "green"), variables.get("warning", "yellow"))
        graphs = self.spans.render(scale, width, self.ascii_only, colors)
        if graphs is None:
            graphs = render_graphs(self.store, self.index, scale, width, self.ascii_only, colors)
        self.query_one("#gpu-detail-graphs", TextLines).update(graphs)
        fields = render_fields(gpu, self.ascii_only, sample.unread_gpu_fields)
        self.query_one("#gpu-detail-fields", TextLines).update(fields)
        self.query_one("#gpu-detail-processes", TextLines).update(
            render_processes(sample, self.index, width)
        )

    def action_span(self, direction: int) -> None:
        sample = self.store.latest
        gpu = next((g for g in sample.gpus if g.index == self.index), None) if sample else None
        self.spans.step(direction, None if gpu is None else gpu.uuid)
        self.refresh_from_store()

    def on_series_read(self, message: SeriesRead) -> None:
        self.spans.take(message)
        self.refresh_from_store()
