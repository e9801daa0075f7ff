"""``gpumon pick --prometheus URL``: N GPUs of one node, as ``HOST GPUS``; or, with
``--across-nodes``, ``node:index,...`` from several.

    read host gpus < <(gpumon pick --prometheus http://prometheus:9090 -n 2)

The nodes come from the fleet's rows; of a fleet larger than
:data:`~gpumon.commands.cluster_fleet.SMALL_FLEET_NODES` only the nodes whose FREE counts can
give the pick are read GPU by GPU, best first, at most :data:`MAX_DETAILED_NODES`. ``--wait``
asks again at most every :data:`POLL_FLOOR_S` (Prometheus' data changes only when it
scrapes). Claims are this machine's: a cluster pick leaves none and reads none.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

from gpumon.commands import cluster_fleet as cf
from gpumon.commands import cluster_output as co
from gpumon.commands import cluster_pick
from gpumon.commands.pick_wait import Attempt, attempts, hand_over, processes_text
from gpumon.data.cluster import ClusterSample, Node, NodeSummary

if TYPE_CHECKING:
    from gpumon.config import Settings

#: Prometheus is asked at most this often while waiting.
POLL_FLOOR_S = 5.0
#: A pick reads at most this many nodes GPU by GPU; one node's pick, this many at a time.
MAX_DETAILED_NODES = 64
ONE_NODE_BATCH = 4
SIMULATED = "gpumon pick: simulated GPUs (a node serves gpumon export --demo)"


@dataclass(frozen=True, slots=True)
class Wanted:
    """What the pick asks for (``free_below_bytes``: only FREE GPUs qualify)."""

    n: int
    min_free_bytes: int | None
    max_utilization_pct: float | None
    free_below_bytes: int | None
    output_format: str

    @property
    def word(self) -> str:
        return "qualify" if self.free_below_bytes is None else "free"


def run_cluster(
    settings: Settings,
    *,
    n: int,
    min_free_bytes: int | None,
    max_utilization_pct: float | None,
    free_below_bytes: int | None,
    output_format: str,
    across_nodes: bool = False,
    wait_s: float | None = None,
) -> int:
    """Print the picked GPUs (exit 0), or why no node has them (exit 1); 2: bad settings."""
    from gpumon.config import SettingsError
    from gpumon.sources.prometheus.client import PrometheusError

    wanted = Wanted(n, min_free_bytes, max_utilization_pct, free_below_bytes, output_format)
    looks = 0

    def look() -> Attempt:
        nonlocal looks
        looks += 1
        cluster = source.sample()
        failure = co.read_failure(cluster)
        if failure is not None:
            if looks == 1:  # a wrong address or token: waiting would not mend it
                return Attempt(fatal=(f"gpumon pick: {failure}",))
            return Attempt(failure=f"gpumon pick: {failure}", status=f"waiting: {failure}")
        try:
            return (
                across(source, cluster, wanted)
                if across_nodes
                else one_node(source, cluster, wanted)
            )
        except PrometheusError as error:  # a node's GPUs could not be read: ask again
            return Attempt(failure=f"gpumon pick: {error}", status=f"waiting: {error}")

    try:
        source = cf.open_fleet_source(settings)
    except SettingsError as error:
        print(f"gpumon: error: {error}", file=sys.stderr)
        return 2
    try:
        interval_s = max(settings.interval_s, POLL_FLOOR_S)
        result = attempts(look, wait_s=wait_s, interval_s=interval_s, stderr=sys.stderr)
    finally:
        source.close()
    return result if isinstance(result, int) else hand_over(result)


def with_offers(
    source: cf.FleetSource,
    overview: ClusterSample,
    wanted: Wanted,
    *,
    one_node: bool,
    enough: Callable[[ClusterSample], bool],
) -> tuple[ClusterSample, tuple[str, ...]]:
    """``overview`` with the nodes the pick needs read GPU by GPU (every node of a small
    fleet), and why the nodes not read cannot give it. Candidates are read best first until
    ``enough`` says the pick is made; raises ``PrometheusError``."""
    if overview.nodes:
        return overview, ()
    if len(overview.rows or ()) <= cf.SMALL_FLEET_NODES:
        return source.sample(detail=True), ()
    free_only = wanted.free_below_bytes is not None
    candidates, reasons = cluster_pick.candidate_rows(
        overview, need=wanted.n if one_node else 1, free_only=free_only, ssh_names_only=one_node
    )
    nodes: list[Node] = []
    detailed = replace(overview, nodes=())
    while candidates and len(nodes) < MAX_DETAILED_NODES and not (nodes and enough(detailed)):
        size = ONE_NODE_BATCH if one_node else _covering(candidates, wanted.n, free_only)
        batch = candidates[: min(size, MAX_DETAILED_NODES - len(nodes))]
        candidates = candidates[len(batch) :]
        nodes += [source.detail(row.name) for row in batch]
        detailed = replace(overview, nodes=tuple(nodes))
    if candidates:
        reasons += (f"{len(candidates)} more candidate nodes not read",)
    return detailed, reasons


def _covering(rows: Sequence[NodeSummary], n: int, free_only: bool) -> int:
    """How many of ``rows`` (at least one) together offer ``n`` GPUs."""
    offered = 0
    for count, row in enumerate(rows, 1):
        offered += (row.free_gpus if free_only else row.gpu_count) or 0
        if offered >= n:
            return count
    return max(1, len(rows))


def one_node(source: cf.FleetSource, overview: ClusterSample, wanted: Wanted) -> Attempt:
    """One look for ``n`` GPUs of one node: ``HOST GPUS``, or why not."""
    n = wanted.n

    def found_in(cluster: ClusterSample) -> cluster_pick.OneNodeResult:
        return cluster_pick.pick_one_node(cluster, **asdict(wanted))

    cluster, unread = with_offers(
        source, overview, wanted, one_node=True, enough=lambda c: found_in(c).pick is not None
    )
    found = found_in(cluster)
    found = replace(found, reasons=(*unread, *found.reasons))
    if found.best_node is None:  # none read: the row with the most FREE, if any
        found = replace(
            found, **cluster_pick.best_row(cluster, wanted.free_below_bytes is not None)
        )
    if found.pick is None:
        if found.best_node is None:
            status = f"waiting: no node has a GPU {wanted.word} (need {n})"
        else:
            status = f"waiting: the best node, {found.best_node}, has {found.best_count} of {n}"
        failure = cluster_pick.one_node_failure_line(cluster, found, n)
        return Attempt(failure=failure, status=f"{status} {wanted.word}")
    notes = [SIMULATED] if cluster.simulated else []
    busy = [c for c in found.pick.picked if c.process_count]
    if busy:
        listed = ", ".join(f"{c.label} runs {processes_text(c.process_count)}" for c in busy)
        notes.append(f"gpumon pick: note: {found.pick.node}: {listed}")
    return Attempt(output=found.pick.line(wanted.output_format), notes=tuple(notes))


def across(source: cf.FleetSource, overview: ClusterSample, wanted: Wanted) -> Attempt:
    """One look for ``n`` GPUs on any nodes: ``node:index,...``, or why not."""
    n = wanted.n

    def ranked(
        cluster: ClusterSample,
    ) -> tuple[tuple[cluster_pick.ClusterCandidate, ...], tuple[str, ...]]:
        return cluster_pick.rank_cluster(cluster, **asdict(wanted))

    cluster, unread = with_offers(
        source, overview, wanted, one_node=False, enough=lambda c: len(ranked(c)[0]) >= n
    )
    picked, reasons = ranked(cluster)
    reasons = (*unread, *reasons)
    if len(picked) < n:
        count = cluster_pick.node_count(cluster)
        nodes = f"{count} node" + ("" if count == 1 else "s")
        return Attempt(
            failure=cluster_pick.cluster_failure_line(cluster, picked, reasons, n),
            status=f"waiting: {len(picked)} of {n} {wanted.word} on {nodes}",
        )
    notes = [SIMULATED] if cluster.simulated else []
    busy = [c for c in picked if c.candidate.process_count]
    if busy:
        listed = ", ".join(
            f"{c.label} runs {processes_text(c.candidate.process_count)}" for c in busy
        )
        notes.append(f"gpumon pick: note: {listed} (too few GPUs without processes)")
    value = ",".join(candidate.value(wanted.output_format) for candidate in picked)
    return Attempt(output=value, notes=tuple(notes))
