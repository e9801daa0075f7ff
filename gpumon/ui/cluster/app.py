"""The cluster dashboard (``gpumon --prometheus URL``): keys, polling with backoff, screens.

It shares the widgets, the app base and the poller with the one-machine dashboard, not its
screens. The poller posts each :class:`~gpumon.data.cluster.ClusterSample`; the app sets
:attr:`ClusterApp.cluster`, which the screen on top draws; a node's GPUs are read on demand
(:mod:`~gpumon.ui.cluster.detail`). An answer that failed (the last rows kept, the next try
after the source's backoff) or a refresh stalled for three intervals is stale: no node UP,
no GPU FREE (docs/cluster.md). A slow refresh stretches the interval. ``w`` on a node's GPU
alerts on the first answer with it FREE.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol, cast

from textual.message import Message
from textual.reactive import var
from textual.screen import Screen

from gpumon import startup
from gpumon.data import format as fmt
from gpumon.data.cluster import ClusterSample, Node, marked_stale
from gpumon.sampling.pipeline import Stall, stall_of
from gpumon.sampling.poller import Poller
from gpumon.sampling.watches import Watch, Watches
from gpumon.sources.prometheus.client import Backoff
from gpumon.ui import exact_updates
from gpumon.ui.app import APP_BINDINGS, MonitorApp, wants_ascii
from gpumon.ui.cluster.answer import Shown, find_node
from gpumon.ui.cluster.detail import DetailRead, DetailReader, DetailsDone
from gpumon.ui.cluster.screen import ClusterScreen
from gpumon.ui.widgets.lines import Glyphs

if TYPE_CHECKING:
    from gpumon.config import Settings
    from gpumon.data.model import GpuStats, Sample
    from gpumon.sources.base import GpuSource

#: Prometheus' data changes once a scrape interval (15 s is usual): unless the user chose an
#: interval, the cluster is read this often, not every second.
DEFAULT_CLUSTER_INTERVAL_S = 5.0
#: A refresh may take a fifth of the interval; a longer one stretches the interval to five
#: times the refresh.
REFRESH_SHARE = 5
#: Why the last answer is stale while a refresh takes too long.
WAITING = "Prometheus not answering"


class ClusterSource(Protocol):
    """What the cluster dashboard reads
    (:class:`gpumon.sources.prometheus.source.PrometheusSource`).

    ``sample()`` blocks (HTTP) and never raises: an unreachable server gives a sample with
    ``error`` set and the last nodes marked ``stale``, and ``next_retry_s`` says how long to
    wait before the next try (``None`` after a success). ``detail(node)`` (one node's GPUs
    and processes, for a node named in the rows) and ``history()`` block, and may raise (one
    line saying why). ``users_wanted``: refreshes read every user on each node (the
    filter by user is on).
    """

    users_wanted: bool

    @property
    def next_retry_s(self) -> float | None: ...

    def sample(self) -> ClusterSample: ...

    def detail(self, node: str) -> Node: ...

    def history(
        self, node: str, gpu_index: int, field_key: str, seconds: float = 3600.0
    ) -> Sequence[tuple[float, float | None]]: ...

    def close(self) -> None: ...


class _Timed:
    """The source as the poller samples it, remembering when each poll started: the backoff
    counts from there, so a poll that timed out after 5 s is not followed by 5 s more."""

    simulated = False

    def __init__(self, source: ClusterSource, clock: Callable[[], float]) -> None:
        self.source = source
        self._clock = clock
        self.started = clock()
        #: How long the last refresh took (``None``: one handed in by a test).
        self.took_s: float | None = None

    def sample(self) -> ClusterSample:
        self.started = self._clock()
        self.took_s = None
        cluster = self.source.sample()
        self.took_s = self._clock() - self.started
        return cluster

    def close(self) -> None:
        self.source.close()


class ClusterTaken(Message):
    """The poller read the cluster (messages up), in ``took_s`` seconds."""

    def __init__(self, cluster: ClusterSample, took_s: float | None) -> None:
        super().__init__()
        self.cluster = cluster
        self.took_s = took_s


class ClusterApp(MonitorApp):
    """gpumon's cluster dashboard."""

    CSS_PATH = ["../app.tcss", "cluster.tcss"]
    TITLE = "gpumon cluster"
    ENABLE_COMMAND_PALETTE = True
    #: The latest answer (or the last nodes, marked stale, with why Prometheus failed): the
    #: screens watch it (state down); set again after a key changed what they show.
    cluster: var[ClusterSample | None] = var(None, always_update=True, init=False)
    #: While the last answer is not current: seconds to the next try, and the stall (the
    #: banner's countdown, once a second).
    waiting: var[tuple[int | None, Stall | None]] = var((None, None), init=False)
    #: Counts the nodes' details read (:mod:`~gpumon.ui.cluster.detail`): the screens of a
    #: node watch it.
    details_read: var[int] = var(0, init=False)

    BINDINGS = APP_BINDINGS

    def __init__(
        self,
        source: ClusterSource,
        *,
        settings: Settings | None = None,
        interval_s: float | None = None,
        ascii_only: bool | None = None,
        autostart: bool = True,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        from gpumon.config import Settings

        exact_updates.install()
        self.settings = settings or Settings()
        self.source = source
        self.glyphs = Glyphs(wants_ascii() if ascii_only is None else ascii_only)
        self.autostart = autostart
        self.clock = clock
        #: Seconds since the epoch: where a GPU's last hour ends.
        self.wall_clock = wall_clock
        if interval_s is None:
            chosen = self.settings.origins.get("interval_s", "default") != "default"
            interval_s = self.settings.interval_s if chosen else DEFAULT_CLUSTER_INTERVAL_S
        self.interval_s = interval_s
        #: How long the last good refresh took, when it stretched the interval (the header
        #: says so), else ``None``.
        self.refresh_s: float | None = None
        # Polls that raised (a bug in the source: it should not): the same growing waits.
        self._raised = Backoff()
        #: When the latest good answer was read (seconds since the epoch).
        self.last_answer_s: float | None = None
        #: When the next try starts after a failure (``clock()`` time), else ``None``.
        self.retry_at: float | None = None
        #: The refresh in flight has taken more than three intervals: the last answer is
        #: then shown stale.
        self.stall: Stall | None = None
        #: ``w`` on a node's GPU: tell me when it is FREE.
        self.watches = Watches()
        #: The nodes' GPUs and processes, read for the nodes on screen and the watched ones.
        self.details = DetailReader(self, source)
        #: What the screens read of the answer: rows, the fleet, a node's GPUs.
        self.shown = Shown(self.settings.free_threshold_mib, self.details.details)
        self._timed = _Timed(source, clock)
        # The poller hands on whatever sample() returns: a ClusterSample here.
        self.poller = Poller(
            cast("GpuSource", self._timed),
            interval_s,
            cast("Callable[[Sample], None]", self._cluster_taken),
            on_error=self._on_poll_error,
            clock=clock,
        )

    # -- screens ---------------------------------------------------------------------

    def get_default_screen(self) -> Screen[None]:
        self.node_list_screen = ClusterScreen()
        return self.node_list_screen

    def on_mount(self) -> None:
        self.call_after_refresh(startup.settled)  # once the first frame is drawn
        if self.autostart:
            self.run_worker(self.poller.run(), group="poller", exclusive=True)
        # The banner's "retrying in N s" counts down.
        self.set_interval(1.0, self._tick)
        self.start_common()

    # -- samples in ------------------------------------------------------------------

    def receive_cluster(self, cluster: ClusterSample) -> None:
        """Show ``cluster`` now (tests, snapshots): the path the poller's samples take."""
        self._timed.started = self.clock()
        self._on_cluster(cluster)

    def _cluster_taken(self, cluster: ClusterSample) -> None:
        # Messages up: handled in its turn.
        self.post_message(ClusterTaken(cluster, self._timed.took_s))

    def on_cluster_taken(self, message: ClusterTaken) -> None:
        self._on_cluster(message.cluster, message.took_s)

    @property
    def every_s(self) -> float:
        """Seconds between refreshes: the interval, stretched to five times the last refresh
        when that took more than a fifth of it (a slow server is not asked back to back)."""
        took = self.refresh_s
        return self.interval_s if took is None else took * REFRESH_SHARE

    def _on_cluster(self, cluster: ClusterSample, took_s: float | None = None) -> None:
        previous = self.cluster
        self.stall = None
        if cluster.error is None:
            self._raised.succeeded()
            self.retry_at = None
            slow = took_s is not None and took_s * REFRESH_SHARE > self.interval_s
            self.refresh_s = took_s if slow else None
            self.poller.interval_s = self.every_s
            self.last_answer_s = cluster.timestamp_s
        else:
            delay = self.source.next_retry_s or self._raised.delay_s or self._raised.initial_s
            self.retry_at = self._timed.started + delay
            self.poller.interval_s = delay
            if not cluster.nodes and not cluster.rows and previous is not None:
                # Never lose what was known: the last nodes and rows stay, marked stale.
                cluster = replace(
                    cluster, nodes=previous.nodes, rows=previous.rows, fleet=previous.fleet,
                    path=previous.path,
                )  # fmt: skip
            cluster = replace(cluster, stale=True)
        if cluster.stale:
            # Whoever built it (the source, a poll that raised, the last nodes kept above):
            # a stale answer has no node UP, so no count, pick or watch takes a GPU as FREE.
            cluster = marked_stale(cluster)
        self._check_watches(cluster)  # first: the screens show what is still watched
        with self.batch_update():
            self.cluster = cluster
        if cluster.error is None:
            self.details.read(self._detail_names())  # the nodes on screen follow

    def _on_poll_error(self, error: BaseException) -> None:
        # The source should never raise; if it does, it reads as Prometheus failing.
        self._raised.failed()
        why = str(error) or type(error).__name__
        cluster = self.cluster
        if cluster is None:
            cluster = ClusterSample(self.wall_clock(), "", ())
        self._on_cluster(replace(cluster, timestamp_s=self.wall_clock(), error=why))

    def retry_in_s(self) -> int | None:
        """Whole seconds to the next try after a failure (0: trying now), else ``None``."""
        if self.retry_at is None:
            return None
        return max(0, math.ceil(self.retry_at - self.clock()))

    def _tick(self) -> None:
        self._check_stalled()
        self.waiting = (self.retry_in_s(), self.stall)

    def _check_stalled(self) -> None:
        """Once a second, as the one-machine dashboard does: a refresh that has taken more
        than three intervals leaves the last answer no longer current (stale: no node UP, no
        GPU FREE) until an answer comes; the banner says how long it has waited."""
        # A poll that raised is an answer here (Prometheus failing), with a banner of its own.
        was, self.stall = self.stall, stall_of(self.poller, reads_failing=False, reason=WAITING)
        cluster = self.cluster
        if was is not None or self.stall is None or cluster is None:
            return
        with self.batch_update():
            self.cluster = replace(marked_stale(cluster), timestamp_s=self.wall_clock())

    def want_users(self, wanted: bool) -> None:
        """The node list filters by user (``wanted``): each refresh reads every user on a node,
        from one started now."""
        newly = wanted and not self.source.users_wanted
        self.source.users_wanted = wanted
        if newly:
            self.poller.poll_now()

    # -- a node's detail -------------------------------------------------------------

    def want_detail(self, name: str) -> None:
        """A screen of node ``name`` opened: its GPUs are read now, then after each answer."""
        self.details.want(name, fresh=any(watch.node == name for watch in self.watches))
        self.details.read(self._detail_names())

    def drop_detail(self, name: str) -> None:
        watched = any(watch.node == name for watch in self.watches)
        self.details.drop(name, keep=watched)

    def _detail_names(self) -> list[str]:
        """The nodes whose detail to read: on screen, or watched, and not in the answer."""
        cluster = self.cluster
        if cluster is None:
            return []
        names = [*self.details.wanted, *(watch.node or "" for watch in self.watches)]
        shown = self.shown
        return [n for n in names if find_node(cluster, n) is None and shown.row_of(cluster, n)]

    def on_detail_read(self, message: DetailRead) -> None:
        self.details.on_read(message)
        self._check_watches(self.cluster)
        self.details_read += 1

    def on_details_done(self, _: DetailsDone) -> None:
        self.details.on_done(self._detail_names)

    def _check_watches(self, cluster: ClusterSample | None) -> None:
        """Alert on the watched GPUs FREE now; withdraw alerts on those no longer FREE."""
        if not self.is_running or cluster is None:
            return

        def free(watch: Hashable) -> bool:
            assert isinstance(watch, Watch)
            return watch.gpu_index in self.shown.free_of(cluster, watch.node or "")

        self.withdraw_alerts(lambda watch: not free(watch))
        for watch in self.watches.finish(free):
            self.alert(watch.done_text(watch.node or "?", cluster.timestamp_s), watch)

    # -- actions ---------------------------------------------------------------------

    def action_help(self) -> None:
        from gpumon.ui.cluster.help import ClusterHelpScreen

        self.push_screen(ClusterHelpScreen(self.glyphs.ascii_only))

    def toggle_watch(self, node_name: str, gpu: GpuStats) -> None:
        """``w`` on a node's GPU: watch it until it is FREE (the node UP, its processes
        read), or stop watching it. FREE already, or a node whose exporter lists no
        processes (dcgm-exporter): said at once, not watched."""
        watch = Watch(gpu.index, f"GPU {gpu.index} ({gpu.name or fmt.NA})", node=node_name)
        node, _ = self.shown.node_of(self.cluster, node_name)
        refusal = None
        if node is not None and not self.watches.watching(watch):
            if not node.sample.processes_read:
                refusal = (
                    f"{node_name} lists no processes ({node.exporter.value} exporter): "
                    "whether its GPUs are FREE cannot be told, so none can be watched."
                )
            elif gpu.index in self.shown.free_of(self.cluster, node_name):
                refusal = f"GPU {gpu.index} of {node_name} is FREE now: nothing to wait for."
        if refusal is not None:
            self.notify(refusal, markup=False)
        elif self.watches.toggle(watch):
            self.notify(f"Watching {watch.name} of {node_name}: you will be told when it is "
                        "FREE (w again: stop).", markup=False)  # fmt: skip
        else:
            self.notify(f"Stopped watching {watch.name} of {node_name}.", markup=False)
        self.cluster = self.cluster  # the watched GPU's note

    def action_toggle_pause(self) -> None:
        self.poller.paused = not self.poller.paused
        self.cluster = self.cluster  # the banner says paused


def create_cluster_app(
    settings: Settings,
    source: ClusterSource | None = None,
    *,
    ascii_only: bool | None = None,
    autostart: bool = True,
    clock: Callable[[], float] = time.monotonic,
    wall_clock: Callable[[], float] = time.time,
) -> ClusterApp:
    """The cluster dashboard for ``settings.prometheus_url``: the one way the CLI, the tests
    and the screenshot script build it (``source`` given: tests, recorded answers).

    Raises:
        SettingsError: from :func:`~gpumon.sources.cluster_base.open_cluster_source` (no
            ``prometheus_url``, an unreadable CA file): one line; the CLI exits 2.
    """
    if source is None:
        from gpumon.sources.cluster_base import open_cluster_source

        source = open_cluster_source(settings)
    return ClusterApp(
        source,
        settings=settings,
        ascii_only=ascii_only,
        autostart=autostart,
        clock=clock,
        wall_clock=wall_clock,
    )
