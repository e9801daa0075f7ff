"""The fleet summary first: the cluster header's totals (GPUs, FREE, busy, idle-held, per
partition, how the rows were read) and the top-k lists, which fold away on a short terminal;
a slow refresh stretches the interval, and the header says so.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpumon.data.cluster import ClusterSample, Ranked, fleet_of
from gpumon.ui.cluster.node_list import NodeList
from tests.support.ui_helpers import GIB, screen_text
from tests.ui.cluster.test_cluster_rows import rows_only
from tests.ui.cluster.test_cluster_ui import (
    CLUSTER_FREE,
    FakeSource,
    cluster_app,
    make_cluster,
    shown,
    unreachable,
)


def partitioned() -> ClusterSample:
    """The 100 nodes' rows, node1-50 in partition a100, the rest in h100; node3 holds 12G
    idle, node4 3G; read through recording rules."""
    cluster = rows_only(make_cluster())
    assert cluster.rows is not None
    rows = []
    for number, row in enumerate(cluster.rows, start=1):
        partition = "a100" if number <= 50 else "h100"
        idle = {3: 12 * GIB, 4: 3 * GIB}.get(number, 0) if row.exporter.value == "gpumon" else None
        rows.append(replace(row, labels=(("partition", partition),), idle_held_bytes=idle))
    top = [Ranked("erin", 5280.0 * GIB), Ranked("dave", 5170.0 * GIB)]
    return replace(cluster, rows=tuple(rows), fleet=fleet_of(rows, top), path="recording rules")


async def test_the_header_says_the_fleets_totals_and_its_top_lists() -> None:
    cluster = partitioned()
    app = cluster_app(cluster)
    async with app.run_test(size=(160, 40)) as pilot:
        text = await shown(app, pilot, cluster)
        lines = text.splitlines()
        busy = 784 - CLUSTER_FREE - 80  # the UP nodes' GPUs, less FREE, less dcgm's unknown
        assert lines[1].split("  ")[:3] == [
            f" 784 GPUs up: {CLUSTER_FREE} FREE, {busy} busy",
            "idle-held 15.0G",
            "(recording rules)",
        ]
        assert "partition=a100: 384 GPUs" in lines[1]  # node7 DOWN and node13 stale: not up
        assert "partition=h100: 400 GPUs" in lines[1]
        assert lines[2].split() == ["Hottest", "Most", "idle-held", "Users", "holding", "most"]
        assert lines[3].split()[2:] == ["node3", "12.0G", "erin", "5280G"]
        assert lines[4].split()[2:] == ["node4", "3.0G", "dave", "5170G"]
        assert lines[3].split()[1] == "79°C"
        assert " Nodes 100" in text


async def test_at_80x24_the_top_lists_fold_away_and_the_rows_stay() -> None:
    cluster = partitioned()
    app = cluster_app(cluster)
    async with app.run_test(size=(80, 24)) as pilot:
        text = await shown(app, pilot, cluster)
        assert "Hottest" not in text
        assert f"{CLUSTER_FREE} GPUs free" in text.splitlines()[0]
        totals = text.splitlines()[1]
        assert f"784 GPUs up: {CLUSTER_FREE} FREE" in totals and "(recording rules)" in totals
        assert "partition" not in totals  # a label that does not fit whole is left out
        assert len([line for line in text.splitlines() if line.startswith("node")]) >= 15


async def test_a_stale_answer_counts_no_free_gpu_in_the_fleet() -> None:
    cluster = partitioned()
    app = cluster_app(cluster)
    async with app.run_test(size=(160, 40)) as pilot:
        await shown(app, pilot, cluster)
        failed = replace(unreachable(make_cluster()), nodes=(), rows=None)
        lines = (await shown(app, pilot, failed)).splitlines()
        assert "0 GPUs free in the cluster" in lines[0]
        assert lines[2].startswith(" 0 GPUs up: 0 FREE, 0 busy  idle-held N/A")
        assert lines[4].split()[:3] == ["-", "-", "erin"]  # nothing current to rank


async def test_a_slow_refresh_stretches_the_interval_and_the_header_says_so() -> None:
    now = [1000.0]
    took = [1.4]

    class Slow(FakeSource):
        def sample(self) -> ClusterSample:
            now[0] += took[0]
            return super().sample()

    source = Slow(rows_only(make_cluster()))
    app = cluster_app(source=source)
    app.clock = lambda: now[0]
    app._timed._clock = app.clock
    async with app.run_test(size=(160, 40)) as pilot:
        await app.poller.poll_once()
        await pilot.pause()
        assert app.poller.interval_s == pytest.approx(7.0)  # 1.4 s is more than a fifth of 5 s
        assert "every 7 s (refresh 1.4 s)" in screen_text(app).splitlines()[0]
        took[0] = 0.5
        await app.poller.poll_once()
        await pilot.pause()
        assert app.poller.interval_s == 5.0
        header = screen_text(app).splitlines()[0]
        assert "refresh" not in header
        assert app.screen.query_one(NodeList).total == 100
