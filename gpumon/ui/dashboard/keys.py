"""The dashboard screen's keys: what acts on its panels (details, filters, sort, zoom, the
probe, signals, ``w``), mixed into :class:`~gpumon.ui.dashboard.screen.DashboardScreen`.

They are the screen's, so they are off (and out of the footer) while another screen is on top,
and while the terminal is too small to show what they act on. ``q``, ``?`` and space are the
app's; the screen lists them first, as ``app.`` actions, so the footer keeps its order.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, cast

from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer

from gpumon.ui.dashboard.signal_dialog import SIGNAL_BINDINGS
from gpumon.ui.widgets.gpu_panel import GpuPanel
from gpumon.ui.widgets.process_table import ProcessTable

if TYPE_CHECKING:
    from gpumon.data.model import GpuStats, Sample
    from gpumon.ui.dashboard.app import GpumonApp
    from gpumon.ui.dashboard.probe_panel import ProbePanel
    from gpumon.ui.dashboard.screen import DashboardScreen

DASHBOARD_BINDINGS: list[BindingType] = [
    Binding("q", "app.quit", "Quit", tooltip="quit"),
    Binding("question_mark", "app.help", "Help", tooltip="this help"),
    Binding("enter", "details", "Details", tooltip="details of the selected GPU or process"),
    Binding("f", "gpu_filter", "GPU", tooltip="only the selected GPU's processes (again: all)"),
    Binding("m", "mine", "Mine", tooltip="only my processes (again: everyone's)"),
    Binding("slash", "search", "Filter", key_display="/",
            tooltip="filter processes by user, command or PID, live (Esc clears)"),
    Binding("u", "users", "Users", tooltip="per-user summary: GPUs, GPU memory, processes"),
    Binding("z", "zoom", "Zoom", tooltip="process table on the whole screen (again: back)"),
    Binding("escape", "clear_filters", "Clear", show=False, tooltip="clear the filters"),
    Binding("s", "sort", "Sort", tooltip="cycle the sort column"),
    Binding("r", "reverse_sort", "Reverse", show=False, tooltip="reverse the sort"),
    Binding("space", "app.toggle_pause", "Pause", tooltip="pause / resume updates"),
    Binding("P", "probe", "Probe", key_display="P",
            tooltip="torch probe on the selected GPU (needs torch in the probe's Python)"),
    *SIGNAL_BINDINGS,
    # Out of the footer: the line is full.
    Binding("w", "watch", "Watch", show=False,
            tooltip="tell me when the selected GPU is FREE, or the process under the cursor "
            "ends: a notification, the bell and a desktop notification (again: stop)"),
    # The process table's paging keys, from the GPU panel too (where the focus starts):
    # they take the focus to the table and page it, never do nothing.
    Binding("pageup", "table('page', -1)", show=False),
    Binding("pagedown", "table('page', 1)", show=False),
    Binding("home", "table('edge', -1)", show=False),
    Binding("end", "table('edge', 1)", show=False),
]  # fmt: skip


class DashboardKeys:
    """The actions of :data:`DASHBOARD_BINDINGS`, for :class:`DashboardScreen` only."""

    @property
    def _screen(self) -> DashboardScreen:
        return cast("DashboardScreen", self)

    @property
    def gpumon(self) -> GpumonApp:
        return cast("GpumonApp", cast("Screen[None]", self).app)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return not self._screen.too_small  # nothing of it is on screen to act on

    def action_table(self, action: str, direction: int) -> None:
        table = self._screen.query_one(ProcessTable)
        table.focus()
        if action == "page":
            table.action_page(direction)
        else:
            table.action_edge(direction)

    def action_gpu_filter(self) -> None:
        """``f``: only the selected GPU's processes, or all again."""
        screen = self._screen
        current = screen.process_filter
        gpu = screen.query_one(GpuPanel).selected_gpu
        if current.gpu_index is not None:
            screen.set_filter(replace(current, gpu_index=None))
        elif gpu is None:
            self.gpumon.notify("No GPU to filter by yet.", severity="warning")
        else:
            screen.set_filter(replace(current, gpu_index=gpu.index))

    def action_mine(self) -> None:
        """``m``: only the current user's processes, or everyone's again."""
        current = self._screen.process_filter
        self._screen.set_filter(replace(current, mine=not current.mine))

    def action_zoom(self) -> None:
        """``z``: the process table on the whole screen, and back."""
        screen = self._screen
        screen.zoomed = not screen.zoomed
        screen.set_class(screen.zoomed, "-zoom")
        if screen.zoomed:
            screen.query_one(ProcessTable).focus()
        screen.refresh_all()

    def action_sort(self) -> None:
        self._screen.query_one(ProcessTable).cycle_sort()

    def action_reverse_sort(self) -> None:
        self._screen.query_one(ProcessTable).reverse_sort()

    def action_users(self) -> None:
        from gpumon.ui.dashboard.user_summary import UserSummaryScreen

        self.gpumon.push_screen(UserSummaryScreen(self.gpumon.store))

    def action_signal(self, name: str) -> None:
        """T, K, I: signal the process under the cursor, after a confirmation; only the
        user's own processes (root: any), never a PID that now names another process."""
        import signal

        from gpumon.ui.dashboard.signal_dialog import request_signal

        app = self.gpumon
        table = self._screen.query_one(ProcessTable)
        request_signal(
            app, table.cursor_process, signal.Signals[name], readonly=app.settings.readonly
        )

    def action_details(self) -> None:
        """Enter: the selected GPU's detail, or the process under the cursor's."""
        from gpumon.ui.dashboard.gpu_detail import GpuDetailScreen
        from gpumon.ui.dashboard.process_detail import ProcessDetailScreen

        app = self.gpumon
        ascii_only = app.glyphs.ascii_only
        table = self._screen.query_one(ProcessTable)
        if app.focused is table and table.cursor_key is not None:
            chosen = table.cursor_process  # the row on the screen, not the latest sample's
            app.push_screen(
                ProcessDetailScreen(
                    app.store, table.cursor_key, ascii_only=ascii_only, chosen=chosen
                )
            )
            return
        gpu = self._screen.query_one(GpuPanel).selected_gpu
        if gpu is None:
            app.notify("No GPU to show yet.", severity="warning")
            return
        app.push_screen(GpuDetailScreen(app.store, gpu.index, ascii_only=ascii_only))

    def action_watch(self) -> None:
        """``w``: watch the process under the cursor (the table focused), else the selected
        GPU; again: stop (:class:`~gpumon.sampling.watches.WatchCheck`)."""
        screen = self._screen
        table = screen.query_one(ProcessTable)
        process = table.cursor_process if screen.app.focused is table else None
        panel = screen.query_one(GpuPanel)
        app = self.gpumon
        watches = app.pipeline.watches
        said, severity = watches.toggle_one(panel.selected_gpu, process, panel.free, app.sample)
        app.notify(said, severity=severity, markup=False)
        app.refresh_state()

    # -- the torch probe -------------------------------------------------------------

    async def action_probe(self) -> None:
        """Run the torch probe on the selected GPU in a child process, in a side panel."""
        app = self.gpumon
        sample = app.sample
        gpu = self._screen.query_one(GpuPanel).selected_gpu
        if sample is None or gpu is None:
            app.notify("No GPU to probe yet.", severity="warning")
            return
        if sample.simulated:
            app.notify(
                "The probe needs a real GPU: these GPUs are simulated (--demo), and probing "
                "them would prove nothing. Run gpumon on a machine with NVIDIA GPUs.",
                severity="warning",
                timeout=8,
            )
            return
        if gpu.lost:
            app.notify(f"GPU {gpu.index} is lost: nothing to probe.", severity="error")
            return
        await self.open_probe(gpu, sample)

    async def open_probe(self, gpu: GpuStats, sample: Sample) -> None:
        """Open the probe panel on ``gpu`` (replacing a running probe, which is killed)."""
        from gpumon.ui.dashboard.probe_panel import ProbePanel

        screen, app = self._screen, self.gpumon
        for old in screen.query(ProbePanel):
            await old.remove()
        panel = ProbePanel(
            gpu.index,
            gpu.uuid,
            gpu.name or "N/A",
            gpus=[
                (other.index, other.uuid)
                for other in sample.gpus
                if not other.lost and other.uuid is not None
            ],
            python=app.probe_python,
            next_sample=app.sample_now,
            child_command=app.probe_child_command,
        )
        panel.id = "probe"
        await screen.mount(panel, before=screen.query_one(Footer))
        screen.refresh_all()

    @property
    def probing(self) -> bool:
        """True while a probe panel is on the dashboard."""
        return self.gpumon.is_running and bool(self._screen.query("#probe"))

    # A probe message can arrive while the app shuts down: its widgets are gone by then.

    def on_probe_panel_probe_holding(self, message: ProbePanel.ProbeHolding) -> None:
        if self.gpumon.is_running:
            self._screen.query_one(ProcessTable).highlight(frozenset({message.pid}))

    def on_probe_panel_finished(self, message: ProbePanel.Finished) -> None:
        if self.gpumon.is_running:
            self._screen.query_one(ProcessTable).highlight(frozenset())

    async def on_probe_panel_closed(self, message: ProbePanel.Closed) -> None:
        if message.panel.is_attached:
            await message.panel.remove()
        if not self.gpumon.is_running:
            return
        # Escape then P typed ahead: a new panel may already run; this is only the old one.
        screen = self._screen
        if not self.probing:
            screen.query_one(ProcessTable).highlight(frozenset())
            screen.query_one(GpuPanel).focus()
        screen.refresh_all()
