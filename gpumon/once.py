"""``gpumon once``: one snapshot of every GPU and its processes, then exit.

A compact table in the spirit of gpustat (one line per GPU, its processes indented below),
or with ``--json`` the same data in the documented, versioned JSON shape of
:mod:`gpumon.snapshot`. One sample, no sleeping: fast even on an 8-GPU server.

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
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TextIO

from gpumon import format as fmt
from gpumon.model import GpuProcess, GpuStats, Sample, notable_unlisted_memory_bytes

if TYPE_CHECKING:
    from gpumon.settings import Settings

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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json",
        dest="as_json",
        action="store_true",
        help="print JSON (schema: docs/json-schema.md) instead of the table",
    )
    parser.add_argument(
        "--no-processes",
        action="store_true",
        help="GPUs only: leave out the process lines (JSON: processes is null)",
    )
    parser.add_argument(
        "--color",
        choices=("auto", "always", "never"),
        default="auto",
        help="colour the table: auto (default) = on a terminal unless NO_COLOR is set",
    )


def run(settings: Settings, *, as_json: bool, no_processes: bool, color: str) -> int:
    """``gpumon once``: print one sample (a table, or JSON with ``as_json``) and exit."""
    from gpumon.snapshot import no_gpu_data, report_unavailable, sample_to_dict, take_sample

    # The table shows no PCIe throughput: skip NVML's slow call for it (JSON has it).
    sample = take_sample(settings, processes=not no_processes, pcie=as_json)
    failed = no_gpu_data(sample)
    if as_json:
        data = sample_to_dict(sample, include_processes=not no_processes)
        import json  # here: `once` without --json does not need it

        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    elif not failed:
        stdout = sys.stdout
        width = shutil.get_terminal_size().columns if stdout.isatty() else None
        stdout.write(
            render_table(
                sample,
                show_processes=not no_processes,
                color=use_color(color, stdout, os.environ),
                width=width,
            )
        )
    if failed:
        assert sample.unavailable is not None
        report_unavailable(sample.unavailable)
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


class _Painter:
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
    """Colours of :func:`gpumon.format.temperature_level`, as in the dashboard.

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


def _widths(rows: Sequence[Mapping[str, str]]) -> dict[str, int]:
    widths: dict[str, int] = {}
    for row in rows:
        for key, text in row.items():
            widths[key] = max(widths.get(key, 0), fmt.cell_len(text))
    return widths


def header_line(sample: Sample, paint: _Painter) -> str:
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
) -> str:
    """The ``gpumon once`` table.

    Args:
        sample: what to show.
        show_processes: indent each GPU's processes below it.
        color: add ANSI colours.
        width: terminal width; commands are cut to fit it. ``None`` (piped) cuts nothing.
        ascii_only: mark cut commands with ``~`` instead of ``…``; ``None`` decides from
            the locale (:func:`gpumon.format.locale_is_utf8`).

    Returns:
        The table, one line per GPU and process, ending with a newline.
    """
    paint = _Painter(color)
    if ascii_only is None:
        ascii_only = not fmt.locale_is_utf8()
    ellipsis = fmt.ASCII_ELLIPSIS if ascii_only else fmt.ELLIPSIS
    gpu_rows = [_gpu_cells(gpu, ascii_only) for gpu in sample.gpus]
    gpu_widths = _widths(gpu_rows)
    process_rows = [_process_cells(process) for process in sample.processes]
    process_widths = _widths(process_rows)
    by_gpu: dict[int, list[tuple[GpuProcess, dict[str, str]]]] = {
        gpu.index: [] for gpu in sample.gpus
    }
    for process, cells in zip(sample.processes, process_rows, strict=True):
        by_gpu.setdefault(process.gpu_index, []).append((process, cells))

    lines = [header_line(sample, paint)]
    for gpu, cells in zip(sample.gpus, gpu_rows, strict=True):
        lines.append(_gpu_line(gpu, cells, gpu_widths, paint))
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
    return "\n".join(lines) + "\n"


def _gpu_line(gpu: GpuStats, cells: dict[str, str], widths: dict[str, int], paint: _Painter) -> str:
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
    row: dict[str, str], widths: dict[str, int], paint: _Painter, width: int | None, ellipsis: str
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
