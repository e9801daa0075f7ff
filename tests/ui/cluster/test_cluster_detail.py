"""Detail on demand: the node list comes from rows; a node's GPUs and processes are read
(``source.detail(node)``) only when its screen opens, on a thread, never two reads at once,
then again at each answer while the screen is open. Until the first answer the screen says
it is reading; a read that fails says why in one line, and the last GPUs read are old, never
FREE.
"""

from __future__ import annotations

import threading
from dataclasses import replace

from gpumon.data.cluster import ClusterSample, Node
from gpumon.ui.cluster.app import ClusterApp
from gpumon.ui.cluster.node_history import NodeGpuScreen
from gpumon.ui.cluster.node_screen import NodeScreen
from tests.support.ui_helpers import screen_text
from tests.ui.cluster.test_cluster_rows import rows_only
from tests.ui.cluster.test_cluster_ui import FakeSource, cluster_app, make_cluster, shown


class DetailSource(FakeSource):
    """Answers rows only; ``detail(node)`` gives the node of ``full``, or raises ``failure``,
    after ``gate`` opens."""

    def __init__(self, full: ClusterSample) -> None:
        super().__init__(rows_only(full))
        self.full = full
        self.detail_calls: list[tuple[str, str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.failure: str | None = None
        self.reading = 0
        self.most_reading = 0

    def detail(self, node: str) -> Node:
        self.reading += 1
        self.most_reading = max(self.most_reading, self.reading)
        try:
            self.detail_calls.append((node, threading.current_thread().name))
            self.gate.wait(5)
            if self.failure is not None:
                raise RuntimeError(self.failure)
            return next(n for n in self.full.nodes if n.name == node)
        finally:
            self.reading -= 1


async def settle(app: ClusterApp, pilot) -> None:  # type: ignore[no-untyped-def]
    """Wait until no detail read is in flight."""
    for _ in range(200):
        await pilot.pause(0.02)
        if not app.details.in_flight:
            break
    await pilot.pause()


async def test_opening_a_node_reads_its_gpus_off_the_event_loop() -> None:
    source = DetailSource(make_cluster(20))
    app = cluster_app(source=source)
    async with app.run_test(size=(140, 50)) as pilot:
        await shown(app, pilot, source.clusters[0])
        assert source.detail_calls == []  # the list reads rows only
        source.gate.clear()
        await pilot.press("down", "enter")
        await pilot.pause()
        assert isinstance(app.screen, NodeScreen)
        text = screen_text(app)
        assert text.splitlines()[0].startswith(" node2  UP  gpumon exporter  10.0.0.2:9835")
        assert "reading node2…" in text
        source.gate.set()
        await settle(app, pilot)
        text = screen_text(app)
        assert "reading" not in text
        assert all(f"GPU {index}" in text for index in range(8))
        assert "FREE" in text and "python train_" in text
        assert [name for name, _ in source.detail_calls] == ["node2"]
        assert source.detail_calls[0][1] != threading.main_thread().name


async def test_a_node_is_read_again_at_each_answer_one_read_at_a_time() -> None:
    source = DetailSource(make_cluster(20))
    app = cluster_app(source=source)
    async with app.run_test(size=(140, 50)) as pilot:
        await shown(app, pilot, source.clusters[0])
        await pilot.press("enter")
        await settle(app, pilot)
        assert len(source.detail_calls) == 1
        source.gate.clear()  # the next read hangs
        for _ in range(3):  # three answers meanwhile: one read more after it, not three
            await shown(app, pilot, source.clusters[0])
        source.gate.set()
        await settle(app, pilot)
        assert source.most_reading == 1
        assert [name for name, _ in source.detail_calls] == ["node1"] * 3
        # Back on the list: the node is no longer read.
        await pilot.press("escape")
        await shown(app, pilot, source.clusters[0])
        await settle(app, pilot)
        assert len(source.detail_calls) == 3


async def test_a_read_that_fails_says_why_and_leaves_no_gpu_free() -> None:
    full = make_cluster(20)
    source = DetailSource(full)
    source.failure = "HTTP 502 Bad Gateway"
    app = cluster_app(source=source)
    async with app.run_test(size=(140, 50)) as pilot:
        await shown(app, pilot, source.clusters[0])
        await pilot.press("enter")
        await settle(app, pilot)
        text = screen_text(app)
        assert "node1: its GPUs could not be read: HTTP 502 Bad Gateway" in text
        source.failure = None
        await shown(app, pilot, source.clusters[0])
        await settle(app, pilot)
        assert "FREE" in screen_text(app)
        assert app.shown.free_of(app.cluster, "node1") == {4}
        source.failure = "timed out after 5 s"
        await shown(app, pilot, source.clusters[0])
        await settle(app, pilot)
        text = screen_text(app)
        assert text.splitlines()[0].startswith(" node1  stale")
        assert "Not read again: timed out after 5 s." in text
        assert "GPU 7" in text and "FREE" not in text
        assert app.shown.free_of(app.cluster, "node1") == frozenset()


async def test_a_gpus_last_hour_opens_on_a_node_read_on_demand() -> None:
    source = DetailSource(make_cluster(5))
    app = cluster_app(source=source)
    async with app.run_test(size=(140, 60)) as pilot:
        await shown(app, pilot, source.clusters[0])
        await pilot.press("enter")
        await settle(app, pilot)
        await pilot.press("right", "enter")
        for _ in range(100):
            await pilot.pause(0.02)
            if isinstance(app.screen, NodeGpuScreen) and app.screen.history is not None:
                break
        text = screen_text(app)
        assert text.splitlines()[0].startswith(" node1 · GPU 1  UP")
        assert "(last hour, from Prometheus)" in text
        assert {call[:2] for call in source.history_calls} == {("node1", 1)}


async def test_a_watched_gpu_of_a_node_read_on_demand_alerts_when_free() -> None:
    full = make_cluster(5)
    node = full.nodes[0]
    busy_gpu = node.gpus[4]  # FREE in make_cluster; taken here by a process first
    taken = replace(node, sample=replace(node.sample, processes=(
        *node.sample.processes, replace(node.sample.processes[0], gpu_index=4, pid=99),
    )))  # fmt: skip
    source = DetailSource(replace(full, nodes=(taken, *full.nodes[1:])))
    app = cluster_app(source=source)
    async with app.run_test(size=(140, 50)) as pilot:
        await shown(app, pilot, source.clusters[0])
        await pilot.press("enter")
        await settle(app, pilot)
        app.toggle_watch("node1", busy_gpu)
        assert 4 in app.watches.notes("node1")
        await pilot.press("escape")  # off the node's screen: a watched node is still read
        source.full = full  # its GPU 4 is FREE now
        await shown(app, pilot, source.clusters[0])
        await settle(app, pilot)
        assert not len(app.watches)  # the watch fired
        assert source.detail_calls[-1][0] == "node1"
        # Opened again later: what was read for the watch is not shown as current.
        source.gate.clear()
        await pilot.press("enter")
        await pilot.pause()
        assert "reading node1…" in screen_text(app) and "GPU 7" not in screen_text(app)
        source.gate.set()
        await settle(app, pilot)
