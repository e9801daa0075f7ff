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

from gpumon.data.cluster import ClusterSample, ExporterKind, Node, NodeState
from gpumon.data.free import free_gpu_indices
from gpumon.ui.cluster.node_columns import clock_text
from gpumon.ui.cluster.view import (
    WATCH_TOOLTIP,
    ClusterBanner,
    ClusterView,
    find_node,
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


def node_title(node: Node, now_s: float) -> str:
    """``node07  UP  gpumon exporter  10.0.0.7:9835  8 GPUs``; what matters first (the
    state, DEMO) comes first, so a narrow terminal cuts only the end."""
    state = node_state(node, now_s)
    demo = "  DEMO (simulated)" if node.sample.simulated else ""
    job = f" ({node.job})" if node.job else ""
    return (
        f" {node.name}  {state}{demo}  {EXPORTER_NAMES[node.exporter]}  "
        f"{node.instance}{job}  {len(node.gpus)} GPUs"
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
        self.show_cluster(self.cluster_app.cluster)

    def _show(self, cluster: ClusterSample | None) -> None:
        app = self.cluster_app
        node = self.node = find_node(cluster, self.node_name)
        if cluster is None or node is None:
            self.set_title(f" {self.node_name}: no longer listed by Prometheus")
            self.set_class(True, "-old")
            self._note("")
            self.query_one(GpuView).show(None, empty_text="Processes unknown: the node is gone.")
            return
        current = node.usable and not cluster.stale
        self.set_class(not current, "-old")
        self.set_class(node.state is NodeState.DOWN, "-down")
        self.set_class(node.state is NodeState.STALE, "-stale")
        self.set_title(node_title(node, cluster.timestamp_s))
        note = processes_note(node, cluster.timestamp_s, current)
        has_table = not note
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
