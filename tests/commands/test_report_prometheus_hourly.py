"""`gpumon report --prometheus` on the hourly roll-ups, under promtool's PromQL engine: the
contrib rules' hourly group evaluated every hour over minute series, then the report's
queries read the period's whole hours from it and its edges from the minute series; the
totals are those of the minute series alone, to the sample."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpumon.data.periods import Period
from gpumon.sources.prometheus.rollup import (
    HOURLY_MARKER,
    Hours,
    hours_query,
    hours_range_ms,
    over_time,
    read_hours,
)
from gpumon.sources.prometheus.usage import cluster_usage
from tests.commands.export.test_contrib import run_promtool
from tests.commands.test_report_prometheus import RULES, WEEK, FakePrometheus, fact, vector

NODE = 'job="gpumon", instance="n1:9402", user="alice"'
HELD = "instance_user:gpumon_gpus_held:count"
PEAK = "instance_user:gpumon_process_gpu_memory_bytes:max"
MINUTES = 300
#: One sample a minute from 0m: minute m holds m + 1 (a sample counted twice or missed at
#: an hour's boundary changes the sum).
INPUT = "".join(
    f"      - series: '{name}{{{NODE}}}'\n        values: '1+1x{MINUTES}'\n"
    for name in (HELD, PEAK)
)


def hourly_rules(tmp_path: Path) -> Path:
    """The contrib file's hourly group alone (promtool evaluates every group at its test's
    evaluation_interval, whatever the group's own, and loads the input up to the last
    evaluation: periods end on an hour)."""
    document = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    groups = [g for g in document["groups"] if g["name"] == "gpumon-usage-hourly"]
    path = tmp_path / "hourly.yml"
    path.write_text(yaml.safe_dump({"groups": groups}), encoding="utf-8")
    return path


def expect(expression: str, at_s: float, *samples: tuple[str, float]) -> str:
    listed = "".join(
        f"          - labels: '{{{labels}}}'\n            value: {value}\n"
        for labels, value in samples
    )
    return (
        f"      - expr: {json.dumps(expression)}\n        eval_time: {round(at_s * 1000)}ms\n"
        f"        exp_samples:\n{listed}"
    )


def minutes_in(period: Period) -> list[int]:
    """The minutes whose samples the minute series' window reads (both its ends)."""
    start_s = period.end_s - max(1, math.ceil(period.seconds))
    return [m for m in range(MINUTES + 1) if start_s <= m * 60 <= period.end_s]


@pytest.mark.parametrize(
    "period",
    [Period(420.0, 14400.0), Period(1000.5, 18000.0), Period(3600.0, 18000.0)],
    ids=["start-on-a-sample", "start-between-samples", "an-hour-to-the-end"],
)
def test_the_hourly_path_sums_the_same_samples_as_the_minute_series(
    tmp_path: Path, period: Period
) -> None:
    range_ms = hours_range_ms(period)
    assert range_ms is not None
    start_ms = round(period.end_s * 1000) - range_ms
    evaluated = [t for t in range(0, MINUTES * 60 + 1, 3600) if start_ms <= t * 1000]
    evaluated = [t for t in evaluated if t <= period.end_s]
    hours = Hours(evaluated[0] * 1000, evaluated[-1] * 1000, range_ms)
    minutes = minutes_in(period)
    held, peak = sum(m + 1 for m in minutes), max(minutes) + 1
    tests = "".join(
        expect(
            f"sum by (gpumon_fact) ({over_time('sum', 'held', HELD, period, read)})",
            period.end_s,
            ('gpumon_fact="held"', held),
        )
        + expect(
            f"max by (gpumon_fact) ({over_time('max', 'peak', PEAK, period, read)})",
            period.end_s,
            ('gpumon_fact="peak"', peak),
        )
        for read in (None, hours)
    )
    facts = (("count", len(evaluated)), ("first", evaluated[0]), ("last", evaluated[-1]))
    tests += expect(
        hours_query(range_ms), period.end_s, *((f'gpumon_fact="{f}"', v) for f, v in facts)
    )
    test = tmp_path / "hourly.test.yml"
    test.write_text(
        f"rule_files:\n  - {hourly_rules(tmp_path)}\nevaluation_interval: 1h\ntests:\n"
        f"  - interval: 1m\n    input_series:\n{INPUT}    promql_expr_test:\n{tests}",
        encoding="utf-8",
    )
    result = run_promtool("test", "rules", str(test))
    assert result.returncode == 0, result.stdout + result.stderr


def answer(count: int, first_s: float, last_s: float) -> dict[str, Any]:
    facts = {"count": count, "first": first_s, "last": last_s}
    return {
        "resultType": "vector",
        "result": [
            {"metric": {"gpumon_fact": fact}, "value": [last_s, str(value)]}
            for fact, value in facts.items()
        ],
    }


def test_hours_with_one_missed_are_not_read() -> None:
    """Prometheus down over an hour's evaluation: the minutes of that hour are in no hourly
    sample, and the report reads the minute series alone."""
    assert read_hours(answer(5, 7200.0, 21600.0), 99) == Hours(7_200_000, 21_600_000, 99)
    assert read_hours(answer(4, 7200.0, 21600.0), 99) is None
    assert read_hours(answer(0, 7200.0, 7200.0), 99) is None


def test_hours_evaluated_at_another_time_of_the_hour_are_not_read() -> None:
    """The rules file moved: the group's evaluations shift within the hour (its offset is a
    hash of its file), and the hours before and after the move overlap."""
    # 2h and 3h, then 3h37m and 4h37m: four over 2h37m; the hours of 3h and 3h37m overlap.
    assert read_hours(answer(4, 7200.0, 7200.0 + 2 * 3600 + 37 * 60), 99) is None
    # 2h and 3h, then 4h37m and 5h37m: four over 3h37m; no hour rolls up 2h55m to 3h32m.
    assert read_hours(answer(4, 7200.0, 7200.0 + 3 * 3600 + 37 * 60), 99) is None


def test_a_period_shorter_than_an_hour_and_its_delay_reads_no_hours() -> None:
    assert hours_range_ms(Period(0.0, 3900.0)) is None
    assert hours_range_ms(Period(0.0, 3901.0)) == 999


class HourlyPrometheus(FakePrometheus):
    """The rules recorded with their hourly roll-ups, ``missed`` hours missing."""

    def __init__(self, missed: int) -> None:
        super().__init__(rules=True)
        self.missed = missed

    def query(self, expression: str, at_s: float) -> Any:
        if HOURLY_MARKER in expression:
            self.asked.append(("instant", expression))
            return answer(166 - self.missed, WEEK.start_s + 7200, WEEK.end_s - 3600)
        if "_sum_1h" in expression:
            self.asked.append(("instant", expression))
            return vector(*[
                fact("held", held, user="alice", gpumon_part=part)
                for part, held in (("head", 2), ("hours", 100), ("tail", 3))
            ], fact("interval", 60.0))  # fmt: skip
        return super().query(expression, at_s)


def test_a_week_on_the_hourly_roll_ups_sums_its_hours_and_its_edges() -> None:
    """alice's GPUs over the week: 2 samples before its first whole hour, 100 in its hours
    (as rolled up), 3 after its last: 105 one-minute samples, 1.75 GPU-hours."""
    source = HourlyPrometheus(missed=0)
    report = cluster_usage(source, WEEK, "user", WEEK.end_s)  # type: ignore[arg-type]
    (alice,) = [row for row in report.rows if row.key == "alice"]
    assert alice.gpu_hours_held == pytest.approx(105 / 60)
    assert report.recording_rules and report.step_s == 60.0
    totals = next(expression for _, expression in source.asked if '"held"' in expression)
    assert "instance_user:gpumon_gpus_held:count_sum_1h[" in totals


def test_a_week_with_an_hour_not_rolled_up_reads_the_minutes() -> None:
    source = HourlyPrometheus(missed=1)
    cluster_usage(source, WEEK, "user", WEEK.end_s)  # type: ignore[arg-type]
    asked = [expression for _, expression in source.asked]
    assert not any("_1h" in expression for expression in asked)
    assert any("sum_over_time(instance_user:gpumon_gpus_held:count[" in e for e in asked)
