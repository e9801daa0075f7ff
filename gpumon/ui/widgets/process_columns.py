"""The process table's columns (which show at a width, and how wide), how a cell reads, and
what an empty table says.

``SM%`` is NVML's per-process SM utilisation over the last interval; it shows only where some
process has one (not on MIG GPUs, nor in a cluster node's table) and the table is wide
enough, and reads ``idle 2h13m`` for an IDLE process (:mod:`gpumon.data.idle`): it widens
then, while some process is idle. Narrower than that, it still shows while some process is
idle, in CPU%'s place and as ``idle 2h``: who holds a GPU without using it is the question a
shared server asks, at any width (CPU% stays in the process detail).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Mapping, Sequence
from typing import Any

from gpumon.data import format as fmt
from gpumon.data.idle import Activity, idle_text
from gpumon.data.model import GpuProcess, ProcessKind, Sample, notable_unlisted_memory_bytes
from gpumon.data.views import shorten_command
from gpumon.ui.widgets.keyed_table import Column

ProcessKey = tuple[int, int]  # (GPU index, PID)

# What an empty table says. "None" is a claim: only made when every GPU's list was read.
EMPTY_WAITING = "Waiting for the first sample: processes not known yet."
EMPTY_NONE = "No processes on any GPU."
EMPTY_NONE_ON_THE_OTHERS = "No processes listed on the GPUs whose lists could be read."
EMPTY_UNKNOWN = "Processes unknown: no GPU data (see above)."
EMPTY_ALL_UNKNOWN = "Processes unknown: no GPU's process list could be read."


def _none_last(value: Any) -> tuple[bool, Any]:
    return (value is None, value if value is not None else 0)


def _na_lowest(value: int | None) -> int:
    return -1 if value is None else value


def kind_text(kind: ProcessKind) -> str:
    """``C``, ``G``, ``C+G``; N/A where a node's exporter did not say (the cluster)."""
    return fmt.NA if kind is ProcessKind.UNKNOWN else kind.value


COLUMNS: tuple[Column[GpuProcess], ...] = (
    Column("gpu", "GPU", 4, True, lambda p: (p.gpu_index, p.gpu_instance_id or 0, p.pid)),
    Column("pid", "PID", 8, True, lambda p: p.pid),
    Column("user", "USER", 10, False, lambda p: _none_last(p.user)),
    Column("job", "JOB", 9, True, lambda p: _none_last(_job_number(p.job_id)),
           min_terminal_width=100, optional=True),
    Column("container", "CONTAINER", 12, False, lambda p: _none_last(p.container_id),
           min_terminal_width=130, optional=True),
    Column("type", "TYPE", 5, False, lambda p: kind_text(p.kind), min_terminal_width=72),
    # Descending first for the sizes: the biggest users are what people look for.
    Column("gpu_memory", "GPU-MEM", 8, True, lambda p: _none_last(p.gpu_memory_bytes), True),
    # N/A below 0 %: busiest first puts it last, as nothing is known of it.
    Column("sm", "SM%", 4, True, lambda p: _na_lowest(p.sm_utilization_pct), True, 100, True),
    # Below 50 cells CPU% gives way, so that COMMAND keeps some room (a 40-column terminal).
    Column("cpu", "CPU%", 6, True, lambda p: _none_last(p.cpu_pct), True, 50),
    Column("rss", "RSS", 7, True, lambda p: _none_last(p.rss_bytes), True, 90),
    Column("time", "TIME", 9, True, lambda p: _none_last(p.elapsed_s), True, 80),
    Column("command", "COMMAND", 0, False, lambda p: _none_last(p.command)),
)  # fmt: skip
SM_COLUMN = next(c for c in COLUMNS if c.key == "sm")
#: The fewest cells COMMAND is shown in (a letter or three and the ellipsis).
MIN_COMMAND_WIDTH = 4
#: The SM% column's width while some process is idle: ``idle ≥ 2h13m``.
IDLE_SM_WIDTH = 12
#: The TIME column's width with ``seconds`` (``time_seconds``): ``12d04h05m06s``.
SECONDS_TIME_WIDTH = 12
#: The SM% column's width below its own terminal width, while some process is idle: ``idle≥13m``.
NARROW_IDLE_SM_WIDTH = 9
#: Optional columns and the process field whose value shows them; ``idle`` widens SM%.
_OPTIONAL_FIELDS = (("job", "job_id"), ("container", "container_id"), ("sm", "sm_utilization_pct"))


def optional_columns(
    processes: Sequence[GpuProcess], activity: Mapping[tuple[int, int], Activity]
) -> frozenset[str]:
    """The optional columns some of ``processes`` have a value for, and ``idle`` when one of
    them is IDLE (``activity``: by :attr:`GpuProcess.key`)."""
    shown = {
        key
        for key, field in _OPTIONAL_FIELDS
        if any(getattr(p, field) is not None for p in processes)
    }
    if activity and any((a := activity.get(p.key)) is not None and a.idle for p in processes):
        shown.add("idle")
    return frozenset(shown)


def visible_columns(width: int, optional: frozenset[str] = frozenset()) -> list[Column[GpuProcess]]:
    """The columns shown at the table's full ``width`` (with the scrollbar's cell: a
    column does not come and go with the scrollbar when the rows outgrow the table)."""
    idle = "idle" in optional and "sm" in optional
    narrow = idle and width < SM_COLUMN.min_terminal_width
    columns = []
    for column in COLUMNS:
        if (column.optional and column.key not in optional) or (narrow and column.key == "cpu"):
            continue  # narrow and idle: SM% takes CPU%'s place, so the idle mark shows
        if idle and column.key == "sm":
            cells = NARROW_IDLE_SM_WIDTH if narrow else IDLE_SM_WIDTH
            column = dataclasses.replace(column, width=cells, min_terminal_width=0)
        if "seconds" in optional and column.key == "time":
            column = dataclasses.replace(column, width=SECONDS_TIME_WIDTH)
        if width >= column.min_terminal_width:
            columns.append(column)
    return columns


@functools.lru_cache(maxsize=16)
def column_layout(
    width: int, full_width: int, optional: frozenset[str] = frozenset()
) -> list[tuple[Column[GpuProcess], int]]:
    """Each shown column and its width in ``width`` cells (left of the scrollbar).

    COMMAND gets what the other columns leave. The row is never wider than ``width``: a
    column that does not fit is dropped whole (COMMAND first, then from the right, and
    COMMAND is back where that leaves it room), never cut mid-number."""
    columns = visible_columns(max(width, full_width), optional)
    fixed = sum(c.width + 1 for c in columns if c.width)
    if width - fixed < MIN_COMMAND_WIDTH:
        command = [c for c in columns if not c.width]
        columns = [c for c in columns if c.width]
        while len(columns) > 1 and fixed - 1 > width:  # no space after the last column
            fixed -= columns.pop().width + 1
        if width - fixed >= MIN_COMMAND_WIDTH:
            columns += command
    return [(c, c.width or width - fixed) for c in columns]


def short_idle_text(activity: Activity, ascii_only: bool = False) -> str:
    """``idle 2h``, ``idle≥13m`` (ASCII ``idle>=13m``): the idle time's largest unit."""
    mark = (">=" if ascii_only else "≥") if activity.at_least else " "
    coarse = re.match(r"\d+\D", fmt.duration(activity.quiet_s))
    return f"idle{mark}{coarse.group() if coarse else fmt.duration(activity.quiet_s)}"


def _job_number(job_id: str | None) -> int | None:
    return fmt.ascii_int(job_id)


def table_messages(sample: Sample | None) -> tuple[list[str], str]:
    """The notice lines below the rows, and the text of an empty table, for ``sample``.

    A GPU whose process list is unknown (refused by NVML, or the GPU LOST) gets a notice, and
    so does one whose memory is held mostly by processes NVML does not list here. "No
    processes" is said only when every GPU's list was read.
    """
    if sample is None:
        return [], EMPTY_WAITING
    if not sample.gpus:
        return [], EMPTY_UNKNOWN if sample.unavailable is not None else EMPTY_NONE
    by_gpu: dict[int, list[GpuProcess]] = {gpu.index: [] for gpu in sample.gpus}
    for process in sample.processes:
        by_gpu.setdefault(process.gpu_index, []).append(process)
    notices: list[str] = []
    unknown = 0
    for gpu in sample.gpus:
        if gpu.lost:  # its processes vanish from the rows: say why, as for a refused list
            unknown += 1
            notices.append(f"GPU {gpu.index}: processes N/A (LOST: no readings)")
        elif gpu.processes_error is not None:
            unknown += 1
            notices.append(f"GPU {gpu.index}: processes N/A ({gpu.processes_error})")
        else:
            unlisted = notable_unlisted_memory_bytes(gpu, by_gpu[gpu.index])
            if unlisted is not None:
                notices.append(f"GPU {gpu.index}: {fmt.unlisted_memory(unlisted)}")
    if unknown == len(sample.gpus):
        return notices, EMPTY_ALL_UNKNOWN
    return notices, EMPTY_NONE_ON_THE_OTHERS if unknown else EMPTY_NONE


def cell_text(
    column: Column[GpuProcess],
    process: GpuProcess,
    activity: Activity | None = None,
    ascii_only: bool = False,
    seconds: bool = False,
) -> str:
    """What the cell of ``column`` reads for ``process``; ``activity`` is what gpumon has seen
    of its SM utilisation (an IDLE process's SM% reads ``idle 2h13m``); ``seconds``: TIME to
    the second (``5h17m04s``), else to the minute (``<1m``, ``17m``, ``5h17m``)."""
    key = column.key
    if key == "gpu":
        if process.gpu_instance_id is not None:  # MIG: GPU / GPU instance
            return f"{process.gpu_index}/{process.gpu_instance_id}"
        return str(process.gpu_index)
    if key == "job":
        return process.job_id or "-"
    if key == "container":
        return process.container_id or "-"
    if key == "pid":
        return str(process.pid)
    if key == "user":
        return process.user or ("?" if process.visible else "-")
    if key == "type":
        return kind_text(process.kind)
    if key == "gpu_memory":
        return fmt.bytes_short(process.gpu_memory_bytes)
    if key == "sm":
        if activity is not None and activity.idle:
            if column.width < IDLE_SM_WIDTH:
                return short_idle_text(activity, ascii_only)
            return idle_text(activity, ascii_only)
        return fmt.NA if process.sm_utilization_pct is None else str(process.sm_utilization_pct)
    if key == "cpu":
        return fmt.NA if process.cpu_pct is None else f"{process.cpu_pct:.0f}"
    if key == "rss":
        return fmt.bytes_short(process.rss_bytes)
    if key == "time":
        return fmt.running_time(process.elapsed_s, precise=seconds)
    if process.exited:
        return "(exited: NVML still lists it)"
    if not process.visible:
        return "(not visible here: outside this PID namespace - see ?)"
    return shorten_command(process.command) if process.command else "?"
