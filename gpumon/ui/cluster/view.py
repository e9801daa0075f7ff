"""What every cluster screen is and shows: :class:`ClusterView` (the app hands it each new
:class:`~gpumon.data.cluster.ClusterSample` while it is on top, and it catches up when it is
shown again), :class:`ClusterBanner`, the line saying Prometheus does not answer, and what
both node screens say of a node (:func:`node_state`; no process table: ``NO_PROCESSES_*``).

The node list (:mod:`gpumon.ui.cluster.screen`), a node (:mod:`gpumon.ui.cluster.node_screen`)
and a node's GPU (:mod:`gpumon.ui.cluster.node_history`) build on these; this module imports
none of them, nor the app (only its type, for the checker).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, cast

from textual.screen import Screen

from gpumon.data.cluster import ClusterSample, Node, NodeState
from gpumon.sampling.pipeline import Stall
from gpumon.ui.cluster.node_columns import clock_text, state_text
from gpumon.ui.widgets.lines import ComponentStyles, Glyphs, Line, LinesWidget

if TYPE_CHECKING:
    from gpumon.ui.cluster.app import ClusterApp


#: What a node screen says in place of the process table.
NO_PROCESSES_DCGM = (
    "Processes: not available from dcgm-exporter (it exports GPU readings only). "
    "Run gpumon's exporter (gpumon export) on this node to see who uses its GPUs."
)
NO_PROCESSES_UNKNOWN = "Processes: unknown (no GPU exporter gpumon knows answers on this target)."
#: ``w`` on a node's GPU, in both screens that show one.
WATCH_TOOLTIP = (
    "tell me when this GPU is FREE (its node UP): a notification, the bell and a desktop "
    "notification (again: stop)"
)


def no_current_processes(node: Node, now_s: float) -> str:
    """Why a node that is not UP shows no process: only an UP node's processes are shown
    (``once --prometheus`` and the docs say so), since the last known ones may have ended."""
    seen = "" if node.last_seen_s is None else f" (last seen {clock_text(node.last_seen_s, now_s)})"
    return (
        f"Processes: not shown while the node is {node.state.value.upper()}{seen}: "
        "the last known ones may have ended."
    )


def node_state(node: Node, now_s: float) -> str:
    """``UP``, or ``DOWN since 14:02: readings as last seen at 14:01``."""
    text = state_text(node, now_s)
    problem = f" ({node.problem})" if node.problem else ""
    if node.state is NodeState.UP:
        return text + problem
    seen = node.last_seen_s
    return (
        text + problem + (f": readings as last seen at {clock_text(seen, now_s)}" if seen else "")
    )


def find_node(cluster: ClusterSample | None, name: str) -> Node | None:
    """The node called ``name`` in ``cluster``; ``None`` when it is no longer listed."""
    if cluster is None:
        return None
    return next((node for node in cluster.nodes if node.name == name), None)


class ClusterView(Screen[None]):
    """A screen of the cluster dashboard: shows each new cluster sample while on top."""

    @property
    def cluster_app(self) -> ClusterApp:
        return cast("ClusterApp", self.app)

    def on_mount(self) -> None:
        app = self.cluster_app
        self.watch(app, "cluster", self._on_cluster, init=False)
        self.watch(app, "waiting", self._on_waiting, init=False)

    def _on_cluster(self, cluster: ClusterSample | None) -> None:
        # Under another screen: it catches up when shown again (on_screen_resume).
        if cluster is not None and self.app.screen is self:
            self.show_cluster(cluster)

    def _on_waiting(self) -> None:
        app = self.cluster_app
        if (app.retry_at is not None or app.stall is not None) and self.app.screen is self:
            self.show_banner()

    def show_cluster(self, cluster: ClusterSample) -> None:
        """Hand ``cluster``'s pieces down to the widgets."""
        raise NotImplementedError

    def show_banner(self) -> None:
        """The banner while Prometheus does not answer (and its countdown), or while a
        refresh takes too long; else nothing."""
        app = self.cluster_app
        cluster = app.cluster
        failing = cluster is not None and cluster.error is not None
        failing = failing or app.stall is not None
        self.set_class(failing, "-unreachable")
        if failing:
            self.query_one(ClusterBanner).show(
                cluster, app.last_answer_s, app.retry_in_s(), app.poller.paused, app.stall
            )

    def on_screen_resume(self) -> None:
        # Skipped while under another screen: catch up now.
        cluster = self.cluster_app.cluster
        if cluster is not None:
            self.show_cluster(cluster)


class ClusterBar(ComponentStyles, LinesWidget):
    """A one-line bar of the cluster screens (the header, the banner): drawn again, from what
    it last showed, when its width changes."""

    def __init__(self, glyphs: Glyphs, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.glyphs = glyphs
        self._shown: tuple[Any, ...] | None = None

    def on_resize(self) -> None:
        if self._shown is not None:
            self.show(*self._shown)

    def show(self, *args: Any) -> None:
        raise NotImplementedError


class ClusterBanner(ClusterBar):
    """While Prometheus does not answer: why (or for how long, while a refresh hangs), how
    old the data shown is, when the next try starts. One line, repainted only where it
    changes (the countdown)."""

    STYLE_PREFIX = "cluster-banner"
    COMPONENT_CLASSES = {"cluster-banner--text"}
    DEFAULT_CSS = """
    ClusterBanner { height: 1; }
    ClusterBanner > .cluster-banner--text {
        background: $error-muted; color: $text-error; text-style: bold;
    }
    """

    def show(
        self,
        cluster: ClusterSample | None,
        answered_s: float | None,
        retry_in_s: int | None,
        paused: bool,
        stall: Stall | None = None,
    ) -> None:
        self._shown = (cluster, answered_s, retry_in_s, paused, stall)
        error = (cluster.error if cluster is not None else None) or "no answer"
        now = cluster.timestamp_s if cluster is not None else time.time()
        data = (
            "no data yet"
            if answered_s is None
            else f"showing data from {clock_text(answered_s, now)}"
        )
        if paused:
            retry = "paused (space resumes)"
        elif stall is not None:
            retry = "still waiting"
        elif retry_in_s is None or retry_in_s <= 0:
            retry = "retrying now"
        else:
            retry = f"retrying in {retry_in_s} s"
        width = self.size.width or 80
        tail = f"; {data}, {retry}"
        head = f" Prometheus unreachable: {error}"
        if stall is not None:
            head = f" {stall}"
        # The reason is cut before the age of the data and the countdown.
        head = self.glyphs.truncate(head, max(24, width - len(tail)))
        style = self.style("text")
        self.set_lines([Line().add(head + tail, style).strip(width, style)])
