"""The GPU panel's cards (:class:`~gpumon.ui.widgets.gpu_panel.GpuPanel`, on wide terminals):
a card's border and title, its five lines of readings, and its sparklines.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from textual.strip import Strip

from gpumon.data import format as fmt
from gpumon.data.model import GpuStats
from gpumon.ui.widgets.gpu_layout import CARD_HEIGHT
from gpumon.ui.widgets.gpu_rows import count_text, lost_reason, mig_rows, short_bus
from gpumon.ui.widgets.graphs import history_sparkline
from gpumon.ui.widgets.lines import Line

if TYPE_CHECKING:
    from gpumon.data.notes import GpuNote
    from gpumon.ui.widgets.gpu_panel import GpuPanel


def card_sparks(panel: GpuPanel, gpu: GpuStats, inner: int) -> tuple[str, str]:
    """Utilisation and memory sparklines for a card ``inner`` cells wide: only where
    the bars keep at least 12 cells (never crowding out numbers), and never for a lost
    GPU."""
    width = min(24, (inner - 28) // 3)
    if panel.history is None or gpu.lost or width < 6:
        return ("", "")
    ascii_only = panel.glyphs.ascii_only
    total = gpu.memory_total_bytes
    return (
        history_sparkline(
            panel.history, gpu.index, "utilization_gpu_pct", width, 100.0,
            panel.interval_s, ascii_only,
        ),
        history_sparkline(
            panel.history, gpu.index, "memory_used_bytes", width,
            None if total is None else float(total), panel.interval_s, ascii_only,
        ),
    )  # fmt: skip


def draw_card(
    panel: GpuPanel,
    gpu: GpuStats,
    selected: bool,
    width: int,
    sparks: tuple[str, str] = ("", ""),
    free: bool = False,
    extra: int = 0,
    notes: tuple[GpuNote, ...] = (),
) -> list[Strip]:
    """One GPU's card, ``width`` cells wide: a border with its index, name (FREE) and UUID
    around :func:`card_body` and its MIG instances, ``extra`` lines taller for MIG; its
    ``notes`` in the bottom border."""
    g = panel.glyphs
    border = panel.style("border-selected" if selected else "border")
    inner = width - 4
    title = Line().add(g.tl + g.h, border)
    title.add(f" GPU {gpu.index} ", panel.style("selected") if selected else panel.style("title"))
    if free:
        title.add(" FREE ", panel.style("free")).add(" ", border)
    room = inner - 26 - (7 if free else 0)  # " FREE " and its space
    title.add(g.truncate(f" {gpu.name or fmt.NA} ", max(0, room)), panel.style("title"))
    right = f" {gpu.short_uuid} "
    title.add(g.h * max(0, width - title.width - len(right) - 2), border)
    title.add(right, panel.style("dim")).add(g.h + g.tr, border)
    body = card_body(panel, gpu, inner, sparks)
    body += mig_rows(panel, gpu, inner)
    # A row of cards is as tall as its tallest card (one with MIG instances).
    body += [Line() for _ in range(CARD_HEIGHT - 2 + extra - len(body))]
    lines = [title.strip(width)]
    for content in body:
        line = Line().add(g.v + " ", border).extend(content, inner)
        lines.append(line.add(" " + g.v, border).strip(width))
    bottom = Line().add(g.bl + g.h, border)
    for note in notes:
        room = width - bottom.width - 3
        if room < 8:
            break
        bottom.add(g.truncate(f" {note.text} ", room), panel.style(note.style)).add(g.h, border)
    bottom.add(g.h * max(0, width - bottom.width - 1), border).add(g.br, border)
    lines.append(bottom.strip(width))
    return lines


def card_body(
    panel: GpuPanel, gpu: GpuStats, inner: int, sparks: tuple[str, str] = ("", "")
) -> list[Line]:
    """The five lines inside a card (fan, temperature, bars, clocks), or why a lost GPU has
    none."""
    label = panel.style("label")
    if gpu.lost:
        lost = Line().add(" LOST ", panel.style("lost"))
        lost.add(" no readings; the others keep updating", label)
        reason = textwrap.wrap(lost_reason(gpu), inner) or [""]
        if len(reason) > 2:
            reason = [reason[0], panel.glyphs.truncate(" ".join(reason[1:]), inner)]
        return [
            lost,
            *(Line().add(text) for text in reason),
            *([Line()] * (3 - len(reason))),
            Line().add("PCI ", label).add(gpu.pci_bus_id or fmt.NA),
        ]
    spark = panel.style("spark")
    spark_width = len(sparks[0]) + 1 if sparks[0] else 0
    bar_width = max(6, inner - 28 - spark_width)
    first = Line().add("Fan ", label)
    panel._value(first, fmt.percent(gpu.fan_pct).rjust(4))
    first.add("  Temp ", label)
    panel._value(
        first,
        fmt.celsius(gpu.temperature_c, panel.glyphs.ascii_only).rjust(5),
        panel.temperature_style(gpu),
    )
    first.add("  ", label)
    panel._value(first, fmt.pstate(gpu.performance_state))
    first.add("  Persist ", label)
    panel._value(first, fmt.on_off(gpu.persistence_mode))
    first.add("  PCI ", label).add(short_bus(gpu.pci_bus_id), panel.style("dim"))

    util = Line().add("GPU ", label)
    fraction = None if gpu.utilization_gpu_pct is None else gpu.utilization_gpu_pct / 100
    panel._bar(util, fraction, bar_width)
    if sparks[0]:  # right of the bar, as the memory's below: the two line up
        util.add(" " + sparks[0], spark)
    panel._value(util, " " + fmt.percent(gpu.utilization_gpu_pct).rjust(4))
    util.add("  MemBW ", label)
    panel._value(util, fmt.percent(gpu.utilization_memory_pct).rjust(4))

    memory = Line().add("MEM ", label)
    panel._bar(memory, gpu.memory_used_fraction, bar_width)
    if sparks[1]:
        memory.add(" " + sparks[1].ljust(len(sparks[0])), spark)
    panel._value(memory, " " + fmt.memory_pair(gpu.memory_used_bytes, gpu.memory_total_bytes))
    if gpu.memory_reserved_bytes:
        memory.add(" rsv ", label).add(fmt.bytes_short(gpu.memory_reserved_bytes))

    power = Line().add("PWR ", label)
    panel._bar(power, gpu.power_fraction, bar_width)
    panel._value(power, " " + fmt.watts_pair(gpu.power_draw_w, gpu.power_limit_w))

    clocks = Line().add("SM ", label)
    panel._value(clocks, fmt.mhz(gpu.clock_sm_mhz))
    clocks.add(" Mem ", label)
    panel._value(clocks, fmt.mhz(gpu.clock_memory_mhz))
    clocks.add("  ECC ", label)
    panel._value(clocks, count_text(gpu.ecc_errors_uncorrected_volatile), panel._ecc_style(gpu))
    clocks.add("  MIG ", label)
    panel._value(clocks, fmt.on_off(gpu.mig_mode))
    clocks.add("  ", label)
    panel._value(clocks, gpu.compute_mode or fmt.NA)
    return [first, util, memory, power, clocks]
