"""The node rows' recording rules: contrib/prometheus/gpumon-recording.yml holds the very
expressions the source sends, promtool's unit tests of them pass, and the source reads the
recorded series while the rules' marker says they are recorded for its free threshold, and
evaluates the expressions itself otherwise (``ClusterSample.path`` says which)."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpumon.sources.prometheus.aggregate import (
    RULES,
    RULES_EVALUATED,
    RULES_FREE_THRESHOLD_MIB,
    RULES_LOADED,
    RULES_VERSION,
    TOP_EXPRESSION,
    TOP_RULE,
    USERS_EXPRESSION,
    USERS_RULE,
    rows_queries,
)
from gpumon.sources.prometheus.queries import (
    INTERVAL_RECORDED,
    UP_RECORDED,
    scrape_interval,
    up_moments,
)
from gpumon.sources.prometheus.source import PrometheusSource
from tests.support.prometheus_replay import Replay, load, refreshes, with_marker

CONTRIB = Path(__file__).resolve().parents[3] / "contrib" / "prometheus"


def recorded() -> dict[str, str]:
    document = yaml.safe_load((CONTRIB / "gpumon-recording.yml").read_text())
    return {
        rule["record"]: " ".join(rule["expr"].split())
        for group in document["groups"]
        for rule in group["rules"]
    }


def test_the_rules_hold_the_expressions_the_source_sends() -> None:
    threshold = str(RULES_FREE_THRESHOLD_MIB * 1024**2)
    rules = recorded()
    for name, expression in RULES.items():
        assert rules[name] == expression.replace("{threshold}", threshold), name
    assert rules[RULES_LOADED] == f"vector({RULES_FREE_THRESHOLD_MIB})"
    assert rules[USERS_RULE] == USERS_EXPRESSION
    assert rules[TOP_RULE] == TOP_EXPRESSION
    assert rules[UP_RECORDED] == up_moments()
    assert rules[INTERVAL_RECORDED] == scrape_interval()


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool (Debian: prometheus)")
def test_promtool_passes_the_rules_unit_tests() -> None:
    result = subprocess.run(
        ["promtool", "test", "rules", "gpumon-recording.test.yml"],
        cwd=CONTRIB, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_source_reads_the_rules_while_they_are_recorded(replay: Replay) -> None:
    answers = load("shared_host")
    replay.serve(with_marker(answers, "1024"))
    source = PrometheusSource(replay.url)
    first, second = source.sample(), source.sample()
    assert (first.path, second.path) == ("recording rules", "recording rules")
    asked, expected = refreshes(
        replay.queries,
        rows_queries(1024, rules=True),
        [RULES_EVALUATED, *rows_queries(1024, rules=True, lean=True)],
    )
    assert asked == expected
    replay.serve(with_marker(answers, None))  # the rules were unloaded: raw in the same refresh
    replay.requests.clear()
    unloaded = source.sample()
    assert unloaded.path == "raw queries" and unloaded.rows == first.rows
    asked, expected = refreshes(
        replay.queries,
        [RULES_EVALUATED, *rows_queries(1024, rules=True, lean=True)],
        rows_queries(1024, rules=False, lean=True),
    )
    assert asked == expected


def test_a_first_refresh_asks_the_rules_and_the_expressions_where_none_are_recorded(
    replay: Replay,
) -> None:
    replay.serve(with_marker(load("shared_host"), None))
    cluster = PrometheusSource(replay.url).sample()
    assert cluster.path == "raw queries" and cluster.rows
    asked, expected = refreshes(
        replay.queries, rows_queries(1024, rules=True), rows_queries(1024, rules=False)
    )
    assert asked == expected


@pytest.mark.parametrize("version", [None, "1", "3"])
def test_rules_of_another_version_are_not_used(replay: Replay, version: str | None) -> None:
    """An older rules file lacks a rule the rows read (whether a node is simulated): its
    rows would not say what they must."""
    replay.serve(with_marker(load("shared_host"), "1024", version))
    source = PrometheusSource(replay.url)
    first, second = source.sample(), source.sample()
    assert (first.path, second.path) == ("raw queries", "raw queries")
    assert first.rows and first.rows == second.rows
    asked, expected = refreshes(
        replay.queries,
        rows_queries(1024, rules=True),
        rows_queries(1024, rules=False),
        rows_queries(1024, rules=False, lean=True),
    )
    assert asked == expected


@pytest.mark.parametrize(("threshold", "marker"), [(512, "1024"), (1024, "512")])
def test_rules_for_another_free_threshold_are_not_used(
    replay: Replay, threshold: int, marker: str
) -> None:
    replay.serve(with_marker(load("shared_host"), marker))
    replay.aliases = {
        **dict.fromkeys(rows_queries(threshold, rules=False), "rows"),
        **dict.fromkeys(rows_queries(threshold, rules=False, lean=True), "lean rows"),
    }
    source = PrometheusSource(replay.url, free_threshold_mib=threshold)
    assert source.sample().error is None
    assert source.sample().path == "raw queries"
    guessed = [rows_queries(1024, rules=True)] if threshold == 1024 else []  # the rules' own
    asked, expected = refreshes(
        replay.queries,
        *guessed,
        rows_queries(threshold, rules=False),
        rows_queries(threshold, rules=False, lean=True),
    )
    assert asked == expected


@pytest.mark.parametrize("scenario", ["down", "dcgm", "shared_host", "idle", "mig", "stalled"])
def test_the_rules_series_are_read_again_only_once_the_rules_were_evaluated_again(
    replay: Replay, scenario: str
) -> None:
    """Prometheus evaluates the rules every minute by default and a dashboard refreshes every
    few seconds: a refresh reads their series only where their marker's time says they were
    evaluated since it last read them (once, the first time it asks), and builds the same
    rows from those it read then."""
    replay.serve(with_marker(load(scenario), "1024"))
    source = PrometheusSource(replay.url)
    rows = [source.sample().rows for _ in range(3)]
    lean = rows_queries(1024, rules=True, lean=True)
    asked, expected = refreshes(
        replay.queries,
        rows_queries(1024, rules=True),
        [RULES_EVALUATED, *lean],
        [RULES_EVALUATED, *rows_queries(1024, rules=True, lean=True, recorded=True)],
    )
    assert asked == expected
    assert rows[0] and rows[0] == rows[1] == rows[2]


def test_a_new_evaluation_or_every_user_wanted_reads_the_rules_series_again(
    replay: Replay,
) -> None:
    answers = with_marker(load("shared_host"), "1024")
    replay.serve(answers)
    source = PrometheusSource(replay.url)
    source.sample()
    source.sample()
    moved = copy.deepcopy(answers)  # carol now holds what alice held
    for item in moved["rules"]["data"]["result"]:
        if item["metric"].get("user") == "alice":
            item["metric"]["user"] = "carol"

    def top_users() -> list[str | None]:
        return [row.top_user for row in source.sample().rows or () if row.top_user]

    replay.answers = moved  # not evaluated since: what was read stands
    assert top_users() == ["alice"]
    replay.serve(moved)
    assert top_users() == ["carol"]
    replay.requests.clear()
    source.users_wanted = True
    assert [row.users for row in source.sample().rows or () if row.users] == [{"bob", "carol"}]
    asked, expected = refreshes(
        replay.queries, [RULES_EVALUATED, *rows_queries(1024, rules=True, lean=True, users=True)]
    )
    assert asked == expected


def test_the_rules_marker_is_stored_after_every_node_rule() -> None:
    """Its time tells when the node rules were last evaluated (:data:`RULES_EVALUATED`):
    Prometheus evaluates and stores a group's rules in order, but for those it may evaluate
    concurrently (a feature flag), which it never does in a group where a selector has no
    metric name."""
    document = yaml.safe_load((CONTRIB / "gpumon-recording.yml").read_text())
    (group,) = [g for g in document["groups"] if any(r["record"] in RULES for r in g["rules"])]
    names = [rule["record"] for rule in group["rules"]]
    assert names[-1] == RULES_LOADED and set(RULES) <= set(names)
    assert any('{__name__=~"' in rule["expr"] for rule in group["rules"])
    assert group["rules"][-1]["labels"] == {"version": RULES_VERSION}


def test_a_node_the_rules_have_not_recorded_yet_says_so(replay: Replay) -> None:
    """A new node's series are scraped before the next evaluation of the rules: its row says
    why it is not current, and it is never counted free."""
    answers = with_marker(load("partial"), "1024")
    result = answers["rules"]["data"]["result"]
    result[:] = [s for s in result if ":gpumon_" not in s["metric"].get("__name__", "")]
    replay.serve(answers)
    source = PrometheusSource(replay.url)
    source.sample()
    (row,) = source.sample().rows or ()
    assert row.state.value == "stale" and row.free_gpus is None
    assert row.problem is not None and row.problem.startswith("no row recorded yet: the recording")
