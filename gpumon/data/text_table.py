"""The plain-text GPU table of the headless modes: ``gpumon once``, and per node the cluster
view of ``gpumon once --prometheus`` (:mod:`gpumon.commands.cluster_output`).
Pure functions of a sample; colours come from :mod:`gpumon.data.painting`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

from gpumon.data import format as fmt
from gpumon.data.model import GpuProcess, GpuStats, Sample, notable_unlisted_memory_bytes
from gpumon.data.painting import (
    BLUE,
    BOLD,
    CYAN,
    DIM,
    GREEN,
    MAGENTA,
    RED,
    YELLOW,
    Painter,
    fit_line,
    temperature_codes,
)
from gpumon.data.views import ProcessFilter, filter_processes, shorten_command

DEMO_MARKER = "DEMO (simulated data)"

#: The SM% cell is left out of the process lines rather than cut commands below this width.
_MIN_COMMAND_WITH_SM = 24
#: Where a GPU line is too wide, its name is cut to no fewer cells than this before its
#: power column is left out.
_MIN_NAME_WIDTH = 6
#: The mark of a GPU with no process and (almost) no memory in use.
FREE = "FREE"
USER_COLUMNS = ("USER", "GPUS", "GPU-MEM", "PROCS")


def _gpu_cells(gpu: GpuStats, ascii_only: bool = False) -> dict[str, str]:
    return {
        "index": f"[{gpu.index}]",
        "name": gpu.name or fmt.NA,
        "temperature": fmt.celsius(gpu.temperature_c, ascii_only),
        "utilization": fmt.percent(gpu.utilization_gpu_pct),
        "memory_used": fmt.bytes_short(gpu.memory_used_bytes),
        "memory_total": fmt.bytes_short(gpu.memory_total_bytes),
        "power": fmt.watts_pair(gpu.power_draw_w, gpu.power_limit_w),
    }


def _process_cells(process: GpuProcess, sm: bool = False) -> dict[str, str]:
    """A process line's cells, the program's path shortened as the dashboard's table does
    (the whole command line is in ``--json``); with ``sm``, its SM utilisation (``sm``)."""
    if process.visible:
        command = shorten_command(process.command) if process.command else "?"
    elif process.exited:
        command = "(exited: NVML still lists it)"
    else:
        command = "(not visible here: another PID namespace?)"
    cells = {
        "user": process.user or "?",
        "pid": str(process.pid),
        "memory": fmt.bytes_short(process.gpu_memory_bytes),
        "command": command,
    }
    if sm:
        cells["sm"] = fmt.percent(process.sm_utilization_pct)
    return cells


def column_widths(rows: Sequence[Mapping[str, str]]) -> dict[str, int]:
    widths: dict[str, int] = {}
    for row in rows:
        for key, text in row.items():
            widths[key] = max(widths.get(key, 0), fmt.cell_len(text))
    return widths


def gpu_lines(
    sample: Sample,
    *,
    show_processes: bool = True,
    color: bool = False,
    width: int | None = None,
    ascii_only: bool | None = None,
    free: Set[int] = frozenset(),
    process_filter: ProcessFilter | None = None,
) -> list[str]:
    """The table's lines below its header: one per GPU, its processes indented below.

    Args:
        show_processes: indent each GPU's processes below it.
        color: add ANSI colours.
        width: no line is wider (commands are cut first, then SM%, GPU names and power go);
            ``None`` (piped) cuts nothing.
        ascii_only: mark cut commands with ``~``; ``None`` decides from the locale.
        free: NVML indices of the GPUs to mark FREE.
        process_filter: list only the processes it passes (``--user``).
    """
    paint = Painter(color)
    if ascii_only is None:
        ascii_only = not fmt.locale_is_utf8()
    ellipsis = fmt.ASCII_ELLIPSIS if ascii_only else fmt.ELLIPSIS
    gpu_rows = [_gpu_cells(gpu, ascii_only) for gpu in sample.gpus]
    gpu_widths = column_widths(gpu_rows)
    if width is not None:
        marked = any(gpu.index in free for gpu in sample.gpus)
        narrower = width - (3 + len(FREE) if marked else 0)
        _narrow_gpu_columns(gpu_rows, gpu_widths, narrower, ellipsis)
    # Unlisted memory counts every process; a filter (``--user``) only leaves lines out.
    every: dict[int, list[GpuProcess]] = {gpu.index: [] for gpu in sample.gpus}
    for process in sample.processes:
        every.setdefault(process.gpu_index, []).append(process)
    shown = filter_processes(sample.processes, process_filter or ProcessFilter())
    # SM% where some process has one (not under MIG, nor on a cluster node) and room is left.
    sm = any(process.sm_utilization_pct is not None for process in shown)
    process_rows = [_process_cells(process, sm) for process in shown]
    process_widths = column_widths(process_rows)
    if sm and width is not None and width - _prefix_cells(process_widths) < _MIN_COMMAND_WITH_SM:
        for row in process_rows:
            del row["sm"]
        del process_widths["sm"]
    by_gpu: dict[int, list[dict[str, str]]] = {gpu.index: [] for gpu in sample.gpus}
    for process, cells in zip(shown, process_rows, strict=True):
        by_gpu.setdefault(process.gpu_index, []).append(cells)

    lines = []
    for gpu, cells in zip(sample.gpus, gpu_rows, strict=True):
        line = _gpu_line(gpu, cells, gpu_widths, paint)
        lines.append(f"{line} | {paint(FREE, BOLD, GREEN)}" if gpu.index in free else line)
        if not show_processes or gpu.lost:
            continue
        if gpu.processes_error is not None:
            lines.append(f"    processes: N/A ({gpu.processes_error})")
            continue
        lines.extend(
            _process_line(row, process_widths, paint, width, ellipsis) for row in by_gpu[gpu.index]
        )
        unlisted = notable_unlisted_memory_bytes(gpu, every[gpu.index])
        if unlisted is not None:
            lines.append(f"    {paint(fmt.unlisted_memory(unlisted), YELLOW)}")
    if width is not None:
        lines = [fit_line(line, width, ellipsis) for line in lines]
    return lines


def _narrow_gpu_columns(
    rows: list[dict[str, str]], widths: dict[str, int], width: int, ellipsis: str
) -> None:
    """Make the GPU lines fit ``width``: cut the names (to :data:`_MIN_NAME_WIDTH`), then
    leave out the power column, then the names (the index still tells the GPUs apart)."""
    overflow = _gpu_line_cells(widths) - width
    if overflow > 0 and widths["name"] > _MIN_NAME_WIDTH:
        widths["name"] = max(_MIN_NAME_WIDTH, widths["name"] - overflow)
        for row in rows:
            row["name"] = fmt.truncate(row["name"], widths["name"], ellipsis)
    for column in ("power", "name"):
        if _gpu_line_cells(widths) <= width:
            return
        for row in rows:
            del row[column]
        del widths[column]


def _gpu_line_cells(widths: Mapping[str, int]) -> int:
    """The cells of a GPU line (without FREE) whose cells are ``widths`` wide."""
    power = 3 + widths["power"] if "power" in widths else 0
    identity = widths["index"] + (1 + widths["name"] if "name" in widths else 0)
    readings = widths["temperature"] + 1 + widths["utilization"]
    return identity + 3 + readings + 3 + widths["memory_used"] + 3 + widths["memory_total"] + power


def _gpu_line(gpu: GpuStats, cells: dict[str, str], widths: dict[str, int], paint: Painter) -> str:
    def cell(key: str, *codes: str, left: bool = False) -> str:
        pad = fmt.ljust_cells if left else fmt.rjust_cells
        return paint(pad(cells[key], widths[key]), *codes)

    identity = cell("index", CYAN, left=True)
    if "name" in cells:
        identity += f" {cell('name', BLUE, left=True)}"
    if gpu.lost:
        reason = gpu.lost_reason or "no readings from this GPU"
        return f"{identity} | {paint('LOST', BOLD, RED)} ({reason})"
    temperature = cell(
        "temperature", *temperature_codes(gpu.temperature_c, gpu.temperature_slowdown_c)
    )
    utilization = cell("utilization", GREEN)
    memory = f"{cell('memory_used', YELLOW)} / {cell('memory_total', YELLOW)}"
    power = f" | {cell('power', MAGENTA)}" if "power" in cells else ""
    return f"{identity} | {temperature} {utilization} | {memory}{power}"


def _process_line(
    row: dict[str, str], widths: dict[str, int], paint: Painter, width: int | None, ellipsis: str
) -> str:
    # Widths are terminal cells: a CJK user name or command keeps the columns aligned.
    user = fmt.ljust_cells(row["user"], widths["user"])
    pid = fmt.rjust_cells(row["pid"], widths["pid"])
    memory = fmt.rjust_cells(row["memory"], widths["memory"])
    sm = f"SM {paint(fmt.rjust_cells(row['sm'], widths['sm']), GREEN)}  " if "sm" in row else ""
    command = row["command"]
    if width is not None:
        # Down to its ellipsis: the command goes before anything else on the line.
        command = fmt.truncate(command, max(1, width - _prefix_cells(widths)), ellipsis)
    return f"    {paint(user, DIM)}  {paint(pid, DIM)}  {paint(memory, YELLOW)}  {sm}{command}"


def _prefix_cells(widths: Mapping[str, int]) -> int:
    """Cells left of a process line's command: user, PID, memory and (when shown) SM%."""
    sm = 3 + widths["sm"] + 2 if "sm" in widths else 0
    return 4 + widths["user"] + 2 + widths["pid"] + 2 + widths["memory"] + 2 + sm


def user_line(row: Mapping[str, str], widths: Mapping[str, int]) -> str:
    user = fmt.ljust_cells(row["user"], widths["user"])
    gpus = fmt.ljust_cells(row["gpus"], widths["gpus"])
    memory = fmt.rjust_cells(row["memory"], widths["memory"])
    processes = fmt.rjust_cells(row["processes"], widths["processes"])
    return f"{user}  {gpus}  {memory}  {processes}".rstrip()
