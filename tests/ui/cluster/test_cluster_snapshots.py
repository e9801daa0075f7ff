"""SVG snapshots of the cluster dashboard (pytest-textual-snapshot).

Deterministic: the hand-built cluster of tests/ui/cluster/test_cluster_ui.py (100 nodes of 8 GPUs,
node7 DOWN, node13 stale, node91-100 on dcgm-exporter), a fixed clock (FIXED_TIME, 22:13:20
UTC; conftest sets TZ=UTC), a last hour from a fake source.
Regenerate after an intended change with:
pytest tests/ui/cluster/test_cluster_snapshots.py --snapshot-update
Each docstring below appears in the snapshot report next to the diff.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from textual.pilot import Pilot

from gpumon.ui.cluster.app import ClusterApp
from gpumon.ui.cluster.node_history import NodeGpuScreen
from tests.ui.cluster.test_cluster_ui import FakeSource, cluster_app, make_cluster, unreachable


def after(*keys: str, failing: bool = False) -> Callable[[Pilot[Any]], Awaitable[None]]:
    """Hand the app the 100-node cluster (then, with ``failing``, Prometheus' failure), then
    press ``keys`` and wait for a GPU's last hour to be read."""

    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, ClusterApp) and isinstance(app.source, FakeSource)
        cluster = make_cluster()
        app.receive_cluster(app.source.answer(cluster))
        if failing:
            app.receive_cluster(app.source.answer(unreachable(cluster, "HTTP 503")))
        await pilot.pause()
        if keys:
            await pilot.press(*keys)
        for _ in range(100):
            screen = app.screen
            if not isinstance(screen, NodeGpuScreen) or screen.history is not None:
                break
            await pilot.pause(0.02)
        await pilot.pause()

    return run_before


def test_node_list_100_nodes_120x40(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """The node list of 100 nodes: the header (server, 100 nodes with 1 DOWN and 1 stale, GPUs
    free in the cluster), the fleet's totals and top lists (hottest, most idle-held: none
    known, users holding most), one row per node sorted by name (node2 before node10), node7
    DOWN and node13 stale in colour with FREE "-", the first rows only."""
    assert snap_compare(cluster_app(), terminal_size=(120, 40), run_before=after())


def test_node_list_sorted_by_free_at_the_end_120x40(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """Sorted by FREE (s twice), scrolled to the end: the nodes that cannot tell (DOWN,
    stale, dcgm-exporter's N/A) after every node that can."""
    run_before = after("s", "s", "end")
    assert snap_compare(cluster_app(), terminal_size=(120, 40), run_before=run_before)


def test_prometheus_unreachable_120x30(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """Prometheus answers HTTP 503: a banner (why, data from 22:13, retrying in 2 s), every
    node kept with its last readings, dimmed and stale, no GPU free (the fleet's totals: 0
    GPUs up; nothing current to rank)."""
    run_before = after(failing=True)
    assert snap_compare(cluster_app(), terminal_size=(120, 30), run_before=run_before)


def test_node_drilled_into_120x40(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """Enter on node3 (gpumon's exporter): its eight GPU cards (two FREE) and its processes."""
    run_before = after("down", "down", "enter")
    assert snap_compare(cluster_app(), terminal_size=(120, 40), run_before=run_before)


def test_dcgm_node_120x40(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """Enter on node100 (dcgm-exporter): GPU cards with the fields it lacks as N/A, and a line
    saying that process data is not available from dcgm-exporter."""
    run_before = after("end", "enter")
    assert snap_compare(cluster_app(), terminal_size=(120, 40), run_before=run_before)


def test_gpu_last_hour_120x40(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """Enter on node3, right, Enter: GPU 1's last hour from Prometheus (utilisation,
    memory, temperature with its slowdown line; power not served: said so), then its fields."""
    run_before = after("down", "down", "enter", "right", "enter")
    assert snap_compare(cluster_app(), terminal_size=(120, 40), run_before=run_before)
