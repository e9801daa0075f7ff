"""Stale is not current, in the cluster dashboard too: when Prometheus fails, or a refresh
takes more than three intervals, the last answer stays on screen under a banner, its nodes
no longer UP, no GPU FREE, no watch fired.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpumon.config import Settings
from gpumon.data.cluster import ClusterSample
from gpumon.ui.cluster.app import ClusterApp, create_cluster_app
from gpumon.ui.cluster.node_list import NodeList
from gpumon.ui.cluster.node_screen import NodeScreen
from tests.support.ui_helpers import FIXED_TIME, screen_text
from tests.ui.cluster.test_cluster_ui import URL, FakeSource, make_cluster, row_of, shown

#: node1's FREE GPU in make_cluster (GPU i of node n is FREE when n + i is a multiple of 5).
NODE1_FREE = {4}


def stale_app(source: FakeSource, now: list[float]) -> ClusterApp:
    return create_cluster_app(
        Settings(prometheus_url=URL),
        source,
        ascii_only=False,
        autostart=False,
        clock=lambda: now[0],
        wall_clock=lambda: FIXED_TIME,
    )


def lines(app: ClusterApp) -> tuple[str, str]:
    """The header and the line under it (the banner, when there is one)."""
    header, second = screen_text(app).splitlines()[:2]
    return header, second.strip()


class Raising(FakeSource):
    """Answers once, then raises: a bug in the source, which should never raise."""

    def sample(self) -> ClusterSample:
        if self.calls:
            raise RuntimeError("boom")
        return super().sample()


def no_nodes_error(_: ClusterSample) -> ClusterSample:
    """A failed answer that carries no nodes: the app keeps the last ones."""
    return ClusterSample(FIXED_TIME + 30, URL, (), error="timed out after 5 s", stale=True)


async def test_a_refresh_longer_than_three_intervals_leaves_nothing_up_or_free() -> None:
    now = [1000.0]
    source = FakeSource(make_cluster(20))
    app = stale_app(source, now)
    async with app.run_test(size=(140, 30)) as pilot:
        await shown(app, pilot, make_cluster(20))
        assert "GPUs free in the cluster" in lines(app)[0] and "0 GPUs" not in lines(app)[0]
        source.release.clear()  # the next refresh hangs
        app.run_worker(app.poller.poll_once())
        await pilot.pause()
        assert app.poller.in_flight
        interval = app.poller.interval_s
        # Within three intervals the last answer is current.
        now[0] += 3 * interval
        app._tick()
        await pilot.pause()
        assert app.shown.free_of(app.cluster, "node1") == NODE1_FREE
        assert "not answering" not in screen_text(app)
        # Past them it is not: a banner, no node UP, no GPU FREE.
        now[0] += 2
        app._tick()
        await pilot.pause()
        header, banner = lines(app)
        seconds = int(3 * interval + 2)
        assert banner == (
            f"Prometheus not answering for {seconds} s; showing data from 22:13, still waiting"
        )
        assert "0 GPUs free in the cluster" in header
        assert "stale, last seen" in row_of(screen_text(app), "node1")
        assert app.screen.query_one(NodeList).stale
        assert app.shown.free_of(app.cluster, "node1") == frozenset()
        # The banner counts on; the node's own screen says it is stale too.
        now[0] += 1
        app._tick()
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, NodeScreen)
        text = screen_text(app)
        assert text.splitlines()[0].startswith(" node1  stale, last seen 22:13")
        assert f"Prometheus not answering for {seconds + 1} s" in text
        assert "FREE" not in text
        await pilot.press("escape")
        # The answer comes: current again.
        source.release.set()
        for _ in range(100):
            await pilot.pause(0.02)
            if not app.poller.in_flight:
                break
        await pilot.pause()
        assert "not answering" not in screen_text(app)
        assert app.shown.free_of(app.cluster, "node1") == NODE1_FREE


async def test_a_gpu_free_in_a_late_answer_is_watched_not_taken_for_free() -> None:
    """``w`` asks "tell me when it is FREE": a late answer cannot say it is FREE now; the
    next answer can."""
    now = [1000.0]
    source = FakeSource(make_cluster(20))
    app = stale_app(source, now)
    async with app.run_test(size=(140, 30)) as pilot:
        await shown(app, pilot, make_cluster(20))
        source.release.clear()
        app.run_worker(app.poller.poll_once())
        await pilot.pause()
        now[0] += 4 * app.poller.interval_s
        app._tick()
        await pilot.pause()
        assert app.cluster is not None
        (gpu,) = [gpu for gpu in app.cluster.nodes[0].gpus if gpu.index in NODE1_FREE]
        app.toggle_watch("node1", gpu)
        assert gpu.index in app.watches.notes("node1")  # watched: not refused as "FREE now"
        source.release.set()
        for _ in range(100):
            await pilot.pause(0.02)
            if not len(app.watches):
                break
        assert not len(app.watches)  # the answer came, with the GPU FREE: the watch fired


@pytest.mark.parametrize(
    ("make_source", "reason"),
    [
        (lambda good: Raising(good), "boom"),
        (lambda good: FakeSource(good, no_nodes_error(good)), "timed out after 5 s"),
    ],
    ids=["source-raises", "error-without-nodes"],
)
async def test_a_failed_refresh_keeps_the_last_nodes_none_up_none_free(
    make_source: Callable[[ClusterSample], FakeSource], reason: str
) -> None:
    good = make_cluster(20)
    now = [1000.0]
    app = stale_app(make_source(good), now)
    async with app.run_test(size=(140, 30)) as pilot:
        await app.poller.poll_once()
        await pilot.pause()
        assert app.shown.free_of(app.cluster, "node1") == NODE1_FREE
        await app.poller.poll_once()
        await pilot.pause()
        header, banner = lines(app)
        assert banner.startswith(f"Prometheus unreachable: {reason}; showing data from 22:13")
        assert "0 GPUs free in the cluster" in header
        assert "stale, last seen" in row_of(screen_text(app), "node1")
        assert app.cluster is not None and not any(node.usable for node in app.cluster.nodes)
        assert app.shown.free_of(app.cluster, "node1") == frozenset()
