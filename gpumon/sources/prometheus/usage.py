"""Who used a cluster's GPUs over a period, from Prometheus: ``gpumon report --prometheus``.

Read from the exporter's per-process series with the rules of :mod:`gpumon.data.usage`; a
row with no SM utilisation known has USED N/A, never 0. Five instant queries whose answers
hold one series per group and node whatever the period; on the recording rules, sums over
their recorded samples, its whole hours from their hourly roll-ups (:mod:`.rollup`), else
over the per-process series at most :data:`MAX_POINTS` times. Hours are never summed over
time Prometheus holds no data of. Details: docs/cluster.md, "The usage report".
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from gpumon.data.cluster import node_names
from gpumon.data.format import ascii_int, safe_text
from gpumon.data.idle import IdleRule
from gpumon.data.periods import Period
from gpumon.data.report import IdleHolder, UsageReport, sorted_holders, sorted_rows, used_notes
from gpumon.data.usage import UsageRow
from gpumon.sources.prometheus.queries import _FACT
from gpumon.sources.prometheus.rollup import Hours, hourly, over_time
from gpumon.sources.prometheus.series import _Series, _vector
from gpumon.sources.prometheus.source import PrometheusSource

#: The exporter's label that groups the rows, per grouping.
LABELS = {"user": "user", "job": "job_id", "container": "container_id", "gpu": "uuid"}
MAX_POINTS = 720
MIN_STEP_S = 15.0
#: The recording rules' series (contrib/prometheus/gpumon-recording.yml), per fact.
RECORDED = {
    "held": "instance_user:gpumon_gpus_held:count",
    "used": "instance_user:gpumon_gpus_used:sum",
    "idle": "instance_user:gpumon_gpus_held_idle:count",
    "peak": "instance_user:gpumon_process_gpu_memory_bytes:max",
    "known": "instance_user:gpumon_gpus_used_known:count",
}
#: A series the recording rules always write: they were loaded at a moment where it is.
RULES_MARKER = "gpumon:usage_rules_loaded"
#: Per user and node, the processes started since the rules' previous evaluation; per
#: process, that it holds memory; per node, its host name and whether it is simulated; the
#: fleet's newest sample time.
STARTED = "instance_user:gpumon_processes_started:count"
PRESENT = "instance_user_pid:gpumon_process_gpu_memory_bytes:group"
HOSTS = "instance_hostname:gpumon_simulated:max"
SAMPLE_TIME = "gpumon:usage_sample_time:max"
#: The seconds between two evaluations of the recording rules (each recorded sample stands
#: for one): also written on every evaluation but the first.
RULES_INTERVAL = "gpumon:usage_rules_interval_seconds"


def step_seconds(period: Period) -> float:
    """Seconds between the evaluations of ``period``: at most :data:`MAX_POINTS` of them, at
    most one per :data:`MIN_STEP_S`, spanning it exactly."""
    count = max(1, min(MAX_POINTS, math.floor(period.seconds / MIN_STEP_S)))
    return period.seconds / count


def raw_expressions(label: str, offset: str = "") -> dict[str, str]:
    """Per fact, the PromQL over the per-process series, by ``label`` and node; ``offset``
    follows every selector."""
    group = f"instance, job, {label}"
    per_gpu = group if label == "uuid" else f"{group}, uuid"
    memory, sm, idle = (
        f"gpumon_process_{name}{offset}"
        for name in ("gpu_memory_bytes", "sm_utilization_ratio", "idle_seconds")
    )
    return {
        "held": f"count by ({group}) (count by ({per_gpu}) ({memory} > 0))",
        "used": f"sum by ({group}) (clamp_max(sum by ({per_gpu}) ({sm}), 1))",
        "idle": f"count by ({group}) (count by ({per_gpu}) ({idle} > 0))",
        "known": f"count by ({group}) (count by ({per_gpu}) "
        f"({sm} and on (instance, job, uuid, pid) ({memory} > 0)))",
    }


def grid_shift_s(end_s: float, step_s: float) -> float:
    """How long after ``end_s`` the raw totals are evaluated, their selectors offset by as
    much: a subquery evaluates at multiples of its step, and so reads the moments ``end_s``,
    ``end_s - step_s``, ... as a range query ending at ``end_s`` would."""
    step_ms = max(1, math.floor(step_s)) * 1000
    return (-round(end_s * 1000) % step_ms) / 1000


def _window(seconds: float) -> str:
    return f"[{max(1, math.ceil(seconds))}s]"


def extent_query(period: Period, recorded: bool) -> str:
    """Each node's first (``first``) and last (``last``) sample time in ``period`` (recorded:
    the fleet's), from the time the exporter stamps on every sample, read over the raw
    samples (each series once, whatever the period: no subquery), at the period's end."""
    window = _window(period.seconds)
    if recorded:
        sampled = f"{SAMPLE_TIME}{window}"
        return (
            f'label_replace(min_over_time({sampled}), "{_FACT}", "first", "", "") or '
            f'label_replace(max_over_time({sampled}), "{_FACT}", "last", "", "")'
        )
    return " or ".join(
        f"label_replace({kind} by (instance, job) ({kind}_over_time("
        f'gpumon_sample_timestamp_seconds{window})), "{_FACT}", "{fact}", "", "")'
        for kind, fact in (("min", "first"), ("max", "last"))
    )


def totals_query(
    label: str, covered: Period, step_s: float, recorded: bool, hours: Hours | None = None
) -> str:
    """One instant query, at the end of ``covered`` (raw: :func:`grid_shift_s` after it): per
    group and node, each fact summed over it (``peak``: its most), plus host names and
    simulated data per node. Recorded: the rules' samples and their evaluation interval
    (``interval``; a host's value says whether it is simulated), ``hours`` from the hourly
    roll-ups and the rest from the minute series (``gpumon_part``); raw: the per-process
    expressions evaluated every ``step_s`` and how many evaluations saw each node
    (``seen``). One series per group and node whatever the period."""
    window = _window(covered.seconds)
    shift_ms = 0 if recorded else round(grid_shift_s(covered.end_s, step_s) * 1000)
    offset = f" offset {shift_ms}ms" if shift_ms else ""
    if recorded:  # the whole hours of ``hours`` from their roll-ups
        parts = [
            over_time("sum", fact, RECORDED[fact], covered, hours)
            for fact in ("held", "used", "idle", "known")
        ]
        parts.append(over_time("max", "peak", RECORDED["peak"], covered, hours))
        interval = f"quantile_over_time(0.5, {RULES_INTERVAL}{window})"
        parts.append(f'label_replace({interval}, "{_FACT}", "interval", "", "")')
        parts.append(over_time("max", "host", HOSTS, covered, hours))  # value: simulated or not
        return " or ".join(parts)
    # A subquery's range includes its start: a second less keeps it to the period's.
    span = max(1, math.ceil(covered.seconds) - 1)
    steps = f"[{span}s:{max(1, math.floor(step_s))}s]"
    expressions = raw_expressions(label, offset)
    facts = {
        fact: f"sum_over_time(({expressions[fact]}){steps})"
        for fact in ("held", "used", "idle", "known")
    }
    facts["peak"] = f"max by (instance, job, {label}) (max_over_time(" + (
        f"gpumon_process_gpu_memory_bytes{window}{offset}))"
    )
    facts["seen"] = f"count_over_time((group by (instance, job) (gpumon_host_info{offset})){steps})"
    hosts = f"last_over_time(gpumon_host_info{window}{offset})"
    facts["host"] = f"group by (instance, job, hostname) ({hosts})"
    simulated = f"max_over_time(gpumon_simulated{window}{offset})"
    facts["simulated"] = f"max by (instance, job) ({simulated})"
    return " or ".join(
        f'label_replace({expression}, "{_FACT}", "{fact}", "", "")'
        for fact, expression in facts.items()
    )


def processes_query(label: str, period: Period, recorded: bool, hours: Hours | None = None) -> str:
    """Distinct PIDs per group and node in the period: recorded, those started in it plus
    those there when it began; raw, those with a sample in it (each series read once)."""
    window = _window(period.seconds)
    if recorded:
        running = f"count by (instance, job, user) ({PRESENT} offset {window[1:-1]})"
        started = over_time("sum", "started", STARTED, period, hours)
        return f'{started} or label_replace({running}, "{_FACT}", "running", "", "")'
    group = f"instance, job, {label}"
    pids = f"last_over_time(gpumon_process_gpu_memory_bytes{window})"
    return f"count by ({group}) (group by ({group}, pid) ({pids}))"


def holders_query(min_memory_bytes: int) -> str:
    """The idle holders now (``idle``: their idle seconds, ``memory``: what they hold) and
    the processes holding at least ``min_memory_bytes`` (the idle rule's minimum) with no SM
    utilisation series (``unknown``: MIG, no sample from the driver), whose idleness nobody
    can tell."""
    return (
        f'label_replace(gpumon_process_idle_seconds > 0, "{_FACT}", "idle", "", "") or '
        f"label_replace(gpumon_process_gpu_memory_bytes and on (instance, job, uuid, pid) "
        f'(gpumon_process_idle_seconds > 0), "{_FACT}", "memory", "", "") or '
        f"label_replace(gpumon_process_gpu_memory_bytes >= {int(min_memory_bytes)} "
        "unless on (instance, job, uuid, pid) gpumon_process_sm_utilization_ratio, "
        f'"{_FACT}", "unknown", "", "")'
    )


@dataclass
class _Row:
    held: float = 0.0
    used: float = 0.0
    idle: float = 0.0
    known: float | None = None
    peak: float | None = None
    processes: int = 0


def _target(labels: dict[str, str]) -> tuple[str, str]:
    return labels.get("instance", ""), labels.get("job", "")


def cluster_usage(
    source: PrometheusSource,
    period: Period,
    by: str,
    now_s: float,
    *,
    min_memory_bytes: int = IdleRule().min_memory_bytes,
) -> UsageReport:
    """The report of ``period`` grouped ``by``; raises :class:`PrometheusError` (one safe line)."""
    label = LABELS[by]
    # Loaded when the period asked for began, as before clipping: else the raw series.
    recorded = by == "user" and _rules_loaded(source, period, step_seconds(period))
    extents = _extents(source.query(extent_query(period, recorded), period.end_s), period)
    covered = _covered(period, extents)
    step_s = step_seconds(covered)
    hours = hourly(source, covered) if recorded else None
    if recorded:
        asked = totals_query(label, covered, step_s, True, hours)
        totals = _vector(source.query(asked, covered.end_s))
        interval = next((i.value for i in totals if i.labels.get(_FACT) == "interval"), None)
        if interval is not None and interval > 0:
            step_s = interval  # each recorded sample stands for one evaluation
        else:  # rules of an older gpumon, which did not record their interval
            recorded = False
    if not recorded:
        raw = totals_query(label, covered, step_s, False)
        totals = _vector(source.query(raw, covered.end_s + grid_shift_s(covered.end_s, step_s)))
    rows: dict[tuple[tuple[str, str], str | None], _Row] = {}
    hosts: dict[tuple[str, str], str] = {}
    seen: dict[tuple[str, str], int] = {}  # evaluations that saw each node (raw series)
    simulated = False
    for item in totals:
        fact, value, target = item.labels.get(_FACT), item.value, _target(item.labels)
        if value is None or value < 0:
            continue
        if fact == "host":
            if item.labels.get("hostname"):
                hosts[target] = safe_text(item.labels["hostname"])
            simulated = simulated or (recorded and value > 0)
        elif fact == "seen":
            seen[target] = int(value)
        elif fact == "simulated":
            simulated = simulated or value > 0
        elif fact in ("held", "used", "idle", "known", "peak"):
            key = item.labels.get(label) or None
            row = rows.setdefault((target, None if key is None else safe_text(key)), _Row())
            if fact == "peak":
                row.peak = value if row.peak is None else max(row.peak, value)
            else:  # known: None until read
                setattr(row, fact, (getattr(row, fact) or 0.0) + value * step_s / 3600.0)
    for (target, _), row in rows.items():
        _scale(row, _presence(extents.get(target), seen.get(target, 0), step_s))
    counted = source.query(processes_query(label, covered, recorded, hours), covered.end_s)
    for item in _vector(counted):
        key = item.labels.get(label) or None
        found = rows.get((_target(item.labels), None if key is None else safe_text(key)))
        if found is not None and item.value is not None:
            found.processes += int(item.value)
    now = _vector(source.query(holders_query(min_memory_bytes), now_s))
    holders = _holders(now)
    idle_unknown = sum(1 for item in now if item.labels.get(_FACT) == "unknown")
    names = _names({target for target, _ in rows} | {t for t, _ in holders}, hosts)
    # No known series at all: recording rules of an older gpumon, which did not record it.
    tracked = not recorded or any(row.known is not None for row in rows.values())
    usage = [
        UsageRow(
            key=key,
            gpu_hours_held=row.held,
            gpu_hours_used=_used(row, tracked),
            used_known_hours=min(row.known or 0.0, row.held) if tracked else None,
            # Idleness is judged from the same SM utilisation: never known, not 0.
            idle_held_hours=None if _used(row, tracked) is None else min(row.idle, row.held),
            peak_memory_bytes=None if row.peak is None else int(row.peak),
            processes=row.processes,
            node=names[target],
        )
        for (target, key), row in rows.items()
        if row.held > 0 or row.processes
    ]
    return UsageReport(
        period=period,
        by=by,
        rows=sorted_rows(usage),
        holders=sorted_holders([replace(holder, node=names[t]) for t, holder in holders]),
        idle_unknown=idle_unknown,
        source="prometheus",
        where=source.url,
        step_s=step_s,
        recording_rules=recorded,
        simulated=simulated,
        notes=used_notes(by, tuple(usage)),
        recorded_from_s=min((first for first, _ in extents.values()), default=None),
        recorded_to_s=max((last for _, last in extents.values()), default=None),
    )


def _extents(data: Any, period: Period) -> dict[tuple[str, str], tuple[float, float]]:
    """Each node's first and last sample in ``period`` (an :func:`extent_query` answer)."""
    firsts: dict[tuple[str, str], float] = {}
    lasts: dict[tuple[str, str], float] = {}
    for item in _vector(data):
        fact, value = item.labels.get(_FACT), item.value  # finite, or None (_vector)
        if value is not None and fact in ("first", "last"):
            (firsts if fact == "first" else lasts)[_target(item.labels)] = value
    return {
        target: (max(first, period.start_s), min(lasts[target], period.end_s))
        for target, first in firsts.items()
        if target in lasts and lasts[target] >= max(first, period.start_s)
    }


def _covered(period: Period, extents: dict[tuple[str, str], tuple[float, float]]) -> Period:
    """``period`` clipped to the data's extent (at least :data:`MIN_STEP_S` long); the
    whole period where no extent is known."""
    if not extents:
        return period
    end = max(last for _, last in extents.values())
    start = max(period.start_s, min(min(first for first, _ in extents.values()), end - MIN_STEP_S))
    return Period(start, end) if end > start else period


def _presence(extent: tuple[float, float] | None, seen: int, step_s: float) -> float:
    """The share of its evaluations a node was there for: 1 unless its data spans less than
    the ``seen`` evaluations of ``step_s`` stand for (it came up or went away between
    them); a sample stands for :data:`MIN_STEP_S` at least, a usual scrape interval."""
    if extent is None or seen <= 0:
        return 1.0
    there_s = extent[1] - extent[0] + MIN_STEP_S
    return min(1.0, there_s / (seen * step_s))


def _scale(row: _Row, share: float) -> None:
    row.held *= share
    row.used *= share
    row.idle *= share
    if row.known is not None:
        row.known *= share


def _used(row: _Row, tracked: bool) -> float | None:
    """A row's GPU-hours used; ``None`` when it held GPUs and no SM utilisation of its
    processes was ever known (tracked: the known series was read)."""
    if tracked and row.held > 0 and not row.known:
        return None
    return min(row.used, row.held)


def _rules_loaded(source: PrometheusSource, period: Period, step_s: float) -> bool:
    """Whether this gpumon's recording rules ran when the period began (they wrote their
    interval; an older gpumon's did not, and their series are not read)."""
    window = max(1, math.ceil(step_s)) + 60  # at least one evaluation interval of a minute
    asked = f"count_over_time({RULES_INTERVAL}[{window}s])"
    answer = source.query(asked, period.start_s + step_s)
    return any(item.value for item in _vector(answer))


def _holders(series: Iterable[_Series]) -> list[tuple[tuple[str, str], IdleHolder]]:
    memory: dict[tuple[str, str, str | None, str | None], float] = {}
    idle: list[_Series] = []
    for item in series:
        labels = item.labels
        if labels.get(_FACT) == "memory" and item.value is not None:
            ident = (*_target(labels), labels.get("uuid"), labels.get("pid"))
            memory[ident] = item.value
        elif labels.get(_FACT) == "idle" and item.value is not None:
            idle.append(item)
    found = []
    for item in idle:
        labels = item.labels
        pid = ascii_int(labels.get("pid"), 9)
        if pid is None or item.value is None:
            continue
        held = memory.get((*_target(labels), labels.get("uuid"), labels.get("pid")))
        holder = IdleHolder(
            user=item.label("user"),
            pid=pid,
            gpu_index=ascii_int(labels.get("gpu"), 3),
            gpu_uuid=item.label("uuid"),
            idle_s=item.value,
            gpu_memory_bytes=None if held is None else int(held),
            command=item.label("process"),
            job=item.label("job_id"),
        )
        found.append((_target(labels), holder))
    return found


def _names(
    targets: set[tuple[str, str]], hosts: dict[tuple[str, str], str]
) -> dict[tuple[str, str], str]:
    """Each target's node name, as the cluster view names it."""
    ordered = sorted(targets)
    names = node_names([(hosts.get(target), safe_text(target[0])) for target in ordered])
    return dict(zip(ordered, names, strict=True))
