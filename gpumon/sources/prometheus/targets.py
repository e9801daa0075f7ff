"""Scrape targets, the Prometheus source's nodes: facts and grouping per target.

A target is its ``(instance, job)`` labels (docs/cluster.md).
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gpumon.data.cluster import ExporterKind
from gpumon.data.format import known_time
from gpumon.sources.prometheus.queries import _FACT
from gpumon.sources.prometheus.series import _kind, _Series

Target = tuple[str, str]  # (instance, job)


def _target(series: _Series) -> Target | None:
    instance = series.labels.get("instance")
    return None if instance is None else (instance, series.labels.get("job", ""))


def _by_target(series: Iterable[_Series]) -> dict[Target, list[_Series]]:
    grouped: dict[Target, list[_Series]] = {}
    for item in series:
        target = _target(item)
        if target is not None:
            grouped.setdefault(target, []).append(item)
    return grouped


@dataclass(slots=True)
class _Facts:
    up: float | None = None
    scraped_s: float | None = None
    last_up_s: float | None = None
    #: Seconds between scrapes, as measured (:func:`.queries.targets_query`) or taken.
    interval_s: float | None = None
    #: Read by the node list's whole requests, kept by the lean ones: its host label, for
    #: a node serving no GPU now what named it within the hour (values and host labels), and
    #: the target's own labels but instance and job (a site's partition), made safe.
    host: str | None = None
    seen: tuple[dict[str, float | None], dict[str, str | None]] = field(
        default_factory=lambda: ({}, {})
    )
    labels: tuple[tuple[str, str], ...] = ()


#: The longest scrape interval the windows can measure (one scrape, the one before 5 min).
_LONGEST_INTERVAL_S = 600.0
_SLOTS = {"up": "up", "scraped": "scraped_s", "last_up": "last_up_s", "interval": "interval_s"}
#: Every fact of a target, as the targets query names them.
TARGET_FACTS = frozenset(_SLOTS)


def _facts(series: Iterable[_Series]) -> dict[Target, _Facts]:
    facts: dict[Target, _Facts] = {}
    for item in series:
        _add_fact(facts, item)
    return facts


def _add_fact(facts: dict[Target, _Facts], item: _Series) -> None:
    """The fact ``item`` tells of its target, into ``facts`` (where it tells one)."""
    target, fact = _target(item), item.labels.get(_FACT, "")
    if target is not None and fact in TARGET_FACTS:
        target_facts = facts.setdefault(target, _Facts())
        if fact == "scraped" and target_facts.up is None:
            target_facts.up = 1.0  # scraped, and not told down
        # A time that is not a real moment is not known (None), as Prometheus' own; nor is
        # an interval no scrapes in the window can span.
        value = item.value
        if fact == "interval":
            value = value if value is not None and 0 < value <= _LONGEST_INTERVAL_S else None
        elif fact != "up":
            value = known_time(value)
        setattr(target_facts, _SLOTS[fact], value)


def _with_fleet_interval(facts: Mapping[Target, _Facts], targets: Iterable[Target]) -> float | None:
    """The median of ``targets``' measured scrape intervals, taken as the interval of those
    with none measured (younger than the shortest window, or scraped once): a site scrapes its
    nodes alike, and the default would call a node scraped less often stale between scrapes."""
    told = [facts[t] for t in targets if t in facts]
    intervals = [interval for f in told if (interval := f.interval_s)]
    median = statistics.median(intervals) if intervals else None
    for target_facts in told:
        if target_facts.interval_s is None:
            target_facts.interval_s = median
    return median


def _node_targets(
    facts: Mapping[Target, _Facts],
    data: Mapping[Target, list[_Series]],
    identity: Mapping[Target, list[_Series]],
) -> list[Target]:
    """Targets that are nodes: GPU series now or within the hour, or a job that has some."""
    gpu_targets = {
        t
        for t, series in (*data.items(), *identity.items())
        if _kind(series) is not ExporterKind.UNKNOWN
    }
    gpu_jobs = {job for _, job in gpu_targets}
    everything = set(facts) | set(data) | set(identity)
    return sorted(t for t in everything if t in gpu_targets or t[1] in gpu_jobs)


def _unique(names: list[str], jobs: list[str | None]) -> list[str]:
    """Names that are still alike (one instance in two jobs) get the job added."""
    counts = Counter(names)
    return [
        f"{name} [{job}]" if counts[name] > 1 and job else name
        for name, job in zip(names, jobs, strict=True)
    ]
