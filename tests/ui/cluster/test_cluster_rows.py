"""The node list and its header read rows (one per node, as the aggregate queries answer),
never a node's GPUs: an answer with rows only shows what one with every GPU shows.

The rows are the 100-node cluster of test_cluster_ui.py, summarised; ``nodes=()`` as the
aggregate path sends them.
"""

from __future__ import annotations

from dataclasses import replace

from gpumon.data.cluster import ClusterSample, fleet_of, summarize
from gpumon.ui.cluster.answer import top_users
from tests.support.ui_helpers import screen_text
from tests.ui.cluster.test_cluster_ui import (
    CLUSTER_FREE,
    cluster_app,
    listed,
    make_cluster,
    nodes_of,
    row_of,
    shown,
    unreachable,
)


def rows_only(cluster: ClusterSample, *, fleet: bool = True) -> ClusterSample:
    """``cluster`` as the aggregate path answers it: one row per node, no node's GPUs, and
    (with ``fleet``) the fleet summary with its top users."""
    rows = tuple(summarize(node, 1024) for node in cluster.nodes)
    summary = fleet_of(rows, top_users(cluster.nodes)) if fleet else None
    return replace(cluster, nodes=(), rows=rows, fleet=summary)


async def test_rows_alone_show_the_same_list_and_header_as_every_gpu() -> None:
    full = make_cluster()
    screens = []
    for cluster in (full, rows_only(full)):
        app = cluster_app(cluster)
        async with app.run_test(size=(140, 40)) as pilot:
            screens.append(await shown(app, pilot, cluster))
    assert screens[0] == screens[1]
    header = screens[1].splitlines()[0]
    assert "100 nodes (1 DOWN, 1 stale)" in header
    assert f"{CLUSTER_FREE} GPUs free in the cluster (+10 nodes unknown)" in header
    assert row_of(screens[1], "node1").split()[:2] == ["node1", "8"]


async def test_the_text_filter_finds_a_user_in_the_rows() -> None:
    cluster = rows_only(make_cluster())
    app = cluster_app(cluster)
    async with app.run_test(size=(140, 40)) as pilot:
        await shown(app, pilot, cluster)
        await pilot.press("slash", *"carol", "enter")
        await pilot.pause()
        expected = nodes_of("carol")
        assert listed(app) == expected
        assert f"Nodes {len(expected)} of 100" in screen_text(app)


async def test_a_failed_answer_leaves_the_last_rows_stale_and_nothing_free() -> None:
    good = rows_only(make_cluster())
    app = cluster_app(good)
    async with app.run_test(size=(140, 40)) as pilot:
        await shown(app, pilot, good)
        failed = replace(unreachable(make_cluster()), nodes=(), rows=None)
        text = await shown(app, pilot, failed)
        assert "0 GPUs free in the cluster" in text.splitlines()[0]
        assert "stale, last seen" in row_of(text, "node1")
        assert row_of(text, "node1").split()[2] == "-"
        assert app.cluster is not None and app.cluster.rows is not None
        assert not any(row.current for row in app.cluster.rows)
