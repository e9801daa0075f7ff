"""``u``: who holds the GPUs. Per user: GPUs used, GPU memory, process count, most memory first.

Drawn from the store on every sample (:func:`gpumon.data.views.user_summary`, the same summary as
``gpumon once --by-user``). A GPU whose process list is unknown is named below the table: the
summary cannot count its users, and says so rather than leave them out silently.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Footer, Static

from gpumon.data import format as fmt
from gpumon.data.model import Sample
from gpumon.data.views import UserUsage, processes_known, user_summary
from gpumon.ui.dashboard.store_screen import StoreScreen
from gpumon.ui.widgets.text_lines import TextLines

HEADER = f"{'USER':<20} {'GPUS':<16} {'GPU-MEM':>9} {'PROCS':>6}"


def usage_row(usage: UserUsage) -> str:
    gpus = ",".join(str(index) for index in usage.gpu_indices)
    memory = fmt.bytes_short(usage.gpu_memory_bytes)
    if usage.memory_partial:
        memory = ">=" + memory
    user = fmt.ljust_cells(fmt.truncate(usage.user, 20), 20)
    return f"{user} {gpus:<16} {memory:>9} {usage.process_count:>6}"


def render_summary(sample: Sample | None) -> Text:
    """The per-user table of ``sample``, and what it cannot count."""
    text = Text()
    if sample is None:
        text.append("Waiting for the first sample: users not known yet.\n", "dim")
        return text
    if sample.simulated:
        text.append("DEMO: simulated users and processes.\n", "bold")
    if sample.unavailable is not None:
        text.append(f"No GPU data: {sample.unavailable.headline}\n", "bold")
        return text
    usages = user_summary(sample.processes)
    text.append(HEADER + "\n", "bold")
    if not usages:
        text.append("No processes on the GPUs whose process lists could be read.\n", "dim")
    for usage in usages:
        text.append(usage_row(usage) + "\n", "bold" if usage.is_current_user else "")
    unknown = [gpu.index for gpu in sample.gpus if not processes_known(gpu, sample)]
    if unknown:
        names = ", ".join(str(index) for index in unknown)
        text.append(
            f"\nNot counted: GPU {names} (process list unknown: lost or refused by NVML).\n",
            "dim",
        )
    if any(usage.memory_partial for usage in usages):
        text.append(">=: some of the user's processes have GPU memory N/A.\n", "dim")
    return text


class UserSummaryScreen(StoreScreen):
    """Per-user GPU use, live; ``Escape`` goes back."""

    TITLE_ID = "user-summary-title"

    def compose(self) -> ComposeResult:
        yield Static("", id=self.TITLE_ID)
        with VerticalScroll():
            yield TextLines(id="user-summary")
        yield Footer()

    def refresh_from_store(self) -> None:
        sample = self.store.latest
        count = len(user_summary(sample.processes)) if sample is not None else 0
        self.show_title(f" Users of the GPUs: {count}  (most GPU memory first)")
        self.query_one("#user-summary", TextLines).update(render_summary(sample))
