"""What the cluster screens read of an answer, worked out once per answer.

The node list's rows and the fleet summary (:func:`~gpumon.data.cluster.rows_of`,
:func:`~gpumon.data.cluster.fleet_of`), a row by name, and a node with its GPUs: from the
answer where it carries them (the per-series path, hand-made samples), else from the node's
last detail read (:mod:`gpumon.ui.cluster.detail`). A node's readings are current only
while it is UP in an answer that is not stale and its last detail read answered: only
then may a GPU of it be FREE.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping

from gpumon.data.cluster import (
    ClusterSample,
    Fleet,
    Node,
    NodeSummary,
    Ranked,
    fleet_of,
    rows_of,
)
from gpumon.data.free import free_gpu_indices
from gpumon.data.views import user_summary
from gpumon.ui.cluster.detail import Detail


def find_node(cluster: ClusterSample | None, name: str) -> Node | None:
    """The node called ``name`` in ``cluster``'s nodes; ``None`` when they do not hold it."""
    if cluster is None:
        return None
    return next((node for node in cluster.nodes if node.name == name), None)


def top_users(nodes: Iterable[Node]) -> list[Ranked]:
    """The users holding the most GPU memory on the UP nodes, most first: the fleet's list
    where the source gave none (an answer with every node's processes)."""
    held: Counter[str] = Counter()
    for node in nodes:
        if node.usable:
            for user in user_summary(node.sample.processes):
                held[user.user] += user.gpu_memory_bytes or 0
    return [Ranked(user, float(value)) for user, value in held.most_common()]


class Shown:
    """The rows, fleet and nodes of the latest answer asked about (one kept: the screens
    all read the answer shown)."""

    def __init__(self, free_threshold_mib: int, details: Mapping[str, Detail]) -> None:
        self.free_threshold_mib = free_threshold_mib
        self._details = details
        self._of: ClusterSample | None = None
        self._rows: tuple[NodeSummary, ...] = ()
        self._fleet = fleet_of(())
        self._by_name: dict[str, NodeSummary] = {}

    def rows(self, cluster: ClusterSample | None) -> tuple[tuple[NodeSummary, ...], Fleet]:
        """The node list's rows and the fleet summary of ``cluster``."""
        if cluster is not self._of:
            rows = () if cluster is None else rows_of(cluster, self.free_threshold_mib)
            fleet = None if cluster is None else cluster.fleet
            if fleet is None:
                fleet = fleet_of(rows, () if cluster is None else top_users(cluster.nodes))
            self._of, self._rows, self._fleet = cluster, rows, fleet
            self._by_name = {row.name: row for row in rows}
        return self._rows, self._fleet

    def row_of(self, cluster: ClusterSample | None, name: str) -> NodeSummary | None:
        """The row of node ``name``; ``None`` when the answer no longer lists it."""
        self.rows(cluster)
        return self._by_name.get(name)

    def node_of(self, cluster: ClusterSample | None, name: str) -> tuple[Node | None, bool]:
        """Node ``name`` with its GPUs and processes (``None``: not listed, or not read yet),
        and whether its readings are current."""
        node = find_node(cluster, name)
        if cluster is None or node is not None:
            return node, node is not None and node.usable and not (cluster and cluster.stale)
        detail = self._details.get(name)
        row = self.row_of(cluster, name)
        if detail is None or detail.node is None or row is None:
            return None, False
        current = row.current and detail.node.usable and detail.error is None
        return detail.node, current and not cluster.stale

    def free_of(self, cluster: ClusterSample | None, name: str) -> frozenset[int]:
        """The FREE GPUs of node ``name``, as its screen marks them: none unless current."""
        node, current = self.node_of(cluster, name)
        if node is None or not current:
            return frozenset()
        return free_gpu_indices(node.sample, self.free_threshold_mib)
