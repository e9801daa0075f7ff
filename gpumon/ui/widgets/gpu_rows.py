"""The GPU panel's two-line and one-line rows, for terminals too small for cards."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.strip import Strip

from gpumon.data import format as fmt
from gpumon.data.model import GpuStats
from gpumon.ui.widgets.graphs import history_sparkline
from gpumon.ui.widgets.lines import Line

if TYPE_CHECKING:
    from gpumon.ui.widgets.gpu_panel import GpuPanel


def index_cell(panel: GpuPanel, line: Line, gpu: GpuStats, selected: bool) -> None:
    line.add(f"{gpu.index:>2} ", panel.style("selected") if selected else panel.style("title"))


def name_cell(panel: GpuPanel, line: Line, gpu: GpuStats, width: int) -> None:
    """The GPU's short name in ``width`` cells; a FREE GPU's starts with FREE, in the same
    cells, so the columns after it stay aligned."""
    if gpu.index in panel.free and width >= 10:
        line.add("FREE", panel.style("free")).add(" ")
        width -= 5
    line.add(panel.glyphs.fit(short_name(gpu.name), width - 1) + " ", panel.style("title"))


def notes_cell(panel: GpuPanel, line: Line, gpu: GpuStats, width: int) -> None:
    """The GPU's notes (claimed, held idle, watched) at the end of a row, as far as they fit."""
    for note in panel.notes.get(gpu.index, ()):
        room = width - line.width - 1
        if room < 8:
            return
        line.add(" ").add(panel.glyphs.truncate(note.text, room), panel.style(note.style))


def mig_rows(panel: GpuPanel, gpu: GpuStats, width: int, indent: int = 0) -> list[Line]:
    """A GPU in MIG mode: one line per MIG instance (GPU and compute instance ids, profile,
    memory, its own UUID, its process count), or one line saying why there is none."""
    if gpu.lost or not gpu.mig_mode:
        return []
    label = panel.style("label")
    pad = " " * indent
    if gpu.mig_instances is None:
        text = "MIG on: instances not readable here (NVML lists them to root only)"
        return [Line().add(pad + panel.glyphs.truncate(text, width), label)]
    if not gpu.mig_instances:
        return [Line().add(pad + "MIG on: no MIG instance configured", label)]
    counts = panel.mig_process_counts
    lines = []
    for instance in gpu.mig_instances:
        line = Line().add(pad + "MIG ", label)
        line.add(f"{instance.profile or fmt.NA:<8}", panel.style("title"))
        line.add(
            f" GI {_id(instance.gpu_instance_id)} CI {_id(instance.compute_instance_id)}", label
        )
        memory = fmt.memory_pair(instance.memory_used_bytes, instance.memory_total_bytes)
        # The bar only where the rest (about 58 cells) still fits: a card is 54 wide inside.
        bar_width = min(20, width - 64)
        if bar_width >= 4:
            line.add(" ")
            panel._bar(line, instance.memory_used_fraction, bar_width)
        panel._value(line, " " + memory.rjust(11))
        processes = counts.get((gpu.index, instance.gpu_instance_id))
        if processes is not None:
            line.add(f" {processes:>2} proc", label)
        uuid = fmt.short_uuid(instance.uuid) if instance.uuid else fmt.NA
        line.add(" " + uuid, panel.style("dim"))
        lines.append(line)
    return lines


def _id(value: int | None) -> str:
    return "?" if value is None else str(value)


def two_lines(panel: GpuPanel, gpu: GpuStats, selected: bool, width: int) -> list[Strip]:
    label = panel.style("label")
    top = Line()
    index_cell(panel, top, gpu, selected)
    name_cell(panel, top, gpu, 19)
    if gpu.lost:
        top.add(" LOST ", panel.style("lost")).add(" " + lost_reason(gpu))
        return [
            top.strip(width),
            Line().add("    PCI " + (gpu.pci_bus_id or fmt.NA), label).strip(width),
        ]
    top.add(gpu.short_uuid + " ", panel.style("dim"))
    panel._value(
        top,
        fmt.celsius(gpu.temperature_c, panel.glyphs.ascii_only).rjust(5),
        panel.temperature_style(gpu),
    )
    top.add(" Fan ", label)
    panel._value(top, fmt.percent(gpu.fan_pct).rjust(4))
    # Notes before the P-state and flags; then each flag only while it fits whole, so on a
    # short line MIG goes first, then ECC, Pers, the P-state (ECC 12345 never reads 1234).
    notes_cell(panel, top, gpu, width)
    flags = (
        (" ", fmt.pstate(gpu.performance_state), None),
        (" Pers ", fmt.on_off(gpu.persistence_mode), None),
        (" ECC ", count_text(gpu.ecc_errors_uncorrected_volatile), panel._ecc_style(gpu)),
        (" MIG ", fmt.on_off(gpu.mig_mode), None),
    )
    for name, value, style in flags:
        if top.width + len(name) + len(value) > width:
            break
        top.add(name, label)
        panel._value(top, value, style)
    bottom = Line().add("   ")
    spare = width - 3 - 44
    # A utilisation sparkline where the bars keep at least 12 cells each.
    spark_width = min(16, (spare - 36) // 2) if panel.history is not None else 0
    spark = ""
    if spark_width >= 6:
        assert panel.history is not None
        spark = history_sparkline(
            panel.history, gpu.index, "utilization_gpu_pct", spark_width, 100.0,
            panel.interval_s, panel.glyphs.ascii_only,
        )  # fmt: skip
    bar_width = max(4, (spare - (len(spark) + 1 if spark else 0)) // 3)
    bottom.add("GPU", label)
    fraction = None if gpu.utilization_gpu_pct is None else gpu.utilization_gpu_pct / 100
    panel._bar(bottom, fraction, bar_width)
    if spark:
        bottom.add(" " + spark, panel.style("spark"))
    panel._value(bottom, fmt.percent(gpu.utilization_gpu_pct).rjust(5))
    bottom.add(" MEM", label)
    panel._bar(bottom, gpu.memory_used_fraction, bar_width)
    panel._value(bottom, fmt.memory_pair(gpu.memory_used_bytes, gpu.memory_total_bytes).rjust(12))
    bottom.add(" PWR", label)
    panel._bar(bottom, gpu.power_fraction, bar_width)
    panel._value(bottom, fmt.watts_pair(gpu.power_draw_w, gpu.power_limit_w).rjust(11))
    return [top.strip(width), bottom.strip(width)]


def one_line(panel: GpuPanel, gpu: GpuStats, selected: bool, width: int) -> Strip:
    line = Line()
    index_cell(panel, line, gpu, selected)
    if gpu.lost:
        line.add(panel.glyphs.fit(short_name(gpu.name), 14) + " ").add(
            " LOST ", panel.style("lost")
        )
        line.add(" " + lost_reason(gpu))
        return line.strip(width)
    if width >= 70:
        name_cell(panel, line, gpu, 15)
    elif gpu.index in panel.free:
        line.add("FREE", panel.style("free")).add(" ")
    elif panel.free:  # keep the columns aligned with the FREE rows
        line.add(" " * 5)
    panel._value(
        line,
        fmt.celsius(gpu.temperature_c, panel.glyphs.ascii_only).rjust(5),
        panel.temperature_style(gpu),
    )
    line.add(" ")
    memory = (" " + fmt.memory_pair(gpu.memory_used_bytes, gpu.memory_total_bytes)).rjust(11)
    # Notes at the end: the bars give up room for them, down to 3 cells each. Where even
    # that leaves the memory no room the bars go, whole: the numbers stay whole.
    wanted = sum(len(note.text) + 1 for note in panel.notes.get(gpu.index, ()))
    rest = width - line.width - 11 - len(memory)
    rest -= min(wanted, max(0, rest - 6))
    bars = rest >= 5  # two bars of 3 cells take the spare cell too
    bar_width = max(3, rest // 2)
    fraction = None if gpu.utilization_gpu_pct is None else gpu.utilization_gpu_pct / 100
    if bars:
        panel._bar(line, fraction, bar_width)
    panel._value(line, fmt.percent(gpu.utilization_gpu_pct).rjust(5))
    line.add(" ")
    if bars:
        panel._bar(line, gpu.memory_used_fraction, max(3, rest - bar_width))
    panel._value(line, memory)
    notes_cell(panel, line, gpu, width)
    return line.strip(width)


def lost_reason(gpu: GpuStats) -> str:
    return gpu.lost_reason or "no readings from this GPU"


def short_name(name: str | None) -> str:
    if not name:
        return fmt.NA
    for prefix in ("NVIDIA GeForce ", "NVIDIA ", "GeForce "):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def short_bus(bus_id: str | None) -> str:
    """``00000000:17:00.0`` -> ``17:00.0``: the domain is almost always zero."""
    if bus_id is None:
        return fmt.NA
    domain, _, rest = bus_id.partition(":")
    return rest if rest and set(domain) <= {"0"} else bus_id


def count_text(value: int | None) -> str:
    return fmt.NA if value is None else str(value)
