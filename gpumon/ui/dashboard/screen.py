"""The dashboard screen: header, GPUs and processes (:class:`~gpumon.ui.widgets.gpu_view.GpuView`),
the ``/`` box, host strip, footer.

It subscribes to the app's :class:`~gpumon.sampling.store.Store` and hands each sample's pieces
down to its widgets ("attributes down"). The stylesheet lays it out (``app.tcss``): the
breakpoints below set the classes it reads (too small, probe panel beside or under it). The app
keeps the bindings (but ``w``: :mod:`gpumon.ui.dashboard.watch`), the poller and the screens.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Static

from gpumon.data.free import free_gpu_indices
from gpumon.data.model import Sample
from gpumon.data.views import ProcessFilter
from gpumon.ui.widgets.bars import HeaderBar, HostStrip
from gpumon.ui.widgets.gpu_notes import gather_notes
from gpumon.ui.widgets.gpu_panel import GpuPanel
from gpumon.ui.widgets.gpu_view import GpuView
from gpumon.ui.widgets.keys_footer import KeysFooter
from gpumon.ui.widgets.process_table import ProcessTable
from gpumon.ui.widgets.search_box import SearchBox

if TYPE_CHECKING:
    from gpumon.ui.dashboard.app import GpumonApp


class DashboardScreen(Screen[None]):
    """The default screen: everything gpumon shows at once."""

    #: Below 40x10 a line says the terminal is too small. From 160 columns the probe panel
    #: is beside the dashboard; under it, below 15 lines, it shows alone (app.tcss).
    HORIZONTAL_BREAKPOINTS = [(0, "-too-narrow"), (40, "-narrow"), (160, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-too-short"), (10, "-short"), (15, "-tall")]

    # Out of the footer: a screen's keys come before the app's there, and the line is full.
    BINDINGS = [
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

    def __init__(self) -> None:
        super().__init__()
        self._unsubscribe: Callable[[], None] | None = None
        #: ``z``: the process table takes the whole screen (the GPU panel hides).
        self.zoomed = False

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return not self.too_small  # nothing of it is on screen to act on

    @property
    def too_small(self) -> bool:
        return self.has_class("-too-narrow") or self.has_class("-too-short")

    def action_table(self, action: str, direction: int) -> None:
        table = self.query_one(ProcessTable)
        table.focus()
        if action == "page":
            table.action_page(direction)
        else:
            table.action_edge(direction)

    @property
    def gpumon(self) -> GpumonApp:
        return cast("GpumonApp", self.app)

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
        panel.focus()
        if app.settings.user_filter:  # --user NAME: shown in the table's title; Escape clears
            self.set_filter(ProcessFilter(user=app.settings.user_filter))
        self._unsubscribe = app.store.subscribe(self._on_sample)
        self.refresh_all()

    def on_unmount(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None

    def _on_sample(self, sample: Sample) -> None:
        if not self.app.is_running or self.app.screen is not self:
            # Shutting down (its widgets are gone), or under another screen (its scroll
            # updates would make Textual lay that screen out again, every sample): it catches
            # up when it is shown again (on_screen_resume).
            return
        with self.app.batch_update():
            self.refresh_all()

    def on_screen_resume(self) -> None:
        self.refresh_all()

    # -- filters and zoom (the app's keys call these) ---------------------------------

    @property
    def process_filter(self) -> ProcessFilter:
        return self.query_one(ProcessTable).process_filter

    def set_filter(self, process_filter: ProcessFilter) -> None:
        self.query_one(ProcessTable).set_filter(process_filter)

    def toggle_gpu_filter(self) -> None:
        """``f``: only the selected GPU's processes, or all again."""
        current = self.process_filter
        gpu = self.query_one(GpuPanel).selected_gpu
        if current.gpu_index is not None or gpu is None:
            self.set_filter(dataclasses.replace(current, gpu_index=None))
        else:
            self.set_filter(dataclasses.replace(current, gpu_index=gpu.index))

    def toggle_mine(self) -> None:
        """``m``: only the current user's processes, or everyone's again."""
        current = self.process_filter
        self.set_filter(dataclasses.replace(current, mine=not current.mine))

    def open_search(self) -> None:
        """``/``: type to filter by user, command or PID; the table follows each key."""
        self.query_one(SearchBox).start(self.process_filter.text)

    def clear_filters(self) -> bool:
        """Escape: drop every filter; False when there was none."""
        if not self.process_filter.active and not self.has_class("-searching"):
            return False
        self.query_one(SearchBox).close()
        self.set_filter(ProcessFilter())
        return True

    def _search_text(self, text: str) -> None:
        self.set_filter(dataclasses.replace(self.process_filter, text=text))

    def toggle_zoom(self) -> None:
        """``z``: the process table on the whole screen, and back."""
        self.zoomed = not self.zoomed
        self.set_class(self.zoomed, "-zoom")
        if self.zoomed:
            self.query_one(ProcessTable).focus()
        self.refresh_all()

    def action_watch(self) -> None:
        """``w``: watch the process under the cursor (the table focused), else the selected
        GPU; again: stop (:mod:`gpumon.ui.dashboard.watch`)."""
        table = self.query_one(ProcessTable)
        process = table.cursor_process if self.app.focused is table else None
        panel = self.query_one(GpuPanel)
        self.gpumon.watches.toggle(panel.selected_gpu, process, panel.free)
        self.refresh_all()

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
        """Hand the latest sample down."""
        app = self.gpumon
        if not app.is_running or not self.is_attached:
            return
        # Asked of the DOM, never of a flag: a redraw can come (a new sample) while a closing
        # panel is awaited out of it, or a replacing one into it.
        self.set_class(bool(self.query("#probe")), "-probing")
        sample = app.sample
        self.query_one(HeaderBar).show(
            sample,
            app.poller.interval_s,
            app.poller.paused,
            polling=app.autostart,
            stalled_s=app.stalled_s,
            stall_reason=app.stall_reason,
            selection=app.shown_gpus.header_text,
        )
        host = self.query_one(HostStrip)
        host.show(sample.host if sample else None, sample.simulated if sample else False)
        view = self.query_one(GpuView)
        view.panel.interval_s = app.poller.interval_s
        view.table.activity = app.idle.view.processes  # SM% reads "idle 2h13m" where idle
        view.show(
            sample,
            # A driver stuck or failing for three intervals: the last sample is stale, and
            # stale is not free.
            free=frozenset()
            if app.stale
            else free_gpu_indices(sample, app.settings.free_threshold_mib),
            notes=gather_notes(app.note_sources, sample),
            empty_text=app.shown_gpus.nothing_shown or "",
        )
