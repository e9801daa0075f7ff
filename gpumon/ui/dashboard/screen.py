"""The dashboard screen: header, GPU panel, process table, host strip, footer.

It watches the app's :class:`~gpumon.sampling.pipeline.DashboardState` and hands its pieces
down to its widgets ("attributes down"). It lays out for the terminal: which GPU layout fits,
how much room the process table keeps, where the probe panel goes, and a one-line message below
the minimum size. Sizes come from the stylesheet (``app.tcss`` and the widgets' CSS), read off
the widgets, never mirrored here. Its keys: :mod:`gpumon.ui.dashboard.keys`.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from textual import events
from textual.app import ComposeResult
from textual.geometry import Size
from textual.screen import Screen
from textual.widgets import Footer, Input, Static

from gpumon.data.free import processes_known
from gpumon.data.views import ProcessFilter
from gpumon.sampling.pipeline import STALL_NOT_ANSWERING, DashboardState
from gpumon.ui.dashboard.keys import DASHBOARD_BINDINGS, DashboardKeys
from gpumon.ui.widgets.bars import HeaderBar, HostStrip
from gpumon.ui.widgets.gpu_layout import choose_layout, layout_height, mig_lines
from gpumon.ui.widgets.gpu_panel import GpuPanel
from gpumon.ui.widgets.keys_footer import KeysFooter
from gpumon.ui.widgets.process_table import ProcessTable, table_messages
from gpumon.ui.widgets.screen_layout import TABLE_MIN_SHARE, fixed_cells, mig_process_counts

if TYPE_CHECKING:
    pass

MIN_WIDTH, MIN_HEIGHT = 40, 10
#: Below this width the probe panel goes under the dashboard, not beside it.
PROBE_RIGHT_MIN_WIDTH = 160
#: Below this height the probe panel under the dashboard (55 % of the lines above the
#: footer) leaves it less than its header, a GPU line, three of the table, the search box
#: and the host strip: the panel shows alone until Escape closes it or the terminal grows.
PROBE_BOTTOM_MIN_HEIGHT = 15


class SearchInput(Input):
    """The ``/`` box: the table follows each key in the same frame as its echo (reacting to
    ``Input.Changed``, which bubbles up after the box repainted, drew the table one frame
    later: about 35 ms per typed character)."""

    def watch_value(self, value: str) -> None:
        screen = self.screen
        if isinstance(screen, DashboardScreen) and screen.has_class("-searching"):
            screen.set_filter(dataclasses.replace(screen.process_filter, text=value.strip()))


class DashboardScreen(DashboardKeys, Screen[None]):
    """The default screen: everything gpumon shows at once."""

    BINDINGS = DASHBOARD_BINDINGS

    def __init__(self) -> None:
        super().__init__()
        self._terminal_size: Size | None = None
        #: ``z``: the process table takes the whole screen (the GPU panel hides).
        self.zoomed = False

    def compose(self) -> ComposeResult:
        glyphs = self.gpumon.glyphs
        yield HeaderBar(glyphs, id="header")
        yield GpuPanel(glyphs, id="gpus")
        yield ProcessTable(glyphs, id="processes")
        yield SearchInput(placeholder="filter: user, command or PID (Enter keeps, Esc clears)",
                          id="process-search")  # fmt: skip
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
        search = self.query_one("#process-search", Input)
        self.add_class("-searching")
        search.value = self.process_filter.text
        search.focus()
        self.refresh_all()  # the GPU panel gives the box its line now, not at the next sample

    def action_clear_filters(self) -> None:
        """Escape: drop every filter."""
        self._close_search()
        self.set_filter(ProcessFilter())

    def _close_search(self) -> None:
        if self.has_class("-searching"):
            self.remove_class("-searching")
            self.query_one(ProcessTable).focus()
            self.refresh_all()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "process-search":
            text = event.value.strip()
            self.set_filter(dataclasses.replace(self.process_filter, text=text))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "process-search":
            self._close_search()

    def on_key(self, event: events.Key) -> None:
        # Escape in the search box: clear the text filter and close it.
        if event.key == "escape" and self.has_class("-searching"):
            event.stop()
            self.set_filter(dataclasses.replace(self.process_filter, text=""))
            self._close_search()

    def on_gpu_panel_selected(self, message: GpuPanel.Selected) -> None:
        table = self.query_one(ProcessTable)
        table.select_gpu(message.gpu_index)
        # "Only the selected GPU" follows the selection.
        if table.process_filter.gpu_index is not None:
            table.set_filter(dataclasses.replace(table.process_filter, gpu_index=message.gpu_index))

    def on_resize(self, event: events.Resize) -> None:
        # This runs before the new size is applied, so lay out for the event's size.
        self._terminal_size = event.size
        self.refresh_all()

    def refresh_all(self) -> None:
        """Hand the latest sample down and lay out for the terminal."""
        app = self.gpumon
        if not app.is_running or not self.is_attached:
            return
        width, height = self._terminal_size or self.size
        # Asked of the DOM, never of a flag: a redraw can come (a new sample) while a closing
        # panel is awaited out of it, or a replacing one into it.
        probe = next(iter(self.query("#probe")), None)
        # The probe panel takes the right side of a wide terminal, the bottom of a narrow one.
        probe_right = probe is not None and width >= PROBE_RIGHT_MIN_WIDTH
        probe_bottom = probe is not None and not probe_right
        self.set_class(probe_right, "-probe-right")
        self.set_class(probe_bottom, "-probe-bottom")
        self.set_class(probe_bottom and height < PROBE_BOTTOM_MIN_HEIGHT, "-probe-alone")
        too_small = width < MIN_WIDTH or height < MIN_HEIGHT
        if too_small != self.has_class("-too-small"):
            self.set_class(too_small, "-too-small")
            app.refresh_bindings()  # the dashboard's keys are off while it is too small
        if too_small:
            self.query_one("#too-small", Static).update(
                f"Terminal too small ({width}x{height}): gpumon needs at least "
                f"{MIN_WIDTH}x{MIN_HEIGHT}."
            )
            return
        footer = self.query_one(Footer)
        if probe is not None and probe_right:
            width -= fixed_cells(probe, "width")
        elif probe is not None:
            # Its stylesheet height, 55 % of the lines above the footer (its bottom margin).
            height -= (height - fixed_cells(footer, "height")) * 55 // 100
        state = app.state
        sample = state.sample
        header = self.query_one(HeaderBar)
        stall = state.stall
        header.show(
            sample,
            state.interval_s,
            state.paused,
            polling=state.polling,
            stalled_s=None if stall is None else stall.seconds,
            stall_reason=STALL_NOT_ANSWERING if stall is None else stall.reason,
            selection=state.selection,
        )
        host = self.query_one(HostStrip)
        host.show(sample.host if sample else None, sample.simulated if sample else False)
        panel = self.query_one(GpuPanel)
        gpus = sample.gpus if sample else ()
        chrome = sum(fixed_cells(w, "height") for w in (header, host, footer))
        if self.has_class("-searching"):
            chrome += fixed_cells(self.query_one("#process-search", Input), "height")
        available = height - chrome
        table_min = max(4, int(height * TABLE_MIN_SHARE))
        budget = available - table_min
        extra = [mig_lines(gpu) for gpu in gpus]
        layout, columns = choose_layout(len(gpus), width, max(1, budget), extra)
        if gpus:
            panel_height = min(
                layout_height(layout, len(gpus), columns, extra), max(1, available - table_min)
            )
        elif sample is not None and sample.unavailable is not None:
            panel_height = 4 if sample.unavailable.hint else 3
        else:
            panel_height = 1
        if panel.styles.height is None or panel.styles.height.value != panel_height:
            panel.styles.height = panel_height
        panel.interval_s = state.interval_s
        panel.free = state.free  # none while the sample is stale: stale is not free
        panel.notes = state.notes
        panel.mig_process_counts = mig_process_counts(sample)
        if not self.zoomed:
            panel.show(gpus, sample.unavailable if sample else None, layout, columns, panel_height)
        notices, empty_text = table_messages(sample)
        empty_text = state.nothing_shown or empty_text
        table = self.query_one(ProcessTable)
        selected = panel.selected_gpu
        table.select_gpu(None if selected is None or len(gpus) < 2 else selected.index)
        unknown = {
            gpu.index: gpu.processes_error or ("lost" if gpu.lost else "not read")
            for gpu in gpus
            if sample is not None and not processes_known(gpu, sample)
        }
        table.activity = state.idle.processes  # SM% reads "idle 2h13m" where idle
        table.show(sample.processes if sample else (), notices, empty_text, unknown)
