"""What every cluster screen is and shows: :class:`ClusterView` (the app hands it each new
:class:`~gpumon.data.cluster.ClusterSample` while it is on top; it catches up when shown again),
:class:`ClusterBanner` (Prometheus does not answer), and what the node screens say of a node
(:func:`node_state`, :func:`processes_note`). It imports no screen, nor the app.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, cast

from textual.screen import Screen
from textual.widgets import Static

from gpumon.data.cluster import ClusterSample, ExporterKind, Node, NodeState
from gpumon.sampling.pipeline import Stall
from gpumon.ui.cluster.node_columns import clock_text, state_text
from gpumon.ui.widgets.bars import Bar
from gpumon.ui.widgets.lines import Line

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


def processes_note(node: Node, now_s: float, current: bool) -> str:
    """Why the node's processes are not shown, empty when they are (gpumon's exporter, the node
    ``current``). Only an UP node's processes are shown (``once --prometheus`` and the docs say
    so): the last known ones may have ended."""
    if node.exporter is ExporterKind.DCGM:
        return NO_PROCESSES_DCGM
    if node.exporter is not ExporterKind.GPUMON:
        return NO_PROCESSES_UNKNOWN
    if current:
        return ""
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


class ClusterView(Screen[None]):
    """A screen of the cluster dashboard: shows each new cluster sample while on top."""

    #: The id of the screen's title line (a Static), if it has one.
    TITLE_ID = ""
    _title: str | None = None

    @property
    def cluster_app(self) -> ClusterApp:
        return cast("ClusterApp", self.app)

    def on_mount(self) -> None:
        app = self.cluster_app
        self.watch(app, "cluster", self.show_cluster, init=False)
        self.watch(app, "waiting", self._on_waiting, init=False)
        self.watch(app, "details_read", lambda: self.show_cluster(app.cluster), init=False)

    def _on_waiting(self) -> None:
        app = self.cluster_app
        if (app.retry_at is not None or app.stall is not None) and self.app.screen is self:
            self.show_banner()

    def show_cluster(self, cluster: ClusterSample | None) -> None:
        """Hand ``cluster``'s pieces down to the widgets, while the screen is on top (under
        another screen it catches up when it is shown again)."""
        app = self.cluster_app
        if app.is_running and self.is_attached and app.screen is self:
            self.show_banner()
            self._show(cluster)

    def _show(self, cluster: ClusterSample | None) -> None:
        raise NotImplementedError

    def set_title(self, text: str) -> None:
        # A Static's update lays the whole screen out again: only when the text changed.
        if text != self._title:
            self._title = text
            self.query_one(f"#{self.TITLE_ID}", Static).update(text)

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


class ClusterBanner(Bar):
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
