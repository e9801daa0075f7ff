"""Stale is not current, in the cluster dashboard too: when Prometheus fails, the last
answer stays on screen under a banner, its nodes no longer UP, no GPU FREE.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpumon.data.cluster import ClusterSample
from gpumon.settings import Settings
from gpumon.ui.cluster.app import ClusterApp, create_cluster_app, free_gpus
from tests.test_cluster_ui import URL, FakeSource, make_cluster, row_of
from tests.ui_helpers import FIXED_TIME, screen_text

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
        assert free_gpus(app.cluster, "node1", 1024) == NODE1_FREE
        await app.poller.poll_once()
        await pilot.pause()
        header, banner = lines(app)
        assert banner.startswith(f"Prometheus unreachable: {reason}; showing data from 22:13")
        assert "0 GPUs free in the cluster" in header
        assert "stale, last seen" in row_of(screen_text(app), "node1")
        assert app.cluster is not None and not any(node.usable for node in app.cluster.nodes)
        assert free_gpus(app.cluster, "node1", 1024) == frozenset()
