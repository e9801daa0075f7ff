"""A cluster source for tests: the aggregate source's API over hand-made nodes or rows.

``sample()`` answers rows and the fleet only (``nodes=()``), as the aggregate queries do;
``sample(detail=True)`` also the nodes; ``detail(name)`` one node, by name or instance, or
:class:`PrometheusError`. ``calls`` records what was asked, so a test can tell what a command
read: ``["sample", "detail node3"]``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from gpumon.data.cluster import ClusterSample, Node, NodeSummary, fleet_of, rows_of
from gpumon.sources.prometheus.client import PrometheusError

FREE_THRESHOLD_MIB = 1024


class FakeClusterSource:
    """Answers ``answer`` (a :class:`ClusterSample` with ``nodes``, or ``rows`` only) in
    turn with the next of ``later`` on each ``sample()``; then the last for ever."""

    def __init__(self, answer: ClusterSample, *later: ClusterSample) -> None:
        self.answers = [answer, *later]
        self.calls: list[str] = []
        self.closed = False
        self.users_wanted = False

    @property
    def url(self) -> str:
        return self.answers[0].url

    def _current(self) -> ClusterSample:
        return self.answers[0]

    def sample(self, detail: bool = False) -> ClusterSample:
        self.calls.append("sample detail" if detail else "sample")
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        rows = rows_of(answer, FREE_THRESHOLD_MIB)
        fleet = answer.fleet or fleet_of(rows)
        nodes = answer.nodes if detail else ()
        path = answer.path or "raw queries"
        return dataclasses.replace(answer, nodes=nodes, rows=rows, fleet=fleet, path=path)

    def detail(self, node: str) -> Node:
        self.calls.append(f"detail {node}")
        answer = self._current()
        if answer.error is not None:
            raise PrometheusError(answer.error)
        for each in answer.nodes:
            if node in (each.name, each.instance):
                return each
        raise PrometheusError(f"Prometheus at {answer.url} knows no node {node!r}")

    @property
    def details(self) -> list[str]:
        """The nodes ``detail`` was asked for, in order."""
        return [call.removeprefix("detail ") for call in self.calls if call.startswith("detail ")]

    def close(self) -> None:
        self.closed = True


def rows_only(answer: ClusterSample) -> ClusterSample:
    """``answer`` as the aggregate path gives it: rows and fleet, no per-GPU nodes."""
    rows: Sequence[NodeSummary] = rows_of(answer, FREE_THRESHOLD_MIB)
    return dataclasses.replace(answer, nodes=(), rows=tuple(rows), fleet=fleet_of(rows))
