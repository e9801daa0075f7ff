"""A GPU's readings as both dashboards' GPU screens show them (the one-machine GPU detail, a
cluster node's GPU): the graphs drawn and their fixed scales (:data:`GRAPHS`), every field of
the field table, and the GPU's processes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.text import Text

from gpumon.data import format as fmt
from gpumon.data.fields import FIELDS
from gpumon.data.model import GpuStats, Sample


@dataclass(frozen=True, slots=True)
class Graph:
    """One graph of a GPU screen: a reading on a fixed scale."""

    title: str
    field: str
    text: Callable[[float], str]
    #: The top of the scale from the latest GPU reading (``None``: the largest value seen).
    top: Callable[[GpuStats], float | None] = lambda gpu: None
    threshold: Callable[[GpuStats], float | None] = lambda gpu: None
    threshold_name: str = ""

    def scale_top(self, gpu: GpuStats, known: Sequence[float]) -> float:
        """The top of the chart's scale: :attr:`top`'s for ``gpu``, else the largest of the
        ``known`` values (1 when there is none)."""
        top = self.top(gpu)
        return top if top is not None and top > 0 else (max(known, default=0.0) or 1.0)


def _temperature_top(gpu: GpuStats) -> float | None:
    limit = gpu.temperature_shutdown_c or gpu.temperature_slowdown_c
    return None if limit is None else float(limit + 5)


GRAPHS: tuple[Graph, ...] = (
    Graph("Utilisation", "utilization_gpu_pct", lambda v: f"{v:.0f}%", lambda gpu: 100.0),
    Graph(
        "Memory used",
        "memory_used_bytes",
        lambda v: fmt.bytes_short(int(v)),
        lambda gpu: None if gpu.memory_total_bytes is None else float(gpu.memory_total_bytes),
    ),
    Graph(
        "Power",
        "power_draw_w",
        lambda v: f"{v:.0f}W",
        lambda gpu: gpu.power_limit_w,
    ),
    Graph(
        "Temperature",
        "temperature_c",
        lambda v: f"{v:.0f}°C",
        _temperature_top,
        lambda gpu: None if gpu.temperature_slowdown_c is None else gpu.temperature_slowdown_c,
        "slowdown",
    ),
    Graph("SM clock", "clock_sm_mhz", lambda v: f"{v:.0f}MHz"),
    Graph("PCIe rx", "pcie_rx_bytes_per_s", lambda v: f"{fmt.bytes_short(int(v))}/s"),
    Graph("PCIe tx", "pcie_tx_bytes_per_s", lambda v: f"{fmt.bytes_short(int(v))}/s"),
)


#: What a field the source has not read yet shows (see ``Sample.unread_gpu_fields``): the GPU
#: screen asks for it when it opens, and it comes with the next sample.
NOT_READ_YET = "…"


def render_fields(
    gpu: GpuStats, ascii_only: bool = False, unread: frozenset[str] = frozenset()
) -> Text:
    """Every field of the field table: label, value, what it is; ``unread`` fields (not
    read for this sample: never N/A) as :data:`NOT_READ_YET`."""
    text = Text("Fields\n", style="bold")
    for field in FIELDS:
        value = field.show(gpu) if field.attribute not in unread else NOT_READ_YET
        if ascii_only:
            value = value.replace("°C", "C")
        text.append(f"  {field.label:<10} ", "bold")
        text.append(f"{value:<16} ")
        text.append(field.help + "\n", "dim")
    return ascii_text(text, ascii_only)


def render_processes(sample: Sample, index: int, width: int = 120) -> Text:
    """The GPU's processes, biggest GPU memory first (unknown is said, never "none")."""
    gpu = next((gpu for gpu in sample.gpus if gpu.index == index), None)
    text = Text("Processes\n", style="bold")
    if gpu is None or gpu.lost:
        return text.append("  unknown: the GPU is lost\n")
    if gpu.processes_error is not None:
        return text.append(f"  unknown: {gpu.processes_error}\n")
    processes = sorted(sample.processes_on(index), key=lambda p: -(p.gpu_memory_bytes or 0))
    if not processes:
        return text.append("  none\n")
    for process in processes:
        sm = fmt.NA if process.sm_utilization_pct is None else f"{process.sm_utilization_pct}%"
        hidden = "exited" if process.exited else "not visible here"
        user = process.user or (hidden if not process.visible else fmt.NA)
        memory = fmt.bytes_short(process.gpu_memory_bytes)
        line = fitted_line(
            [(f"  {process.pid:>7} {user:<12.12} {memory:>6}", "", 0), (f"  SM {sm:>4}", "dim", 1)],
            width,
        )
        room = width - line.cell_len - 2
        if room >= 10:  # the command where it has room, cut with an ellipsis
            line.append("  ").append(fmt.truncate(process.command or "", room))
        text.append_text(line).append("\n")
    return text


#: A piece of a line: its text, its style, and when it gives way (0: never; the highest first).
Piece = tuple[str, str, int]


def fitted_line(pieces: Sequence[Piece], width: int) -> Text:
    """The ``pieces`` that fit in ``width`` cells, in order: while the line is too wide the
    piece of the highest rank (the last of them) is dropped whole, so a number is shown in
    full or not at all. Rank 0 pieces always stay (cropped only where they alone are too
    wide)."""
    shown = list(pieces)
    while sum(fmt.cell_len(piece[0]) for piece in shown) > width:
        rank = max(piece[2] for piece in shown)
        if rank == 0:
            break
        last = max(number for number, piece in enumerate(shown) if piece[2] == rank)
        del shown[last]
    text = Text()
    for piece, style, _ in shown:
        text.append(piece, style)
    return text


def ascii_text(text: Text, ascii_only: bool) -> Text:
    """``text`` as an ASCII terminal shows it: °C reads C, an ellipsis ~ (unchanged otherwise)."""
    if not ascii_only:
        return text
    plain = text.plain.replace("°C", "C").replace("…", "~")
    if plain == text.plain:
        return text
    return Text(plain, style=text.style)


#: Cells left of a chart for its scale's labels (one more for the space after them).
SCALE_CELLS = 8


def chart_width(width: int) -> int:
    """The cells a chart gets of a screen ``width`` cells wide, its scale left of it."""
    return max(10, width - SCALE_CELLS - 1)


def append_chart(
    text: Text, rows: Sequence[str], top_label: str, style: str, ascii_only: bool
) -> None:
    """``rows`` (from :func:`gpumon.ui.widgets.graphs.chart`) onto ``text``, each after its
    scale label (``top_label`` on the first row, ``0`` on the last), then an empty line."""
    for number, row in enumerate(rows):
        label = top_label if number == 0 else ("0" if number == len(rows) - 1 else "")
        text.append_text(ascii_text(Text(f"{label:>{SCALE_CELLS}} ", "dim"), ascii_only))
        text.append(row, style=style)
        text.append("\n")
    text.append("\n")
