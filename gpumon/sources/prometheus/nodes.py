"""One node from its scrape target's series: its state, its GPUs, and why it is not current.

A node that answers may still serve an old sample (a driver call stuck behind a live
exporter), and one naming more GPUs than a machine can have is refused (docs/cluster.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpumon.data import format as fmt
from gpumon.data.cluster import ExporterKind, Node, NodeState, classify
from gpumon.data.format import safe_text
from gpumon.data.model import Sample
from gpumon.data.views import STALE_AFTER_INTERVALS, is_stale
from gpumon.sources.prometheus.series import (
    _dcgm_sample,
    _gpu_index,
    _gpumon_sample,
    _host,
    _identity_sample,
    _kind,
    _reading,
    _Series,
    sample_time,
)
from gpumon.sources.prometheus.targets import Target, _Facts

#: Used where fewer than two scrapes of a target were seen in five minutes.
DEFAULT_SCRAPE_INTERVAL_S = 15.0
#: The most GPUs one node may name (NVML indices 0 to 63): more is not a machine's answer.
MAX_GPUS_PER_NODE = 64


@dataclass(frozen=True, slots=True)
class _Known:
    """What was last read of a target while it served data."""

    host: str | None
    kind: ExporterKind
    sample: Sample


def _build_node(
    target: Target,
    facts: _Facts | None,
    data: list[_Series],
    identity: list[_Series],
    now: float,
    known: _Known | None,
) -> tuple[str | None, Node, _Known | None]:
    """(host label, the node, what to remember of it or None) for one target."""
    facts = facts or _Facts()
    state, last_seen, down_since = _state(facts, now)
    interval = facts.interval_s or DEFAULT_SCRAPE_INTERVAL_S
    host = _host(data) or _host(identity) or (known.host if known else None)
    shown = host or safe_text(target[0])
    kind = _kind(data)
    problem = _gpu_count_problem(data)
    remembered = None
    sampled: float | None = None
    has_gpus = any(_gpu_index(item) is not None for item in data)
    if problem is None and kind is not ExporterKind.UNKNOWN and has_gpus:
        build = _gpumon_sample if kind is ExporterKind.GPUMON else _dcgm_sample
        sample = build(data, shown, last_seen or now)
        remembered = _Known(host, kind, sample)
        if kind is ExporterKind.GPUMON and state is NodeState.UP:
            problem, sampled = _health(data, now, interval, facts.scraped_s)
    else:
        # Nothing usable about its GPUs now: down, gone, refused, or an exporter that could
        # not read them (gpumon's serves no GPU series when its sampler fails or is stuck).
        if known is not None:
            kind, sample = known.kind, known.sample
        else:
            kind = _kind(identity) if kind is ExporterKind.UNKNOWN else kind
            named = [] if _gpu_count_problem(identity) else identity
            sample = _identity_sample(named, shown, last_seen or now)
        if problem is None and state is NodeState.UP and kind is not ExporterKind.UNKNOWN:
            problem, sampled = _health(data, now, interval, facts.scraped_s)
            problem = problem or "the exporter serves no GPU series: its sampling fails"
    if problem is not None and state is NodeState.UP:
        state = NodeState.STALE
        if sampled is not None and (last_seen is None or sampled < last_seen):
            last_seen = sampled  # when its data was last current
    node = Node(
        name=shown,
        instance=safe_text(target[0]),
        job=safe_text(target[1]) or None,
        exporter=kind,
        state=state,
        sample=sample,
        last_seen_s=last_seen,
        down_since_s=down_since,
        problem=problem,
    )
    return host, node, remembered


def _state(facts: _Facts, now: float) -> tuple[NodeState, float | None, float | None]:
    """(state, last seen, down since) of a target. No ``up`` series: gone from Prometheus."""
    interval = facts.interval_s or DEFAULT_SCRAPE_INTERVAL_S
    last_seen = facts.scraped_s if facts.up else facts.last_up_s
    if facts.up is None:
        return NodeState.STALE, last_seen, None
    state = classify(facts.up, last_seen, now, interval)
    down_since = None
    if state is NodeState.DOWN and facts.last_up_s is not None:
        # The scrape after the last good one (found at 15 s steps), not after the latest.
        down_since = facts.last_up_s + interval
        if facts.scraped_s is not None:
            down_since = min(down_since, facts.scraped_s)
    return state, last_seen, down_since


def _gpu_count_problem(series: list[_Series]) -> str | None:
    """Why a target's GPUs are refused (more than :data:`MAX_GPUS_PER_NODE`), or None."""
    indices = {index for item in series if (index := _gpu_index(item)) is not None}
    if len(indices) <= MAX_GPUS_PER_NODE and all(i < MAX_GPUS_PER_NODE for i in indices):
        return None
    claimed = max(len(indices), max(indices) + 1)
    return f"refused: its exporter claims {claimed} GPUs; a node has at most {MAX_GPUS_PER_NODE}"


def _health(
    series: list[_Series], now: float, interval_s: float, scraped_s: float | None
) -> tuple[str | None, float | None]:
    """Why gpumon's exporter serves no current sample although it answers, or None; and when its
    latest sample was read. Stalled, or a sample age or timestamp older than
    :data:`~gpumon.data.views.STALE_AFTER_INTERVALS` scrape intervals (by the server's clock).
    """
    values = {item.name: item.value for item in series if "gpu" not in item.labels}
    stamp = sample_time(series)
    age = _reading(values.get("gpumon_sample_age_seconds"))
    if age is not None:  # measured by the exporter itself: no skew between machines' clocks
        stamp = (scraped_s if scraped_s is not None else now) - age
    if values.get("gpumon_sampler_stalled"):
        problem = "the exporter's sampler is stalled"
    elif (age is not None and age > STALE_AFTER_INTERVALS * interval_s) or (
        stamp is not None and is_stale(stamp, now, interval_s)
    ):
        problem = "the exporter serves an old sample"
    else:  # (most nodes, every refresh: no text made)
        return None, None
    if stamp is not None:
        problem += f": its last sample is {fmt.duration(max(0.0, now - stamp))} old"
    return problem, stamp
