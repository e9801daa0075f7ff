"""The node list's columns, filter and sort orders, over the rows of a
:class:`~gpumon.data.cluster.ClusterSample` (:func:`~gpumon.data.cluster.rows_of`: the
aggregate queries' rows, or one :func:`~gpumon.data.cluster.summarize` per node). A node
that is not UP (DOWN, stale; every node while Prometheus does not answer) never reads like
a node of idle GPUs: its free count reads ``-``, its last readings are drawn dimmed (the
list's style), and on the reading columns it sorts after every UP node, either direction.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from gpumon.data import format as fmt
from gpumon.data.cluster import ExporterKind, Fleet, Node, NodeState, NodeSummary
from gpumon.data.format import known_time, natural_key
from gpumon.ui.widgets.keyed_table import Column

#: What a node that is not UP shows for its free GPUs (and a node with no top user).
NOT_CURRENT = "-"

#: A node name's sort key, kept: a fleet of thousands is sorted again on each answer.
name_key = functools.lru_cache(maxsize=65536)(natural_key)

EMPTY_WAITING = "Waiting for the first answer from Prometheus."
EMPTY_NONE = "Prometheus lists no node with GPU metrics."


@dataclass(frozen=True, slots=True)
class NodeFilter:
    """``text``: nodes whose name, or a user on them, contains it (case-insensitive);
    ``free_only``: nodes with a FREE GPU now."""

    text: str = ""
    free_only: bool = False

    @property
    def active(self) -> bool:
        return bool(self.text) or self.free_only

    def matches(self, row: NodeSummary) -> bool:
        if self.free_only and not (row.current and (row.free_gpus or 0) > 0):
            return False
        if self.text:
            needle = self.text.casefold()
            haystacks = (row.name, row.instance, *row.users)
            if not any(needle in haystack.casefold() for haystack in haystacks):
                return False
        return True

    def describe(self) -> str:
        parts = []
        if self.free_only:
            parts.append("free GPUs")
        if self.text:
            parts.append(f'"{self.text}"')
        return " · ".join(parts)


_STATE_ORDER = {NodeState.DOWN: 0, NodeState.STALE: 1, NodeState.UP: 2}


def _free(row: NodeSummary) -> int | None:
    return row.free_gpus if row.current else None


COLUMNS: tuple[Column[NodeSummary], ...] = (
    Column("node", "NODE", 0, False, lambda row: name_key(row.name)),
    Column("gpus", "GPUS", 5, True, lambda row: row.gpu_count, True),
    Column("free", "FREE", 5, True, _free, True),
    Column("util", "UTIL", 5, True, lambda row: row.mean_utilization_pct, True),
    Column("memory", "MEMORY", 13, True, lambda row: row.memory_used_bytes, True, 72),
    Column("hot", "HOT", 5, True, lambda row: row.hottest_c, True, 86),
    Column("user", "TOP USER", 12, False, lambda row: row.top_user, False, 96),
    Column("state", "STATE", 23, False, lambda row: _STATE_ORDER[row.state]),
    Column("exporter", "EXPORTER", 9, False, lambda row: row.exporter.value, False, 112),
)
#: Readings of the GPUs: old ones (a node not UP) sort after every current one.
READINGS = frozenset({"free", "util", "memory", "hot"})


def sort_rows(rows: Iterable[NodeSummary], key: str, reverse: bool) -> list[NodeSummary]:
    """Rows by column ``key`` (its natural direction, or the other with ``reverse``); on a
    reading column, old readings after current ones; rows without a sort value (``None``)
    last, by name; ties by name."""
    column = next(c for c in COLUMNS if c.key == key)
    current: list[tuple[Any, NodeSummary]] = []
    old: list[tuple[Any, NodeSummary]] = []
    unknown: list[NodeSummary] = []
    reading = key in READINGS
    for row in rows:
        value = column.sort(row)
        if value is None:
            unknown.append(row)
        else:
            (old if reading and not row.current else current).append((value, row))
    descending = reverse != column.descending_first
    ordered = []
    for group in (current, old):
        by_name = sorted(group, key=lambda pair: name_key(pair[1].name))
        ordered += sorted(by_name, key=lambda pair: pair[0], reverse=descending)  # stable
    return [row for _, row in ordered] + sorted(unknown, key=lambda row: name_key(row.name))


def clock_text(seconds: float | None, now_s: float) -> str:
    """``14:02`` today, ``Mar 03 14:02`` on another day (local time); ``unknown`` for a time a
    server gave that is no real moment (NaN, Inf, 1e300, negative: see format.known_time)."""
    if known_time(seconds) is None or known_time(now_s) is None:
        return "unknown"
    assert seconds is not None
    when = time.localtime(seconds)
    if time.localtime(now_s)[:3] == when[:3]:
        return time.strftime("%H:%M", when)
    return time.strftime("%b %d %H:%M", when)


def state_text(summary: NodeSummary | Node, now_s: float) -> str:
    """``UP``, ``DOWN since 14:02``, ``stale, last seen 14:02``."""
    if summary.state is NodeState.UP:
        return "UP"
    if summary.state is NodeState.DOWN:
        if summary.down_since_s is not None:
            return f"DOWN since {clock_text(summary.down_since_s, now_s)}"
        if summary.last_seen_s is not None:
            return f"DOWN, last seen {clock_text(summary.last_seen_s, now_s)}"
        return "DOWN"
    if summary.last_seen_s is not None:
        return f"stale, last seen {clock_text(summary.last_seen_s, now_s)}"
    return "stale, never seen"


_EXPORTER_NAMES = {
    ExporterKind.GPUMON: "gpumon",
    ExporterKind.DCGM: "dcgm",
    ExporterKind.UNKNOWN: "?",
}


def cell_text(key: str, row: NodeSummary, now_s: float, ascii_only: bool = False) -> str:
    """Column ``key`` of ``row`` as shown."""
    if key == "node":
        return row.name
    if key == "gpus":
        return str(row.gpu_count)
    if key == "state":
        return state_text(row, now_s)
    if key == "exporter":
        return _EXPORTER_NAMES[row.exporter]
    if key == "user":
        return row.top_user or NOT_CURRENT
    if key == "free":
        if not row.current:
            return NOT_CURRENT  # old readings offer no free GPU
        return fmt.NA if row.free_gpus is None else str(row.free_gpus)
    if key == "util":
        return fmt.percent(row.mean_utilization_pct)
    if key == "memory":
        return fmt.memory_pair(row.memory_used_bytes, row.memory_total_bytes)
    if key == "hot":
        return fmt.celsius(row.hottest_c, ascii_only)
    raise KeyError(key)


def header_counts(fleet: Fleet) -> tuple[str, str, str]:
    """The header's words: ``100 nodes (2 DOWN, 1 stale)``, ``37 GPUs free in the cluster``
    and, where some UP nodes cannot tell (dcgm-exporter), ``(+10 nodes unknown)``."""
    problems = []
    if fleet.down:
        problems.append(f"{fleet.down} DOWN")
    if fleet.stale:
        problems.append(f"{fleet.stale} stale")
    nodes = f"{fleet.nodes} node{'s' if fleet.nodes != 1 else ''}"
    if problems:
        nodes += f" ({', '.join(problems)})"
    free = f"{fleet.free_gpus} GPU{'s' if fleet.free_gpus != 1 else ''} free in the cluster"
    unknown = ""
    if fleet.free_unknown:
        unknown = f"(+{fleet.free_unknown} node{'s' if fleet.free_unknown != 1 else ''} unknown)"
    return nodes, free, unknown
