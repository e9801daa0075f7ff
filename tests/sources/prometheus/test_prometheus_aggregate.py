"""The node list from aggregate queries gives the rows the per-series path gives.

Both paths' queries were answered by a real Prometheus at one instant (the recorded answers in
tests/support/fixtures/prometheus; record.py there regenerates them): for every case the rows
of ``sample()`` (the aggregate queries) equal ``summarize()`` of the nodes of
``sample(detail=True)`` in every field the per-series path tells, from raw expressions and from
the recording rules alike.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
import time
from typing import Any

import pytest

from gpumon.data.cluster import ExporterKind, NodeState, NodeSummary, summarize
from gpumon.data.format import safe_text
from gpumon.sources.prometheus.aggregate import RULES_EVALUATED, rows_queries
from gpumon.sources.prometheus.client import PrometheusError
from gpumon.sources.prometheus.queries import node_queries
from gpumon.sources.prometheus.source import PrometheusSource
from tests.support.prometheus_replay import Replay, load, refreshes, series, with_marker

GIB = 1024**3
#: What only the aggregate path tells (the per-series rows leave them unknown).
AGGREGATE_ONLY = {"idle_held_bytes": None, "idle_holders": (), "labels": ()}


def both_paths(
    replay: Replay, scenario: str, *, rules: bool = False
) -> tuple[tuple[NodeSummary, ...], tuple[NodeSummary, ...], PrometheusSource]:
    """(aggregate rows, the per-series path's rows) of one recorded scenario."""
    # The rules' marker is fleet-wide: the recording, by job, dropped it.
    replay.serve(with_marker(load(scenario), "1024" if rules else None))
    source = PrometheusSource(replay.url)
    source.users_wanted = True  # every user on each node, as the per-series path reads
    aggregated = source.sample()
    assert aggregated.error is None and aggregated.nodes == () and aggregated.rows is not None
    assert aggregated.path == ("recording rules" if rules else "raw queries")
    detailed = PrometheusSource(replay.url).sample(detail=True)
    assert detailed.error is None
    per_series = tuple(summarize(node, 1024) for node in detailed.nodes)
    return aggregated.rows, per_series, source


def told(rows: tuple[NodeSummary, ...]) -> list[NodeSummary]:
    return [dataclasses.replace(row, **AGGREGATE_ONLY) for row in rows]


#: Exporters serving fixed texts: the rules' values (evaluated every second) are the same.
FIXED = ["dcgm", "shared_host", "stalled", "old", "partial", "nan", "idle", "mig", "hostile"]


@pytest.mark.parametrize("scenario", ["demo", "down", "stale", *FIXED])
def test_the_aggregate_rows_equal_the_per_series_rows(replay: Replay, scenario: str) -> None:
    aggregated, per_series, _ = both_paths(replay, scenario)
    assert per_series, "the scenario has nodes"
    assert told(aggregated) == list(per_series)


@pytest.mark.parametrize("scenario", FIXED)
def test_the_rows_from_recording_rules_equal_the_per_series_rows(
    replay: Replay, scenario: str
) -> None:
    aggregated, per_series, _ = both_paths(replay, scenario, rules=True)
    assert told(aggregated) == list(per_series)


def test_gpumon_exporter_node_counts_free_gpus_by_the_viewers_rules(replay: Replay) -> None:
    """The static host: GPU 1 idle (free), GPU 0 busy, GPU 2 MIG with processes, GPU 3 lost."""
    rows, _, _ = both_paths(replay, "shared_host")
    (row,) = [r for r in rows if r.exporter is ExporterKind.GPUMON]
    assert (row.state, row.gpu_count, row.free_gpus) == (NodeState.UP, 4, 1)
    assert row.top_user == "alice" and row.users == frozenset({"alice", "bob"})
    assert row.hottest_c == 71 and row.memory_used_bytes == 90 * GIB + 4 * 1024**2


def test_dcgm_exporter_node_cannot_tell_free_gpus(replay: Replay) -> None:
    rows, _, _ = both_paths(replay, "dcgm")
    (row,) = rows
    assert row.exporter is ExporterKind.DCGM and row.name == "dgx-07"
    assert row.free_gpus is None and row.top_user is None and row.idle_held_bytes is None
    assert (row.gpu_count, row.mean_utilization_pct, row.max_utilization_pct) == (2, 43.5, 87)


def test_down_and_never_seen_targets_are_never_free(replay: Replay) -> None:
    rows, _, _ = both_paths(replay, "down")
    states = sorted(row.state.value for row in rows)
    assert states == ["down", "down", "up"]
    assert all(row.free_gpus is None for row in rows if not row.current)
    stopped = [row for row in rows if row.state is NodeState.DOWN and row.gpu_count]
    assert stopped and stopped[0].down_since_s is not None


def test_the_recording_rules_tell_a_down_node_since_its_first_failed_scrape(
    replay: Replay,
) -> None:
    """Recorded at every evaluation (1 s here), the last scrape up is known to the scrape, where
    the per-series path's subquery steps 15 s: the rest of the row is the same."""
    rows, per_series, _ = both_paths(replay, "down", rules=True)
    (row,) = [r for r in rows if r.state is NodeState.DOWN and r.gpu_count]
    (other,) = [r for r in per_series if r.instance == row.instance]
    assert row.down_since_s is not None and other.down_since_s is not None
    assert other.down_since_s <= row.down_since_s <= (row.last_seen_s or 0) + 1.0
    assert told([row]) == [dataclasses.replace(other, down_since_s=row.down_since_s,
                                               last_seen_s=row.last_seen_s)]  # fmt: skip


def test_a_target_younger_than_the_windows_is_scraped_as_the_fleet_is(replay: Replay) -> None:
    """Its interval not measurable yet, a new node takes its fleet's (every 60 s here), not
    the default 15 s by which it would be stale 50 s after its latest scrape."""
    answers = copy.deepcopy(load("demo"))
    result = answers["rows"]["data"]["result"]
    now = result[0]["value"][0]
    result[:] = [item for item in result if item["metric"].get("gpumon_fact") != "interval"]
    for item in result:
        if item["metric"].get("gpumon_fact") == "scraped":
            item["value"][1] = str(now - 50)
    elder = copy.deepcopy([item for item in result if "instance" in item["metric"]])
    for item in elder:
        item["metric"]["instance"] = "10.0.0.9:9400"
    scraped = next(item for item in elder if item["metric"].get("gpumon_fact") == "scraped")
    told_fact = copy.deepcopy(scraped)
    told_fact["metric"]["gpumon_fact"], told_fact["value"][1] = "interval", "60"
    result += [*elder, told_fact]
    replay.serve(answers)
    cluster = PrometheusSource(replay.url).sample()
    assert cluster.scrape_interval_s == 60.0
    assert [row.state for row in cluster.rows or ()] == [NodeState.UP, NodeState.UP]


@pytest.mark.parametrize(
    ("scenario", "said"),
    [
        ("stalled", "the exporter's sampler is stalled"),
        ("old", "the exporter serves an old sample: its last sample is 10m"),
    ],
)
def test_an_exporter_that_serves_no_current_sample_is_stale(
    replay: Replay, scenario: str, said: str
) -> None:
    rows, _, _ = both_paths(replay, scenario)
    (row,) = rows
    assert row.state is NodeState.STALE and row.free_gpus is None
    assert row.problem is not None and row.problem.startswith(said)


@pytest.mark.parametrize("rules", [False, True])
def test_an_exporter_that_tells_no_sample_age_is_judged_by_its_timestamp(
    replay: Replay, rules: bool
) -> None:
    """Exporters older than the sample's age serve only the sample's timestamp (the scenario's
    age says ten minutes): twenty minutes old, the node is STALE as by an age."""
    answers = load("old")
    ages = [
        item
        for role in ("rows", "rules")
        for item in series(answers[role])
        if item["metric"].get("__name__") == "gpumon_sample_age_seconds"
    ]
    assert len(ages) == 2
    for item in ages:
        item["metric"]["__name__"] = "gpumon_sample_timestamp_seconds"
        item["value"][1] = repr(item["value"][0] - 1200.0)
    replay.serve(with_marker(answers, "1024" if rules else None))
    cluster = PrometheusSource(replay.url).sample()
    assert cluster.path == ("recording rules" if rules else "raw queries")
    (row,) = cluster.rows or ()
    assert row.state is NodeState.STALE and row.free_gpus is None
    assert row.problem == "the exporter serves an old sample: its last sample is 20m old"


def test_unknown_processes_are_never_free(replay: Replay) -> None:
    """GPU 1's process list is refused: only the known GPUs' count is told, never more."""
    rows, _, _ = both_paths(replay, "partial")
    (row,) = rows
    assert row.free_gpus == 0 and row.gpu_count == 3


def test_mig_gpus_are_free_only_where_their_instances_are_readable(replay: Replay) -> None:
    rows, per_series, _ = both_paths(replay, "mig")
    (row,) = rows
    assert row.free_gpus == 1 == per_series[0].free_gpus  # GPU 1; never GPU 2


def test_idle_held_memory_and_its_holders(replay: Replay) -> None:
    rows, _, _ = both_paths(replay, "idle")
    (row,) = rows
    assert row.idle_held_bytes == 59 * GIB and row.idle_holders == ("alice",)


def test_a_node_without_idle_series_tells_no_idle_held_memory(replay: Replay) -> None:
    rows, _, _ = both_paths(replay, "partial")
    assert rows[0].idle_held_bytes is None


def test_the_same_queries_each_refresh_whatever_the_gpus(replay: Replay) -> None:
    """The first asks every fact of the targets (of the rules first, where they are not
    recorded then of the expressions); the next ones, for a minute, their state and latest
    scrape only (the scrape intervals measured then), with the same rows."""
    replay.serve("demo")
    moment = [1_000.0]
    source = PrometheusSource(replay.url, clock=lambda: moment[0])
    first = source.sample()
    moment[0] += 30
    second = source.sample()
    moment[0] += 31
    source.sample()
    whole, lean = rows_queries(1024, rules=False), rows_queries(1024, rules=False, lean=True)
    rules = rows_queries(1024, rules=True)  # asked first, not recorded here
    asked, expected = refreshes(replay.queries, rules, whole, lean, whole)
    assert asked == expected
    assert second.rows == first.rows and second.scrape_interval_s == first.scrape_interval_s
    assert first.scrape_interval_s is not None


def test_every_user_on_a_node_is_read_only_while_the_filter_wants_them(replay: Replay) -> None:
    """Every user of every node is most of an answer's series, and only the node list's filter
    by user needs them: a refresh reads each node's top user, and a row keeps the users read
    last while the filter is off."""
    answers = with_marker(load("shared_host"), "1024")
    replay.serve(answers)
    source = PrometheusSource(replay.url)

    def gpumon_row() -> NodeSummary:
        (row,) = [r for r in source.sample().rows or () if r.exporter is ExporterKind.GPUMON]
        return row

    assert (gpumon_row().top_user, gpumon_row().users) == ("alice", frozenset())
    source.users_wanted = True
    before = gpumon_row()
    assert (before.top_user, before.users) == ("alice", frozenset({"alice", "bob"}))
    for item in answers["rules"]["data"]["result"]:  # now carol holds the most, alice left
        if item["metric"].get("user") == "alice":
            item["metric"]["user"] = "carol"
    source.users_wanted = False
    replay.requests.clear()
    off = gpumon_row()
    assert (off.top_user, off.users) == ("carol", before.users)
    source.users_wanted = True
    on = gpumon_row()
    assert (on.top_user, on.users) == ("carol", frozenset({"carol", "bob"}))
    asked, expected = refreshes(  # (users read or not: the rules' series read again)
        replay.queries,
        [RULES_EVALUATED, *rows_queries(1024, rules=True, lean=True)],
        [RULES_EVALUATED, *rows_queries(1024, rules=True, lean=True, users=True)],
    )
    assert asked == expected


@pytest.mark.parametrize("gone", [False, True], ids=["down", "gone-from-prometheus"])
def test_a_lean_refresh_keeps_what_named_a_node_serving_no_gpu(replay: Replay, gone: bool) -> None:
    """What named a node serving no GPU now, and its GPUs, within the hour: read by the whole
    request (once a minute) and kept by the lean ones, which do not ask it; also for a
    target gone from Prometheus (no ``up`` any more)."""
    answers = copy.deepcopy(load("down"))
    result = answers["rows"]["data"]["result"]
    if gone:  # its target's facts gone, what named it within the hour still there
        instance, facts = down_instance(result), ("up", "scraped", "last_up", "interval")
        result[:] = [
            item
            for item in result
            if item["metric"].get("instance") != instance
            or item["metric"].get("gpumon_fact") not in facts
        ]
    replay.serve(answers)
    source = PrometheusSource(replay.url)
    whole, lean = source.sample().rows or (), source.sample().rows or ()
    assert lean == whole
    (seen,) = [row for row in whole if row.exporter is ExporterKind.GPUMON and not row.current]
    expected = NodeState.STALE if gone else NodeState.DOWN
    assert (seen.name.startswith("demo-gpu-server"), seen.gpu_count, seen.state) == (
        True,
        4,
        expected,
    )
    lean_queries = replay.queries[-2:]
    assert not any("seen_" in q or "gpumon_host_info" in q for q in lean_queries)


def down_instance(result: list[dict[str, Any]]) -> str:
    """The instance of the demo exporter that stopped (told ``up`` 0, seen within the hour)."""
    (instance,) = {
        item["metric"]["instance"]
        for item in result
        if item["metric"].get("gpumon_fact") == "seen_gpus"
    }
    return str(instance)


def test_a_target_gone_up_or_down_since_is_asked_again_whole(replay: Replay) -> None:
    """A lean answer whose targets changed (new ones, one down) is not used: the same refresh
    asks every fact again, so that a node just down says since when."""
    replay.serve("demo")
    source = PrometheusSource(replay.url)
    source.users_wanted = True  # compared with the per-series rows: with every user
    source.sample()
    replay.serve("down")
    replay.requests.clear()
    cluster = source.sample()
    whole = rows_queries(1024, rules=False, users=True)
    lean = rows_queries(1024, rules=False, lean=True, users=True)
    asked, expected = refreshes(replay.queries, lean, whole)
    assert asked == expected
    _, per_series, _ = both_paths(replay, "down")
    assert told(cluster.rows or ()) == list(per_series)
    replay.requests.clear()
    again = source.sample()  # lean: the down nodes keep their last time up
    asked, expected = refreshes(replay.queries, lean)
    assert asked == expected and again.rows == cluster.rows


def test_a_lean_answer_from_the_rules_whose_targets_changed_is_asked_again_from_them(
    replay: Replay,
) -> None:
    replay.serve(with_marker(load("demo"), "1024"))
    source = PrometheusSource(replay.url)
    source.sample()
    replay.serve(with_marker(load("down"), "1024"))
    replay.requests.clear()
    cluster = source.sample()
    asked, expected = refreshes(
        replay.queries,
        [RULES_EVALUATED, *rows_queries(1024, rules=True, lean=True)],
        rows_queries(1024, rules=True),
    )
    assert asked == expected
    assert cluster.path == "recording rules"
    assert sorted(row.state.value for row in cluster.rows or ()) == ["down", "down", "up"]


def test_a_refresh_ends_with_the_last_of_its_queries(replay: Replay) -> None:
    """A refresh's queries are asked at once, each from a daemon thread (a hung server never
    keeps gpumon from quitting): where one fails at once, the refresh still ends only once
    the others have, so that no two refreshes' requests are ever in flight together."""
    slow = rows_queries(1024, rules=True)[1]
    threads: list[bool] = []
    answer = replay.respond

    def respond(handler: Any, form: dict[str, str]) -> None:
        if form["query"] == slow:
            threads.extend(t.daemon for t in threading.enumerate() if t.name == "gpumon-prometheus")
            time.sleep(0.5)
            answer(handler, form)
        else:  # a query it does not know: an error, as Prometheus says it
            answer(handler, {"query": "unknown"})

    replay.respond = respond  # type: ignore[method-assign]
    started = time.monotonic()
    failed = PrometheusSource(replay.url).sample()
    assert failed.error is not None and "query failed" in failed.error
    assert time.monotonic() - started >= 0.5
    assert threads and all(threads)  # this one's at least


def test_a_failed_refresh_keeps_the_rows_not_current(replay: Replay) -> None:
    replay.serve("demo")
    source = PrometheusSource(replay.url)
    first = source.sample()
    assert first.rows and first.rows[0].current and first.rows[0].free_gpus is not None
    replay.reply.status = 500
    failed = source.sample()
    assert failed.error and failed.stale and failed.rows is not None
    assert [row.state for row in failed.rows] == [NodeState.STALE]
    assert failed.rows[0].free_gpus is None and failed.fleet is not None
    assert failed.fleet.free_gpus == 0 and failed.fleet.stale == 1


def test_detail_reads_one_node_with_matchers(replay: Replay) -> None:
    """Opening a node asks today's three queries for its target only, and builds its GPUs."""
    replay.serve("demo")
    source = PrometheusSource(replay.url)
    source.users_wanted = True
    (row,) = source.sample().rows or ()
    queries = node_queries({"instance": row.instance, "job": row.job or ""})
    replay.aliases = dict(zip(queries, ("targets", "data", "identity"), strict=True))
    replay.requests.clear()
    node = source.detail(row.name)
    assert replay.queries == list(queries)
    assert all(f'instance="{row.instance}",job="{row.job}"' in query for query in queries)
    assert (node.name, node.instance, len(node.gpus)) == (row.name, row.instance, row.gpu_count)
    assert summarize(node, 1024) == dataclasses.replace(row, **AGGREGATE_ONLY)


def test_detail_of_a_node_not_in_the_answer_raises(replay: Replay) -> None:
    replay.serve("demo")
    source = PrometheusSource(replay.url)
    source.sample()
    replay.aliases = dict.fromkeys(node_queries({"instance": "nowhere:1"}), "identity")
    replay.serve("empty")
    with pytest.raises(PrometheusError, match="no node nowhere:1"):
        source.detail("nowhere:1")


def test_other_machines_text_in_the_rows_is_made_safe(replay: Replay) -> None:
    """Escapes, bidi overrides and C1 controls in a host label and a user name."""
    rows, _, _ = both_paths(replay, "hostile")
    (row,) = rows
    shown = [row.name, row.top_user or "", *row.users]
    assert "owned" in row.name and all(text.isprintable() for text in shown), shown


def test_the_fleet_names_the_users_holding_most_memory(replay: Replay) -> None:
    """From the request's fleet-wide ``topk``: most first, names made safe."""
    answers = copy.deepcopy(load("shared_host"))
    result = answers["rows"]["data"]["result"]
    moment = result[0]["value"][0]
    for user, held in (("bob", "2e10"), ("mal\u202eory", "5e10")):
        metric = {"gpumon_fact": "top_user", "user": user}
        result.append({"metric": metric, "value": [moment, held]})
    replay.serve(answers)
    fleet = PrometheusSource(replay.url).sample().fleet
    assert fleet is not None
    assert [(top.name, top.value) for top in fleet.top_users] == [
        (safe_text("mal\u202eory"), 5e10),
        ("bob", 2e10),
    ]
    assert fleet.nodes == 2 and fleet.gpus == 6 and fleet.free_gpus == 1


def test_the_targets_site_labels_group_the_fleet(replay: Replay) -> None:
    """A label the site gives its targets (file_sd's ``partition``) is the row's, and the
    fleet counts GPUs and FREE GPUs by it."""
    answers = copy.deepcopy(load("shared_host"))
    for item in answers["rows"]["data"]["result"]:
        if item["metric"].get("gpumon_fact") in ("up", "scraped"):
            item["metric"]["partition"] = "a100" if item["metric"]["job"] == "static" else "dgx"
    replay.serve(answers)
    cluster = PrometheusSource(replay.url).sample()
    assert {row.labels for row in cluster.rows or ()} == {
        (("partition", "a100"),),
        (("partition", "dgx"),),
    }
    assert cluster.fleet is not None
    assert [(c.value, c.gpus, c.free_gpus) for c in cluster.fleet.by_label] == [
        ("a100", 4, 1),
        ("dgx", 2, 0),
    ]
    detailed = PrometheusSource(replay.url).sample(detail=True)  # once on a small fleet
    assert detailed.fleet is not None and detailed.fleet.by_label == cluster.fleet.by_label


def test_a_detailed_read_tells_the_idle_held_memory_too(replay: Replay) -> None:
    replay.serve(load("idle"))
    (row,) = PrometheusSource(replay.url).sample(detail=True).rows or ()
    assert row.idle_held_bytes == 59 * GIB and row.idle_holders == ("alice",)
