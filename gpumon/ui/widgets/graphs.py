"""Sparklines and small charts as text, on a fixed scale.

Drawn here rather than with Textual's ``Sparkline`` widget for two reasons: the GPU cards are
rendered as lines (:mod:`gpumon.ui.widgets.lines`, repainted cell by cell), where a widget
cannot sit inside a line; and Textual's sparkline scales every graph to its own minimum and
maximum, so a GPU at 50 % with a 2 % wobble would fill the whole height. A monitor's graphs
need a fixed scale (0 to 100 % for utilisation, 0 to the total for memory) and gaps where a
reading was N/A.

Pure functions of numbers: no Textual, tested directly.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Protocol


class HistorySource(Protocol):
    """What a sparkline reads history from (the store)."""

    sequence: int

    def gpu_history(self, index: int, field: str, last: int | None = None) -> list[float | None]:
        """``field`` of GPU ``index``, oldest first (the ``last`` newest values)."""
        ...


#: The GPU fields the dashboard draws from history: the GPU screen's graphs
#: (:data:`~gpumon.ui.widgets.gpu_fields.GRAPHS`) and the cards' and rows' sparklines. Its
#: store keeps a history of these only (ten minutes of a field on 8 GPUs at 0.25 s: 77 KiB).
GRAPHED_GPU_FIELDS = (
    "utilization_gpu_pct",
    "memory_used_bytes",
    "power_draw_w",
    "temperature_c",
    "clock_sm_mhz",
    "pcie_rx_bytes_per_s",
    "pcie_tx_bytes_per_s",
)
#: The process fields the process screen graphs (its store keeps no others).
GRAPHED_PROCESS_FIELDS = ("gpu_memory_bytes", "sm_utilization_pct", "cpu_pct")

#: Eight heights, then the ASCII fallback (one row: coarse, but readable in any terminal).
BLOCKS = "▁▂▃▄▅▆▇█"
ASCII_BLOCKS = "_.-:=+*#"
#: Rows of a chart: a full cell, and partial cells from 1/8 to 7/8 (UTF-8), or ASCII.
_FULL, _ASCII_FULL = "█", "#"


def resample(values: Sequence[float | None], width: int) -> list[float | None]:
    """The last ``width`` columns of ``values``: one value per column, the maximum of the
    values that fall in it when there are more values than columns (a spike stays visible);
    ``None`` (a gap) only when all of them are N/A. Fewer values than columns: right-aligned,
    the left padded with gaps."""
    if width <= 0:
        return []
    if len(values) <= width:
        return [None] * (width - len(values)) + list(values)
    columns: list[float | None] = []
    step = len(values) / width
    for column in range(width):
        start = int(column * step)
        chunk = values[start : max(start + 1, int((column + 1) * step))]
        known = [value for value in chunk if value is not None and not math.isnan(value)]
        columns.append(max(known) if known else None)
    return columns


def _level(value: float, low: float, high: float, levels: int) -> int:
    """0 .. levels-1 for ``value`` on the fixed scale ``low`` .. ``high`` (clamped)."""
    if high <= low:
        return 0
    fraction = (value - low) / (high - low)
    return max(0, min(levels - 1, int(fraction * levels)))


def sparkline(
    values: Sequence[float | None], width: int, low: float, high: float, ascii_only: bool = False
) -> str:
    """One row, ``width`` cells: the newest value on the right, gaps as spaces."""
    blocks = ASCII_BLOCKS if ascii_only else BLOCKS
    cells = []
    for value in resample(values, width):
        if value is None or math.isnan(value):
            cells.append(" ")
        else:
            cells.append(blocks[_level(value, low, high, len(blocks))])
    return "".join(cells)


def chart(
    values: Sequence[float | None],
    width: int,
    height: int,
    low: float,
    high: float,
    *,
    threshold: float | None = None,
    ascii_only: bool = False,
) -> list[str]:
    """``height`` rows of ``width`` cells, top row first: columns filled from the bottom on
    the fixed scale ``low`` .. ``high``; a gap is an empty column. ``threshold`` (e.g. the
    slowdown temperature) is drawn as a dotted row where a column does not reach it."""
    if width <= 0 or height <= 0:
        return []
    columns = resample(values, width)
    rows = [[" "] * width for _ in range(height)]
    partial = "" if ascii_only else BLOCKS
    full = _ASCII_FULL if ascii_only else _FULL
    marker_row = None
    if threshold is not None and high > low and low <= threshold <= high:
        marker_row = height - 1 - min(height - 1, int((threshold - low) / (high - low) * height))
    for x, value in enumerate(columns):
        if value is None or math.isnan(value):
            continue
        span = max(0.0, min(1.0, (value - low) / (high - low))) if high > low else 0.0
        eighths = round(span * height * 8)
        if eighths == 0 and value > low:
            eighths = 1  # a non-zero reading never reads as nothing
        whole, part = divmod(eighths, 8)
        for y in range(whole):
            rows[height - 1 - y][x] = full
        if part and whole < height:
            rows[height - 1 - whole][x] = partial[part - 1] if partial else "."
    if marker_row is not None:
        dot = "-" if ascii_only else "┄"
        for x in range(width):
            if rows[marker_row][x] == " ":
                rows[marker_row][x] = dot
    return ["".join(row) for row in rows]


def bucketed(
    values: Sequence[float | None],
    end: int,
    per_column: int,
    width: int,
    *,
    from_start: bool = False,
) -> list[float | None]:
    """``width`` columns of ``per_column`` samples each, aligned to the samples' absolute
    numbers (``end`` is the number after the newest, e.g. the store's ``sequence``): each
    column is the maximum of its samples, so a sparkline moves one column every
    ``per_column`` samples, not every sample (fewer cells to repaint over SSH), and only its
    newest column changes in between. ``from_start``: while the samples since number 0 do
    not fill the width, the first column holds sample 0 and the graph grows to the right
    (nothing moves; gaps on the right) instead of sliding in from the right."""
    per_column = max(1, per_column)
    newest_bucket = (end - 1) // per_column if end > 0 else 0
    first = (newest_bucket - width + 1) * per_column  # number of the oldest sample shown
    if from_start:
        first = max(0, first)
    offset = end - len(values)  # values[i] is sample number offset + i
    columns: list[float | None] = []
    for bucket in range(width):
        start = max(0, first + bucket * per_column - offset)
        stop = max(0, min(len(values), first + (bucket + 1) * per_column - offset))
        best: float | None = None
        for value in values[start:stop]:  # runs on every sample: plain loop, no lists
            if value is not None and value == value and (best is None or value > best):
                best = value  # (value == value is False for NaN)
        columns.append(best)
    return columns


#: A card's sparkline spans about this much time, whatever its width.
SPARK_SPAN_S = 300.0


def history_sparkline(
    store: HistorySource,
    index: int,
    field: str,
    width: int,
    top: float | None,
    interval_s: float,
    ascii_only: bool = False,
) -> str:
    """A GPU card's sparkline: about the last five minutes of ``field`` of GPU ``index`` in
    ``width`` cells, on the scale 0 .. ``top`` (``""`` without a top or a width).

    Until five minutes have been read it grows from the left, one sample a cell at first:
    when the samples fill the width, a cell takes twice as many (the one redraw of the whole
    line), up to the five-minute bucket; after that it slides, a cell every bucket. In
    between only the newest cell changes: a new dashboard repaints one cell of a graph a
    second, not all of them (a graph sliding in from the right at one sample a cell moved
    every cell every second, over SSH)."""
    if width <= 0 or not top or top <= 0:
        return ""
    full_window = max(1, round(SPARK_SPAN_S / max(interval_s, 0.25) / width))
    per_column = 1
    while per_column < full_window and store.sequence > per_column * width:
        per_column *= 2
    per_column = min(per_column, full_window)
    values = store.gpu_history(index, field, per_column * (width + 1))
    columns = bucketed(values, store.sequence, per_column, width, from_start=True)
    return sparkline(columns, width, 0.0, top, ascii_only)


def time_columns(
    series: Sequence[tuple[float, float | None]], start_s: float, end_s: float, width: int
) -> list[float | None]:
    """``width`` columns over [start, end]: each the maximum of the points in its time
    slice (a spike stays visible). A point holds until the next one, for at most the
    series' step (a range query's points are a step apart, often wider than a column);
    ``None`` (a gap) where nothing was read."""
    columns: list[float | None] = [None] * width
    span = end_s - start_s
    if width <= 0 or span <= 0:
        return columns
    points = sorted((when, value) for when, value in series if value is not None and value == value)
    gaps = sorted(b[0] - a[0] for a, b in itertools.pairwise(points))
    step = gaps[len(gaps) // 2] if gaps else 0.0  # the median: a missing point stays a gap
    for number, (when, value) in enumerate(points):
        until = when + step
        if number + 1 < len(points):
            until = min(until, points[number + 1][0])
        first = int((when - start_s) / span * width)
        last = max(first, math.ceil((until - start_s) / span * width) - 1)
        for column in range(max(0, first), min(width, last + 1)):
            best = columns[column]
            columns[column] = value if best is None or value > best else best
    return columns
