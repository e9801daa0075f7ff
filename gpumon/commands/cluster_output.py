"""A cluster for the headless modes: ``once --prometheus`` text and JSON.

Pure functions of a :class:`~gpumon.data.cluster.ClusterSample`, with no clock but the one
passed in. The fleet's line and its rows come from :mod:`gpumon.commands.cluster_fleet`; a
node read GPU by GPU prints as ``gpumon once`` prints a machine, under a line that says
whether it is UP; only an UP node's GPUs can be FREE.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpumon.commands import cluster_fleet as cf
from gpumon.commands.cluster_fleet import EXPORTER_LABELS, state_text
from gpumon.data import format as fmt
from gpumon.data.cluster import ClusterSample, ExporterKind, Node, NodeState, rows_of
from gpumon.data.format import natural_key
from gpumon.data.free import free_gpu_indices, processes_known
from gpumon.data.painting import BOLD, DIM, GREEN, RED, REVERSE, YELLOW, Painter
from gpumon.data.text_table import DEMO_MARKER, USER_COLUMNS, column_widths, gpu_lines, user_line
from gpumon.data.views import UserUsage, user_summary


def read_failure(cluster: ClusterSample) -> str | None:
    """Why ``cluster`` answers nothing a headless run can use (one line), or None."""
    if cluster.error is not None:
        if cluster.url in cluster.error:  # the source's line names the server already
            return cluster.error
        return f"cannot read Prometheus at {cluster.url}: {cluster.error}"
    if not cluster.nodes and not cluster.rows:
        return (
            f"Prometheus at {cluster.url} knows no GPU node: no scrape target with gpumon's "
            "or dcgm-exporter's metrics (docs/cluster.md has the scrape config)"
        )
    return None


def ordered(nodes: Sequence[Node]) -> list[Node]:
    """Nodes by name, as a person counts (``node2`` before ``node10``), then instance."""
    return sorted(nodes, key=lambda node: (natural_key(node.name), node.instance))


def node_free(node: Node, threshold_mib: int) -> frozenset[int]:
    """NVML indices of ``node``'s FREE GPUs: none unless it is UP with process lists."""
    return free_gpu_indices(node.sample, threshold_mib) if processes_shown(node) else frozenset()


def render_cluster(
    cluster: ClusterSample,
    *,
    show_processes: bool = True,
    by_user: bool = False,
    color: bool = False,
    width: int | None = None,
    ascii_only: bool | None = None,
    free_threshold_mib: int = 1024,
) -> str:
    """``gpumon once --prometheus``: the fleet's summary line; a line per node read without
    its GPUs (:func:`~gpumon.commands.cluster_fleet.row_lines`); per node read with them a
    header and its GPUs (as ``gpumon once`` prints them), then who uses what on those nodes;
    each line ends with a newline. ``show_processes`` False: no process lines, no FREE, no
    users; ``by_user``: the per-user table instead of the process lines.
    """
    paint = Painter(color)
    rows = rows_of(cluster, free_threshold_mib)
    fleet = cf.fleet_or_computed(cluster, rows)
    lines = cf.fleet_lines(cluster, fleet, show_free=show_processes, paint=paint, width=width)
    nodes = ordered(cluster.nodes)
    detailed = {node.name for node in nodes}
    brief = [row for row in cf.ordered_rows(rows) if row.name not in detailed]
    if brief:
        lines += cf.top_lines(fleet, show_processes=show_processes)
        lines += cf.row_lines(
            brief, cluster.timestamp_s, show_processes=show_processes, paint=paint
        )
    for node in nodes:
        lines.append(_node_line(node, cluster.timestamp_s, paint))
        inner = gpu_lines(
            node.sample,
            show_processes=show_processes and not by_user and processes_shown(node),
            color=color,
            width=None if width is None else width - len(INDENT),
            ascii_only=ascii_only,
            free=node_free(node, free_threshold_mib) if show_processes else frozenset(),
        )
        lines.extend(INDENT + line for line in inner or [paint("(no GPU series)", DIM)])
    text = "\n".join(lines) + "\n"
    if show_processes and nodes:
        text += render_cluster_users(nodes, color=color, always=by_user)
    return text


INDENT = "  "


def processes_shown(node: Node) -> bool:
    """A node's processes are worth showing: UP (a DOWN node's last known ones may be gone)
    and read (dcgm-exporter exports none)."""
    return node.usable and node.sample.processes_read


def _node_line(node: Node, now_s: float, paint: Painter) -> str:
    codes = {NodeState.UP: (GREEN,), NodeState.DOWN: (BOLD, RED), NodeState.STALE: (YELLOW,)}
    exporter = EXPORTER_LABELS[node.exporter]
    if node.exporter is ExporterKind.DCGM:
        exporter += " (no process data)"
    count = f"{len(node.gpus)} GPU" + ("" if len(node.gpus) == 1 else "s")
    if node.gpus and not node.usable:
        count += " (last known)"
    parts = [
        paint(node.name, BOLD),
        paint(state_text(node, now_s), *codes[node.state]),
        exporter,
        count,
    ]
    if node.sample.simulated:
        parts.append(paint(DEMO_MARKER, BOLD, YELLOW, REVERSE))
    return "  ".join(parts)


@dataclass(frozen=True, slots=True)
class ClusterUser:
    """One user's share of the cluster (GPUs as ``node:0,1 other:3``) or of one machine."""

    user: str
    gpus: str
    gpu_memory_bytes: int | None
    memory_partial: bool
    process_count: int
    #: The user running gpumon (``gpumon once`` bolds the row).
    current: bool = False


def cluster_users(nodes: Sequence[Node]) -> tuple[tuple[ClusterUser, ...], tuple[str, ...]]:
    """Who uses what on the UP nodes whose process lists are known, most memory first; and
    what is left out (``node3 (DOWN)``, ``node5 (processes unknown)``, ``node1:GPU 2``)."""
    merged: dict[str, list[tuple[str, UserUsage]]] = {}
    left_out: list[str] = []
    for node in nodes:
        if not processes_shown(node):
            why = "processes unknown" if node.usable else STATE_WORDS[node.state]
            left_out.append(f"{node.name} ({why})")
            continue
        sample = node.sample
        known = {gpu.index for gpu in sample.gpus if processes_known(gpu, sample)}
        left_out += [
            f"{node.name}:GPU {gpu.index}" for gpu in sample.gpus if gpu.index not in known
        ]
        for usage in user_summary(p for p in sample.processes if p.gpu_index in known):
            merged.setdefault(usage.user, []).append((node.name, usage))
    users = [_merged(user, parts) for user, parts in merged.items()]
    users.sort(key=lambda u: (u.gpu_memory_bytes is None, -(u.gpu_memory_bytes or 0), u.user))
    return tuple(users), tuple(left_out)


STATE_WORDS = {NodeState.UP: "UP", NodeState.DOWN: "DOWN", NodeState.STALE: "stale"}


def _merged(user: str, parts: list[tuple[str, UserUsage]]) -> ClusterUser:
    known = [usage.gpu_memory_bytes for _, usage in parts if usage.gpu_memory_bytes is not None]
    return ClusterUser(
        user=user,
        gpus=" ".join(f"{node}:{','.join(map(str, usage.gpu_indices))}" for node, usage in parts),
        gpu_memory_bytes=sum(known) if known else None,
        memory_partial=any(usage.memory_partial for _, usage in parts) or len(known) < len(parts),
        process_count=sum(usage.process_count for _, usage in parts),
    )


def render_cluster_users(
    nodes: Sequence[Node], *, color: bool = False, always: bool = False
) -> str:
    """The cluster's who-uses-what table, as ``gpumon once`` prints a machine's."""
    users, left_out = cluster_users(nodes)
    return users_text(users, ", ".join(left_out), color=color, always=always)


def users_text(
    users: Sequence[ClusterUser], left_out: str, *, color: bool, always: bool, at_least: str = ">="
) -> str:
    """A blank line, the table of ``users`` (USER, GPUS, GPU-MEM, PROCS; a partial sum of
    memory after ``at_least``) and what is ``left_out``, each line ending with a newline;
    ``""`` when there is nothing to say (unless ``always``)."""
    if not (users or left_out or always):
        return ""
    paint = Painter(color)
    lines = [""]
    if users or always:
        rows = [
            {
                "user": user.user,
                "gpus": user.gpus,
                "memory": (at_least if user.memory_partial else "")
                + fmt.bytes_short(user.gpu_memory_bytes),
                "processes": str(user.process_count),
            }
            for user in users
        ]
        header = dict(zip(("user", "gpus", "memory", "processes"), USER_COLUMNS, strict=True))
        widths = column_widths([header, *rows])
        lines.append(paint(user_line(header, widths), BOLD))
        for user, row in zip(users, rows, strict=True):
            lines.append(
                paint(user_line(row, widths), BOLD) if user.current else user_line(row, widths)
            )
        if not users:
            lines.append("(no process on the GPUs whose processes are known)")
    if left_out:
        lines.append(paint(f"not counted: {left_out}", YELLOW))
    return "\n".join(lines) + "\n"


def cluster_to_dict(
    cluster: ClusterSample,
    *,
    include_processes: bool = True,
    free_threshold_mib: int = 1024,
) -> dict[str, Any]:
    """The cluster as JSON-able data, following ``gpumon/schema/once-cluster.schema.json``:
    ``nodes``, each with ``once --json``'s GPU objects."""
    from gpumon import __version__
    from gpumon.sampling.snapshot import SCHEMA_VERSION, iso_timestamp

    rows = rows_of(cluster, free_threshold_mib)
    return {
        "schema_version": SCHEMA_VERSION,
        "gpumon_version": __version__,
        "prometheus_url": cluster.url,
        "simulated": cluster.simulated,
        "timestamp": iso_timestamp(cluster.timestamp_s),
        "timestamp_s": fmt.known_time(cluster.timestamp_s),
        "scrape_interval_s": cluster.scrape_interval_s,
        "stale": cluster.stale,
        "error": cluster.error,
        "path": cluster.path,
        "fleet": cf.fleet_to_dict(cf.fleet_or_computed(cluster, rows)),
        "rows": cf.rows_to_dict(rows),
        "nodes": [
            node_to_dict(node, include_processes=include_processes, threshold=free_threshold_mib)
            for node in ordered(cluster.nodes)
        ],
    }


def node_to_dict(node: Node, *, include_processes: bool, threshold: int) -> dict[str, Any]:
    """One entry of ``nodes``."""
    from gpumon.sampling.snapshot import gpu_to_dict, iso_timestamp

    sample = node.sample
    with_processes = include_processes and processes_shown(node)
    free = node_free(node, threshold) if include_processes else frozenset()
    return {
        "name": node.name,
        "instance": node.instance,
        "job": node.job,
        "exporter": node.exporter.value,
        "state": node.state.value,
        "up": node.state is NodeState.UP,
        "simulated": sample.simulated,
        "last_seen": iso_timestamp(node.last_seen_s),
        "down_since": iso_timestamp(node.down_since_s),
        "problem": node.problem,
        "gpus": [
            gpu_to_dict(
                gpu,
                sample.processes_on(gpu.index) if with_processes else None,
                free=gpu.index in free,
            )
            for gpu in sample.gpus
        ],
    }
