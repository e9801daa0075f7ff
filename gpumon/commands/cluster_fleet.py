"""A fleet in the headless modes: how they read it, its summary line, a line per node.

Rows and the fleet's totals come from the source's aggregate queries, one series per node
whatever its GPUs; per-GPU series are read for every node of a fleet of at most
:data:`SMALL_FLEET_NODES` (the output is then ``once``'s per-GPU lines) and otherwise only for
the nodes asked for. A row that is not UP, or cannot tell its processes, has no FREE count.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol

from gpumon.data import format as fmt
from gpumon.data.cluster import (
    ClusterSample,
    ExporterKind,
    Fleet,
    Node,
    NodeState,
    NodeSummary,
    fleet_of,
)
from gpumon.data.format import natural_key
from gpumon.data.painting import BOLD, DIM, GREEN, RED, REVERSE, YELLOW, Painter
from gpumon.data.text_table import DEMO_MARKER, column_widths

if TYPE_CHECKING:
    from gpumon.config import Settings

#: Up to this many nodes, ``once --cluster`` prints every node's GPUs (one more query round).
SMALL_FLEET_NODES = 32
#: Entries of each top-k list ``once`` prints under the summary line.
TOP_K = 5

EXPORTER_LABELS = {
    ExporterKind.GPUMON: "gpumon",
    ExporterKind.DCGM: "dcgm-exporter",
    ExporterKind.UNKNOWN: "unknown exporter",
}


#: What a time that is not known reads as.
UNKNOWN_TIME = "unknown"


def clock(timestamp_s: float | None, now_s: float | None) -> str:
    """``14:03`` today (local time), ``2024-06-09 14:03`` on another day; ``unknown`` for
    ``None`` or a number that is not a real moment (:func:`gpumon.data.format.known_time`)."""
    known = fmt.known_time(timestamp_s)
    if known is None:
        return UNKNOWN_TIME
    moment = time.localtime(known)
    now = fmt.known_time(now_s)
    today = now is not None and time.localtime(now)[:3] == moment[:3]
    return time.strftime("%H:%M" if today else "%Y-%m-%d %H:%M", moment)


def state_text(node: Node | NodeSummary, now_s: float) -> str:
    """``UP``, ``DOWN since 14:03`` (else ``DOWN, last seen 14:01``) or
    ``stale, last seen 14:01``; then the node's problem, if it has one (``stale, last seen
    14:01 (the exporter's sampler is stalled)``)."""
    problem = f" ({node.problem})" if node.problem else ""
    if node.state is NodeState.UP:
        return "UP" + problem
    if node.state is NodeState.DOWN:
        if fmt.known_time(node.down_since_s) is not None:
            return f"DOWN since {clock(node.down_since_s, now_s)}{problem}"
        head = "DOWN"
    else:
        head = "stale"
    if fmt.known_time(node.last_seen_s) is None:
        return head + problem
    return f"{head}, last seen {clock(node.last_seen_s, now_s)}{problem}"


class FleetSource(Protocol):
    """What the headless modes ask of a cluster source (the Prometheus source's API)."""

    @property
    def url(self) -> str: ...

    def sample(self, detail: bool = False) -> ClusterSample: ...

    def detail(self, node: str) -> Node: ...

    def close(self) -> None: ...


def open_fleet_source(settings: Settings) -> FleetSource:
    """The cluster source for a headless run; raises as ``open_headless_source``."""
    from gpumon.sources import cluster_base

    return cluster_base.open_headless_source(settings)


def unknown_nodes(rows: Sequence[NodeSummary], names: Sequence[str]) -> list[str]:
    """The ``names`` that are neither a row's name nor its instance."""
    known = {row.name for row in rows} | {row.instance for row in rows}
    return [name for name in names if name not in known]


def with_detail(
    source: FleetSource, overview: ClusterSample, named: Sequence[str]
) -> ClusterSample:
    """``overview`` (an aggregate read) with per-GPU nodes: the ``named`` ones (``detail``;
    raises ``PrometheusError``), else every node of a small fleet (one more read)."""
    if overview.nodes:  # a source that reads every node's GPUs anyway
        return overview
    if named:
        return replace(overview, nodes=tuple(source.detail(name) for name in named))
    if overview.error is None and 0 < len(overview.rows or ()) <= SMALL_FLEET_NODES:
        return source.sample(detail=True)
    return overview


def ordered_rows(rows: Sequence[NodeSummary]) -> list[NodeSummary]:
    """Rows by name, as a person counts (``node2`` before ``node10``), then instance."""
    return sorted(rows, key=lambda row: (natural_key(row.name), row.instance))


def fleet_lines(
    cluster: ClusterSample,
    fleet: Fleet,
    *,
    show_free: bool,
    paint: Painter,
    width: int | None = None,
) -> list[str]:
    """``URL  time  5 nodes (3 up, 1 DOWN, 1 stale)  24 GPUs up, 6 FREE, 16 busy  12G
    idle-held  raw queries``; ``(2 nodes cannot tell)`` where processes are unknown; the DEMO
    marker on simulated data. ``show_free`` False: GPUs only. Wider than ``width``: the
    server, time, path and marker on a line, the counts on the next, so none is cut off."""
    plain = [
        part for parts in _fleet_parts(cluster, fleet, show_free, Painter(False)) for part in parts
    ]
    where, counts, after = _fleet_parts(cluster, fleet, show_free, paint)
    if width is None or fmt.cell_len("  ".join(plain)) <= width:
        return ["  ".join([*where, *counts, *after])]
    return ["  ".join([*where, *after]), "  ".join(counts)]


def _fleet_parts(
    cluster: ClusterSample, fleet: Fleet, show_free: bool, paint: Painter
) -> tuple[list[str], list[str], list[str]]:
    read_s = fmt.known_time(cluster.timestamp_s)
    stamp = (
        UNKNOWN_TIME
        if read_s is None
        else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(read_s))
    )
    states = [f"{fleet.nodes - fleet.down - fleet.stale} up"]
    if fleet.down:
        states.append(paint(f"{fleet.down} DOWN", BOLD, RED))
    if fleet.stale:
        states.append(paint(f"{fleet.stale} stale", YELLOW))
    noun = "node" if fleet.nodes == 1 else "nodes"
    gpus = f"{fleet.gpus} GPUs up"
    if show_free:
        gpus += f", {fleet.free_gpus} FREE, {fleet.busy_gpus} busy"
        if fleet.free_unknown:
            many = "node cannot" if fleet.free_unknown == 1 else "nodes cannot"
            gpus += f" ({fleet.free_unknown} {many} tell)"
    counts = [f"{fleet.nodes} {noun} ({', '.join(states)})", gpus]
    if show_free and fleet.idle_held_bytes is not None:
        counts.append(f"{fmt.bytes_short(fleet.idle_held_bytes)} idle-held")
    after = [paint(cluster.path, DIM)] if cluster.path else []
    if cluster.simulated:
        after.append(paint(DEMO_MARKER, BOLD, YELLOW, REVERSE))
    return [paint(cluster.url, BOLD), stamp], counts, after


def top_lines(fleet: Fleet, *, show_processes: bool) -> list[str]:
    """The fleet's partitions and top-k lists, a line each (none where empty)."""
    lines = []
    if fleet.by_label:
        groups = [f"{g.label}={g.value} {g.gpus} GPUs, {g.free_gpus} FREE" for g in fleet.by_label]
        lines.append("by label: " + "; ".join(groups))
    lists = [("hottest", fleet.hottest, lambda v: f"{v:.0f}C")]
    if show_processes:
        lists += [
            ("most idle-held", fleet.most_idle_held, lambda v: fmt.bytes_short(int(v))),
            ("users holding most", fleet.top_users, lambda v: fmt.bytes_short(int(v))),
        ]
    for title, ranked, unit in lists:
        if ranked:
            lines.append(f"{title}: " + ", ".join(f"{r.name} {unit(r.value)}" for r in ranked))
    return lines


ROW_COLUMNS = {
    "name": "NODE",
    "state": "STATE",
    "gpus": "GPUS",
    "free": "FREE",
    "util": "UTIL",
    "max": "MAX",
    "memory": "MEMORY",
    "hot": "HOT",
    "user": "TOP-USER",
    "idle": "IDLE-HELD",
    "note": "NOTE",
}
_RIGHT = frozenset({"gpus", "free", "util", "max", "memory", "hot", "idle"})
_STATE_CODES = {NodeState.UP: (GREEN,), NodeState.DOWN: (BOLD, RED), NodeState.STALE: (YELLOW,)}


def row_lines(
    rows: Sequence[NodeSummary], now_s: float, *, show_processes: bool, paint: Painter
) -> list[str]:
    """A header and one line per row. A node that is not UP shows its GPU count and why; a
    FREE count only where the node is UP and its processes are known (else N/A)."""
    cells = [_row_cells(row, now_s) for row in rows]
    shown = [key for key in ROW_COLUMNS if show_processes or key not in ("free", "user", "idle")]
    widths = column_widths([ROW_COLUMNS, *cells])
    lines = [paint(_line(ROW_COLUMNS, widths, shown), BOLD)]
    for row, cell in zip(rows, cells, strict=True):
        line = _line(cell, widths, shown)
        lines.append(line if row.current else paint(line, *_STATE_CODES[row.state]))
    return lines


def _line(cells: dict[str, str], widths: dict[str, int], shown: Sequence[str]) -> str:
    texts = [
        fmt.rjust_cells(cells[key], widths[key])
        if key in _RIGHT
        else fmt.ljust_cells(cells[key], widths[key])
        for key in shown
    ]
    return "  ".join(texts).rstrip()


def _row_cells(row: NodeSummary, now_s: float) -> dict[str, str]:
    note = [] if row.current else [state_text(row, now_s).removeprefix(_STATE_WORDS[row.state])]
    if row.current and row.problem:
        note.append(f"({row.problem})")
    note.append(EXPORTER_LABELS[row.exporter])
    if row.exporter is ExporterKind.DCGM:
        note.append("(no process data)")
    if row.simulated:
        note.append("DEMO")
    blank = "" if row.current else "-"
    current = row.current
    return {
        "name": row.name,
        "state": _STATE_WORDS[row.state],
        "gpus": str(row.gpu_count),
        "free": fmt.NA if row.free_gpus is None else str(row.free_gpus),
        "util": fmt.percent(row.mean_utilization_pct) if current else blank,
        "max": fmt.percent(row.max_utilization_pct) if current else blank,
        "memory": fmt.memory_pair(row.memory_used_bytes, row.memory_total_bytes)
        if current
        else blank,
        "hot": fmt.celsius(row.hottest_c, ascii_only=True) if current else blank,
        "user": (row.top_user or ("-" if row.free_gpus is not None else fmt.NA))
        if current
        else blank,
        "idle": _idle_held(row) if current else blank,
        "note": " ".join(part.strip(", ") for part in note if part.strip(", ")),
    }


_STATE_WORDS = {NodeState.UP: "UP", NodeState.DOWN: "DOWN", NodeState.STALE: "stale"}


def _idle_held(row: NodeSummary) -> str:
    if row.idle_held_bytes is None:
        return fmt.NA
    if not row.idle_holders:
        return fmt.bytes_short(row.idle_held_bytes)
    return f"{fmt.bytes_short(row.idle_held_bytes)} {','.join(row.idle_holders)}"


def rows_to_dict(rows: Sequence[NodeSummary]) -> list[dict[str, Any]]:
    """``rows`` of ``once --cluster --json``: one object per node, by name."""
    from gpumon.sampling.snapshot import iso_timestamp

    return [
        {
            "name": row.name,
            "instance": row.instance,
            "job": row.job,
            "exporter": row.exporter.value,
            "state": row.state.value,
            "up": row.current,
            "simulated": row.simulated,
            "gpu_count": row.gpu_count,
            "free_gpus": row.free_gpus if row.current else None,
            "mean_utilization_pct": row.mean_utilization_pct,
            "max_utilization_pct": row.max_utilization_pct,
            "memory_used_bytes": row.memory_used_bytes,
            "memory_total_bytes": row.memory_total_bytes,
            "hottest_c": row.hottest_c,
            "top_user": row.top_user,
            "idle_held_bytes": row.idle_held_bytes,
            "idle_holders": list(row.idle_holders),
            "labels": dict(row.labels),
            "last_seen": iso_timestamp(row.last_seen_s),
            "down_since": iso_timestamp(row.down_since_s),
            "problem": row.problem,
        }
        for row in ordered_rows(rows)
    ]


def fleet_to_dict(fleet: Fleet) -> dict[str, Any]:
    """``fleet`` of ``once --cluster --json``: totals over every node and the top-k lists."""

    def ranked(entries: Sequence[Any]) -> list[dict[str, Any]]:
        return [{"name": entry.name, "value": entry.value} for entry in entries]

    return {
        "nodes": fleet.nodes,
        "down": fleet.down,
        "stale": fleet.stale,
        "gpus": fleet.gpus,
        "free_gpus": fleet.free_gpus,
        "free_unknown": fleet.free_unknown,
        "busy_gpus": fleet.busy_gpus,
        "idle_held_bytes": fleet.idle_held_bytes,
        "by_label": [
            {"label": g.label, "value": g.value, "gpus": g.gpus, "free_gpus": g.free_gpus}
            for g in fleet.by_label
        ],
        "hottest": ranked(fleet.hottest),
        "most_idle_held": ranked(fleet.most_idle_held),
        "top_users": ranked(fleet.top_users),
    }


def fleet_or_computed(cluster: ClusterSample, rows: Sequence[NodeSummary]) -> Fleet:
    """The source's fleet, else the one the rows make."""
    return cluster.fleet if cluster.fleet is not None else fleet_of(rows, k=TOP_K)
