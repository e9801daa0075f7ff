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
from textual.widgets import Footer, Static

from gpumon.data import format as fmt
from gpumon.data.free import processes_known
from gpumon.data.idle import IdleRule
from gpumon.data.model import Sample
from gpumon.data.views import UserUsage, user_summary
from gpumon.ui.dashboard.store_screen import StoreScreen
from gpumon.ui.widgets.text_lines import TextLines

if TYPE_CHECKING:
    from gpumon.ui.dashboard.app import GpumonApp

HEADER = f"{'USER':<20} {'GPUS':<16} {'GPU-MEM':>9} {'PROCS':>6} {'IDLE-MEM':>9}"


def usage_row(usage: UserUsage) -> str:
    gpus = ",".join(str(index) for index in usage.gpu_indices)
    memory = fmt.bytes_short(usage.gpu_memory_bytes)
    if usage.memory_partial:
        memory = ">=" + memory
    if usage.idle_memory_bytes:
        idle = (">=" if usage.idle_unknown else "") + fmt.bytes_short(usage.idle_memory_bytes)
    else:
        idle = fmt.NA if usage.idle_unknown else "-"  # idleness unknown (MIG) is not "none"
    user = fmt.ljust_cells(fmt.truncate(usage.user, 20), 20)
    return f"{user} {gpus:<16} {memory:>9} {usage.process_count:>6} {idle:>9}"


def render_summary(
    sample: Sample | None,
    idle: frozenset[tuple[int, int]] = frozenset(),
    rule: IdleRule | None = None,
) -> Text:
    """The per-user table of ``sample``, and what it cannot count; ``idle``: the keys of the
    processes that are IDLE by ``rule``."""
    text = Text()
    if sample is None:
        text.append("Waiting for the first sample: users not known yet.\n", "dim")
        return text
    if sample.simulated:
        text.append("DEMO: simulated users and processes.\n", "bold")
    if sample.unavailable is not None:
        text.append(f"No GPU data: {sample.unavailable.headline}\n", "bold")
        return text
    usages = user_summary(sample.processes, idle)
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
    if rule is not None and any(usage.idle_memory_bytes for usage in usages):
        text.append(
            f"IDLE-MEM: held by processes at or below {rule.below_pct} % SM for "
            f"{fmt.duration(rule.after_s)} or more.\n",
            "dim",
        )
    return text


class UserSummaryScreen(StoreScreen):
    """Per-user GPU use, live; ``Escape`` goes back."""

    TITLE_ID = "user-summary-title"

    def compose(self) -> ComposeResult:
        yield Static("", id=self.TITLE_ID, markup=False)
        with VerticalScroll():
            yield TextLines(id="user-summary")
        yield Footer()

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
        tracker = cast("GpumonApp", self.app).idle
        summary = render_summary(sample, tracker.view.idle_keys(), tracker.rule)
        self.query_one("#user-summary", TextLines).update(summary)
