"""The aggregate path against a real Prometheus: three `gpumon export --demo` exporters (a
new sample every 2 s: current), scraped every second with the contrib recording rules loaded;
the rows of ``sample()`` equal the per-series path's, from raw expressions first, then from the
recorded series once their marker is seen. Skips where the `prometheus` binary is missing."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpumon.data.cluster import NodeSummary, summarize
from gpumon.sources.prometheus.source import PrometheusSource
from tests.sources.prometheus.test_prometheus_integration import (
    PROMETHEUS,
    ROOT,
    Started,
    instant,
    start_exporter,
    start_prometheus,
    targets_up,
    wait_for,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(PROMETHEUS is None, reason="needs the Prometheus server binary"),
]
RULES = ROOT / "contrib" / "prometheus" / "gpumon-recording.yml"
#: What only the aggregate path tells, and the latest scrape's time (a second apart).
#: How long both paths may take to read the same scrape.
AGREE_S = 60.0
NOT_COMPARED = {"idle_held_bytes": None, "idle_holders": (), "labels": (), "last_seen_s": None}


def compared(rows: tuple[NodeSummary, ...]) -> list[NodeSummary]:
    return [dataclasses.replace(row, **NOT_COMPARED) for row in rows]


def test_both_paths_give_the_same_rows_from_a_real_prometheus(
    started: Started, tmp_path: Path
) -> None:
    ports = [start_exporter(started, tmp_path / f"e{n}.log", "2")[1] for n in range(3)]
    instances = [f"127.0.0.1:{port}" for port in ports]
    url = start_prometheus(started, tmp_path, instances, rules=(RULES,))
    wait_for("the targets up", lambda: targets_up(url, 3))
    wait_for("the node rules", lambda: instant(url, "instance:gpumon_gpus:count"))
    learning = PrometheusSource(url)  # reads the recorded series from its first refresh
    learning.users_wanted = True  # every user on a node at each refresh, as while filtering
    differing: list[tuple[NodeSummary, NodeSummary]] = []  # the latest try's, for a failure

    def rows_of_both(source: PrometheusSource) -> str | None:
        """The aggregate path's name when its rows equal the per-series path's, else None."""
        aggregated = source.sample()
        nodes = PrometheusSource(url).sample(detail=True).nodes
        rows = compared(aggregated.rows or ())
        per_series = compared(tuple(summarize(node, 1024) for node in nodes))
        if len(rows) != 3 or rows != per_series:
            differing[:] = [(a, b) for a, b in zip(rows, per_series, strict=False) if a != b]
            return None
        assert all(row.current and row.gpu_count == 4 and row.simulated for row in rows)
        assert all(row.free_gpus is not None for row in rows)
        return aggregated.path

    def raw() -> PrometheusSource:
        source = PrometheusSource(url)
        source._rules = False  # its first request evaluates the expressions, as where unrecorded
        source.users_wanted = True
        return source

    # Both reads must fall between two scrapes (a second apart): on a loaded machine that
    # takes a few tries.
    try:
        path = wait_for("the raw rows to agree", lambda: rows_of_both(raw()), AGREE_S)
        assert path == "raw queries"
        wait_for(
            "the rows from the rules to agree",
            lambda: rows_of_both(learning) == "recording rules",
            AGREE_S,
        )
    except pytest.fail.Exception as failed:
        pytest.fail(f"{failed}; the latest try's rows (aggregate, per-series): {differing}")
