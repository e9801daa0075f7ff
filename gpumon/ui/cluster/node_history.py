"""``Enter`` on a node's GPU: its last hour from Prometheus, every field, its processes.

The graphs (utilisation, memory, power, temperature) come from range queries
(:meth:`PrometheusSource.history <gpumon.sources.prometheus.source.PrometheusSource.history>`), run
on a worker thread when the screen opens and once a minute after: the last hour shows at
once, whenever gpumon was started. Drawn on the one-machine detail screen's fixed scales
(:data:`gpumon.ui.widgets.gpu_fields.GRAPHS`), by time: a point holds for one step of the query, and
a time with no value (the node was down) stays a gap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static

from gpumon.data import format as fmt
from gpumon.data.cluster import ClusterSample, NodeState, no_longer_current
from gpumon.data.fields import FIELDS
from gpumon.data.model import GpuStats
from gpumon.ui.cluster.view import (
    WATCH_TOOLTIP,
    ClusterBanner,
    ClusterView,
    node_state,
    processes_note,
)
from gpumon.ui.widgets.gpu_fields import (
    GRAPHS,
    Graph,
    append_chart,
    chart_width,
    render_fields,
    render_processes,
)
from gpumon.ui.widgets.graphs import chart, time_columns
from gpumon.ui.widgets.keys_footer import KeysFooter
from gpumon.ui.widgets.text_lines import TextLines

HISTORY_S = 3600.0
#: Read again this often while the screen is open.
HISTORY_REFRESH_S = 60.0
_HISTORY_FIELDS = ("utilization_gpu_pct", "memory_used_bytes", "power_draw_w", "temperature_c")
#: (graph, field key for the source) for each graph drawn from Prometheus.
HISTORY_GRAPHS: tuple[tuple[Graph, str], ...] = tuple(
    (graph, next(f.key for f in FIELDS if f.attribute == graph.field))
    for attribute in _HISTORY_FIELDS
    for graph in GRAPHS
    if graph.field == attribute
)
CHART_ROWS = 3


Series = Sequence[tuple[float, float | None]]


@dataclass(frozen=True, slots=True)
class History:
    """What the range queries returned: field key -> (time, value) points, or why not."""

    series: dict[str, Series]
    end_s: float
    error: str | None = None


def render_history(
    history: History | None, gpu: GpuStats, width: int, ascii_only: bool, color: str
) -> Text:
    """The last hour's graphs; a line saying they are loading, or why they cannot be."""
    text = Text(no_wrap=True, overflow="crop")
    if history is None:
        return text.append("Last hour: reading it from Prometheus…\n", "dim")
    if history.error is not None:
        return text.append(f"Last hour: not available ({history.error})\n", "dim")
    width_cells = chart_width(width)
    for graph, key in HISTORY_GRAPHS:
        series = history.series.get(key, ())
        columns = time_columns(series, history.end_s - HISTORY_S, history.end_s, width_cells)
        known = [value for value in columns if value is not None]
        top = graph.scale_top(gpu, known)
        latest = getattr(gpu, graph.field)
        line = Text(f"{graph.title}  ", style="bold")
        line.append(fmt.NA if latest is None else graph.text(latest))
        if known:
            # The latest reading belongs to the hour too: the range never leaves it outside.
            seen = known if latest is None else [*known, latest]
            line.append(f"   min {graph.text(min(seen))}  max {graph.text(max(seen))}", "dim")
        elif not series:
            line.append("   no history: the node's exporter does not serve it", "dim")
        else:
            line.append("   no reading in the last hour", "dim")
        line.append("   (last hour, from Prometheus)", "dim")
        text.append_text(line)
        text.append("\n")
        threshold = graph.threshold(gpu)
        rows = chart(columns, width_cells, CHART_ROWS, 0.0, top, threshold=threshold,
                     ascii_only=ascii_only)  # fmt: skip
        append_chart(text, rows, graph.text(top), color, ascii_only)
    if ascii_only:
        return Text(text.plain.replace("°C", "C").replace("…", "~"), no_wrap=True)
    return text


class NodeGpuScreen(ClusterView):
    """One GPU of a node: its last hour from Prometheus, every field, its processes."""

    TITLE_ID = "node-gpu-title"

    BINDINGS = [
        Binding("escape", "back", "Back", tooltip="back to the node"),
        Binding("w", "watch", "Watch", tooltip=WATCH_TOOLTIP),
    ]

    class HistoryRead(Message):
        """The worker thread read the range queries."""

        def __init__(self, history: History) -> None:
            super().__init__()
            self.history = history

    def __init__(self, node_name: str, gpu_index: int) -> None:
        super().__init__()
        self.node_name = node_name
        self.gpu_index = gpu_index
        self.history: History | None = None

    def compose(self) -> ComposeResult:
        # markup=False: the node's and the GPU's names are remote labels, brackets and all.
        yield Static(id="node-gpu-title", markup=False)
        yield ClusterBanner(self.cluster_app.glyphs, id="cluster-banner")
        with VerticalScroll(id="node-gpu-body"):
            yield TextLines(id="node-gpu-graphs")
            yield TextLines(id="node-gpu-fields")
            yield TextLines(id="node-gpu-processes")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.show_cluster(self.cluster_app.cluster)
        self.read_history()
        self.set_interval(HISTORY_REFRESH_S, self.read_history)

    def on_resize(self) -> None:
        self.show_cluster(self.cluster_app.cluster)

    def read_history(self) -> None:
        """Run the range queries on a worker thread (never on the event loop)."""
        node, _ = self.cluster_app.shown.node_of(self.cluster_app.cluster, self.node_name)
        if node is None:
            return
        source = self.cluster_app.source
        index = self.gpu_index
        clock = self.cluster_app.wall_clock

        def read() -> None:
            end = clock()
            try:
                series = {key: source.history(node.name, index, key, HISTORY_S)
                          for _, key in HISTORY_GRAPHS}  # fmt: skip
                history = History(series, end)
            except Exception as error:  # the source's own failure, in words
                history = History({}, end, str(error) or type(error).__name__)
            self.post_message(self.HistoryRead(history))

        self.run_worker(read, thread=True, exclusive=True, group="history")

    def on_node_gpu_screen_history_read(self, message: HistoryRead) -> None:
        self.history = message.history
        self.show_cluster(self.cluster_app.cluster)

    def _show(self, cluster: ClusterSample | None) -> None:
        app = self.cluster_app
        node, current = app.shown.node_of(cluster, self.node_name)
        if node is not None and not current and node.state is NodeState.UP:
            node = no_longer_current(node)  # its last read failed, or the answer is old
        gpu = (
            None
            if node is None
            else next((gpu for gpu in node.gpus if gpu.index == self.gpu_index), None)
        )
        if cluster is None or node is None or gpu is None:
            self.set_title(f" {self.node_name} GPU {self.gpu_index}: no longer listed")
            return
        self.set_class(node.state is NodeState.DOWN, "-down")
        self.set_class(node.state is NodeState.STALE, "-stale")
        self.set_title(
            f" {node.name} · GPU {gpu.index}  {node_state(node, cluster.timestamp_s)}"
            f"{'  DEMO (simulated)' if node.sample.simulated else ''}"
            f"{'  watching' if gpu.index in app.watches.notes(node.name) else ''}  "
            f"{gpu.name or fmt.NA}  {gpu.short_uuid}"
        )
        width = max(40, self.size.width - 5)
        ascii_only = app.glyphs.ascii_only
        color = app.get_css_variables().get("success", "green")
        self.query_one("#node-gpu-graphs", TextLines).update(
            render_history(self.history, gpu, width, ascii_only, color)
        )
        self.query_one("#node-gpu-fields", TextLines).update(render_fields(gpu, ascii_only))
        why = processes_note(node, cluster.timestamp_s, current)
        if why:
            processes = Text("Processes\n", style="bold").append(f"  {why}\n")
        else:
            processes = render_processes(node.sample, gpu.index, width)
        self.query_one("#node-gpu-processes", TextLines).update(processes)

    def action_watch(self) -> None:
        node, _ = self.cluster_app.shown.node_of(self.cluster_app.cluster, self.node_name)
        gpu = (
            None
            if node is None
            else next((g for g in node.gpus if g.index == self.gpu_index), None)
        )
        if gpu is not None:
            self.cluster_app.toggle_watch(self.node_name, gpu)

    def action_back(self) -> None:
        self.app.pop_screen()
