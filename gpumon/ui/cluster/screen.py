"""The cluster dashboard's node list screen, its header and banner, and its help.

:class:`ClusterView` is what every cluster screen is: the app hands it each new
:class:`~gpumon.data.cluster.ClusterSample` while it is on top (``show_cluster``), and it catches
up when it is shown again. :class:`ClusterScreen` is the default one: a header (the server,
node and free-GPU counts, DEMO), a banner while Prometheus does not answer, and the node list.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any, cast

from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from gpumon.data.cluster import ClusterSample
from gpumon.ui.widgets.help import TEXTUAL_BINDINGS, HelpScreen, fields_section, keys_section
from gpumon.ui.widgets.lines import ComponentStyles, Glyphs, Line, LinesWidget
from gpumon.ui.cluster.node_columns import (
    EMPTY_NONE,
    EMPTY_WAITING,
    NodeFilter,
    clock_text,
    cluster_counts,
    header_counts,
    node_rows,
)
from gpumon.ui.cluster.node_list import NodeList

if TYPE_CHECKING:
    from gpumon.ui.cluster.app import ClusterApp

EMPTY_UNREACHABLE = "No data: Prometheus has not answered yet (see above)."


class ClusterView(Screen[None]):
    """A screen of the cluster dashboard: shows each new cluster sample while on top."""

    @property
    def cluster_app(self) -> ClusterApp:
        return cast("ClusterApp", self.app)

    def show_cluster(self, cluster: ClusterSample) -> None:
        """Hand ``cluster``'s pieces down to the widgets."""
        raise NotImplementedError

    def show_banner(self) -> None:
        """The banner while Prometheus does not answer (and its countdown), else nothing."""
        app = self.cluster_app
        cluster = app.cluster
        failing = cluster is not None and cluster.error is not None
        self.set_class(failing, "-unreachable")
        if failing:
            self.query_one(ClusterBanner).show(
                cluster, app.last_answer_s, app.retry_in_s(), app.poller.paused
            )

    def on_screen_resume(self) -> None:
        # Skipped while under another screen: catch up now.
        cluster = self.cluster_app.cluster
        if cluster is not None:
            self.show_cluster(cluster)


class _Bar(ComponentStyles, LinesWidget):
    def __init__(self, glyphs: Glyphs, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.glyphs = glyphs
        self._shown: tuple[Any, ...] | None = None

    def on_resize(self) -> None:
        if self._shown is not None:
            self.show(*self._shown)

    def show(self, *args: Any) -> None:
        raise NotImplementedError


class ClusterHeader(_Bar):
    """One line: which server, how many nodes, how many GPUs free, DEMO, how fresh."""

    STYLE_PREFIX = "cluster-header"
    COMPONENT_CLASSES = {
        "cluster-header--title",
        "cluster-header--label",
        "cluster-header--demo",
        "cluster-header--paused",
        "cluster-header--free",
    }
    DEFAULT_CSS = """
    ClusterHeader { height: 1; background: $panel; color: $text; }
    ClusterHeader > .cluster-header--title { color: $accent; text-style: bold; }
    ClusterHeader > .cluster-header--label { color: $text-muted; }
    ClusterHeader > .cluster-header--demo {
        background: $warning; color: $text-warning; text-style: bold;
    }
    ClusterHeader > .cluster-header--paused {
        background: $error; color: $text-error; text-style: bold;
    }
    ClusterHeader > .cluster-header--free { color: $success; text-style: bold; }
    """

    def show(
        self,
        cluster: ClusterSample | None,
        counts: tuple[str, str, str],
        interval_s: float,
        paused: bool,
        answered_s: float | None,
    ) -> None:
        """``counts``: the nodes, the free GPUs, the nodes that cannot tell (see
        :func:`~gpumon.ui.cluster.node_columns.header_counts`). The counts, DEMO, PAUSED and the
        clock stay on any width."""
        self._shown = (cluster, counts, interval_s, paused, answered_s)
        width = self.size.width or 80
        nodes, free, unknown = counts
        url = cluster.url if cluster is not None else ""
        title = Line().add(" gpumon cluster", self.style("title"))
        if cluster is not None and cluster.simulated:
            title.add(" ").add(
                " DEMO: simulated data " if width >= 100 else " DEMO ", self.style("demo")
            )
        # What goes first on a narrow terminal: the interval, the unknown count, the words
        # "in the cluster"; then the address is cut.
        for every, unknown_shown, long_free in (
            (True, True, True),
            (False, True, True),
            (False, False, True),
            (False, False, False),
        ):
            middle = Line().add("  " + nodes)
            if free:
                short = free if long_free else free.removesuffix(" in the cluster")
                middle.add("  ").add(short, self.style("free"))
            if unknown and unknown_shown:
                middle.add(" " + unknown, self.style("label"))
            right = self._right(cluster, interval_s, paused, answered_s, every)
            room = width - title.width - middle.width - right.width - 3
            if room >= len(url):
                break
        line = Line()
        _append(line, title)
        if url and room >= 12:
            line.add("  ").add(self.glyphs.truncate(url, room), self.style("label"))
        _append(line, middle)
        line.add(" " * max(1, width - line.width - right.width))
        _append(line, right)
        self.set_lines([line.strip(width)])

    def _right(
        self,
        cluster: ClusterSample | None,
        interval_s: float,
        paused: bool,
        answered_s: float | None,
        every: bool,
    ) -> Line:
        right = Line()
        if paused:
            right.add(" PAUSED ", self.style("paused")).add(" ")
        elif cluster is None:
            right.add("waiting for Prometheus  ", self.style("label"))
        if every:
            right.add("every ", self.style("label")).add(f"{interval_s:g}s  ")
        if answered_s is not None:
            right.add(time.strftime("%H:%M:%S", time.localtime(answered_s)) + " ")
        return right


def _append(line: Line, other: Line) -> None:
    for segment in other.strip(other.width):
        line.add(segment.text, segment.style or Style())


class ClusterBanner(_Bar):
    """While Prometheus does not answer: why, how old the data shown is, when the next try
    starts. One line, repainted only where it changes (the countdown)."""

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
    ) -> None:
        self._shown = (cluster, answered_s, retry_in_s, paused)
        error = (cluster.error if cluster is not None else None) or "no answer"
        now = cluster.timestamp_s if cluster is not None else time.time()
        data = (
            "no data yet"
            if answered_s is None
            else f"showing data from {clock_text(answered_s, now)}"
        )
        if paused:
            retry = "paused (space resumes)"
        elif retry_in_s is None or retry_in_s <= 0:
            retry = "retrying now"
        else:
            retry = f"retrying in {retry_in_s} s"
        width = self.size.width or 80
        tail = f"; {data}, {retry}"
        head = f" Prometheus unreachable: {error}"
        # The reason is cut before the age of the data and the countdown.
        head = self.glyphs.truncate(head, max(24, width - len(tail)))
        style = self.style("text")
        self.set_lines([Line().add(head + tail, style).strip(width, style)])


class ClusterScreen(ClusterView):
    """The default screen: every node, one row each."""

    BINDINGS = [
        Binding("s", "sort", "Sort", tooltip="cycle the sort column"),
        Binding("r", "reverse_sort", "Reverse", show=False, tooltip="reverse the sort"),
        Binding("slash", "search", "Filter", key_display="/",
                tooltip="filter nodes by name or user, live (Esc clears)"),
        Binding("f", "free_only", "Free", tooltip="only nodes with a free GPU (again: all)"),
        Binding("escape", "clear_filters", "Clear", show=False, tooltip="clear the filters"),
    ]  # fmt: skip

    def compose(self) -> ComposeResult:
        glyphs = self.cluster_app.glyphs
        yield ClusterHeader(glyphs, id="cluster-header")
        yield ClusterBanner(glyphs, id="cluster-banner")
        yield NodeList(glyphs, id="nodes")
        yield Input(placeholder="filter: node or user (Enter keeps, Esc clears)",
                    id="node-search")  # fmt: skip
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(NodeList).focus()
        cluster = self.cluster_app.cluster
        if cluster is not None:
            self.show_cluster(cluster)
        else:
            self._show_header(None, ("", "", ""))

    def show_cluster(self, cluster: ClusterSample) -> None:
        app = self.cluster_app
        if not app.is_running or not self.is_attached or app.screen is not self:
            return  # under another screen: on_screen_resume catches up
        rows = node_rows(cluster.nodes, app.settings.free_threshold_mib)
        self._show_header(cluster, header_counts(cluster_counts(rows)))
        self.show_banner()
        if cluster.nodes:
            empty = EMPTY_NONE
        else:
            empty = EMPTY_UNREACHABLE if cluster.error is not None else EMPTY_NONE
        self.query_one(NodeList).show(
            rows, cluster.timestamp_s, stale=cluster.stale, empty_text=empty
        )

    def _show_header(self, cluster: ClusterSample | None, counts: tuple[str, str, str]) -> None:
        app = self.cluster_app
        self.query_one(ClusterHeader).show(
            cluster, counts, app.interval_s, app.poller.paused, app.last_answer_s
        )
        if cluster is None:
            self.query_one(NodeList).show((), 0.0, empty_text=EMPTY_WAITING)

    # -- keys ------------------------------------------------------------------------

    @property
    def node_list(self) -> NodeList:
        return self.query_one(NodeList)

    def action_sort(self) -> None:
        self.node_list.cycle_sort()

    def action_reverse_sort(self) -> None:
        self.node_list.reverse_sort()

    def action_free_only(self) -> None:
        current = self.node_list.node_filter
        self.node_list.set_filter(dataclasses.replace(current, free_only=not current.free_only))

    def action_search(self) -> None:
        """``/``: type to filter by node name or user; the list follows each key."""
        search = self.query_one("#node-search", Input)
        self.add_class("-searching")
        search.value = self.node_list.node_filter.text
        search.focus()

    def action_clear_filters(self) -> None:
        self._close_search()
        self.node_list.set_filter(NodeFilter())

    def _close_search(self) -> None:
        if self.has_class("-searching"):
            self.remove_class("-searching")
            self.node_list.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "node-search":
            current = self.node_list.node_filter
            self.node_list.set_filter(dataclasses.replace(current, text=event.value.strip()))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "node-search":
            self._close_search()

    def on_key(self, event: events.Key) -> None:
        # Escape in the search box: clear the text filter and close it.
        if event.key == "escape" and self.has_class("-searching"):
            event.stop()
            current = self.node_list.node_filter
            self.node_list.set_filter(dataclasses.replace(current, text=""))
            self._close_search()

    def on_node_list_opened(self, message: NodeList.Opened) -> None:
        from gpumon.ui.cluster.node_screen import NodeScreen

        self.app.push_screen(NodeScreen(message.name))


CLUSTER_NOTES = """\
The node list
  STATE           UP: Prometheus scraped the node's exporter on time.
                  DOWN since HH:MM: the scrape fails (up == 0).
                  stale, last seen HH:MM: no series newer than three scrape
                  intervals (the target is gone, or scrapes stopped).
                  A DOWN or stale node's readings are old: dimmed, sorted
                  after current ones, and its GPUs never count as free
                  (FREE reads "-").
  FREE            GPUs with no process and almost no memory in use; N/A
                  where the exporter lists no processes (dcgm-exporter)
  UTIL / MEMORY   mean utilisation of the node's GPUs; memory used / total
  HOT             the hottest GPU's temperature
  TOP USER        the user holding the most GPU memory on the node
  EXPORTER        gpumon (gpumon export: GPUs and processes) or dcgm
                  (NVIDIA's dcgm-exporter: GPUs only, fewer fields)

Header and banner
  DEMO            some node serves simulated data (gpumon export --demo)
  Prometheus unreachable: the last data stays on screen, dimmed and
  stale (no GPU counts as free), and the server is asked again with a
  growing pause between tries (1, 2, 4 ... 60 s).
"""


class ClusterHelpScreen(HelpScreen):
    """The cluster dashboard's keys and what its columns mean."""

    def compose(self) -> ComposeResult:
        from gpumon.ui.cluster.app import ClusterApp
        from gpumon.ui.widgets.gpu_panel import GpuPanel
        from gpumon.ui.cluster.node_history import NodeGpuScreen
        from gpumon.ui.cluster.node_screen import NodeScreen
        from gpumon.ui.widgets.process_table import ProcessTable

        groups = [
            ("Keys", [*ClusterApp.BINDINGS, *TEXTUAL_BINDINGS]),
            ("Node list", [*ClusterScreen.BINDINGS, *NodeList.BINDINGS]),
            ("A node (Enter on the node list)", [*NodeScreen.BINDINGS, *GpuPanel.BINDINGS]),
            ("Its processes (gpumon's exporter only)", ProcessTable.BINDINGS),
            ("A GPU's last hour (Enter on a node's GPU)", NodeGpuScreen.BINDINGS),
        ]
        lines = ["gpumon cluster: every node Prometheus scrapes.  Press Esc, q or ? to close.", ""]
        lines += keys_section(groups, self._ascii_only)
        lines += [*CLUSTER_NOTES.splitlines(), ""]
        lines += fields_section()
        text = "\n".join(lines) + "\n"
        if self._ascii_only:
            text = text.replace("°C", " C")
        content = Text()
        for line in text.splitlines(keepends=True):
            heading = bool(line.strip()) and not line.startswith(" ")
            content.append(line, style="bold" if heading else "")
        with VerticalScroll():
            yield Static(content, id="help-text")
