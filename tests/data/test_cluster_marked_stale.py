"""An answer no longer current offers nothing, whether it carries nodes or rows only: its
rows turn STALE and its fleet summary counts no GPU up and none FREE."""

from __future__ import annotations

from gpumon.data.cluster import (
    ClusterSample,
    ExporterKind,
    NodeState,
    NodeSummary,
    Ranked,
    fleet_of,
    marked_stale,
)


def row(name: str, state: NodeState, free: int | None) -> NodeSummary:
    return NodeSummary(
        name, state, 8, free, 50.0, None, None, 70, "alice", None, None, ExporterKind.GPUMON
    )


def test_rows_turn_stale_and_the_fleet_counts_nothing_free() -> None:
    rows = (row("a", NodeState.UP, 3), row("b", NodeState.DOWN, None), row("c", NodeState.UP, 1))
    users = (Ranked("alice", 1e9),)
    cluster = ClusterSample(0.0, "http://p", (), rows=rows, fleet=fleet_of(rows, users))
    assert cluster.fleet is not None and cluster.fleet.free_gpus == 4
    stale = marked_stale(cluster)
    assert stale.stale and stale.rows is not None
    assert [r.state for r in stale.rows] == [NodeState.STALE, NodeState.DOWN, NodeState.STALE]
    assert stale.fleet is not None
    assert (stale.fleet.gpus, stale.fleet.free_gpus, stale.fleet.stale) == (0, 0, 2)
    assert stale.fleet.hottest == () and stale.fleet.top_users == users
