"""Which recorded series ``gpumon report --prometheus`` reads over a period, and how.

The recording rules' ``gpumon-usage-hourly`` group rolls the minute series up into hours:
an evaluation at T covers the minute samples in (T - 65m, T - 5m]. A period reads the whole
hours inside it from the hourly series and the minutes at its two edges from the minute
series: the same samples as the minute series alone, ~60 times fewer. Hourly evaluations
with a gap between them (a restart): the minute series alone. Details: docs/cluster.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpumon.data.periods import Period
from gpumon.sources.prometheus.queries import _FACT
from gpumon.sources.prometheus.series import _vector
from gpumon.sources.prometheus.source import PrometheusSource

#: Per minute series, its hourly roll-up (contrib/prometheus/gpumon-recording.yml).
HOURLY = {
    name: f"{name}_{kind}_1h"
    for name, kind in (
        ("instance_user:gpumon_gpus_held:count", "sum"),
        ("instance_user:gpumon_gpus_used:sum", "sum"),
        ("instance_user:gpumon_gpus_used_known:count", "sum"),
        ("instance_user:gpumon_gpus_held_idle:count", "sum"),
        ("instance_user:gpumon_process_gpu_memory_bytes:max", "max"),
        ("instance_user:gpumon_processes_started:count", "sum"),
        ("instance_hostname:gpumon_simulated:max", "max"),
    )
}
#: Written on every hourly evaluation; its value is the evaluation's time.
HOURLY_MARKER = "gpumon:usage_hourly_rules_loaded"
HOUR_MS = 3_600_000
#: How long after the hour it rolls up an hourly evaluation runs.
DELAY_MS = 300_000
#: The label that tells a fact's parts apart (edges and hours).
PART = "gpumon_part"


@dataclass(frozen=True)
class Hours:
    """The hourly evaluations a period reads (times in milliseconds), with the range that
    selects them all, ending at the period's end."""

    first_ms: int
    last_ms: int
    range_ms: int


def _bounds_ms(covered: Period) -> tuple[int, int]:
    """The period's end and the length of the minute path's window (whole seconds), in ms."""
    return round(covered.end_s * 1000), max(1, math.ceil(covered.seconds)) * 1000


def hours_range_ms(covered: Period) -> int | None:
    """The range, ending at the period's end, of the hourly evaluations whose hours lie
    inside the minute path's window and begin after its start; ``None``: none can."""
    _, window_ms = _bounds_ms(covered)
    range_ms = window_ms - HOUR_MS - DELAY_MS - 1
    return range_ms if range_ms >= 1 else None


def hours_query(range_ms: int) -> str:
    """How many hourly evaluations in the range, the first and the last (``count``,
    ``first``, ``last``): one series read, at the period's end."""
    return " or ".join(
        f'label_replace({kind}_over_time({HOURLY_MARKER}[{range_ms}ms]), "{_FACT}", "{fact}", '
        '"", "")'
        for kind, fact in (("count", "count"), ("min", "first"), ("max", "last"))
    )


def read_hours(data: Any, range_ms: int) -> Hours | None:
    """The hours of an :func:`hours_query` answer; ``None`` unless an hour apart each."""
    facts = {item.labels.get(_FACT): item.value for item in _vector(data)}
    count, first, last = facts.get("count"), facts.get("first"), facts.get("last")
    if not count or first is None or last is None:
        return None
    first_ms, last_ms = round(first * 1000), round(last * 1000)
    hours, apart = divmod(last_ms - first_ms, HOUR_MS)
    if apart or hours + 1 != round(count):
        # An hour missed, or evaluations moved in the hour (the rules file renamed): some
        # minutes are in no hourly sample, or in two.
        return None
    return Hours(first_ms, last_ms, range_ms)


def spans(name: str, covered: Period, hours: Hours | None) -> list[tuple[str, str, str]]:
    """Per part of the period (``minutes``; ``head``, ``hours``, ``tail``), the series that
    holds ``name``'s samples there and the range selector that reads them, at its end."""
    if hours is None:
        return [("minutes", name, f"[{max(1, math.ceil(covered.seconds))}s]")]
    end_ms, window_ms = _bounds_ms(covered)
    hours_begin_ms = hours.first_ms - HOUR_MS - DELAY_MS  # exclusive
    head_ms = hours_begin_ms - (end_ms - window_ms)  # >= 1: the range starts after it
    tail_ms = end_ms - (hours.last_ms - DELAY_MS + 1)
    return [
        ("head", name, f"[{head_ms}ms] offset {end_ms - hours_begin_ms}ms"),
        ("hours", HOURLY[name], f"[{hours.range_ms}ms]"),
        ("tail", name, f"[{tail_ms}ms]"),
    ]


def over_time(kind: str, fact: str, name: str, covered: Period, hours: Hours | None) -> str:
    """``kind``_over_time of ``name`` over the period, labelled ``fact``: one series a group
    and node (its parts' ``kind``, told apart by :data:`PART` until then)."""
    parts = [
        (part, f'label_replace({kind}_over_time({series}{selector}), "{_FACT}", "{fact}", "", "")')
        for part, series, selector in spans(name, covered, hours)
    ]
    if hours is None:
        return parts[0][1]
    joined = " or ".join(
        f'label_replace({expression}, "{PART}", "{part}", "", "")' for part, expression in parts
    )
    return f"{kind} without ({PART}) ({joined})"


def hourly(source: PrometheusSource, covered: Period) -> Hours | None:
    """The hours of ``covered`` the hourly roll-ups hold (one query); ``None``: read the
    minute series alone."""
    range_ms = hours_range_ms(covered)
    if range_ms is None:
        return None
    return read_hours(source.query(hours_query(range_ms), covered.end_s), range_ms)
