"""``gpumon once``: one snapshot of every GPU and its processes, then exit.

A compact table in the spirit of gpustat (one line per GPU, FREE on the free ones, its
processes indented below, then who uses what: one row per user), or with ``--by-user`` the
per-user table in place of the processes, or with ``--json`` the same data in the documented,
versioned JSON shape of :mod:`gpumon.sampling.snapshot`. One sample, no sleeping: fast even on an
8-GPU server.

Colours are raw ANSI SGR codes (importing rich or textual would cost more than the whole
snapshot): only on a terminal, never when ``NO_COLOR`` is set to anything non-empty, unless
``--color always`` asks for them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Mapping, Sequence, Set
from typing import TYPE_CHECKING, TextIO

from gpumon.data import format as fmt
from gpumon.data.model import GpuProcess, GpuStats, Sample, notable_unlisted_memory_bytes

if TYPE_CHECKING:
    from gpumon.settings import Settings
    from gpumon.data.views import UserUsage

DEMO_MARKER = "DEMO (simulated data)"

# SGR codes; the dashboard's theme does not apply to a plain terminal.
RESET = "\x1b[0m"
BOLD = "1"
DIM = "2"
RED = "31"
GREEN = "32"
YELLOW = "33"
BLUE = "34"
MAGENTA = "35"
CYAN = "36"
REVERSE = "7"

_MIN_COMMAND_WIDTH = 10
#: The mark of a GPU with no process and (almost) no memory in use.
FREE = "FREE"
USER_COLUMNS = ("USER", "GPUS", "GPU-MEM", "PROCS")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        dest="as_json",
        action="store_true",
        help="print JSON (schema: docs/json-schema.md) instead of the table",
    )
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument(
        "--no-processes",
        action="store_true",
        help="GPUs only: leave out the process lines and the per-user summary; reads no "
        "process, so no GPU is marked FREE (JSON: processes and users are null)",
    )
    shown.add_argument(
        "--by-user",
        action="store_true",
        help="the per-user table (USER, GPUS, GPU-MEM, PROCS) in place of the process lines "
        "(JSON: the users list is always there)",
    )
    parser.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour the table: auto (default) = on a terminal unless NO_COLOR is set",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        help="the whole cluster from the configured Prometheus server (prometheus_url), "
        "as --prometheus URL does: per node its state and GPUs (docs/cluster.md)",
    )


def run(
    settings: Settings,
    *,
    as_json: bool,
    no_processes: bool,
    color: str,
    by_user: bool = False,
    cluster: bool = False,
) -> int:
    """``gpumon once``: print one sample (a table, or JSON with ``as_json``) and exit."""
    from gpumon.sources.cluster_base import cluster_requested

    if cluster_requested(settings, cluster):
        return run_cluster(
            settings, as_json=as_json, no_processes=no_processes, color=color, by_user=by_user
        )
    from gpumon.sampling.snapshot import no_gpu_data, report_unavailable, sample_to_dict, take_sample
    from gpumon.data.views import free_gpu_indices

    # The table shows no PCIe throughput: skip NVML's slow call for it (JSON has it).
    sample = take_sample(settings, processes=not no_processes, pcie=as_json)
    failed = no_gpu_data(sample)
    threshold = settings.free_threshold_mib
    if as_json:
        data = sample_to_dict(
            sample, include_processes=not no_processes, free_threshold_mib=threshold
        )
        import json  # here: `once` without --json does not need it

        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    elif not failed:
        stdout = sys.stdout
        width = shutil.get_terminal_size().columns if stdout.isatty() else None
        painted = use_color(color, stdout, os.environ)
        # --no-processes reads none (the demo lists them anyway): then nothing is FREE.
        free = frozenset() if no_processes else free_gpu_indices(sample, threshold)
        table = render_table(
            sample,
            show_processes=not (no_processes or by_user),
            color=painted,
            width=width,
            free=free,
        )
        if not no_processes:
            table += render_users(sample, color=painted, always=by_user)
        stdout.write(table)
    if failed:
        assert sample.unavailable is not None
        report_unavailable(sample.unavailable)
        return 1
    return 0


def run_cluster(
    settings: Settings, *, as_json: bool, no_processes: bool, color: str, by_user: bool
) -> int:
    """``gpumon once --prometheus URL``: the whole cluster; exit 1 when Prometheus cannot be
    read or knows no GPU node (the JSON is printed all the same), 2 for bad settings."""
    from gpumon.commands import cluster_output
    from gpumon.settings import SettingsError
    from gpumon.sources.cluster_base import take_cluster_sample

    try:
        cluster = take_cluster_sample(settings)
    except SettingsError as error:
        print(f"gpumon: error: {error}", file=sys.stderr)
        return 2
    threshold = settings.free_threshold_mib
    failure = cluster_output.read_failure(cluster)
    if as_json:
        import json

        document = cluster_output.cluster_to_dict(
            cluster, include_processes=not no_processes, free_threshold_mib=threshold
        )
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    elif failure is None:
        stdout = sys.stdout
        text = cluster_output.render_cluster(
            cluster,
            show_processes=not no_processes,
            by_user=by_user,
            color=use_color(color, stdout, os.environ),
            width=shutil.get_terminal_size().columns if stdout.isatty() else None,
            free_threshold_mib=threshold,
        )
        stdout.write(text)
    if failure is not None:
        print(f"gpumon: {failure}", file=sys.stderr)
        return 1
    return 0


def use_color(mode: str, stream: TextIO, environ: Mapping[str, str]) -> bool:
    """Decide whether to write ANSI colours.

    Args:
        mode: ``always``, ``never`` or ``auto``.
        stream: where the output goes; ``auto`` colours only a terminal.
        environ: the environment; in ``auto`` mode a non-empty ``NO_COLOR`` (no-color.org)
            or ``TERM=dumb`` turns colours off.

    Returns:
        True to colour.
    """
    if mode == "always":
        return True
    if mode == "never":
        return False
    if environ.get("NO_COLOR", ""):
        return False
    if environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class Painter:
    """Wraps text in SGR codes, or leaves it alone when colour is off."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, *codes: str) -> str:
        if not self.enabled or not codes:
            return text
        return f"\x1b[{';'.join(codes)}m{text}{RESET}"


_TEMPERATURE_CODES: dict[fmt.TemperatureLevel, tuple[str, ...]] = {
    "na": (),
    "normal": (GREEN,),
    "warm": (YELLOW,),
    "hot": (BOLD, RED),
}


def temperature_codes(temperature_c: int | None, slowdown_c: int | None) -> tuple[str, ...]:
    """Colours of :func:`gpumon.data.format.temperature_level`, as in the dashboard.

    Red within 5 °C of the GPU's own slowdown threshold, yellow within 15 °C, green below.
    """
    return _TEMPERATURE_CODES[fmt.temperature_level(temperature_c, slowdown_c)]


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


def _process_cells(process: GpuProcess) -> dict[str, str]:
    if process.visible:
        command = process.command or "?"
    else:
        command = "(not visible here: another PID namespace?)"
    return {
        "user": process.user or "?",
        "pid": str(process.pid),
        "memory": fmt.bytes_short(process.gpu_memory_bytes),
        "command": command,
    }


def column_widths(rows: Sequence[Mapping[str, str]]) -> dict[str, int]:
    widths: dict[str, int] = {}
    for row in rows:
        for key, text in row.items():
            widths[key] = max(widths.get(key, 0), fmt.cell_len(text))
    return widths


def header_line(sample: Sample, paint: Painter) -> str:
    """Host, local time, driver and CUDA versions; the DEMO marker on simulated data."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(sample.timestamp_s))
    parts = [paint(sample.host.hostname, BOLD), stamp]
    if sample.driver is not None:
        parts.append(f"driver {sample.driver.driver_version or fmt.NA}")
        parts.append(f"CUDA {sample.driver.cuda_driver_version or fmt.NA}")
    if sample.simulated:
        parts.append(paint(DEMO_MARKER, BOLD, YELLOW, REVERSE))
    return "  ".join(parts)


def render_table(
    sample: Sample,
    *,
    show_processes: bool = True,
    color: bool = False,
    width: int | None = None,
    ascii_only: bool | None = None,
    free: Set[int] = frozenset(),
) -> str:
    """The ``gpumon once`` table.

    Args:
        sample: what to show.
        show_processes: indent each GPU's processes below it.
        color: add ANSI colours.
        width: terminal width; commands are cut to fit it. ``None`` (piped) cuts nothing.
        ascii_only: mark cut commands with ``~`` instead of ``…``; ``None`` decides from
            the locale (:func:`gpumon.data.format.locale_is_utf8`).
        free: NVML indices of the GPUs to mark FREE (:func:`gpumon.data.views.free_gpu_indices`).

    Returns:
        The table, one line per GPU and process, ending with a newline.
    """
    lines = [header_line(sample, Painter(color))]
    lines += gpu_lines(
        sample,
        show_processes=show_processes,
        color=color,
        width=width,
        ascii_only=ascii_only,
        free=free,
    )
    return "\n".join(lines) + "\n"


def gpu_lines(
    sample: Sample,
    *,
    show_processes: bool = True,
    color: bool = False,
    width: int | None = None,
    ascii_only: bool | None = None,
    free: Set[int] = frozenset(),
) -> list[str]:
    """The table's lines below its header: one per GPU, its processes indented below.

    The cluster view (:mod:`gpumon.commands.cluster_output`) prints these under each node's header;
    the arguments are :func:`render_table`'s.
    """
    paint = Painter(color)
    if ascii_only is None:
        ascii_only = not fmt.locale_is_utf8()
    ellipsis = fmt.ASCII_ELLIPSIS if ascii_only else fmt.ELLIPSIS
    gpu_rows = [_gpu_cells(gpu, ascii_only) for gpu in sample.gpus]
    gpu_widths = column_widths(gpu_rows)
    process_rows = [_process_cells(process) for process in sample.processes]
    process_widths = column_widths(process_rows)
    by_gpu: dict[int, list[tuple[GpuProcess, dict[str, str]]]] = {
        gpu.index: [] for gpu in sample.gpus
    }
    for process, cells in zip(sample.processes, process_rows, strict=True):
        by_gpu.setdefault(process.gpu_index, []).append((process, cells))

    lines = []
    for gpu, cells in zip(sample.gpus, gpu_rows, strict=True):
        line = _gpu_line(gpu, cells, gpu_widths, paint)
        lines.append(f"{line} | {paint(FREE, BOLD, GREEN)}" if gpu.index in free else line)
        if not show_processes or gpu.lost:
            continue
        if gpu.processes_error is not None:
            lines.append(f"    processes: N/A ({gpu.processes_error})")
            continue
        listed = by_gpu[gpu.index]
        lines.extend(
            _process_line(row, process_widths, paint, width, ellipsis) for _, row in listed
        )
        unlisted = notable_unlisted_memory_bytes(gpu, [process for process, _ in listed])
        if unlisted is not None:
            lines.append(f"    {paint(fmt.unlisted_memory(unlisted), YELLOW)}")
    return lines


def _gpu_line(gpu: GpuStats, cells: dict[str, str], widths: dict[str, int], paint: Painter) -> str:
    def cell(key: str, *codes: str, left: bool = False) -> str:
        pad = fmt.ljust_cells if left else fmt.rjust_cells
        return paint(pad(cells[key], widths[key]), *codes)

    identity = f"{cell('index', CYAN, left=True)} {cell('name', BLUE, left=True)}"
    if gpu.lost:
        reason = gpu.lost_reason or "no readings from this GPU"
        return f"{identity} | {paint('LOST', BOLD, RED)} ({reason})"
    temperature = cell(
        "temperature", *temperature_codes(gpu.temperature_c, gpu.temperature_slowdown_c)
    )
    utilization = cell("utilization", GREEN)
    memory = f"{cell('memory_used', YELLOW)} / {cell('memory_total', YELLOW)}"
    power = cell("power", MAGENTA)
    return f"{identity} | {temperature} {utilization} | {memory} | {power}"


def _process_line(
    row: dict[str, str], widths: dict[str, int], paint: Painter, width: int | None, ellipsis: str
) -> str:
    # Widths are terminal cells: a CJK user name or command keeps the columns aligned.
    user = fmt.ljust_cells(row["user"], widths["user"])
    pid = fmt.rjust_cells(row["pid"], widths["pid"])
    memory = fmt.rjust_cells(row["memory"], widths["memory"])
    command = row["command"]
    if width is not None:
        prefix = fmt.cell_len(f"    {user}  {pid}  {memory}  ")
        command = fmt.truncate(command, max(_MIN_COMMAND_WIDTH, width - prefix), ellipsis)
    return f"    {paint(user, DIM)}  {paint(pid, DIM)}  {paint(memory, YELLOW)}  {command}"


def render_users(
    sample: Sample, *, color: bool = False, always: bool = False, ascii_only: bool | None = None
) -> str:
    """Who uses what: one row per user (GPUs, GPU memory, processes), most memory first.

    Only GPUs whose process lists are known count; a note names those left out. Owners that
    cannot be read and processes of another PID namespace get rows of their own, never
    dropped.

    Args:
        sample: what to sum up.
        color: add ANSI colours (the current user's row in bold).
        always: the table even when no process runs (``--by-user``); else nothing then.
        ascii_only: ``>=`` instead of ``≥`` for a lower bound; ``None`` decides from the
            locale.

    Returns:
        A blank line, then the table and its note, each line ending with a newline; or ``""``.
    """
    from gpumon.sampling.snapshot import user_summary_of

    paint = Painter(color)
    if ascii_only is None:
        ascii_only = not fmt.locale_is_utf8()
    usages, left_out = user_summary_of(sample)
    if not (usages or left_out or always):
        return ""
    lines = [""]
    if usages or always:
        rows = [_user_cells(usage, ascii_only) for usage in usages]
        header = dict(zip(("user", "gpus", "memory", "processes"), USER_COLUMNS, strict=True))
        widths = column_widths([header, *rows])
        lines.append(paint(user_line(header, widths), BOLD))
        for usage, row in zip(usages, rows, strict=True):
            text = user_line(row, widths)
            lines.append(paint(text, BOLD) if usage.is_current_user else text)
        if not usages:
            lines.append("(no process on the GPUs whose processes are known)")
    if left_out:
        gpus = ", ".join(str(index) for index in left_out)
        noun = "GPU" if len(left_out) == 1 else "GPUs"
        lines.append(paint(f"not counted: {noun} {gpus} (processes unknown)", YELLOW))
    return "\n".join(lines) + "\n"


def _user_cells(usage: UserUsage, ascii_only: bool) -> dict[str, str]:
    memory = fmt.bytes_short(usage.gpu_memory_bytes)
    if usage.memory_partial:  # some processes' memory is N/A: the sum is a lower bound
        memory = (">=" if ascii_only else "≥") + memory
    return {
        "user": usage.user,
        "gpus": ",".join(str(index) for index in usage.gpu_indices),
        "memory": memory,
        "processes": str(usage.process_count),
    }


def user_line(row: Mapping[str, str], widths: Mapping[str, int]) -> str:
    user = fmt.ljust_cells(row["user"], widths["user"])
    gpus = fmt.ljust_cells(row["gpus"], widths["gpus"])
    memory = fmt.rjust_cells(row["memory"], widths["memory"])
    processes = fmt.rjust_cells(row["processes"], widths["processes"])
    return f"{user}  {gpus}  {memory}  {processes}".rstrip()
