"""`gpumon report --prometheus` never sums hours over time Prometheus holds no data of: a
7-day report over 2 minutes of data counts those 2 minutes, its processes, and says what the
data covers; a node that came up late is not counted for the whole evaluation step.

The fake Prometheus answers as the real one does over samples scraped every 15 s: a series
is seen at an evaluation when it has a sample in the 5 minutes before it (the lookback), a
subquery's evaluations fall on multiples of its resolution, both ends of its range included,
and read the moments its selectors' offset before them."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from gpumon.commands.report_output import render_text, report_to_dict
from gpumon.data.periods import Period
from gpumon.sources.prometheus.usage import cluster_usage
from tests.commands.test_report_prometheus import GIB, WEEK, vector

LOOKBACK_S = 300.0
SCRAPE_S = 15.0
#: alice's two processes on n1 (a GPU each) were scraped for 2 minutes, 16 minutes before
#: the week ended: one evaluation of a 14-minute step sees them, and no multiple of it does.
FIRST_S = WEEK.end_s - 960
TWO_MINUTES = (FIRST_S, FIRST_S + 120)


class Scraped:
    """A Prometheus holding n1's 2 minutes and, with ``bob_all_week``, n2's whole week (bob
    holding one GPU)."""

    url = "http://prometheus.example:9090"

    def __init__(self, *, bob_all_week: bool = False) -> None:
        self.nodes = {"n1:9402": ("alice", 2, TWO_MINUTES)}
        if bob_all_week:
            self.nodes["n2:9402"] = ("bob", 1, (WEEK.start_s - 86400, WEEK.end_s))

    @staticmethod
    def seen(extent: tuple[float, float], at_s: float) -> bool:
        first, last = extent
        if at_s < first:
            return False
        latest = min(last, first + SCRAPE_S * ((at_s - first) // SCRAPE_S))
        return latest > at_s - LOOKBACK_S

    def query_range(self, expression: str, start_s: float, end_s: float, step_s: float) -> Any:
        raise AssertionError("a range query: one series per node and step")

    def query(self, expression: str, at_s: float) -> Any:
        window = re.search(r"\[(\d+)s\]", expression)
        since = at_s - int(window[1]) if window else at_s
        steps = re.search(r"\[(\d+)s:(\d+)s\]", expression)
        if "gpumon_sample_timestamp_seconds" in expression:
            return vector(*[
                ({"instance": node, "job": "gpumon", "gpumon_fact": fact}, value)
                for node, (_, _, (first, last)) in self.nodes.items()
                if last > since
                for fact, value in (("first", max(first, since)), ("last", min(last, at_s)))
            ])  # fmt: skip
        if '"held"' in expression:  # the totals: the subquery's evaluations summed
            assert steps is not None and window is not None
            span, resolution = int(steps[1]), int(steps[2])
            start = int(at_s - span) // resolution * resolution
            grid = [t for t in range(start, int(at_s) + 1, resolution) if t >= at_s - span]
            offset = re.search(r"offset (\d+)ms", expression)  # every selector's
            shift = int(offset[1]) / 1000 if offset else 0.0
            points, since = [t - shift for t in grid], since - shift
            found = []
            for node, (user, gpus, extent) in self.nodes.items():
                seen = sum(1 for t in points if self.seen(extent, t))
                labels = {"instance": node, "job": "gpumon"}
                facts = {"held": gpus, "used": 0, "known": gpus, "idle": gpus}
                found += [
                    ({**labels, "user": user, "gpumon_fact": fact}, value * seen)
                    for fact, value in facts.items()
                    if seen
                ]
                if extent[1] > since:
                    found.append(({**labels, "user": user, "gpumon_fact": "peak"}, 10 * GIB))
                    host = {**labels, "hostname": node.split(":")[0], "gpumon_fact": "host"}
                    found.append((host, 1))
                found.append(({**labels, "gpumon_fact": "seen"}, seen))
            return vector(*found)
        if "count by" in expression:  # processes: those with a sample in the window
            return vector(*[
                ({"instance": node, "job": "gpumon", "user": user}, gpus)
                for node, (user, gpus, (first, last)) in self.nodes.items()
                if last > since and first <= at_s
            ])  # fmt: skip
        if "gpumon_process_idle_seconds" in expression:  # who holds memory idle now
            base = {"instance": "n1:9402", "job": "gpumon", "user": "alice", "uuid": "GPU-1"}
            return vector(
                *[({**base, "pid": pid, "gpu": "1", "gpumon_fact": "idle"}, 600.0)
                  for pid in ("4200", "4201")]
            )  # fmt: skip
        return vector()  # the recording rules were not loaded


def local(timestamp_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp_s))


def test_two_minutes_of_data_in_a_week_count_two_minutes_and_their_processes() -> None:
    report = cluster_usage(Scraped(), WEEK, "user", WEEK.end_s)  # type: ignore[arg-type]
    (alice,) = report.rows
    # Two GPUs for two minutes: 0.067 GPU-hours, not a 14-minute step's 0.47.
    assert alice.gpu_hours_held == pytest.approx(2 * 120 / 3600)
    assert alice.processes == 2  # the two processes it lists as idle, counted
    assert [holder.pid for holder in report.holders] == [4200, 4201]
    assert (report.recorded_from_s, report.recorded_to_s) == TWO_MINUTES
    assert report.step_s == 15.0
    text = render_text(report, width=None)
    assert (
        f"gpumon exporters' data from {local(TWO_MINUTES[0])} to {local(TWO_MINUTES[1])} "
        "(hours summed over it)"
    ) in text
    document = report_to_dict(report)
    assert document["recorded_from_s"] == TWO_MINUTES[0]
    assert document["rows"][0]["gpu_hours_held"] == pytest.approx(2 * 120 / 3600)


def test_a_node_with_two_minutes_beside_one_with_the_week_is_not_counted_a_whole_step() -> None:
    """bob's node covers the week, so the step stays 14 minutes; alice's node was seen at
    one evaluation, for 2 minutes of it (one scrape interval of slack)."""
    report = cluster_usage(Scraped(bob_all_week=True), WEEK, "user", WEEK.end_s)  # type: ignore[arg-type]
    rows = {row.key: row for row in report.rows}
    assert report.step_s == 840.0
    assert rows["bob"].gpu_hours_held == pytest.approx(168.0)
    assert 2 * 120 / 3600 <= rows["alice"].gpu_hours_held <= 2 * (120 + 15) / 3600 + 1e-9


def test_no_data_in_the_period_says_so() -> None:
    class Nothing(Scraped):
        def __init__(self) -> None:
            self.nodes = {}

    report = cluster_usage(Nothing(), WEEK, "user", WEEK.end_s)  # type: ignore[arg-type]
    assert report.rows == () and report.recorded_from_s is None
    assert "gpumon exporters' data in this period: none found" in render_text(report, width=None)


def test_a_period_shorter_than_a_scrape_still_evaluates() -> None:
    short = Period(FIRST_S + 60, FIRST_S + 65)
    report = cluster_usage(Scraped(), short, "user", short.end_s)  # type: ignore[arg-type]
    assert report.step_s is not None and report.step_s > 0
