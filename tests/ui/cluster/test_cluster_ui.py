"""The cluster dashboard (``gpumon --prometheus URL``) over hand-built clusters.

A hundred nodes of eight GPUs, built here (no Prometheus): most nodes run gpumon's exporter,
the last ten dcgm-exporter; node7 is DOWN, node13 stale. The tests drive the real app with
Pilot and read the screen as a user would.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import replace

import pytest

from gpumon.config import Settings
from gpumon.data.cluster import ClusterSample, ExporterKind, Node, NodeState, summarize
from gpumon.data.format import natural_key
from gpumon.data.model import GpuProcess, GpuStats, HostStats, ProcessKind, Sample
from gpumon.sources.prometheus.client import Backoff
from gpumon.ui.cluster.app import ClusterApp, create_cluster_app
from gpumon.ui.cluster.node_columns import NodeFilter, sort_rows, state_text
from gpumon.ui.cluster.node_history import NodeGpuScreen, time_columns
from gpumon.ui.cluster.node_list import NodeList
from gpumon.ui.cluster.node_screen import NodeScreen
from tests.support.ui_helpers import FIXED_TIME, GIB, MIB, screen_text

URL = "http://prometheus.example:9090"
USERS = ("alice", "bob", "carol", "dave", "erin")
DOWN_NODE, STALE_NODE = 7, 13
DCGM_FROM = 91  # node91 .. node100 run dcgm-exporter


def gpu_is_free(node: int, gpu: int) -> bool:
    return (node + gpu) % 5 == 0


def nodes_of(user: str) -> list[str]:
    """The nodes where ``user`` runs a process (on a GPU that is not free), in list order."""
    return [
        f"node{n}"
        for n in range(1, DCGM_FROM)
        if any(USERS[(n + g) % len(USERS)] == user and not gpu_is_free(n, g) for g in range(8))
    ]


def make_gpu(node: int, index: int, dcgm: bool = False) -> GpuStats:
    free = gpu_is_free(node, index)
    gpu = GpuStats(
        index=index,
        uuid=f"GPU-{node:04d}{index:04d}-aaaa-bbbb-cccc-dddddddddddd",
        name="NVIDIA H100 80GB HBM3",
        temperature_c=35 + (node * 7 + index * 3) % 45,
        temperature_slowdown_c=None if dcgm else 87,
        power_draw_w=80.0 + (node + index) % 7 * 50,
        power_limit_w=None if dcgm else 700.0,
        memory_used_bytes=(5 * MIB) if free else (10 + (node + index) % 60) * GIB,
        memory_total_bytes=80 * GIB,
        utilization_gpu_pct=0 if free else 20 + (node * 13 + index * 7) % 80,
        mig_mode=None if dcgm else False,
    )
    return gpu


def make_node(
    number: int,
    *,
    state: NodeState = NodeState.UP,
    exporter: ExporterKind = ExporterKind.GPUMON,
    now: float = FIXED_TIME,
) -> Node:
    dcgm = exporter is ExporterKind.DCGM
    gpus = tuple(make_gpu(number, index, dcgm) for index in range(8))
    processes: list[GpuProcess] = []
    if not dcgm:
        for gpu in gpus:
            if gpu_is_free(number, gpu.index):
                continue
            user = USERS[(number + gpu.index) % len(USERS)]
            processes.append(
                GpuProcess(
                    gpu_index=gpu.index,
                    gpu_uuid=gpu.uuid,
                    pid=1000 * number + gpu.index,
                    kind=ProcessKind.COMPUTE,
                    gpu_memory_bytes=gpu.memory_used_bytes,
                    user=user,
                    command=f"python train_{user}.py --node {number}",
                    elapsed_s=3600.0 + number,
                )
            )
    name = f"node{number}"
    sample = Sample(
        timestamp_s=now,
        host=HostStats(name, None, None, None, None, None, None),
        driver=None,
        gpus=gpus,
        processes=tuple(processes),
        processes_read=not dcgm,
    )
    return Node(
        name=name,
        instance=f"10.0.{number // 256}.{number % 256}:{9400 if dcgm else 9835}",
        job="dcgm" if dcgm else "gpumon",
        exporter=exporter,
        state=state,
        sample=sample,
        last_seen_s=now - 900 if state is NodeState.STALE else now - 5,
        down_since_s=now - 600 if state is NodeState.DOWN else None,
    )


def make_cluster(count: int = 100, *, now: float = FIXED_TIME) -> ClusterSample:
    nodes = []
    for number in range(1, count + 1):
        state = NodeState.UP
        if number == DOWN_NODE:
            state = NodeState.DOWN
        elif number == STALE_NODE:
            state = NodeState.STALE
        exporter = ExporterKind.DCGM if number >= DCGM_FROM else ExporterKind.GPUMON
        nodes.append(make_node(number, state=state, exporter=exporter, now=now))
    return ClusterSample(now, URL, tuple(nodes), scrape_interval_s=15.0)


def unreachable(cluster: ClusterSample, reason: str = "connection refused") -> ClusterSample:
    """What PrometheusSource answers when the server is down: the last nodes, the UP ones
    turned STALE, and why."""
    nodes = tuple(
        replace(node, state=NodeState.STALE) if node.state is NodeState.UP else node
        for node in cluster.nodes
    )
    return replace(
        cluster, timestamp_s=cluster.timestamp_s + 30, nodes=nodes, error=reason, stale=True
    )


def free_gpus(node: int) -> int:
    return sum(gpu_is_free(node, index) for index in range(8))


def top_user(node: int) -> str:
    """Who holds the most GPU memory on gpumon node ``node``."""
    memory: dict[str, int] = {}
    for gpu in make_node(node).gpus:
        if not gpu_is_free(node, gpu.index):
            user = USERS[(node + gpu.index) % len(USERS)]
            memory[user] = memory.get(user, 0) + (gpu.memory_used_bytes or 0)
    return max(sorted(memory), key=lambda user: memory[user])


#: Free GPUs the cluster offers: UP gpumon nodes only (dcgm lists no processes).
CLUSTER_FREE = sum(free_gpus(n) for n in range(1, DCGM_FROM) if n not in (DOWN_NODE, STALE_NODE))


class FakeSource:
    """Answers with the given clusters (the last one forever) and a smooth last hour; counts
    failures with the real source's Backoff (2, 4, 8 ... s here), as PrometheusSource does."""

    def __init__(self, *clusters: ClusterSample, delay_s: float = 0.0) -> None:
        self.clusters = list(clusters)
        self.backoff = Backoff(initial_s=2.0)
        self.delay_s = delay_s
        self.calls = 0
        self.in_flight = 0
        self.most_in_flight = 0
        self.history_calls: list[tuple[str, int, str, float, str]] = []
        self.release = threading.Event()
        self.release.set()
        self.closed = False
        self.users_wanted = False
        self.users_read: list[bool] = []  # at each sample(): whether it read every user

    def sample(self) -> ClusterSample:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            self.calls += 1
            self.users_read.append(self.users_wanted)
            self.release.wait(5)
            if self.delay_s:
                time.sleep(self.delay_s)
            if len(self.clusters) > 1:
                return self.answer(self.clusters.pop(0))
            return self.answer(self.clusters[0])
        finally:
            self.in_flight -= 1

    def answer(self, cluster: ClusterSample) -> ClusterSample:
        """``cluster``, counted as a failure or a success."""
        if cluster.error is None:
            self.backoff.succeeded()
        else:
            self.backoff.failed()
        return cluster

    @property
    def next_retry_s(self) -> float | None:
        return self.backoff.delay_s

    def detail(self, node: str) -> Node:
        """The node of the last cluster answered (the dashboard asks only for a node whose
        GPUs the answer does not carry)."""
        return next(n for n in self.clusters[0].nodes if node in (n.name, n.instance))

    def history(
        self, node: str, gpu_index: int, field_key: str, seconds: float = 3600.0
    ) -> Sequence[tuple[float, float | None]]:
        thread = threading.current_thread().name
        self.history_calls.append((node, gpu_index, field_key, seconds, thread))
        if field_key == "power":
            return []  # as PrometheusSource answers for a field the exporter does not serve
        start = FIXED_TIME - seconds
        points: list[tuple[float, float | None]] = []
        for step in range(0, int(seconds), 60):
            if field_key == "util":
                # A climb, with the ten minutes the node was down (no value) in the middle.
                value: float | None = None if 1800 <= step < 2400 else float((step // 60) % 100)
            elif field_key == "mem_used":
                value = float(40 * GIB)
            else:
                value = None
            points.append((start + step, value))
        return points

    def close(self) -> None:
        self.closed = True


def cluster_app(
    *clusters: ClusterSample, autostart: bool = False, source: FakeSource | None = None
) -> ClusterApp:
    source = source or FakeSource(*(clusters or (make_cluster(),)))
    app = create_cluster_app(
        Settings(prometheus_url=URL),
        source,
        ascii_only=False,
        autostart=autostart,
        clock=lambda: 1000.0,
        wall_clock=lambda: FIXED_TIME,
    )
    return app


async def shown(app: ClusterApp, pilot, cluster: ClusterSample | None = None) -> str:  # type: ignore[no-untyped-def]
    """Hand ``cluster`` to the app as if the source had just answered it; the screen."""
    source = app.source
    assert isinstance(source, FakeSource)
    app.receive_cluster(source.answer(cluster or make_cluster()))
    await pilot.pause()
    return screen_text(app)


def row_of(text: str, name: str) -> str:
    return next(line for line in text.splitlines() if line.split()[:1] == [name])


def listed(app: ClusterApp) -> list[str]:
    return [row.name for row in app.screen.query_one(NodeList).rows]


# -- pure pieces -----------------------------------------------------------------------


def test_node_names_sort_as_people_read_them() -> None:
    names = ["node10", "node2", "gpu-b1", "node1", "Node3", "gpu-a10"]
    assert sorted(names, key=natural_key) == [
        "gpu-a10", "gpu-b1", "node1", "node2", "Node3", "node10",
    ]  # fmt: skip


def test_old_readings_sort_after_current_ones_in_both_directions() -> None:
    cluster = make_cluster(20)
    rows = [summarize(node, 1024) for node in cluster.nodes]
    for reverse in (False, True):
        ordered = [row.name for row in sort_rows(rows, "util", reverse)]
        assert set(ordered[-2:]) == {f"node{DOWN_NODE}", f"node{STALE_NODE}"}
        utils = [r.mean_utilization_pct for r in sort_rows(rows, "util", reverse)[:-2]]
        assert utils == sorted(utils, reverse=not reverse)  # UTIL: busiest first


def test_a_point_holds_for_one_step_and_a_missing_one_stays_a_gap() -> None:
    # Points a minute apart over ten minutes, drawn in twenty columns (30 s each); the
    # point at 300 s is missing (the node was down).
    series = [(float(t), float(t // 60)) for t in range(0, 600, 60) if t != 300]
    columns = time_columns(series, 0.0, 600.0, 20)
    assert columns[:4] == [0.0, 0.0, 1.0, 1.0]  # each point fills its minute
    assert columns[10:12] == [None, None]  # the missing minute
    assert columns[-2:] == [9.0, 9.0]
    assert time_columns([], 0.0, 600.0, 5) == [None] * 5


def test_states_read_with_a_date_when_not_today() -> None:
    node = make_node(1, state=NodeState.DOWN)
    day_before = replace(node, down_since_s=FIXED_TIME - 86_400)
    assert state_text(node, FIXED_TIME) == "DOWN since 22:03"
    assert state_text(day_before, FIXED_TIME) == "DOWN since Nov 13 22:13"
    never = replace(make_node(2, state=NodeState.STALE), last_seen_s=None)
    assert state_text(never, FIXED_TIME) == "stale, never seen"


def test_the_filter_matches_names_instances_and_every_user() -> None:
    row = summarize(make_node(4), 1024)
    assert NodeFilter("NODE4").matches(row)
    assert NodeFilter("10.0.0.4").matches(row)
    assert all(NodeFilter(user).matches(row) for user in row.users)
    assert not NodeFilter("mallory").matches(row)
    assert NodeFilter(free_only=True).matches(row) == (free_gpus(4) > 0)


# -- the node list ---------------------------------------------------------------------


async def test_the_list_shows_every_node_with_the_cluster_counts() -> None:
    app = cluster_app()
    async with app.run_test(size=(140, 40)) as pilot:
        text = await shown(app, pilot)
        header = text.splitlines()[0]
        assert URL in header
        assert "100 nodes (1 DOWN, 1 stale)" in header
        assert f"{CLUSTER_FREE} GPUs free in the cluster (+10 nodes unknown)" in header
        assert "DEMO" not in header
        assert " Nodes 100" in text
        for title in ("NODE", "GPUS", "FREE", "UTIL", "MEMORY", "HOT", "TOP USER", "STATE"):
            assert title in text
        # node2 after node1, node10 after node9: names sort as people read them.
        assert listed(app)[:12] == [f"node{n}" for n in range(1, 13)]
        row = row_of(text, "node1").split()
        assert row[:3] == ["node1", "8", str(free_gpus(1))]
        assert "UP" in row and "gpumon" in row
        # Only the rows on screen exist as lines: the last node is not drawn yet.
        assert "node100" not in text
        await pilot.press("end")
        await pilot.pause()
        text = screen_text(app)
        assert "node100" in text and "node1 " not in text
        assert "dcgm" in row_of(text, "node100")


async def test_down_and_stale_nodes_never_look_like_idle_gpus() -> None:
    app = cluster_app()
    async with app.run_test(size=(140, 40)) as pilot:
        text = await shown(app, pilot)
        down = row_of(text, f"node{DOWN_NODE}")
        assert "DOWN since 22:03" in down  # ten minutes before the fixed clock
        stale = row_of(text, f"node{STALE_NODE}")
        assert "stale, last seen 21:58" in stale
        for number, row in ((DOWN_NODE, down), (STALE_NODE, stale)):
            cells = row.split()
            assert cells[1] == "8"  # its GPUs are still counted
            assert cells[2] == "-"  # free: never offered from old readings
            # Its last readings are still shown (dimmed), and its top user.
            assert cells[3].endswith("%") and cells[4].endswith("/640.0G")
            assert cells[6] == top_user(number)
        # A dcgm node is UP but cannot tell free GPUs: N/A, not 0.
        await pilot.press("end")
        await pilot.pause()
        assert row_of(screen_text(app), "node100").split()[2] == "N/A"


async def test_sorting_cycles_reverses_and_follows_a_click_on_a_title() -> None:
    app = cluster_app()
    async with app.run_test(size=(140, 40)) as pilot:
        await shown(app, pilot)
        node_list = app.screen.query_one(NodeList)
        await pilot.press("s")  # GPUS
        await pilot.press("s")  # FREE: most first
        await pilot.pause()
        assert node_list.sort_key == "free"
        names = listed(app)
        counts = [free_gpus(int(name[4:])) for name in names[:80]]
        assert counts == sorted(counts, reverse=True)
        # Nodes that cannot tell come last, whichever the direction.
        assert set(names[-12:]) == {f"node{n}" for n in (DOWN_NODE, STALE_NODE, *range(91, 101))}
        await pilot.press("r")
        await pilot.pause()
        names = listed(app)
        counts = [free_gpus(int(name[4:])) for name in names[:80]]
        assert counts == sorted(counts)
        assert set(names[-12:]) == {f"node{n}" for n in (DOWN_NODE, STALE_NODE, *range(91, 101))}
        assert "FREE▲" in screen_text(app)
        # A click on STATE sorts by it: the DOWN node first, then the stale one.
        header = next(line for line in screen_text(app).splitlines() if "STATE" in line)
        await pilot.click(NodeList, offset=(header.index("STATE") + 1, 1))
        await pilot.pause()
        assert listed(app)[:2] == [f"node{DOWN_NODE}", f"node{STALE_NODE}"]
        assert "STATE▲" in screen_text(app)


async def test_the_text_filter_counts_what_it_shows_and_escape_clears_it() -> None:
    app = cluster_app()
    async with app.run_test(size=(140, 40)) as pilot:
        await shown(app, pilot)
        await pilot.press("slash", *"node1")
        await pilot.pause()
        assert app.source.users_wanted  # every user on a node, at each refresh while it filters
        text = screen_text(app)
        # node1, node10 .. node19, node100
        assert 'Nodes 12 of 100  filter: "node1"' in text
        assert len(listed(app)) == 12
        await pilot.press("enter")  # keeps the filter, closes the box
        await pilot.press("escape")
        await pilot.pause()
        assert " Nodes 100" in screen_text(app) and not app.source.users_wanted
        # A user's name finds every node they run on, not only where they are on top.
        await pilot.press("slash", *"CAROL", "enter")
        await pilot.pause()
        expected = nodes_of("carol")
        assert listed(app) == expected
        assert f"Nodes {len(expected)} of 100" in screen_text(app)


async def test_free_only_lists_the_nodes_with_a_free_gpu() -> None:
    app = cluster_app()
    async with app.run_test(size=(140, 40)) as pilot:
        await shown(app, pilot)
        await pilot.press("f")
        await pilot.pause()
        expected = [
            f"node{n}"
            for n in range(1, DCGM_FROM)
            if free_gpus(n) and n not in (DOWN_NODE, STALE_NODE)
        ]
        assert listed(app) == expected
        assert f"Nodes {len(expected)} of 100  filter: free GPUs" in screen_text(app)
        await pilot.press("f")
        await pilot.pause()
        assert len(listed(app)) == 100


async def test_the_cursor_stays_on_its_node_when_the_cluster_changes() -> None:
    app = cluster_app()
    async with app.run_test(size=(140, 40)) as pilot:
        cluster = make_cluster()
        await shown(app, pilot, cluster)
        await pilot.press("down", "down", "down")
        node_list = app.screen.query_one(NodeList)
        assert node_list.cursor_key == "node4"
        # node2 leaves the cluster: the cursor stays on node4, one row up.
        smaller = replace(cluster, nodes=tuple(n for n in cluster.nodes if n.name != "node2"))
        await shown(app, pilot, smaller)
        assert node_list.cursor_key == "node4"
        assert node_list.cursor_row == 2


async def test_demo_nodes_are_labelled() -> None:
    cluster = make_cluster(5)
    first = cluster.nodes[0]
    demo = replace(first, sample=replace(first.sample, simulated=True))
    cluster = replace(cluster, nodes=(demo, *cluster.nodes[1:]))
    app = cluster_app(cluster)
    async with app.run_test(size=(140, 20)) as pilot:
        text = await shown(app, pilot, cluster)
        assert "DEMO: simulated data" in text.splitlines()[0]


# -- Prometheus unreachable ------------------------------------------------------------


async def test_unreachable_prometheus_keeps_the_last_data_under_a_banner() -> None:
    app = cluster_app()
    async with app.run_test(size=(140, 40)) as pilot:
        good = make_cluster()
        await shown(app, pilot, good)
        assert "unreachable" not in screen_text(app)
        text = await shown(app, pilot, unreachable(good))
        banner = text.splitlines()[1]
        assert banner.strip() == (
            "Prometheus unreachable: connection refused; showing data from 22:13, retrying in 2 s"
        )
        # The last nodes are still listed, with their readings, but offer no free GPU.
        row = row_of(text, "node1")
        assert row.split()[:4] == ["node1", "8", "-", row.split()[3]]
        assert "stale, last seen" in row
        assert "0 GPUs free in the cluster" in text.splitlines()[0]
        assert app.screen.query_one(NodeList).stale
        # Failing again waits longer; the banner says so.
        text = await shown(app, pilot, unreachable(good, "HTTP 503"))
        assert "Prometheus unreachable: HTTP 503; showing data from 22:13, retrying in 4 s" in (
            text
        )
        assert app.poller.interval_s == 4.0
        # An answer: the banner goes, the interval is back.
        text = await shown(app, pilot, make_cluster(now=FIXED_TIME + 60))
        assert "unreachable" not in text
        assert app.poller.interval_s == app.interval_s
        assert not app.screen.query_one(NodeList).stale


async def test_unreachable_from_the_start_says_there_is_no_data_yet() -> None:
    app = cluster_app()
    async with app.run_test(size=(140, 20)) as pilot:
        failed = ClusterSample(FIXED_TIME, URL, (), error="timed out after 5 s", stale=True)
        text = await shown(app, pilot, failed)
        assert "Prometheus unreachable: timed out after 5 s; no data yet, retrying in 2 s" in text
        assert "No data: Prometheus has not answered yet" in text


async def test_the_banner_counts_down_to_the_next_try() -> None:
    now = [1000.0]
    app = cluster_app()
    app.clock = lambda: now[0]
    async with app.run_test(size=(140, 20)) as pilot:
        await shown(app, pilot, unreachable(make_cluster(10)))
        assert "retrying in 2 s" in screen_text(app)
        now[0] += 1.2
        app._tick()
        await pilot.pause()
        assert "retrying in 1 s" in screen_text(app)
        now[0] += 1.0
        app._tick()
        await pilot.pause()
        assert "retrying now" in screen_text(app)


async def test_polls_run_off_the_event_loop_one_at_a_time() -> None:
    """A poll stuck in the network never freezes the keys, and polls never overlap."""
    source = FakeSource(make_cluster(20))
    app = cluster_app(source=source, autostart=True)
    app.interval_s = 0.25
    app.poller.interval_s = 0.25
    async with app.run_test(size=(140, 30)) as pilot:
        for _ in range(100):
            await pilot.pause(0.02)
            if app.cluster is not None:
                break
        assert app.cluster is not None
        source.release.clear()  # the next poll hangs
        await pilot.pause(0.6)
        assert source.in_flight == 1
        await pilot.press("down", "down")
        assert app.screen.query_one(NodeList).cursor_key == "node3"
        source.release.set()
        await pilot.pause(0.6)
        assert source.most_in_flight == 1
        assert source.calls >= 3


async def test_filtering_by_user_reads_every_user_on_a_node_at_once() -> None:
    """Every user on a node is read only while the node list filters by user: `/` starts a
    refresh that reads them, without waiting for the interval; Escape stops it."""
    source = FakeSource(make_cluster(20))
    app = cluster_app(source=source, autostart=True)
    app.interval_s = app.poller.interval_s = 60.0
    async with app.run_test(size=(140, 30)) as pilot:
        for _ in range(100):
            await pilot.pause(0.02)
            if app.cluster is not None:
                break
        await pilot.press("slash")
        for _ in range(100):
            await pilot.pause(0.02)
            if source.calls == 2:
                break
        assert source.users_read == [False, True]
        await pilot.press("escape")
        assert not source.users_wanted


async def test_a_failing_poll_waits_with_backoff_then_resumes() -> None:
    good = make_cluster(10)
    source = FakeSource(good, unreachable(good), unreachable(good), good)
    source.backoff = Backoff(initial_s=0.3)
    app = cluster_app(source=source, autostart=True)
    app.interval_s = 0.25
    app.poller.interval_s = 0.25
    intervals: list[float] = []
    original = app._on_cluster

    def record(cluster: ClusterSample) -> None:
        original(cluster)
        intervals.append(app.poller.interval_s)

    app._on_cluster = record  # type: ignore[method-assign]
    app.poller._on_sample = record  # type: ignore[assignment]
    async with app.run_test(size=(140, 20)) as pilot:
        for _ in range(300):
            await pilot.pause(0.02)
            if len(intervals) >= 4:
                break
        # The usual interval, then the source's growing waits, then the usual one again.
        assert intervals[:4] == [0.25, 0.3, 0.6, 0.25]
        assert source.most_in_flight == 1


# -- a node ----------------------------------------------------------------------------


async def test_enter_shows_the_node_with_its_gpu_cards_and_processes() -> None:
    app = cluster_app()
    async with app.run_test(size=(140, 50)) as pilot:
        await shown(app, pilot)
        await pilot.press("down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, NodeScreen)
        text = screen_text(app)
        assert text.splitlines()[0].startswith(" node2  UP  gpumon exporter  10.0.0.2:9835")
        for index in range(8):
            assert f"GPU {index}" in text
        assert "FREE" in text  # node2's GPU 3 and GPU 8 - 5 = 3: (2 + 3) % 5 == 0
        assert "python train_" in text
        assert "Processes" in text
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, NodeScreen)
        assert app.screen.query_one(NodeList).cursor_key == "node2"


async def test_a_node_follows_new_samples_while_it_is_shown() -> None:
    app = cluster_app()
    async with app.run_test(size=(140, 50)) as pilot:
        cluster = make_cluster(3)
        await shown(app, pilot, cluster)
        await pilot.press("enter")
        await pilot.pause()
        node = cluster.nodes[0]
        busy = replace(node.gpus[0], utilization_gpu_pct=99, memory_used_bytes=79 * GIB)
        changed = replace(node, sample=replace(node.sample, gpus=(busy, *node.gpus[1:])))
        text = await shown(app, pilot, replace(cluster, nodes=(changed, *cluster.nodes[1:])))
        assert "99%" in text


async def test_a_dcgm_node_says_it_has_no_process_data() -> None:
    app = cluster_app()
    async with app.run_test(size=(140, 50)) as pilot:
        await shown(app, pilot)
        await pilot.press("end", "enter")
        await pilot.pause()
        text = screen_text(app)
        assert "node100  UP  dcgm-exporter" in text
        assert "Processes: not available from dcgm-exporter" in text
        assert "GPU 7" in text
        assert "PID" not in text  # no process table


async def test_a_down_node_shows_its_last_readings_and_no_free_gpu() -> None:
    app = cluster_app()
    async with app.run_test(size=(140, 50)) as pilot:
        await shown(app, pilot)
        await pilot.press(*["down"] * (DOWN_NODE - 1), "enter")
        await pilot.pause()
        text = screen_text(app)
        assert f"node{DOWN_NODE}  DOWN since 22:03: readings as last seen at 22:13" in text
        assert "FREE" not in text
        # Only an UP node's processes are shown, as once --prometheus and the docs say.
        assert "Processes: not shown while the node is DOWN (last seen 22:13)" in " ".join(
            text.split()
        )
        assert "processes as last seen" not in text


async def test_a_gpus_current_reading_is_never_outside_its_own_min_and_max() -> None:
    """The range covered the hour's history but not the reading just taken: "Memory used
    32.1G min 29.8G max 31.1G". The latest reading is part of the hour."""
    from gpumon.data.model import GpuStats
    from gpumon.ui.cluster.node_history import History, render_history

    gpu = GpuStats(index=0, uuid=None, utilization_gpu_pct=95)
    series = {"util": [(FIXED_TIME - 600.0, 40.0), (FIXED_TIME - 60.0, 50.0)]}
    history = History(series=series, end_s=FIXED_TIME, error=None)  # type: ignore[arg-type]
    text = render_history(history, gpu, 100, False, "green").plain
    assert "Utilisation  95%   min 40%  max 95%" in text


async def test_a_gpu_shows_its_last_hour_read_off_the_event_loop() -> None:
    source = FakeSource(make_cluster(5))
    app = cluster_app(source=source)
    async with app.run_test(size=(140, 60)) as pilot:
        await shown(app, pilot, make_cluster(5))
        await pilot.press("enter", "right", "enter")
        for _ in range(100):
            await pilot.pause(0.02)
            if isinstance(app.screen, NodeGpuScreen) and app.screen.history is not None:
                break
        await pilot.pause()
        assert isinstance(app.screen, NodeGpuScreen)
        text = screen_text(app)
        assert text.splitlines()[0].startswith(" node1 · GPU 1  UP")
        assert "Utilisation  40%   min 0%  max 59%" in text
        assert "(last hour, from Prometheus)" in text
        assert "Power  180W   no history: the node's exporter does not serve it" in text
        assert "Temperature  45°C   no reading in the last hour" in text
        fields = {call[2] for call in source.history_calls}
        assert fields == {"util", "mem_used", "power", "temp"}
        assert all(call[:2] == ("node1", 1) and call[3] == 3600 for call in source.history_calls)
        assert all(call[4] != threading.main_thread().name for call in source.history_calls)
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, NodeScreen)


async def test_history_that_fails_says_why() -> None:
    source = FakeSource(make_cluster(3))

    def broken(*args: object, **kwargs: object) -> list[tuple[float, float | None]]:
        raise RuntimeError("HTTP 502 Bad Gateway")

    source.history = broken  # type: ignore[method-assign]
    app = cluster_app(source=source)
    async with app.run_test(size=(140, 50)) as pilot:
        await shown(app, pilot, make_cluster(3))
        await pilot.press("enter", "enter")
        for _ in range(100):
            await pilot.pause(0.02)
            if isinstance(app.screen, NodeGpuScreen) and app.screen.history is not None:
                break
        await pilot.pause()
        assert "Last hour: not available (HTTP 502 Bad Gateway)" in screen_text(app)


# -- help ------------------------------------------------------------------------------


async def test_help_lists_the_cluster_keys() -> None:
    app = cluster_app()
    async with app.run_test(size=(100, 200)) as pilot:
        await shown(app, pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        text = screen_text(app)
        for words in (
            "filter nodes by name or user",
            "only nodes with a free GPU",
            "cycle the sort column",
            "the node under the cursor",
            "back to the node list",
            "last hour (from Prometheus)",
            "stale, last seen HH:MM",
        ):
            assert words in text, words


def test_the_settings_url_reaches_the_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's call: create_cluster_app(settings) opens the source from the settings."""
    opened: list[Settings] = []

    def fake_open(settings: Settings) -> FakeSource:
        opened.append(settings)
        return FakeSource(make_cluster(1))

    import gpumon.sources.cluster_base as cluster_base

    monkeypatch.setattr(cluster_base, "open_cluster_source", fake_open)
    settings = Settings(prometheus_url=URL)
    app = create_cluster_app(settings, autostart=False)
    assert opened == [settings]
    assert isinstance(app.source, FakeSource)


def test_the_quiet_interval_unless_one_was_chosen() -> None:
    source = FakeSource(make_cluster(1))
    app = create_cluster_app(Settings(prometheus_url=URL), source)
    assert app.interval_s == 5.0
    chosen = Settings(prometheus_url=URL, interval_s=2.0, origins={"interval_s": "--interval"})
    assert create_cluster_app(chosen, source).interval_s == 2.0


@pytest.mark.parametrize("absurd", [float("nan"), float("inf"), 1e300, -5.0, 1e12])
def test_a_time_that_is_no_real_moment_reads_unknown_in_the_cluster_view(absurd: float) -> None:
    """Such times crashed all four cluster dashboards (OverflowError, ValueError)."""
    from gpumon.ui.cluster.node_columns import clock_text

    assert clock_text(absurd, FIXED_TIME) == "unknown"
    assert clock_text(FIXED_TIME, absurd) == "unknown"


async def test_absurd_server_times_leave_every_cluster_screen_drawn() -> None:
    import dataclasses

    base = make_cluster(6)
    nodes = tuple(
        dataclasses.replace(node, last_seen_s=float("nan"), down_since_s=1e300)
        for node in base.nodes
    )
    cluster = dataclasses.replace(base, nodes=nodes, timestamp_s=float("inf"))
    app = cluster_app(cluster)
    async with app.run_test(size=(140, 50)) as pilot:
        await shown(app, pilot, cluster)
        for keys in (("enter",), ("right", "enter"), ("escape", "escape")):
            await pilot.press(*keys)
            await pilot.pause(0.2)
            assert app.is_running
        assert app.is_running


def test_a_process_type_a_node_does_not_say_reads_na() -> None:
    from gpumon.data.model import ProcessKind
    from gpumon.ui.widgets.process_columns import kind_text

    assert kind_text(ProcessKind.UNKNOWN) == "N/A"
    assert kind_text(ProcessKind.GRAPHICS) == "G"
