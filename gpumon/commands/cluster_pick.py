"""``gpumon pick --prometheus``'s ranking: the freest GPUs of a cluster's UP nodes.

Pure functions of a :class:`~gpumon.data.cluster.ClusterSample`: within a node,
:func:`gpumon.data.ranking.rank` decides, as for one machine; across nodes the freest come
first, ties by node name (as a person counts), then index. Only an UP node whose process
lists are known offers GPUs: unknown is never free.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpumon.commands.cluster_output import EXPORTER_LABELS, natural_key, ordered, state_text
from gpumon.data.cluster import ClusterSample
from gpumon.data.ranking import Candidate, rank


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
    cluster: ClusterSample,
    *,
    n: int = 1,
    min_free_bytes: int | None = None,
    max_utilization_pct: float | None = None,
    output_format: str = "index",
) -> tuple[tuple[ClusterCandidate, ...], tuple[str, ...]]:
    """The ``n`` freest GPUs of the cluster's UP nodes whose process lists are known, and
    why the others do not qualify (``node3 DOWN since 14:03``, ``node1: GPU 0 LOST``).

    A node that is not UP offers nothing (its GPUs' state is not known now), and neither
    does one whose exporter gives no process lists (dcgm-exporter): unknown is never free.
    Within a node, :func:`gpumon.data.ranking.rank` decides, with the same thresholds.
    """
    qualifying: list[ClusterCandidate] = []
    reasons: list[str] = []
    for node in ordered(cluster.nodes):
        if not node.usable:
            reasons.append(f"{node.name} {state_text(node, cluster.timestamp_s)}")
            continue
        if not node.sample.processes_read:
            exporter = EXPORTER_LABELS[node.exporter]
            reasons.append(f"{node.name} processes unknown ({exporter})")
            continue
        picked, why = rank(
            node.sample,
            n=n,
            min_free_bytes=min_free_bytes,
            max_utilization_pct=max_utilization_pct,
            output_format=output_format,
        )
        qualifying += [ClusterCandidate(node.name, candidate) for candidate in picked]
        reasons += [f"{node.name}: {reason}" for reason in why]
    qualifying.sort(key=ClusterCandidate.sort_key)
    return tuple(qualifying[:n]), tuple(reasons)


def cluster_failure_line(
    cluster: ClusterSample,
    picked: Sequence[ClusterCandidate],
    reasons: Sequence[str],
    n: int,
    *,
    max_reasons: int = 12,
) -> str:
    """The one stderr line for "fewer than ``n`` qualify" in the cluster, with why."""
    prefix = "gpumon pick: simulated GPUs (DEMO): " if cluster.simulated else "gpumon pick: "
    nodes = len(cluster.nodes)
    if nodes == 0:
        return f"{prefix}Prometheus at {cluster.url} knows no GPU node (need {n})"
    where = f"on {nodes} node" + ("" if nodes == 1 else "s")
    if picked:
        verb = "qualifies" if len(picked) == 1 else "qualify"
        head = f"only {len(picked)} GPU{'' if len(picked) == 1 else 's'} {where} {verb}"
    else:
        head = f"no GPU {where} qualifies"
    if not reasons:
        return f"{prefix}{head} (need {n})"
    shown = list(reasons[:max_reasons])
    if len(reasons) > max_reasons:
        shown.append(f"{len(reasons) - max_reasons} more")
    return f"{prefix}{head} (need {n}): {', '.join(shown)}"
