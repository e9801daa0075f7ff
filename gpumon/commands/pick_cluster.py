"""``gpumon pick --prometheus URL``: N GPUs of one node, as ``HOST GPUS``; or, with
``--across-nodes``, ``node:index,...`` from several.

    read host gpus < <(gpumon pick --prometheus http://prometheus:9090 -n 2)

``--wait`` asks again at most every :data:`POLL_FLOOR_S` (Prometheus' data changes only when
it scrapes). Claims are this machine's: a cluster pick leaves none and reads none.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from gpumon.commands import cluster_output as co
from gpumon.commands import cluster_pick
from gpumon.commands.pick_wait import Attempt, attempts, hand_over, processes_text
from gpumon.data.cluster import ClusterSample

if TYPE_CHECKING:
    from gpumon.config import Settings

#: Prometheus is asked at most this often while waiting.
POLL_FLOOR_S = 5.0
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
    from gpumon.sources import cluster_base

    wanted = Wanted(n, min_free_bytes, max_utilization_pct, free_below_bytes, output_format)
    source = None
    looks = 0

    def look() -> Attempt:
        nonlocal looks
        looks += 1
        # Without --wait, one read through the one function every headless mode uses.
        cluster = cluster_base.take_cluster_sample(settings) if source is None else source.sample()
        failure = co.read_failure(cluster)
        if failure is not None:
            if looks == 1:  # a wrong address or token: waiting would not mend it
                return Attempt(fatal=(f"gpumon pick: {failure}",))
            return Attempt(failure=f"gpumon pick: {failure}", status=f"waiting: {failure}")
        return across(cluster, wanted) if across_nodes else one_node(cluster, wanted)

    try:
        if wait_s is not None:
            source = cluster_base.open_headless_source(settings)
        interval_s = max(settings.interval_s, POLL_FLOOR_S)
        result = attempts(look, wait_s=wait_s, interval_s=interval_s, stderr=sys.stderr)
    except SettingsError as error:  # without --wait the source opens in the first look
        print(f"gpumon: error: {error}", file=sys.stderr)
        return 2
    finally:
        if source is not None:
            source.close()
    return result if isinstance(result, int) else hand_over(result)


def one_node(cluster: ClusterSample, wanted: Wanted) -> Attempt:
    """One look for ``n`` GPUs of one node: ``HOST GPUS``, or why not."""
    n = wanted.n
    found = cluster_pick.pick_one_node(cluster, **asdict(wanted))
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


def across(cluster: ClusterSample, wanted: Wanted) -> Attempt:
    """One look for ``n`` GPUs on any nodes: ``node:index,...``, or why not."""
    n = wanted.n
    picked, reasons = cluster_pick.rank_cluster(cluster, **asdict(wanted))
    if len(picked) < n:
        nodes = f"{len(cluster.nodes)} node" + ("" if len(cluster.nodes) == 1 else "s")
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
