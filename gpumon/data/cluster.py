"""A cluster as Prometheus sees it: nodes, each one scrape target with its own :class:`Sample`.

Pure data and functions. A node whose target is down, whose series are older than three
scrape intervals or whose exporter serves an old sample is DOWN or STALE with when it was
last seen; its last known GPUs are kept, and no view may count them free.
"""

from __future__ import annotations

import dataclasses
import enum
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpumon.data.free import free_gpu_indices
from gpumon.data.model import GpuStats, Sample
from gpumon.data.views import OTHER_NAMESPACE, UNKNOWN_USER, is_stale, user_summary


class NodeState(str, enum.Enum):
    UP = "up"
    DOWN = "down"  # Prometheus scraped it and failed (up == 0)
    STALE = "stale"  # no fresh data: the target is gone, scrapes stopped, the sampler is stuck


class ExporterKind(str, enum.Enum):
    GPUMON = "gpumon"  # gpumon's own exporter: GPUs and processes
    DCGM = "dcgm"  # NVIDIA's dcgm-exporter: GPUs only, fewer fields
    UNKNOWN = "unknown"  # a target with an ``up`` series and no GPU metric known here


@dataclass(frozen=True, slots=True)
class Node:
    """One scrape target.

    ``name`` is its host label, else Prometheus' ``instance`` (``host (instance)`` when two
    targets share a label: never merged). ``sample`` holds its GPUs, fields the exporter lacks
    as ``None``. ``last_seen_s`` and ``down_since_s`` are ``None`` when not known; ``problem``
    says in one line why a node that answers is not UP or was refused.
    """

    name: str
    instance: str
    job: str | None
    exporter: ExporterKind
    state: NodeState
    sample: Sample
    last_seen_s: float | None = None
    down_since_s: float | None = None
    problem: str | None = None

    @property
    def gpus(self) -> tuple[GpuStats, ...]:
        return self.sample.gpus

    @property
    def usable(self) -> bool:
        """Its data is current: UP. A DOWN or STALE node's GPUs are never free."""
        return self.state is NodeState.UP


@dataclass(frozen=True, slots=True)
class ClusterSample:
    """Everything the Prometheus server told at one instant. With ``error`` (why the last query
    failed) ``nodes`` are the last read and ``stale`` is True; ``url`` has no credentials.
    """

    timestamp_s: float
    url: str
    nodes: tuple[Node, ...]
    scrape_interval_s: float | None = None
    error: str | None = None
    stale: bool = False
    #: One row per node from aggregate queries (``nodes`` may then be empty: per-GPU series
    #: are fetched for the node on screen only); ``None``: build them from ``nodes``.
    rows: tuple[NodeSummary, ...] | None = None
    #: The fleet's totals and top-k lists; ``None``: compute them from the rows.
    fleet: Fleet | None = None
    #: How the rows were read, for the header: "recording rules", "raw queries" or None.
    path: str | None = None

    @property
    def simulated(self) -> bool:
        """Any node serves simulated data (``gpumon export --demo``): labelled everywhere."""
        if self.rows is not None:
            return any(row.simulated for row in self.rows)
        return any(node.sample.simulated for node in self.nodes)


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """One row of the node list."""

    name: str
    state: NodeState
    gpu_count: int
    free_gpus: int | None  # None: cannot tell (not UP, or processes unknown everywhere)
    mean_utilization_pct: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    hottest_c: int | None
    top_user: str | None  # by GPU memory; None without process data (dcgm-exporter)
    last_seen_s: float | None
    down_since_s: float | None
    exporter: ExporterKind
    instance: str = ""
    job: str | None = None
    max_utilization_pct: float | None = None
    #: GPU memory held by processes the exporter calls idle; None: not known (no process
    #: data, or an exporter that does not tell idleness).
    idle_held_bytes: int | None = None
    idle_holders: tuple[str, ...] = ()  # their users, made safe, by memory held
    users: frozenset[str] = frozenset()  # everyone with a process on it (the text filter)
    simulated: bool = False
    problem: str | None = None
    #: The target's grouping labels that a site sets (``partition``, ``cluster``...).
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def current(self) -> bool:
        """UP: its readings are current and its free GPUs may be offered."""
        return self.state is NodeState.UP


@dataclass(frozen=True, slots=True)
class Ranked:
    """One entry of a top-k list: a node (``node7``, ``node7 GPU 3``) or a user, and its value
    in the list's unit (°C, bytes)."""

    name: str
    value: float


@dataclass(frozen=True, slots=True)
class LabelCount:
    """GPUs and FREE GPUs of the nodes whose target carries ``label=value``."""

    label: str
    value: str
    gpus: int
    free_gpus: int


@dataclass(frozen=True, slots=True)
class Fleet:
    """The fleet summary over every node (a filter never changes it). GPUs, FREE and busy count
    UP nodes only; ``free_unknown`` UP nodes cannot tell their free GPUs (no process data)."""

    nodes: int
    down: int
    stale: int
    gpus: int
    free_gpus: int
    free_unknown: int
    busy_gpus: int
    idle_held_bytes: int | None
    by_label: tuple[LabelCount, ...] = ()
    hottest: tuple[Ranked, ...] = ()
    most_idle_held: tuple[Ranked, ...] = ()
    top_users: tuple[Ranked, ...] = ()  # by GPU memory held across the fleet


def summarize(node: Node, free_threshold_mib: int) -> NodeSummary:
    """The node list's row for ``node``. A node that is not UP has no free GPUs to offer."""
    gpus = [gpu for gpu in node.gpus if not gpu.lost]
    utils = [gpu.utilization_gpu_pct for gpu in gpus if gpu.utilization_gpu_pct is not None]
    used = _sum(gpu.memory_used_bytes for gpu in gpus)
    total = _sum(gpu.memory_total_bytes for gpu in gpus)
    temps = [gpu.temperature_c for gpu in gpus if gpu.temperature_c is not None]
    free: int | None = None
    if node.usable and node.sample.processes_read:
        free = len(free_gpu_indices(node.sample, free_threshold_mib))
    users = user_summary(node.sample.processes) if node.sample.processes_read else ()
    return NodeSummary(
        name=node.name,
        state=node.state,
        gpu_count=len(node.gpus),
        free_gpus=free,
        mean_utilization_pct=sum(utils) / len(utils) if utils else None,
        memory_used_bytes=used,
        memory_total_bytes=total,
        hottest_c=max(temps) if temps else None,
        top_user=users[0].user if users else None,
        last_seen_s=node.last_seen_s,
        down_since_s=node.down_since_s,
        exporter=node.exporter,
        instance=node.instance,
        job=node.job,
        max_utilization_pct=max(utils) if utils else None,
        users=frozenset(
            (p.user or UNKNOWN_USER) if p.visible else OTHER_NAMESPACE
            for p in node.sample.processes
        ),
        simulated=node.sample.simulated,
        problem=node.problem,
    )


def rows_of(cluster: ClusterSample, free_threshold_mib: int) -> tuple[NodeSummary, ...]:
    """The node list's rows: the aggregate path's, else one :func:`summarize` per node."""
    if cluster.rows is not None:
        return cluster.rows
    return tuple(summarize(node, free_threshold_mib) for node in cluster.nodes)


def fleet_of(rows: Sequence[NodeSummary], top_users: Sequence[Ranked] = (), k: int = 5) -> Fleet:
    """The fleet summary of ``rows`` (``top_users`` come from the source: a node's row names
    its top user only). Free and busy GPUs count UP nodes whose processes are known."""
    up = [row for row in rows if row.current]
    told = [row for row in up if row.free_gpus is not None]
    idle = [row.idle_held_bytes for row in up if row.idle_held_bytes is not None]
    groups: dict[tuple[str, str], list[NodeSummary]] = {}
    for row in up:
        for label in row.labels:
            groups.setdefault(label, []).append(row)
    hot = sorted(
        (row for row in up if row.hottest_c is not None), key=lambda r: -(r.hottest_c or 0)
    )
    held = sorted(
        (row for row in up if row.idle_held_bytes), key=lambda r: -(r.idle_held_bytes or 0)
    )
    return Fleet(
        nodes=len(rows),
        down=sum(row.state is NodeState.DOWN for row in rows),
        stale=sum(row.state is NodeState.STALE for row in rows),
        gpus=sum(row.gpu_count for row in up),
        free_gpus=sum(row.free_gpus or 0 for row in told),
        free_unknown=len(up) - len(told),
        busy_gpus=sum(row.gpu_count - (row.free_gpus or 0) for row in told),
        idle_held_bytes=sum(idle) if idle else None,
        by_label=tuple(
            LabelCount(
                label, value, sum(r.gpu_count for r in group), sum(r.free_gpus or 0 for r in group)
            )
            for (label, value), group in sorted(groups.items())
        ),
        hottest=tuple(Ranked(row.name, float(row.hottest_c or 0)) for row in hot[:k]),
        most_idle_held=tuple(Ranked(row.name, float(row.idle_held_bytes or 0)) for row in held[:k]),
        top_users=tuple(top_users[:k]),
    )


def node_names(targets: Sequence[tuple[str | None, str]]) -> list[str]:
    """Names for targets given as (host label or None, instance), in order: the host label,
    else the instance; ``host (instance)`` for every target whose host label another target
    shares."""
    counts = Counter(host for host, _ in targets if host)
    return [
        f"{host} ({instance})" if host and counts[host] > 1 else host or instance
        for host, instance in targets
    ]


def classify(
    up: float | None, last_seen_s: float | None, now_s: float, scrape_interval_s: float
) -> NodeState:
    """UP, DOWN (``up == 0``) or STALE (no series newer than three scrape intervals)."""
    if up is not None and up == 0:
        return NodeState.DOWN
    if is_stale(last_seen_s, now_s, scrape_interval_s):
        return NodeState.STALE
    return NodeState.UP


def no_longer_current(node: Node) -> Node:
    """``node`` once its data is no longer current (Prometheus did not answer, or its answer
    is late): an UP node turns STALE, a DOWN or STALE one stays as it is."""
    if node.state is NodeState.UP:
        return dataclasses.replace(node, state=NodeState.STALE)
    return node


def marked_stale(cluster: ClusterSample) -> ClusterSample:
    """``cluster`` no longer current: ``stale``, and no node UP (:func:`no_longer_current`),
    so that no view counts, offers or watches a GPU of it as FREE. Its rows likewise, and
    its fleet summary is counted again from them (no FREE GPU; the top users are kept)."""
    nodes = tuple(no_longer_current(node) for node in cluster.nodes)
    rows = cluster.rows
    fleet = cluster.fleet
    if rows is not None:
        rows = tuple(
            dataclasses.replace(row, state=NodeState.STALE) if row.current else row for row in rows
        )
        if fleet is not None:
            fleet = fleet_of(rows, fleet.top_users, max(len(fleet.top_users), 5))
    return dataclasses.replace(cluster, nodes=nodes, rows=rows, fleet=fleet, stale=True)


def _sum(values: Iterable[int | None]) -> int | None:
    known = [value for value in values if value is not None]
    return sum(known) if known else None
