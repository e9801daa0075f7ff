"""Scrape targets, the Prometheus source's nodes: facts and grouping per target.

A target is its ``(instance, job)`` labels (docs/cluster.md).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

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
    scrapes_5m: float | None = None
    first_5m_s: float | None = None
    evaluated_s: float | None = None
    measured_s: float | None = None  # the interval as measured by an earlier answer

    @property
    def interval_s(self) -> float | None:
        """Seconds between scrapes: the time the last five minutes' scrapes span over their
        number. ``first_5m_s`` is the latest scrape at or before the window's first second:
        before the window for a target older than that (one gap more than the count)."""
        if self.measured_s is not None:
            return self.measured_s
        first, last, count = self.first_5m_s, self.scraped_s, self.scrapes_5m
        if first is None or last is None or count is None or self.evaluated_s is None:
            return None
        gaps = count if first <= self.evaluated_s - 300 else count - 1
        if gaps < 1 or last <= first:
            return None
        return (last - first) / gaps


def _facts(series: Iterable[_Series]) -> dict[Target, _Facts]:
    facts: dict[Target, _Facts] = {}
    slots = {
        "up": "up",
        "scraped": "scraped_s",
        "last_up": "last_up_s",
        "scrapes_5m": "scrapes_5m",
        "first_5m": "first_5m_s",
    }
    for item in series:
        target, slot = _target(item), slots.get(item.labels.get(_FACT, ""))
        if target is not None and slot is not None:
            target_facts = facts.setdefault(target, _Facts())
            # A time that is not a real moment is not known (None), as Prometheus' own.
            value = known_time(item.value) if slot.endswith("_s") else item.value
            setattr(target_facts, slot, value)
            if item.time_s is not None:
                target_facts.evaluated_s = item.time_s
    return facts


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
