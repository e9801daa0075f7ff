"""The node list's rows from the answer of the aggregate query (:mod:`.aggregate`).

A node's state, last seen and down since come from the targets' facts and the exporter's own
health series by the rules of the per-series path (:func:`.nodes._state`, :func:`.nodes._health`);
a node that serves no GPU now keeps its last row's readings, else the GPUs it named within the
hour, and no view counts its GPUs free.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from gpumon.data.cluster import ExporterKind, NodeState, NodeSummary, Ranked, node_names
from gpumon.data.format import safe_text
from gpumon.data.views import UNKNOWN_USER
from gpumon.sources.prometheus.aggregate import RULES, RULES_LOADED, RULES_VERSION, TOP_RULE
from gpumon.sources.prometheus.nodes import (
    DEFAULT_SCRAPE_INTERVAL_S,
    MAX_GPUS_PER_NODE,
    _health,
    _state,
)
from gpumon.sources.prometheus.queries import _FACT
from gpumon.sources.prometheus.series import _host, _Series
from gpumon.sources.prometheus.targets import (
    TARGET_FACTS,
    Target,
    _add_fact,
    _Facts,
    _target,
    _unique,
    _with_fleet_interval,
)

_GPUMON, _DCGM = "instance:gpumon_", "instance:dcgm_"
_HIDDEN_LABELS = frozenset({"__name__", "instance", "job", _FACT})


@dataclass(slots=True)
class _Read:
    """What the answer told of one target."""

    values: dict[str, float | None] = field(default_factory=dict)
    top: str | None = None  # the user holding the most GPU memory, where one has a process
    users: dict[str, dict[str, float | None]] = field(default_factory=dict)
    series: list[_Series] = field(default_factory=list)  # its per-node series (host, health)
    hosts: dict[str, str | None] = field(default_factory=dict)  # fact -> host label
    #: The recorded entry this one copies, where the rules' series were not read again:
    #: it keeps the row's readings made of them (:meth:`readings`).
    source: _Read | None = None
    kept: tuple[ExporterKind, int, dict[str, Any]] | None = None  # (kind, GPUs, readings)

    def kind(self) -> ExporterKind:
        told = self.top is not None or self.users or self.series
        if told or any(k.startswith(_GPUMON) for k in self.values):
            return ExporterKind.GPUMON
        return ExporterKind.DCGM if _DCGM + "gpus:count" in self.values else ExporterKind.UNKNOWN

    def recorded(self) -> _Read | None:
        """What the recording rules' series told of the target (its aggregates, users and
        top user, dcgm-exporter's host), for the refreshes that do not ask them again; None:
        nothing."""
        values = {f: v for f, v in self.values.items() if f not in _SEEN}
        hosts = {f: h for f, h in self.hosts.items() if f == _DCGM + "gpus:count"}
        if values or hosts or self.top is not None or self.users:
            return _Read(values, self.top, dict(self.users), hosts=hosts)
        return None

    def readings(
        self, kind: ExporterKind, gpus: int, instance: str, job: str | None
    ) -> dict[str, Any]:
        """The row's readings (:func:`_readings`; not to be changed), made once for the
        refreshes that copy the same recorded entry: most of a lean refresh's rows."""
        source = self.source
        told = (self.values, self.top, self.users)
        if source is None or told != (source.values, source.top, source.users):
            return _readings(kind, self, gpus, instance, job)
        if source.kept is None or source.kept[:2] != (kind, gpus):
            source.kept = (kind, gpus, _readings(kind, self, gpus, instance, job))
        return source.kept[2]

    def seen_kind(self) -> ExporterKind:
        if "seen_gpus" in self.values or "seen_host" in self.hosts:
            return ExporterKind.GPUMON
        return ExporterKind.DCGM if "seen_dcgm" in self.values else ExporterKind.UNKNOWN


#: What the recording rules' series told of each target (:meth:`_Read.recorded`).
Recorded = dict[Target, _Read]
#: A node's host label and row, as last read while it served GPU data.
Remembered = tuple[str | None, NodeSummary]


@dataclass(frozen=True, slots=True)
class Answer:
    """The rows of one refresh, and what the next one needs."""

    now_s: float  # when Prometheus evaluated the answer
    rows: tuple[NodeSummary, ...]
    top_users: tuple[Ranked, ...]
    rules_loaded: float | None
    scrape_interval_s: float | None
    known: dict[Target, Remembered]  # rows read while their node served GPU data
    facts: dict[Target, _Facts]  # the targets' facts, for a lean answer's sake
    #: What the recording rules' series told of each target, for an answer without them.
    recorded: Recorded = field(default_factory=dict)
    #: A lean answer's targets are not those of the earlier facts (a new one, one up or down
    #: since): ask again with every fact.
    changed: bool = False


def read_rows(
    series: Iterable[_Series],
    clock: Callable[[float | None], float],
    known: dict[Target, Remembered],
    rules: bool = False,
    earlier: dict[Target, _Facts] | None = None,
    users: bool = True,
    recorded: Recorded | None = None,
) -> Answer:
    """The rows for the aggregate query's answer ``series``, read once, and when it was
    evaluated: ``clock`` of the latest time its series tell (None: none); ``known``: the
    rows of the previous refresh's nodes that served GPU data then; ``rules``: the
    answer read the recording rules' series; ``earlier``: the targets' facts of an earlier
    whole answer, for a lean one (its scrape intervals, last times up and hosts); ``users``: the
    answer holds every user on each node (else a row keeps the users of its known row);
    ``recorded``: the rules' series are not in the answer, an earlier answer's
    (:attr:`Answer.recorded`) stand for them (the rules were not evaluated since)."""
    read: dict[Target, _Read] = {}
    if recorded is not None:  # copies: the facts complete each entry
        read = {t: _Read(dict(r.values), r.top, dict(r.users), hosts=dict(r.hosts), source=r)
                for t, r in recorded.items()}  # fmt: skip
    facts: dict[Target, _Facts] = {}
    top: list[Ranked] = []
    loaded: float | None = None
    latest = moment = None
    for item in series:
        if item.time_s is not moment:  # most series share the moment of the one before
            moment = item.time_s
            if moment is not None and (latest is None or moment > latest):
                latest = moment
        labels = item.labels
        # A recording rule's series read as they are is told apart by its name.
        fact = labels.get(_FACT) or labels.get("__name__", "")
        instance = labels.get("instance")
        # Most of them, the fast way; each keeps the table's name, not the answer's copy.
        if (value_of := _VALUES.get(fact)) is not None and instance is not None:
            target = (instance, labels.get("job", ""))
            entry = read.get(target) or read.setdefault(target, _Read())
            entry.values[value_of] = item.value
            continue
        found = _target(item)
        if fact in TARGET_FACTS:
            _add_fact(facts, item)
            if found is not None and earlier is None and fact in ("up", "scraped"):
                facts[found].labels = tuple(  # (the lean refreshes keep them)
                    sorted((k, safe_text(v)) for k, v in labels.items() if k not in _HIDDEN_LABELS)
                )
            continue
        if fact == "top_user":
            if item.value is not None:
                top.append(Ranked(item.label("user") or UNKNOWN_USER, item.value))
            continue
        if fact == RULES_LOADED:
            if item.label("version") == RULES_VERSION:
                loaded = item.value
            continue
        if found is None:
            continue
        entry = read.setdefault(found, _Read())
        if fact == "node:host":  # (its host label is read once the answer is)
            entry.series.append(item)
        elif fact.startswith("node:"):  # the exporter's health: a name, a value (a GPU's)
            gpu = {"gpu": labels["gpu"]} if "gpu" in labels else {}
            entry.series.append(_Series(item.name, gpu, item.value, item.time_s))
        elif fact == TOP_RULE:
            entry.top = item.label("user") or UNKNOWN_USER
        elif fact.startswith("instance_user:"):
            user = item.label("user") or UNKNOWN_USER
            entry.users.setdefault(user, {})[fact] = item.value
        elif fact in ("seen_host", "seen_dcgm", _DCGM + "gpus:count"):
            entry.hosts[fact] = item.label("hostname" if fact == "seen_host" else "Hostname")
            if fact != "seen_host":  # one series per host label: their GPUs add up
                entry.values[fact] = (entry.values.get(fact) or 0) + (item.value or 0)
        elif fact.startswith(("instance:", "seen_")):
            entry.values[fact] = item.value
    now = clock(latest)
    if recorded is None and rules:
        recorded = {t: part for t, r in read.items() if (part := r.recorded()) is not None}
    if earlier is None:
        for target, entry in read.items():
            values = {f: v for f, v in entry.values.items() if f in _SEEN}
            hosts = {f: h for f, h in entry.hosts.items() if f in _SEEN}
            if target in facts or values or hosts:  # one gone from Prometheus: seen in the hour
                told = facts.setdefault(target, _Facts())
                told.host, told.seen = _host(entry.series), (values, hosts)
    else:
        facts, changed = _with_earlier(facts, earlier)
        if changed:
            return Answer(now, (), (), loaded, None, {}, {}, changed=True)
        for target, told in facts.items():
            if told.seen[0] or told.seen[1]:
                entry = read.setdefault(target, _Read())
                entry.values.update(told.seen[0])
                entry.hosts.update(told.seen[1])
    kinds = {t: r.kind() for t, r in read.items()}
    gpu_jobs = {t[1] for t, r in read.items() if kinds[t] is not ExporterKind.UNKNOWN}
    gpu_jobs |= {t[1] for t, r in read.items() if r.seen_kind() is not ExporterKind.UNKNOWN}
    targets = sorted(t for t in set(read) | set(facts) if t[1] in gpu_jobs)
    interval = _with_fleet_interval(facts, targets)
    built: list[tuple[str | None, NodeSummary]] = []
    remembered: dict[Target, Remembered] = {}
    for target in targets:
        host, row, keep = _row(target, facts.get(target) or _Facts(), read.get(target) or _Read(),
                               kinds.get(target, ExporterKind.UNKNOWN), now, known.get(target),
                               rules, users)  # fmt: skip
        built.append((host, row))
        if (kept := keep or known.get(target)) is not None:
            remembered[target] = kept
    names = node_names([(host, row.instance) for host, row in built])
    names = _unique(names, [row.job for _, row in built])
    rows = [
        row if row.name == name else replace(row, name=name)
        for name, (_, row) in zip(names, built, strict=True)
    ]
    return Answer(
        now_s=now,
        rows=tuple(sorted(rows, key=lambda row: (row.name, row.instance))),
        top_users=tuple(sorted(top, key=lambda r: (-r.value, r.name))),
        rules_loaded=loaded,
        scrape_interval_s=interval,
        known=remembered,
        facts=facts,
        recorded=recorded or {},
    )


def _with_earlier(
    facts: dict[Target, _Facts], earlier: dict[Target, _Facts]
) -> tuple[dict[Target, _Facts], bool]:
    """A lean answer's facts completed by the earlier ones: a target's interval, host and last
    time up (fixed while it stays down), a gone target's as they were; changed when a target
    is new or has gone up, down or away since."""
    merged = {t: e for t, e in earlier.items() if t not in facts}
    if any(e.up is not None for e in merged.values()):
        return facts, True
    for target, fact in facts.items():
        before = earlier.get(target)
        if before is None or (before.up == 1) != (fact.up == 1):
            return facts, True
        fact.last_up_s, fact.interval_s = before.last_up_s, before.interval_s
        fact.host, fact.seen, fact.labels = before.host, before.seen, before.labels
        merged[target] = fact
    return merged, False


def _row(
    target: Target,
    facts: _Facts,
    read: _Read,
    kind: ExporterKind,
    now: float,
    known: Remembered | None,
    rules: bool = False,
    users: bool = True,
) -> tuple[str | None, NodeSummary, Remembered | None]:
    """(host label, the row, the row to remember or None): :func:`.nodes._build_node`'s rules."""
    state, last_seen, down_since = _state(facts, now)
    interval = facts.interval_s or DEFAULT_SCRAPE_INTERVAL_S
    host = facts.host or read.hosts.get(_DCGM + "gpus:count")
    host = host or read.hosts.get("seen_host") or read.hosts.get("seen_dcgm")
    host = host or (known[0] if known is not None else None)
    gpus = read.values.get(_GPUMON + "gpus:count" if kind is ExporterKind.GPUMON else
                           _DCGM + "gpus:count") or 0  # fmt: skip
    problem = _count_problem(gpus)
    sampled: float | None = None
    readings: dict[str, Any] | None = None
    instance, job = safe_text(target[0]), safe_text(target[1]) or None
    if problem is None and kind is not ExporterKind.UNKNOWN and gpus:
        readings = read.readings(kind, int(gpus), instance, job)
        if not users:
            readings = readings | {"users": known[1].users if known is not None else frozenset()}
        if kind is ExporterKind.GPUMON and state is NodeState.UP:
            problem, sampled = _health(read.series, now, interval, facts.scraped_s)
    else:
        if known is not None:
            kind, row = known[1].exporter, known[1]
        else:
            kind = read.seen_kind() if kind is ExporterKind.UNKNOWN else kind
            seen = read.values.get("seen_gpus" if kind is ExporterKind.GPUMON else "seen_dcgm")
            count = int(seen or 0) if _count_problem(seen or 0) is None else 0
            row = _empty(kind, count, instance, job)
        if problem is None and state is NodeState.UP and kind is not ExporterKind.UNKNOWN:
            problem, sampled = _health(read.series, now, interval, facts.scraped_s)
            problem = problem or (
                "no row recorded yet: the recording rules run at their evaluation interval"
                if rules
                else "the exporter serves no GPU series: its sampling fails"
            )
    if problem is not None and state is NodeState.UP:
        state = NodeState.STALE
        if sampled is not None and (last_seen is None or sampled < last_seen):
            last_seen = sampled
    now_told: dict[str, Any] = {
        "name": host or instance,
        "state": state,
        "last_seen_s": last_seen,
        "down_since_s": down_since,
        "problem": problem,
        "labels": facts.labels,
    }
    if state is not NodeState.UP:
        now_told["free_gpus"] = None
    if readings is None:
        return host, replace(row, **now_told), None
    row = NodeSummary(**(readings | now_told))  # made once: most rows take this way
    return host, row, (host, row)


def _count_problem(gpus: float) -> str | None:
    if gpus <= MAX_GPUS_PER_NODE:
        return None
    return f"refused: its exporter claims {gpus:.0f} GPUs; a node has at most {MAX_GPUS_PER_NODE}"


def _empty(kind: ExporterKind, gpus: int, instance: str, job: str | None) -> NodeSummary:
    return NodeSummary(
        instance, NodeState.UP, gpus, None, None, None, None, None, None, None, None, kind,
        instance=instance, job=job,
    )  # fmt: skip


def _int(value: float | None) -> int | None:
    return None if value is None else round(value)


def _readings(
    kind: ExporterKind, read: _Read, gpus: int, instance: str, job: str | None
) -> dict[str, Any]:
    """The row's readings from a node's aggregates (its state and name are told after)."""
    prefix = _GPUMON if kind is ExporterKind.GPUMON else _DCGM
    values = read.values
    told = kind is ExporterKind.GPUMON and prefix + "gpus_free:count" in values
    idle = {u: v for u, f in read.users.items() if (v := f.get(_IDLE))}
    # No top user: no process on the node, so none idle.
    idle_known = told and ("instance:gpumon_idle_told:count" in values or read.top is None)
    return {
        "gpu_count": gpus,
        "free_gpus": _int(values.get(prefix + "gpus_free:count")) if told else None,
        "mean_utilization_pct": values.get(prefix + "utilization:mean"),
        "memory_used_bytes": _int(values.get(prefix + "memory_used_bytes:sum")),
        "memory_total_bytes": _int(values.get(prefix + "memory_total_bytes:sum")),
        "hottest_c": _int(values.get(prefix + "temperature_celsius:max")),
        "top_user": read.top if told else None,
        "exporter": kind,
        "instance": instance,
        "job": job,
        "max_utilization_pct": values.get(prefix + "utilization:max"),
        "idle_held_bytes": _int(sum(idle.values())) if idle_known else None,
        "idle_holders": tuple(sorted(idle, key=lambda u: (-idle[u], u))),
        "users": frozenset(read.users),
        "simulated": bool(values.get(_GPUMON + "simulated:max")),
    }


_IDLE = "instance_user:gpumon_idle_held_bytes:sum"
_SEEN = ("seen_host", "seen_gpus", "seen_dcgm")
#: Facts that are one number of a node, by name.
_VALUES = {
    name: name
    for name in (*RULES, "seen_gpus")
    if name.startswith(("instance:", "seen_")) and name != _DCGM + "gpus:count"
}
