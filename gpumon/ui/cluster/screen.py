"""The cluster dashboard's node list screen and its header.

:class:`ClusterScreen` is the default screen (a :class:`~gpumon.ui.cluster.view.ClusterView`):
a header (the server, node and free-GPU counts, DEMO, the interval), the fleet summary
(:mod:`gpumon.ui.cluster.fleet_view`), a banner while Prometheus does not answer
(:class:`~gpumon.ui.cluster.view.ClusterBanner`), and the node list.
"""

from __future__ import annotations

import dataclasses
import time

from rich.style import Style
from textual.app import ComposeResult
from textual.binding import Binding

from gpumon.data.cluster import ClusterSample
from gpumon.data.format import known_time
from gpumon.ui.cluster.fleet_view import FleetTotals, TopLists
from gpumon.ui.cluster.node_columns import (
    EMPTY_NONE,
    EMPTY_WAITING,
    NodeFilter,
    header_counts,
)
from gpumon.ui.cluster.node_list import NodeList
from gpumon.ui.cluster.view import ClusterBanner, ClusterView
from gpumon.ui.widgets.bars import Bar
from gpumon.ui.widgets.keys_footer import KeysFooter
from gpumon.ui.widgets.lines import Line
from gpumon.ui.widgets.search_box import SearchBox

EMPTY_UNREACHABLE = "No data: Prometheus has not answered yet (see above)."
#: Cells of the server's address kept when the header is short of room.
URL_KEPT = 24


class ClusterHeader(Bar):
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
        every: tuple[float, float | None],
        paused: bool,
        answered_s: float | None,
    ) -> None:
        """``counts``: the nodes, the free GPUs, the nodes that cannot tell (see
        :func:`~gpumon.ui.cluster.node_columns.header_counts`); ``every``: the interval and,
        when a slow refresh stretched it, how long that took. The counts, DEMO, PAUSED and
        the clock stay on any width."""
        self._shown = (cluster, counts, every, paused, answered_s)
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
        for every_shown, unknown_shown, long_free in (
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
            right = self._right(cluster, every, paused, answered_s, every_shown)
            room = width - title.width - middle.width - right.width - 3
            # A stretched interval is said before the whole address.
            if room >= (min(len(url), URL_KEPT) if every[1] is not None else len(url)):
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
        every: tuple[float, float | None],
        paused: bool,
        answered_s: float | None,
        every_shown: bool,
    ) -> Line:
        right = Line()
        if paused:
            right.add(" PAUSED ", self.style("paused")).add(" ")
        elif cluster is None:
            right.add("waiting for Prometheus  ", self.style("label"))
        if every_shown:
            interval_s, refresh_s = every
            right.add("every ", self.style("label")).add(f"{interval_s:.3g} s ")
            if refresh_s is not None:  # a slow server stretched the interval
                right.add(f"(refresh {refresh_s:.1f} s) ", self.style("label"))
            right.add(" ")
        if known_time(answered_s) is not None:
            assert answered_s is not None
            right.add(time.strftime("%H:%M:%S", time.localtime(answered_s)) + " ")
        return right


def _append(line: Line, other: Line) -> None:
    for segment in other.strip(other.width):
        line.add(segment.text, segment.style or Style())


class ClusterScreen(ClusterView):
    """The default screen: the fleet summary, then every node, one row each."""

    #: The top-k lists fold away on a short terminal (cluster.tcss).
    VERTICAL_BREAKPOINTS = [(0, "-short"), (30, "-tall")]

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
        yield FleetTotals(glyphs, id="fleet-totals")
        yield TopLists(glyphs, id="top-lists")
        yield NodeList(glyphs, id="nodes")
        yield SearchBox("filter: node or user (Enter keeps, Esc clears)", self._search_text,
                        NodeList, id="node-search")  # fmt: skip
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one(NodeList).focus()
        cluster = self.cluster_app.cluster
        if cluster is not None:
            self.show_cluster(cluster)
        else:
            self._show_header(None, ("", "", ""))

    def _show(self, cluster: ClusterSample | None) -> None:
        if cluster is None:
            return
        rows, fleet = self.cluster_app.shown.rows(cluster)
        self._show_header(cluster, header_counts(fleet))
        self.query_one(FleetTotals).show(fleet, cluster.path)
        self.query_one(TopLists).show(fleet)
        if rows:
            empty = EMPTY_NONE
        else:
            empty = EMPTY_UNREACHABLE if cluster.error is not None else EMPTY_NONE
        self.query_one(NodeList).show(
            rows, cluster.timestamp_s, stale=cluster.stale, empty_text=empty
        )

    def _show_header(self, cluster: ClusterSample | None, counts: tuple[str, str, str]) -> None:
        app = self.cluster_app
        every = (app.every_s, app.refresh_s)
        self.query_one(ClusterHeader).show(
            cluster, counts, every, app.poller.paused, app.last_answer_s
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
        self.cluster_app.want_users(True)  # a refresh reads them now, as the user types
        self.query_one(SearchBox).start(self.node_list.node_filter.text)

    def action_clear_filters(self) -> None:
        self.query_one(SearchBox).close()
        self.cluster_app.want_users(False)
        self.node_list.set_filter(NodeFilter())

    def _search_text(self, text: str) -> None:
        self.cluster_app.want_users(bool(text))
        self.node_list.set_filter(dataclasses.replace(self.node_list.node_filter, text=text))

    def on_node_list_opened(self, message: NodeList.Opened) -> None:
        from gpumon.ui.cluster.node_screen import NodeScreen

        self.app.push_screen(NodeScreen(message.name))
