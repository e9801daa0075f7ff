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
from gpumon.data.views import is_stale, user_summary


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

    @property
    def simulated(self) -> bool:
        """Any node serves simulated data (``gpumon export --demo``): labelled everywhere."""
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
    so that no view counts, offers or watches a GPU of it as FREE."""
    nodes = tuple(no_longer_current(node) for node in cluster.nodes)
    return dataclasses.replace(cluster, nodes=nodes, stale=True)


def _sum(values: Iterable[int | None]) -> int | None:
    known = [value for value in values if value is not None]
    return sum(known) if known else None
