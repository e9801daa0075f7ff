"""``u``: who holds the GPUs. Per user: GPUs used, GPU memory, process count, the GPU memory
its idle processes hold (held idle: :mod:`gpumon.data.idle`), most memory first.

Drawn from the store on every sample (:func:`gpumon.data.views.user_summary`, the same summary as
``gpumon once --by-user``). A GPU whose process list is unknown is named below the table: the
summary cannot count its users, and says so rather than leave them out silently.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from gpumon.data import format as fmt
from gpumon.data.free import processes_known
from gpumon.data.idle import IdleRule
from gpumon.data.model import Sample
from gpumon.data.views import UserUsage, user_summary
from gpumon.ui.dashboard.process_detail import wrap_cells
from gpumon.ui.dashboard.store_screen import StoreScreen
from gpumon.ui.widgets.keys_footer import KeysFooter
from gpumon.ui.widgets.text_lines import TextLines

if TYPE_CHECKING:
    from gpumon.ui.dashboard.app import GpumonApp

#: The columns: title, right-aligned. Each is as wide as its widest cell; on a narrow screen
#: they are dropped whole from the right (down to GPU-MEM), never cut.
COLUMNS = (("USER", False), ("GPUS", False), ("GPU-MEM", True), ("PROCS", True), ("IDLE-MEM", True))
#: The most cells a user name, and a list of GPUs, takes; a longer one ends with an ellipsis.
USER_CELLS, GPUS_CELLS = 20, 16
#: The fewest cells a user name is cut to before GPU-MEM would not fit.
USER_MIN_CELLS = 8
#: Between two columns.
GAP = "  "


def gpu_list(indices: tuple[int, ...]) -> str:
    """``0,1`` or ``0-7,9``: runs of three or more GPUs as a range."""
    parts: list[str] = []
    start = 0
    while start < len(indices):
        end = start
        while end + 1 < len(indices) and indices[end + 1] == indices[end] + 1:
            end += 1
        if end - start >= 2:
            parts.append(f"{indices[start]}-{indices[end]}")
        else:
            parts.extend(str(index) for index in indices[start : end + 1])
        start = end + 1
    text = ",".join(parts)
    if len(text) > GPUS_CELLS:  # cut after a whole GPU number, never inside one
        cut = text.rfind(",", 0, GPUS_CELLS)
        text = text[:cut] + fmt.ELLIPSIS if cut > 0 else fmt.truncate(text, GPUS_CELLS)
    return text


def usage_cells(usage: UserUsage) -> tuple[str, str, str, str, str]:
    """A user's cells, one per column of :data:`COLUMNS`."""
    memory = fmt.bytes_short(usage.gpu_memory_bytes)
    if usage.memory_partial:
        memory = ">=" + memory
    if usage.idle_memory_bytes:
        idle = (">=" if usage.idle_unknown else "") + fmt.bytes_short(usage.idle_memory_bytes)
    else:
        idle = fmt.NA if usage.idle_unknown else "-"  # idleness unknown (MIG) is not "none"
    gpus = gpu_list(usage.gpu_indices)
    return (usage.user, gpus, memory, str(usage.process_count), idle)


def usage_table(usages: tuple[UserUsage, ...], width: int) -> tuple[list[str], list[str]]:
    """The header and one line per user in ``width`` cells, and the titles of the columns
    dropped (from the right) to fit; user names are cut (with an ellipsis) only where
    GPU-MEM would not fit otherwise."""
    rows = [usage_cells(usage) for usage in usages]
    widths = [
        max([fmt.cell_len(title), *(fmt.cell_len(row[number]) for row in rows)])
        for number, (title, _) in enumerate(COLUMNS)
    ]
    widths[0] = min(widths[0], USER_CELLS)
    shown = len(COLUMNS)
    while shown > 3 and sum(widths[:shown]) + len(GAP) * (shown - 1) > width:
        shown -= 1
    over = sum(widths[:shown]) + len(GAP) * (shown - 1) - width
    if over > 0:
        widths[0] = max(USER_MIN_CELLS, widths[0] - over)

    def line(cells: tuple[str, ...]) -> str:
        parts = []
        for number, cell in enumerate(cells[:shown]):
            cell_width = widths[number]
            if number == 0:
                cell = fmt.truncate(cell, cell_width)
            right = COLUMNS[number][1]
            parts.append(
                fmt.rjust_cells(cell, cell_width) if right else fmt.ljust_cells(cell, cell_width)
            )
        return GAP.join(parts).rstrip()

    lines = [line(tuple(title for title, _ in COLUMNS))]
    lines.extend(line(row) for row in rows)
    return lines, [title for title, _ in COLUMNS[shown:]]


def render_summary(
    sample: Sample | None,
    idle: frozenset[tuple[int, int]] = frozenset(),
    rule: IdleRule | None = None,
    width: int = 200,
) -> Text:
    """The per-user table of ``sample`` in ``width`` cells, and what it cannot count;
    ``idle``: the keys of the processes that are IDLE by ``rule``. Its notes wrap."""
    text = Text()

    def note(line: str, style: str = "dim") -> None:
        for part in wrap_cells(line, max(10, width)):
            text.append(part + "\n", style)

    if sample is None:
        note("Waiting for the first sample: users not known yet.")
        return text
    if sample.simulated:
        note("DEMO: simulated users and processes.", "bold")
    if sample.unavailable is not None:
        note(f"No GPU data: {sample.unavailable.headline}", "bold")
        return text
    usages = user_summary(sample.processes, idle)
    lines, dropped = usage_table(usages, width)
    text.append(lines[0] + "\n", "bold")
    if not usages:
        note("No processes on the GPUs whose process lists could be read.")
    for usage, row in zip(usages, lines[1:], strict=True):
        text.append(row + "\n", "bold" if usage.is_current_user else "")
    if dropped and usages:
        note(f"Not shown here (a wider terminal shows them): {', '.join(dropped)}.")
    unknown = [gpu.index for gpu in sample.gpus if not processes_known(gpu, sample)]
    if unknown:
        names = ", ".join(str(index) for index in unknown)
        text.append("\n")
        note(f"Not counted: GPU {names} (process list unknown: lost or refused by NVML).")
    if any(usage.memory_partial for usage in usages):
        note(">=: some of the user's processes have GPU memory N/A.")
    idle_shown = "IDLE-MEM" not in dropped
    if idle_shown and rule is not None and any(usage.idle_memory_bytes for usage in usages):
        note(
            f"IDLE-MEM: held by processes at or below {rule.below_pct} % SM for "
            f"{fmt.duration(rule.after_s)} or more."
        )
    return text


class UserSummaryScreen(StoreScreen):
    """Per-user GPU use, live; ``Escape`` goes back."""

    TITLE_ID = "user-summary-title"

    def compose(self) -> ComposeResult:
        yield Static("", id=self.TITLE_ID, markup=False)
        with VerticalScroll():
            yield TextLines(id="user-summary")
        yield KeysFooter()

    def refresh_from_store(self) -> None:
        sample = self.store.latest
        known = [] if sample is None else [processes_known(g, sample) for g in sample.gpus]
        if not any(known):  # before the first sample, or no GPU's list read: not "0 users"
            count = "unknown"
        else:
            assert sample is not None
            count = str(len(user_summary(sample.processes)))
            if not all(known):
                count = ">= " + count
        self.show_title(f" Users of the GPUs: {count}  (most GPU memory first)")
        tracker = cast("GpumonApp", self.app).pipeline.idle
        summary = render_summary(
            sample, tracker.view.idle_keys(), tracker.rule, self.content_width()
        )
        self.query_one("#user-summary", TextLines).update(summary)
