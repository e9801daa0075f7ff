"""One node of the cluster (``Enter`` on the node list), shown as the one-machine dashboard
shows a machine (:class:`~gpumon.ui.widgets.gpu_view.GpuView`): its GPUs and, where gpumon's
exporter runs there, its processes (else a note says why not). A node that is not UP keeps its
last readings on screen, dimmed, and never marks a GPU FREE. ``Enter`` on a GPU opens its last
hour (:mod:`gpumon.ui.cluster.node_history`); ``w`` watches it until it is FREE.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from gpumon.data.cluster import (
    ClusterSample,
    ExporterKind,
    Node,
    NodeState,
    NodeSummary,
    no_longer_current,
)
from gpumon.data.free import free_gpu_indices
from gpumon.ui.cluster.detail import Detail
from gpumon.ui.cluster.node_columns import clock_text, state_text
from gpumon.ui.cluster.view import (
    WATCH_TOOLTIP,
    ClusterBanner,
    ClusterView,
    node_state,
    processes_note,
)
from gpumon.ui.widgets.gpu_panel import GpuPanel
from gpumon.ui.widgets.gpu_view import GpuView
from gpumon.ui.widgets.keys_footer import KeysFooter
from gpumon.ui.widgets.process_table import ProcessTable

EXPORTER_NAMES = {
    ExporterKind.GPUMON: "gpumon exporter",
    ExporterKind.DCGM: "dcgm-exporter",
    ExporterKind.UNKNOWN: "unknown exporter",
}


def node_title(node: Node | NodeSummary, now_s: float) -> str:
    """``node07  UP  gpumon exporter  10.0.0.7:9835  8 GPUs``; what matters first (the
    state, DEMO) comes first, so a narrow terminal cuts only the end. From the node's row
    until its GPUs are read."""
    if isinstance(node, Node):
        state, demo, count = node_state(node, now_s), node.sample.simulated, len(node.gpus)
    else:
        state, demo, count = state_text(node, now_s), node.simulated, node.gpu_count
    job = f" ({node.job})" if node.job else ""
    return (
        f" {node.name}  {state}{'  DEMO (simulated)' if demo else ''}  "
        f"{EXPORTER_NAMES[node.exporter]}  {node.instance}{job}  {count} GPUs"
    )


class NodeScreen(ClusterView):
    """A node's GPUs and processes. ``Escape`` goes back to the node list."""

    TITLE_ID = "node-title"

    BINDINGS = [
        Binding("escape", "back", "Back", tooltip="back to the node list"),
        Binding("enter", "gpu", "Last hour",
                tooltip="the selected GPU's last hour (from Prometheus), fields, processes"),
        Binding("s", "sort", "Sort", tooltip="cycle the process table's sort column"),
        Binding("r", "reverse_sort", "Reverse", show=False, tooltip="reverse the sort"),
        Binding("w", "watch", "Watch", tooltip=WATCH_TOOLTIP),
    ]  # fmt: skip

    def __init__(self, name: str) -> None:
        super().__init__()
        self.node_name = name
        self.node: Node | None = None

    def compose(self) -> ComposeResult:
        glyphs = self.cluster_app.glyphs
        # markup=False: names, instances and jobs are remote labels, and "[/]" or
        # "[@click=...]" in them is text (gpumon itself names targets "gpu01 [job]").
        yield Static(id="node-title", markup=False)
        yield ClusterBanner(glyphs, id="cluster-banner")
        yield GpuView(glyphs, Static(id="node-note", markup=False), fit_table=True)
        yield KeysFooter()

    def on_mount(self) -> None:
        panel = self.query_one(GpuPanel)
        panel.settings = self.cluster_app.settings
        panel.focus()
        self.cluster_app.want_detail(self.node_name)  # its GPUs, unless the answer has them
        self.show_cluster(self.cluster_app.cluster)

    def on_unmount(self) -> None:
        self.cluster_app.drop_detail(self.node_name)

    def _show(self, cluster: ClusterSample | None) -> None:
        app = self.cluster_app
        node, current = app.shown.node_of(cluster, self.node_name)
        row = app.shown.row_of(cluster, self.node_name)
        detail = app.details.details.get(self.node_name, Detail())
        self.node = node
        if cluster is None or row is None:
            self.set_title(f" {self.node_name}: no longer listed by Prometheus")
            self.set_class(True, "-old")
            self._note("")
            self.query_one(GpuView).show(None, empty_text="Processes unknown: the node is gone.")
            return
        if node is None:  # its GPUs not read yet, or never
            self._show_unread(row, cluster.timestamp_s, detail.error)
            return
        if not current and node.state is NodeState.UP:
            node = no_longer_current(node)  # its last read failed, or the answer is old
        self.set_class(not current, "-old")
        self.set_class(node.state is NodeState.DOWN, "-down")
        self.set_class(node.state is NodeState.STALE, "-stale")
        self.set_title(node_title(node, cluster.timestamp_s))
        note = processes_note(node, cluster.timestamp_s, current)
        has_table = not note
        if detail.error is not None:
            note = f"Not read again: {detail.error}. " + note
        self.set_class(not has_table, "-no-processes")
        if not node.gpus:
            note = "No GPU listed for this node." + (f"  {note}" if note else "")
        self._note(note)
        notices = []
        if not node.usable and node.last_seen_s is not None:
            seen = clock_text(node.last_seen_s, cluster.timestamp_s)
            notices.append(f"{node.state.value.upper()}: processes as last seen at {seen}.")
        threshold = app.settings.free_threshold_mib
        self.query_one(GpuView).show(
            node.sample,
            # Old readings never offer a FREE GPU.
            free=free_gpu_indices(node.sample, threshold) if current else frozenset(),
            notes=app.watches.notes(node.name),
            processes=has_table,
            notices=notices,
        )

    def _show_unread(self, row: NodeSummary, now_s: float, error: str | None) -> None:
        """The node's row until its GPUs are read: "reading node7...", or why not."""
        self.set_title(node_title(row, now_s))
        self.set_class(True, "-old")
        self.set_class(True, "-no-processes")
        if error is None:
            self._note(f"reading {row.name}{self.cluster_app.glyphs.ellipsis}")
        else:
            self._note(f"{row.name}: its GPUs could not be read: {error}")
        self.query_one(GpuView).show(None, processes=False)

    def _note(self, text: str) -> None:
        self.set_class(not text, "-no-note")
        note = self.query_one("#node-note", Static)
        if str(note.content) != text:
            note.update(text)

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_gpu(self) -> None:
        gpu = self.query_one(GpuPanel).selected_gpu
        if gpu is not None:
            from gpumon.ui.cluster.node_history import NodeGpuScreen

            self.app.push_screen(NodeGpuScreen(self.node_name, gpu.index))

    def action_watch(self) -> None:
        gpu = self.query_one(GpuPanel).selected_gpu
        if gpu is not None:
            self.cluster_app.toggle_watch(self.node_name, gpu)

    def action_sort(self) -> None:
        self.query_one(ProcessTable).cycle_sort()

    def action_reverse_sort(self) -> None:
        self.query_one(ProcessTable).reverse_sort()
