"""The history database as ``gpumon report``, ``gpumon once --json`` and the dashboard read
it: which file, what to say when there is none, and the reader's answers as they show them.

:func:`history_path`: the recorder's when it is configured or exists, else the system's
(``/var/lib/gpumon/history.db``) when that exists, so a user reads the server's history.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from gpumon.config.files import default_history_path
from gpumon.data.format import duration, safe_text
from gpumon.data.report import IdleHolder, UsageReport, sorted_holders, used_notes
from gpumon.data.usage import UsageRow
from gpumon.sampling.history import files
from gpumon.sampling.history.reader import HistoryError, HistoryReader, open_history
from gpumon.sampling.history.schema import DAY_S, HOUR_S

if TYPE_CHECKING:
    from gpumon.config import Settings
    from gpumon.data.model import Sample
    from gpumon.data.periods import Period

#: What the systemd unit records (root's default).
SYSTEM_HISTORY_PATH = default_history_path({}, 0)
#: How to start recording, for every "no database" message.
START_RECORDING = (
    "start recording with `gpumon record`, or as a service: "
    "contrib/systemd/gpumon-record.service (README: History)"
)


def history_path(settings: Settings) -> str:
    """The database to read (see the module docstring)."""
    own = files.history_path(settings)
    unset = settings.history_db is None
    if unset and not os.path.exists(own) and os.path.exists(SYSTEM_HISTORY_PATH):
        return SYSTEM_HISTORY_PATH
    return own


def no_database(path: str) -> str:
    """The one line that says there is no database, and how to make one."""
    return f"no history database at {safe_text(path)}: {START_RECORDING}"


def open_reader(path: str) -> HistoryReader | None:
    """:func:`~gpumon.sampling.history.reader.open_history`, with an OS error turned into a
    :class:`HistoryError` too.
    """
    try:
        return open_history(path)
    except OSError as error:
        raise HistoryError(f"{path}: cannot read it: {error.strerror or error}") from None


def usage(
    reader: HistoryReader, start_s: float, end_s: float, by: str, now_s: float
) -> list[UsageRow]:
    """:meth:`HistoryReader.usage`, for the dashboard (``now_s`` is unused)."""
    del now_s
    return reader.usage(start_s, end_s, by)


def report_from_history(
    reader: HistoryReader, path: str, period: Period, by: str, now_s: float
) -> UsageReport:
    """The report of ``period`` from the database at ``path``; raises :class:`HistoryError`."""
    rows = usage(reader, period.start_s, period.end_s, by, now_s)
    if by == "gpu":
        rows = gpu_rows(reader, rows)
    holders = [
        IdleHolder(
            user=holder.user,
            pid=holder.pid,
            gpu_index=holder.gpu_index,
            gpu_uuid=holder.gpu_uuid,
            idle_s=max(0.0, now_s - holder.idle_since_s),
            gpu_memory_bytes=holder.memory_bytes,
            command=holder.command,
            job=holder.job_id,
        )
        for holder in reader.idle_holders(now_s)
    ]
    span = reader.span()
    first, last = span if span is not None else (None, None)
    days = reader.usage_days_until_s
    return UsageReport(
        period=period,
        by=by,
        rows=tuple(rows),
        holders=sorted_holders(holders),
        idle_unknown=reader.idle_unknown_count(now_s),
        source="history",
        where=path,
        simulated=reader.simulated,
        notes=(*coverage_notes(period, span, reader.interval_s), *used_notes(by, tuple(rows))),
        recorded_from_s=first,
        recorded_to_s=last,
        recording=reader.is_current(now_s),
        bucket_s=float(DAY_S if _in_days(period.start_s, days) else HOUR_S),
        days_before_s=days,
        prorated_s=prorated_seconds(period, days, last),
    )


def gpu_rows(reader: HistoryReader, rows: list[UsageRow]) -> list[UsageRow]:
    """``rows`` of GPUs with their recorded index and name, in index order (unknown last)."""
    recorded = {gpu.uuid: gpu for gpu in reader.gpus()}
    named = []
    for row in rows:
        gpu = recorded.get(row.key or "")
        named.append(row if gpu is None else replace(row, gpu_index=gpu.index, gpu_name=gpu.name))
    return sorted(named, key=lambda row: (row.gpu_index is None, row.gpu_index or 0, row.key or ""))


def _in_days(timestamp_s: float, days_before_s: float | None) -> bool:
    return days_before_s is not None and timestamp_s < days_before_s


def prorated_seconds(
    period: Period, days_before_s: float | None, recorded_to_s: float | None
) -> float:
    """Seconds of ``period`` in the buckets (UTC hours; UTC days before ``days_before_s``)
    it covers in part: its first bucket, when it begins inside one, and its last, when it
    ends inside one that was recorded past its end (the hour in progress counts whole)."""
    start, end = period.start_s, period.end_s
    if end <= start:
        return 0.0
    parts: set[tuple[float, float]] = set()
    width = DAY_S if _in_days(start, days_before_s) else HOUR_S
    first = start // width * width
    if first < start:
        parts.add((start, min(end, first + width)))
    width = DAY_S if _in_days(end, days_before_s) else HOUR_S
    last = end // width * width
    recorded = recorded_to_s is not None and recorded_to_s > end
    if start < end and last < end and recorded and last + width > end:
        parts.add((max(start, last), end))
    merged = sorted(parts)
    if len(merged) == 2 and merged[0][1] >= merged[1][0]:
        return merged[1][1] - merged[0][0]
    return sum(to - frm for frm, to in merged)


def coverage_notes(
    period: Period, span: tuple[float, float] | None, interval_s: float | None
) -> tuple[str, ...]:
    """What the report must say when the database covers only part of ``period``: the
    part before its first sample, or after its latest (older than three intervals)."""
    if span is None:
        return ()
    first, last = span
    notes = []
    if first > period.start_s:
        notes.append(
            f"recorded only from {_local(first)}: the {duration(first - period.start_s)} "
            "before it are not in the database (counted as nothing)"
        )
    if last < period.end_s - 3 * (interval_s or 10.0):
        notes.append(
            f"recorded only up to {_local(last)}: the {duration(period.end_s - last)} after "
            "it are not in the database (counted as nothing)"
        )
    return tuple(notes)


def _local(timestamp_s: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp_s))


def idle_seconds(
    reader: HistoryReader, sample: Sample, below_pct: int
) -> dict[tuple[int, int], float | None]:
    """Per process of ``sample`` (by :attr:`~gpumon.data.model.GpuProcess.key`), how long it
    has held its memory idle as recorded: seconds since its quiet spell began while the
    recorder has it IDLE; 0 when it is not idle (above ``below_pct`` now, or not IDLE in the
    latest recorded sample); ``None`` when nobody can tell (its SM utilisation is N/A, its
    GPU's UUID is unknown, or it is quiet now and the recorder is not writing).

    Raises:
        HistoryError: the database could not be read.
    """
    recording = reader.is_current(sample.timestamp_s)
    found: dict[tuple[int, int], float | None] = {}
    for process in sample.processes:
        utilization = process.sm_utilization_pct
        if utilization is None or process.gpu_uuid is None:
            found[process.key] = None
        elif utilization > below_pct:
            found[process.key] = 0.0  # busy now, whatever the last recorded minute said
        else:
            since = reader.idle_since(process.gpu_uuid, process.pid, process.create_time_s)
            if since is not None:
                found[process.key] = max(0.0, sample.timestamp_s - since)
            else:
                found[process.key] = 0.0 if recording else None
    return found
