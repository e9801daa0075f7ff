"""The dashboard screen: header, GPUs and processes (:class:`~gpumon.ui.widgets.gpu_view.GpuView`),
the ``/`` box, host strip, footer.

It watches the app's :class:`~gpumon.sampling.pipeline.DashboardState` and hands its pieces
down to its widgets ("attributes down"). The stylesheet lays it out (``app.tcss``): the
breakpoints below set the classes it reads (too small, probe panel beside or under it). Its
keys: :mod:`gpumon.ui.dashboard.keys`.
"""

from __future__ import annotations

import dataclasses

from textual import events
from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Static

from gpumon.data.views import ProcessFilter
from gpumon.sampling.pipeline import STALL_NOT_ANSWERING, DashboardState
from gpumon.ui.dashboard.keys import DASHBOARD_BINDINGS, DashboardKeys
from gpumon.ui.widgets.bars import HeaderBar, HostStrip
from gpumon.ui.widgets.gpu_panel import GpuPanel
from gpumon.ui.widgets.gpu_view import GpuView
from gpumon.ui.widgets.keys_footer import KeysFooter
from gpumon.ui.widgets.process_table import ProcessTable
from gpumon.ui.widgets.search_box import SearchBox


class DashboardScreen(DashboardKeys, Screen[None]):
    """The default screen: everything gpumon shows at once."""

    #: Below 40x10 a line says the terminal is too small. From 160 columns the probe panel
    #: is beside the dashboard; under it, below 15 lines, it shows alone (app.tcss).
    HORIZONTAL_BREAKPOINTS = [(0, "-too-narrow"), (40, "-narrow"), (160, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-too-short"), (10, "-short"), (15, "-tall")]

    BINDINGS = DASHBOARD_BINDINGS

    def __init__(self) -> None:
        super().__init__()
        #: ``z``: the process table takes the whole screen (the GPU panel hides).
        self.zoomed = False

    @property
    def too_small(self) -> bool:
        return self.has_class("-too-narrow") or self.has_class("-too-short")

    def compose(self) -> ComposeResult:
        glyphs = self.gpumon.glyphs
        yield HeaderBar(glyphs, id="header")
        yield GpuView(glyphs)
        yield SearchBox("filter: user, command or PID (Enter keeps, Esc clears)",
                        self._search_text, ProcessTable, id="process-search")  # fmt: skip
        yield HostStrip(glyphs, id="host")
        yield Static("", id="too-small")
        yield KeysFooter()

    def on_mount(self) -> None:
        app = self.gpumon
        panel = self.query_one(GpuPanel)
        panel.history = app.store
        panel.settings = app.settings
        self.query_one(ProcessTable).time_seconds = app.settings.time_seconds
        panel.focus()
        if app.settings.user_filter:  # --user NAME: shown in the table's title; Escape clears
            self.set_filter(ProcessFilter(user=app.settings.user_filter))
        self.watch(app, "state", self._on_state, init=False)
        self.refresh_all()

    def _on_state(self, state: DashboardState) -> None:
        if not self.app.is_running or self.app.screen is not self:
            # Shutting down (its widgets are gone), or under another screen (its scroll
            # updates would make Textual lay that screen out again, every sample): it catches
            # up when it is shown again (on_screen_resume).
            return
        self.refresh_all()

    def on_screen_resume(self) -> None:
        self.refresh_all()

    # -- filters and search ------------------------------------------------------------

    @property
    def process_filter(self) -> ProcessFilter:
        return self.query_one(ProcessTable).process_filter

    def set_filter(self, process_filter: ProcessFilter) -> None:
        self.query_one(ProcessTable).set_filter(process_filter)

    def action_search(self) -> None:
        """``/``: type to filter by user, command or PID; the table follows each key."""
        self.query_one(SearchBox).start(self.process_filter.text)

    def action_clear_filters(self) -> None:
        """Escape: drop every filter."""
        self.query_one(SearchBox).close()
        self.set_filter(ProcessFilter())

    def _search_text(self, text: str) -> None:
        self.set_filter(dataclasses.replace(self.process_filter, text=text))

    def on_gpu_panel_selected(self, message: GpuPanel.Selected) -> None:
        # "Only the selected GPU" follows the selection.
        if self.process_filter.gpu_index is not None:
            self.set_filter(dataclasses.replace(self.process_filter, gpu_index=message.gpu_index))

    def on_resize(self, event: events.Resize) -> None:
        width, height = event.size
        min_width, min_height = self.HORIZONTAL_BREAKPOINTS[1][0], self.VERTICAL_BREAKPOINTS[1][0]
        if width < min_width or height < min_height:
            self.query_one("#too-small", Static).update(
                f"Terminal too small ({width}x{height}): gpumon needs at least "
                f"{min_width}x{min_height}."
            )
        # After Screen's own handler set the breakpoint classes: the keys are off while the
        # terminal is too small.
        self.call_after_refresh(self.app.refresh_bindings)

    def refresh_all(self) -> None:
        """Hand the latest state down."""
        app = self.gpumon
        if not app.is_running or not self.is_attached:
            return
        # Asked of the DOM, never of a flag: a redraw can come (a new sample) while a closing
        # panel is awaited out of it, or a replacing one into it.
        self.set_class(bool(self.query("#probe")), "-probing")
        state = app.state
        sample, stall = state.sample, state.stall
        self.query_one(HeaderBar).show(
            sample,
            state.interval_s,
            state.paused,
            polling=state.polling,
            stalled_s=None if stall is None else stall.seconds,
            stall_reason=STALL_NOT_ANSWERING if stall is None else stall.reason,
            selection=state.selection,
            free_text=state.free_text,
        )
        host = self.query_one(HostStrip)
        host.show(sample.host if sample else None, sample.simulated if sample else False)
        view = self.query_one(GpuView)
        view.panel.interval_s = state.interval_s
        view.table.activity = state.idle.processes  # SM% reads "idle 2h13m" where idle
        # None FREE while the sample is stale: stale is not free.
        view.show(sample, free=state.free, notes=state.notes, empty_text=state.nothing_shown or "")
