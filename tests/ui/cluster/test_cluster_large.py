"""A fleet of 5,000 nodes (rows only, as the aggregate queries answer): every key of the
cluster dashboard answers, and only a key that changes the filter or the sort filters the
rows again; moving, pausing, help and opening a node do not. Only a new sort or a new
answer sorts them: a filter keeps their order.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpumon.data.cluster import ClusterSample, ExporterKind, Node, NodeState, NodeSummary
from gpumon.ui.cluster import node_list as node_list_module
from gpumon.ui.cluster.node_list import NodeList
from gpumon.ui.cluster.node_screen import NodeScreen
from tests.support.ui_helpers import FIXED_TIME, GIB, screen_text
from tests.ui.cluster.test_cluster_ui import URL, USERS, cluster_app, make_node

NODES = 5000


def fleet_rows(count: int = NODES) -> tuple[NodeSummary, ...]:
    """``count`` rows of 8 GPUs; every 97th node DOWN, every 89th with a FREE GPU less."""
    rows = []
    for number in range(1, count + 1):
        down = number % 97 == 0
        rows.append(
            NodeSummary(
                name=f"node{number}",
                state=NodeState.DOWN if down else NodeState.UP,
                gpu_count=8,
                free_gpus=None if down else number % 3,
                mean_utilization_pct=float(number * 7 % 100),
                memory_used_bytes=(number % 600) * GIB,
                memory_total_bytes=640 * GIB,
                hottest_c=30 + number % 50,
                top_user=USERS[number % len(USERS)],
                last_seen_s=FIXED_TIME - 5,
                down_since_s=FIXED_TIME - 600 if down else None,
                exporter=ExporterKind.GPUMON,
                instance=f"10.1.{number // 256}.{number % 256}:9835",
                users=frozenset({USERS[number % len(USERS)], USERS[number * 3 % len(USERS)]}),
            )
        )
    return tuple(rows)


class FleetSource:
    """The 5,000 rows, and any node's detail (a made node of 8 GPUs)."""

    next_retry_s = None
    users_wanted = False

    def __init__(self, cluster: ClusterSample) -> None:
        self.cluster = cluster
        self.details: list[str] = []

    def sample(self) -> ClusterSample:
        return self.cluster

    def detail(self, node: str) -> Node:
        self.details.append(node)
        return make_node(int(node.removeprefix("node")))

    def history(self, *args: object, **kwargs: object) -> list[tuple[float, float | None]]:
        return []

    def close(self) -> None:
        pass


def counting(node_list: NodeList) -> Callable[[], int]:
    """Count each time the list filters and sorts every row."""
    calls = [0]
    original = node_list._sorted_rows

    def sorted_rows() -> list[NodeSummary]:
        calls[0] += 1
        return original()

    node_list._sorted_rows = sorted_rows  # type: ignore[method-assign]
    return lambda: calls[0]


async def test_every_key_answers_over_5000_nodes_and_only_filters_and_sorts_rebuild(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sorts = [0]
    sort_rows = node_list_module.sort_rows

    def counted_sort(*args: object) -> list[NodeSummary]:
        sorts[0] += 1
        return sort_rows(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(node_list_module, "sort_rows", counted_sort)
    cluster = ClusterSample(FIXED_TIME, URL, (), scrape_interval_s=15.0, rows=fleet_rows())
    source = FleetSource(cluster)
    app = cluster_app(source=source)  # type: ignore[arg-type]
    async with app.run_test(size=(120, 40)) as pilot:
        app.receive_cluster(cluster)
        await pilot.pause()
        node_list = app.screen.query_one(NodeList)
        rebuilds = counting(node_list)
        assert f"{NODES} nodes (51 DOWN)" in screen_text(app).splitlines()[0]

        async def press(*keys: str, rebuilt: int, sorted_again: bool = False) -> str:
            before, sorted_before = rebuilds(), sorts[0]
            await pilot.press(*keys)
            await pilot.pause()
            assert rebuilds() - before == rebuilt, keys
            assert sorts[0] - sorted_before == sorted_again, keys
            return screen_text(app)

        assert node_list.cursor_key == "node1"
        await press("down", "j", "k", rebuilt=0)
        assert node_list.cursor_key == "node2"
        await press("pagedown", rebuilt=0)
        assert node_list.cursor_row > 20
        assert f"node{NODES}" in await press("end", rebuilt=0)
        await press("G", "home", "g", "pageup", "up", rebuilt=0)
        assert node_list.cursor_key == "node1"
        assert "PAUSED" in await press("space", rebuilt=0)
        assert "PAUSED" not in await press("space", rebuilt=0)
        assert "GPUS▼" in await press("s", rebuilt=1, sorted_again=True)
        assert "GPUS▲" in await press("r", rebuilt=1, sorted_again=True)
        assert "filter: free GPUs" in await press("f", rebuilt=1)
        assert len(node_list.rows) == sum(1 for n in range(1, NODES + 1) if n % 97 and n % 3)
        await press("f", rebuilt=1)
        # The text filter: one rebuild per key typed, the user's name found in the rows.
        await press("slash", rebuilt=0)
        await press(*"erin", rebuilt=4)
        assert len(node_list.rows) == sum(
            1 for n in range(1, NODES + 1) if "erin" in {USERS[n % 5], USERS[n * 3 % 5]}
        )
        await press("enter", rebuilt=0)
        await press("escape", rebuilt=1)
        assert node_list.total == len(node_list.rows) == NODES
        await press("question_mark", rebuilt=0)
        assert "gpumon cluster: every node Prometheus scrapes." in screen_text(app)
        await press("escape", rebuilt=0)
        # A node: its detail read for it alone, then back with the list as it was.
        await press("enter", rebuilt=0)
        for _ in range(100):
            await pilot.pause(0.02)
            if "GPU 7" in screen_text(app):
                break
        assert isinstance(app.screen, NodeScreen) and "GPU 7" in screen_text(app)
        assert source.details == ["node1"]
        await press("s", "r", rebuilt=0)  # the node's process table, not the list
        await press("escape", rebuilt=0)
        assert node_list.cursor_key == "node1"
        # A new answer: the list is sorted once.
        before, sorted_before = rebuilds(), sorts[0]
        app.receive_cluster(ClusterSample(FIXED_TIME + 5, URL, (), rows=fleet_rows()))
        await pilot.pause()
        assert rebuilds() - before == 1 and sorts[0] - sorted_before == 1
