"""``gpumon report``'s three outputs of one :class:`~gpumon.data.report.UsageReport`: text
with a bar per row (:func:`render_text`), CSV (:func:`render_csv`) and JSON
(:func:`report_to_dict`, ``gpumon/schema/report.schema.json``).

Pure functions. Every name is made safe before it is printed; a CSV cell a spreadsheet would
run as a formula gets a leading ``'``.
"""

from __future__ import annotations

import csv
import io
import time
from typing import Any

import gpumon  # gpumon.__version__, read when a document is built
from gpumon.data import format as fmt
from gpumon.data.painting import BOLD, DIM, GREEN, YELLOW, Painter, fit_line
from gpumon.data.report import NO_KEY, UsageReport, bar_cells, hours_text
from gpumon.data.text_table import DEMO_MARKER
from gpumon.data.usage import UsageRow
from gpumon.data.views import shorten_command

#: Bumped only for breaking changes, as ``once --json``'s.
REPORT_SCHEMA_VERSION = 1
#: Column headers of the text table (the key's is the grouping's, upper case): HELD, USED
#: and IDLE are GPU-hours (the legend below the table says so).
NUMBER_COLUMNS = ("HELD", "USED", "IDLE", "PEAK-MEM", "PROCS")
#: The bar's cells: used (SM-weighted), held but not used, held idle; UTF-8 then ASCII.
BAR_CELLS = ("█", "▒", "░")
ASCII_BAR_CELLS = ("#", "=", ".")
#: The bar's width when the output is not a terminal, and the most it takes on one.
PIPED_BAR_WIDTH = 24
MAX_BAR_WIDTH = 40
MIN_BAR_WIDTH = 8
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def key_text(report: UsageReport, key: str | None) -> str:
    return NO_KEY.get(report.by, "(none)") if key is None else fmt.safe_text(key, 200)


def row_text(report: UsageReport, row: UsageRow) -> str:
    """A row's name: a GPU's recorded index and name where known, else its key."""
    if row.gpu_index is None:
        return key_text(report, row.key)
    return fmt.safe_text(f"{row.gpu_index} {row.gpu_name or key_text(report, row.key)}", 200)


def _when(timestamp_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp_s))


def header_lines(report: UsageReport) -> list[str]:
    """What the report covers and where it was read."""
    period = report.period
    span = fmt.duration(period.seconds)
    lines = [
        f"GPU usage by {report.by}, {_when(period.start_s)} to {_when(period.end_s)} "
        f"({span}, local time)"
    ]
    if report.cluster:
        rules = "; recording rules" if report.recording_rules else ""
        step = fmt.duration(report.step_s) if report.step_s else "?"
        lines += [f"from Prometheus at {report.where} (sampled every {step}{rules})"]
        lines.append(coverage_line(report))
    else:
        lines += [f"from the history database {report.where}", coverage_line(report)]
        lines.append(granularity_line(report))
    if report.simulated:
        lines[0] += f"  {DEMO_MARKER}"
    return lines


def coverage_line(report: UsageReport) -> str:
    """What a database covers: its first and latest recorded sample; for Prometheus, the
    first and last sample of the exporters in the period (the hours are summed over that)."""
    first, last = report.recorded_from_s, report.recorded_to_s
    if report.cluster:
        if first is None or last is None:
            return "gpumon exporters' data in this period: none found"
        return f"gpumon exporters' data from {_when(first)} to {_when(last)} (hours summed over it)"
    if first is None or last is None:
        return "recorded: nothing yet"
    writing = "; the recorder is writing" if report.recording else "; the recorder is stopped"
    return f"recorded from {_when(first)} to {_when(last)}{writing}"


def granularity_line(report: UsageReport) -> str:
    """What a database's numbers are summed from, and how much of them is estimated."""
    unit = "counted in UTC hours"
    days = report.days_before_s
    if days is not None and report.period.start_s < days:
        unit += f" (UTC days before {_when(days)})"
    prorated = report.prorated_s or 0.0
    if prorated <= 0:
        return unit
    return (
        f"{unit}; {fmt.duration(prorated)} of the period is in partly covered buckets: "
        "estimated over when the processes were seen (PEAK-MEM there: of the processes seen "
        "in the period, over their whole run)"
    )


def not_recorded_line(report: UsageReport) -> str:
    """The one line instead of a report of a period the database does not cover."""
    period = report.period
    asked = f"{_when(period.start_s)} to {_when(period.end_s)} (local time)"
    first, last = report.recorded_from_s, report.recorded_to_s
    if first is None or last is None:
        covers = "has no samples yet"
    else:
        covers = f"covers {_when(first)} to {_when(last)} only"
    return f"nothing recorded from {asked}: the history database {report.where} {covers}"


def bar(row: UsageRow, top: float, width: int, ascii_only: bool, paint: Painter) -> str:
    """``width`` cells at most: the row's GPU-hours held on the scale 0 .. ``top``, its used
    part first, its idle part last."""
    used_cell, held_cell, idle_cell = ASCII_BAR_CELLS if ascii_only else BAR_CELLS
    counts = bar_cells(row, top, width)
    parts = zip((used_cell, held_cell, idle_cell), counts, (GREEN, DIM, YELLOW), strict=True)
    return "".join(paint(cell * count, code) for cell, count, code in parts if count)


def _row_cells(report: UsageReport, row: UsageRow) -> list[str]:
    cells = [row_text(report, row)]
    if report.cluster:
        cells.append(fmt.safe_text(row.node or "?", 200))
    cells += [
        hours_text(row.gpu_hours_held),
        hours_text(row.gpu_hours_used),
        hours_text(row.idle_held_hours),
        fmt.bytes_short(row.peak_memory_bytes),
        str(row.processes),
    ]
    return cells


def render_text(
    report: UsageReport,
    *,
    color: bool = False,
    width: int | None = None,
    ascii_only: bool | None = None,
    current_user: str | None = None,
) -> str:
    """The report as a table, one row per group with a bar, then who holds memory idle now.

    ``width`` cuts names and sizes the bar (``None``, piped: nothing cut, bars of
    :data:`PIPED_BAR_WIDTH`); ``ascii_only`` ``None`` decides from the locale; ``color`` colours
    the bars and bolds ``current_user``'s row.
    """
    if ascii_only is None:
        ascii_only = not fmt.locale_is_utf8()
    paint = Painter(color)
    ellipsis = fmt.ASCII_ELLIPSIS if ascii_only else fmt.ELLIPSIS
    lines = [paint(line, BOLD) if n == 0 else line for n, line in enumerate(header_lines(report))]
    lines.append("")
    header = [report.by.upper(), *(["NODE"] if report.cluster else []), *NUMBER_COLUMNS]
    rows = [_row_cells(report, row) for row in report.rows]
    widths = [max(fmt.cell_len(cells[i]) for cells in (header, *rows)) for i in range(len(header))]
    texts = 2 if report.cluster else 1  # the columns of names: cut to fit, never the numbers
    bar_width = PIPED_BAR_WIDTH if width is None else _fit(widths, texts, width)

    def line(cells: list[str]) -> str:
        return "  ".join(
            fmt.ljust_cells(fmt.truncate(cell, size, ellipsis), size)
            if i < texts
            else cell.rjust(size)
            for i, (cell, size) in enumerate(zip(cells, widths, strict=True))
        )

    lines.append(paint(line(header), BOLD))
    top = max((row.gpu_hours_held for row in report.rows), default=0.0)
    for row, cells in zip(report.rows, rows, strict=True):
        text = line(cells)
        if report.by == "user" and current_user is not None and row.key == current_user:
            text = paint(text, BOLD)
        drawn = bar(row, top, bar_width, ascii_only, paint)
        lines.append(f"{text}  {drawn}".rstrip() if drawn else text)
    if not report.rows:
        lines.append("(no GPU memory held by any process in this period)")
    else:
        lines.append(paint(legend(ascii_only, bar_width > 0), DIM))
    lines += [paint(note, YELLOW) for note in report.notes]
    lines += ["", *holder_lines(report)]
    if width is not None:
        lines = [fit_line(line, width, ellipsis) for line in lines]
    return "\n".join(lines) + "\n"


def legend(ascii_only: bool, bars: bool) -> str:
    """What the numbers and the bars' cells mean."""
    text = "GPU-hours: HELD, USED (SM-weighted), IDLE (held idle)"
    if not bars:
        return text
    used, held, idle = ASCII_BAR_CELLS if ascii_only else BAR_CELLS
    return f"{text}   {used} used  {held} held  {idle} idle"


def _fit(widths: list[int], texts: int, width: int) -> int:
    """Cut the first ``texts`` columns (the names; to 8 cells at least, the widest first)
    until the table and a bar of :data:`MIN_BAR_WIDTH` fit ``width``; the bar's width, 0
    when none fits."""

    def spare() -> int:
        return width - (sum(widths) + 2 * (len(widths) - 1)) - 2

    while spare() < MIN_BAR_WIDTH:
        widest = max(range(texts), key=lambda i: widths[i])
        if widths[widest] <= 8:
            break
        widths[widest] -= min(widths[widest] - 8, MIN_BAR_WIDTH - spare())
    return min(MAX_BAR_WIDTH, spare()) if spare() >= MIN_BAR_WIDTH else 0


def holder_lines(report: UsageReport) -> list[str]:
    """Who holds GPU memory idle now, longest first."""
    if not report.holders_known:
        since = "?" if report.recorded_to_s is None else _when(report.recorded_to_s)
        return [
            f"Who holds GPU memory idle now is unknown: the recorder has not written since {since}."
        ]
    unknown = _idle_unknown_line(report.idle_unknown)
    if not report.holders:
        if unknown:
            return [f"Nobody is known to hold GPU memory idle now: {unknown}"]
        return ["Nobody holds GPU memory idle now."]
    lines = ["Holding GPU memory idle now:"]
    for holder in report.holders:
        where = f"{fmt.safe_text(holder.node, 200)}  " if holder.node else ""
        gpu = "?" if holder.gpu_index is None else str(holder.gpu_index)
        user = fmt.safe_text(holder.user or NO_KEY["user"], 200)
        text = (
            f"  {user}  {where}GPU {gpu}  PID {holder.pid}  "
            f"{fmt.bytes_short(holder.gpu_memory_bytes)}  idle {fmt.duration(holder.idle_s)}"
        )
        if holder.job:
            text += f"  job {fmt.safe_text(holder.job, 64)}"
        if holder.command:  # as the table shows it (JSON: the whole line)
            text += f"  {fmt.safe_text(shorten_command(holder.command), 200)}"
        lines.append(text)
    if unknown:
        lines.append(f"Not counted: {unknown}")
    return lines


def _idle_unknown_line(count: int | None) -> str:
    """What is said of ``count`` processes whose idleness is unknown ("" for none; ``None``:
    not counted)."""
    if count is None:
        return (
            "the recorder (an older gpumon) does not mark processes that hold GPU memory "
            "with no SM utilisation reading (MIG, or no sample from the driver), so whether "
            "such processes are idle is unknown."
        )
    if count <= 0:
        return ""
    who, it = "1 process holds", "it is"
    if count > 1:
        who, it = f"{count} processes hold", "they are"
    return (
        f"{who} GPU memory with no SM utilisation reading (MIG, or no sample from the "
        f"driver), so whether {it} idle is unknown."
    )


def safe_cell(text: str) -> str:
    """A text cell no spreadsheet runs as a formula: ``'`` before a risky first character."""
    text = fmt.safe_text(text, 1000)
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def render_csv(report: UsageReport) -> str:
    """The rows as CSV: the JSON's names as header, plain numbers, an empty cell where not known
    (never 0), and a ``simulated`` column (``1`` for ``--demo``). No idle holders.
    """
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    header = [report.by, *(["node"] if report.cluster else [])]
    header += ["gpu_hours_held", "gpu_hours_used", "idle_held_hours", "peak_memory_bytes"]
    writer.writerow([*header, "processes", "simulated"])
    simulated = "1" if report.simulated else "0"
    for row in report.rows:
        cells = ["" if row.key is None else safe_cell(row.key)]
        if report.cluster:
            cells.append("" if row.node is None else safe_cell(row.node))
        cells += [
            _number(row.gpu_hours_held),
            _number(row.gpu_hours_used),  # empty: never known
            _number(row.idle_held_hours),
            "" if row.peak_memory_bytes is None else str(row.peak_memory_bytes),
            str(row.processes),
            simulated,
        ]
        writer.writerow(cells)
    return out.getvalue()


def gpu_fields(report: UsageReport, row: UsageRow) -> dict[str, Any]:
    """A GPU row's recorded index and name (a database report by GPU only)."""
    if report.by != "gpu" or report.cluster:
        return {}
    return {"gpu_index": row.gpu_index, "gpu_name": row.gpu_name}


def report_to_dict(report: UsageReport) -> dict[str, Any]:
    """The report as JSON-able data (``gpumon/schema/report.schema.json``)."""
    from gpumon.sampling.snapshot import iso_timestamp as iso

    period = report.period
    return {
        "schema_version": REPORT_SCHEMA_VERSION,
        "gpumon_version": gpumon.__version__,
        "source": report.source,
        "database": None if report.cluster else report.where,
        "prometheus_url": report.where if report.cluster else None,
        "simulated": report.simulated,
        "by": report.by,
        "from": iso(period.start_s),
        "to": iso(period.end_s),
        "from_s": period.start_s,
        "to_s": period.end_s,
        "step_s": report.step_s,
        "recording_rules": report.recording_rules,
        "rows": [
            {
                report.by: row.key,
                "node": row.node,
                "gpu_hours_held": row.gpu_hours_held,
                "gpu_hours_used": row.gpu_hours_used,
                "idle_held_hours": row.idle_held_hours,
                "peak_memory_bytes": row.peak_memory_bytes,
                "processes": row.processes,
                "used_known_hours": row.used_known_hours,
                **gpu_fields(report, row),
            }
            for row in report.rows
        ],
        "recorded_from": iso(report.recorded_from_s),
        "recorded_to": iso(report.recorded_to_s),
        "recorded_from_s": report.recorded_from_s,
        "recorded_to_s": report.recorded_to_s,
        "recording": report.recording,
        "bucket_s": report.bucket_s,
        "days_before": iso(report.days_before_s),
        "days_before_s": report.days_before_s,
        "prorated_s": report.prorated_s,
        "idle_holders": [
            {
                "user": holder.user,
                "node": holder.node,
                "gpu": holder.gpu_index,
                "gpu_uuid": holder.gpu_uuid,
                "pid": holder.pid,
                "command": holder.command,
                "job": holder.job,
                "idle_s": holder.idle_s,
                "gpu_memory_bytes": holder.gpu_memory_bytes,
            }
            for holder in report.holders
        ]
        if report.holders_known
        else None,
        "idle_unknown_processes": report.idle_unknown if report.holders_known else None,
        "notes": list(report.notes),
    }
