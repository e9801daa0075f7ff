"""``gpumon pick --prometheus``'s ranking: the freest GPUs of a cluster's UP nodes.

Pure functions; within a node :func:`gpumon.data.ranking.qualify` decides, as for one
machine. By default N GPUs of one node whose name one can ssh to (:func:`pick_one_node`);
with ``--across-nodes`` the freest of all nodes (:func:`rank_cluster`). Only an UP node whose
process lists are known offers GPUs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gpumon.commands.cluster_fleet import EXPORTER_LABELS, ordered_rows, state_text
from gpumon.commands.cluster_output import ordered
from gpumon.commands.pick_wait import with_reasons
from gpumon.data.cluster import ClusterSample, Node, NodeSummary
from gpumon.data.format import natural_key
from gpumon.data.ranking import Candidate, qualify, rank

#: A host name as ssh takes it: letters, digits, dots, hyphens and underscores, never
#: starting with a hyphen (ssh would read it as an option), no spaces, no port.
_HOST_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9._-]{0,251}[A-Za-z0-9_])?", re.ASCII)


@dataclass(frozen=True, slots=True)
class ClusterCandidate:
    """A GPU (or MIG instance) of one node that ``gpumon pick --prometheus`` could name."""

    node: str
    candidate: Candidate

    @property
    def label(self) -> str:
        """``node1:GPU 2``."""
        return f"{self.node}:{self.candidate.label}"

    def value(self, output_format: str) -> str:
        """``node1:2``, or ``node1:GPU-...`` with ``--format uuid``."""
        return f"{self.node}:{self.candidate.value(output_format)}"

    def sort_key(self) -> tuple[Any, ...]:
        """Freest first, as ``gpumon pick`` ranks one machine's GPUs; ties by node name,
        then index."""
        own = self.candidate
        return (
            own.process_count,
            math.inf if own.memory_used_bytes is None else own.memory_used_bytes,
            math.inf if own.utilization_pct is None else own.utilization_pct,
            natural_key(self.node),
            own.gpu_index,
            -1 if own.mig_index is None else own.mig_index,
        )


def rank_cluster(
    cluster: ClusterSample, *, n: int = 1, **thresholds: Any
) -> tuple[tuple[ClusterCandidate, ...], tuple[str, ...]]:
    """The ``n`` freest GPUs of the cluster's UP nodes whose process lists are known, and
    why the others do not qualify (``node3 DOWN since 14:03``, ``node1: GPU 0 LOST``).

    Within a node :func:`gpumon.data.ranking.rank` decides, with ``thresholds`` (its
    keywords); a node not UP, or without process lists, offers nothing.
    """
    reasons: list[str] = []
    nodes = _each_node(cluster, reasons, rank, n=n, **thresholds)
    qualifying = [ClusterCandidate(node.name, each) for node, picked in nodes for each in picked]
    qualifying.sort(key=ClusterCandidate.sort_key)
    return tuple(qualifying[:n]), tuple(reasons)


def _each_node(
    cluster: ClusterSample,
    reasons: list[str],
    choose: Callable[..., tuple[tuple[Candidate, ...], tuple[str, ...]]],
    *,
    ssh_names_only: bool = False,
    **thresholds: Any,
) -> Iterator[tuple[Node, tuple[Candidate, ...]]]:
    """Each node that offers GPUs, with what ``choose`` (:func:`rank` or :func:`qualify`)
    takes of them; why the other nodes and GPUs do not qualify goes to ``reasons``."""
    for node in ordered(cluster.nodes):
        if not node.usable:
            reasons.append(f"{node.name} {state_text(node, cluster.timestamp_s)}")
        elif not node.sample.processes_read:
            reasons.append(f"{node.name} processes unknown ({EXPORTER_LABELS[node.exporter]})")
        elif ssh_names_only and not safe_host_name(node.name):
            reasons.append(f"{node.name!r} is no host name to ssh to")
        else:
            chosen, why = choose(node.sample, **thresholds)
            reasons += [f"{node.name}: {reason}" for reason in why]
            yield node, chosen


def candidate_rows(
    cluster: ClusterSample, *, need: int, free_only: bool, ssh_names_only: bool
) -> tuple[list[NodeSummary], tuple[str, ...]]:
    """The rows whose node may offer ``need`` GPUs (FREE ones with ``free_only``, else any of
    an UP node whose processes are known), most FREE first; and why the others cannot. A
    row's FREE count bounds what qualifies there: only these nodes' GPUs need reading."""
    reasons: list[str] = []
    offers: list[NodeSummary] = []
    for row in ordered_rows(cluster.rows or ()):
        offer = row.free_gpus if free_only else row.gpu_count
        if not row.current:
            reasons.append(f"{row.name} {state_text(row, cluster.timestamp_s)}")
        elif row.free_gpus is None:
            reasons.append(f"{row.name} processes unknown ({EXPORTER_LABELS[row.exporter]})")
        elif ssh_names_only and not safe_host_name(row.name):
            reasons.append(f"{row.name!r} is no host name to ssh to")
        elif not offer or offer < need:
            reasons.append(
                f"{row.name}: {offer} FREE" if free_only else f"{row.name}: {offer} GPUs"
            )
        else:
            offers.append(row)
    offers.sort(key=_freest_row)
    return offers, tuple(reasons)


def _freest_row(row: NodeSummary) -> tuple[Any, ...]:
    utilization = row.mean_utilization_pct
    return (-(row.free_gpus or 0), math.inf if utilization is None else utilization)


def safe_host_name(name: str) -> bool:
    """True for a node name a script can hand to ssh as it is (``gpu-node3``,
    ``node3.cluster.local``, ``10.0.0.5``); False for ``host (instance)``, ``host:9400``."""
    return _HOST_NAME.fullmatch(name) is not None


@dataclass(frozen=True, slots=True)
class NodePick:
    """N GPUs of one node: printed as ``HOST GPUS`` (``node3 0,2``)."""

    node: str
    picked: tuple[Candidate, ...]

    def line(self, output_format: str) -> str:
        values = ",".join(candidate.value(output_format) for candidate in self.picked)
        return f"{self.node} {values}"


@dataclass(frozen=True, slots=True)
class OneNodeResult:
    """What :func:`pick_one_node` found: the pick (None: no node has N), why nodes and GPUs
    do not qualify, and the node with the most that do (None: none has any)."""

    pick: NodePick | None
    reasons: tuple[str, ...]
    best_node: str | None
    best_count: int


def pick_one_node(cluster: ClusterSample, *, n: int = 1, **thresholds: Any) -> OneNodeResult:
    """``n`` GPUs of one node: of the nodes with ``n`` that qualify, the one whose ``n`` are
    the freest (then by name). A node whose name is no safe host name is skipped."""
    reasons: list[str] = []
    offers: list[tuple[Any, NodePick]] = []
    counts: list[tuple[int, str]] = []
    for node, qualifying in _each_node(
        cluster, reasons, qualify, ssh_names_only=True, n=n, **thresholds
    ):
        if qualifying:
            counts.append((len(qualifying), node.name))
        if len(qualifying) >= n:
            chosen = qualifying[:n]
            key = (tuple(c.sort_key() for c in chosen), natural_key(node.name))
            offers.append((key, NodePick(node.name, chosen)))
    pick = min(offers, key=lambda offer: offer[0])[1] if offers else None
    best = min(counts, key=lambda count: (-count[0], natural_key(count[1])), default=(0, None))
    return OneNodeResult(pick=pick, reasons=tuple(reasons), best_node=best[1], best_count=best[0])


def one_node_failure_line(cluster: ClusterSample, result: OneNodeResult, n: int) -> str:
    """The one stderr line for "no node has ``n``", with the best node's count and why."""
    prefix = "gpumon pick: simulated GPUs (DEMO): " if cluster.simulated else "gpumon pick: "
    if not node_count(cluster):
        return f"{prefix}Prometheus at {cluster.url} knows no GPU node (need {n})"
    if result.best_node is None:
        head = f"no node has a GPU that qualifies (need {n} on one node)"
    else:
        head = (
            f"no node has {n} GPUs that qualify; the best, {result.best_node}, has "
            f"{result.best_count} (--across-nodes picks from several)"
        )
    return with_reasons(prefix + head, result.reasons)


def cluster_failure_line(
    cluster: ClusterSample,
    picked: Sequence[ClusterCandidate],
    reasons: Sequence[str],
    n: int,
) -> str:
    """The one stderr line for "fewer than ``n`` qualify" in the cluster, with why."""
    prefix = "gpumon pick: simulated GPUs (DEMO): " if cluster.simulated else "gpumon pick: "
    nodes = node_count(cluster)
    if nodes == 0:
        return f"{prefix}Prometheus at {cluster.url} knows no GPU node (need {n})"
    where = f"on {nodes} node" + ("" if nodes == 1 else "s")
    if picked:
        verb = "qualifies" if len(picked) == 1 else "qualify"
        head = f"only {len(picked)} GPU{'' if len(picked) == 1 else 's'} {where} {verb}"
    else:
        head = f"no GPU {where} qualifies"
    return with_reasons(f"{prefix}{head} (need {n})", reasons)


def best_row(cluster: ClusterSample, free_only: bool) -> dict[str, Any]:
    """``best_node`` and ``best_count`` of a :class:`OneNodeResult` from the rows: the UP
    node with a safe host name and the most FREE GPUs (any GPUs, not ``free_only``)."""
    offers = [
        (row.free_gpus if free_only else row.gpu_count, row.name)
        for row in cluster.rows or ()
        if row.current and row.free_gpus is not None and safe_host_name(row.name)
    ]
    count, name = min(
        ((count, name) for count, name in offers if count),
        key=lambda offer: (-offer[0], natural_key(offer[1])),
        default=(0, None),
    )
    return {"best_node": name, "best_count": count}


def node_count(cluster: ClusterSample) -> int:
    """The cluster's nodes: its rows where the aggregate path gave them."""
    return len(cluster.rows) if cluster.rows is not None else len(cluster.nodes)
