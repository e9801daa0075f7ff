"""The one-machine dashboard's app: key bindings, the poller's lifecycle, and switching screens.

Data flows one way: the poller pushes each new :class:`Sample` into the app's
:class:`~gpumon.sampling.store.Store` on the event loop; the screens subscribe to the store (the
dashboard, :mod:`gpumon.ui.dashboard.screen`; the detail screens) and hand the pieces down to their
widgets. Widgets never call NVML. What it shares with the cluster dashboard (the ASCII look,
the theme, quitting on signals) is :class:`~gpumon.ui.app.MonitorApp`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer

from gpumon import startup
from gpumon.data.model import GpuStats, Sample
from gpumon.sampling.poller import EarlySample, Poller
from gpumon.sampling.store import Store
from gpumon.sources.base import GpuSource, open_source, read_details
from gpumon.ui import exact_updates
from gpumon.ui.app import MonitorApp, wants_ascii
from gpumon.ui.dashboard.claim_notes import ClaimNotes
from gpumon.ui.dashboard.help import DashboardHelpScreen
from gpumon.ui.dashboard.history import DashboardHistory
from gpumon.ui.dashboard.history_keys import HISTORY_BINDINGS, HistoryKeys
from gpumon.ui.dashboard.idle import watch_idleness
from gpumon.ui.dashboard.screen import DashboardScreen
from gpumon.ui.dashboard.shown_gpus import ShownGpus
from gpumon.ui.dashboard.signal_dialog import SIGNAL_BINDINGS
from gpumon.ui.dashboard.watch import DashboardWatches
from gpumon.ui.widgets.bars import STALL_NOT_ANSWERING, STALL_READS_FAILING
from gpumon.ui.widgets.gpu_notes import unknown_process_notes
from gpumon.ui.widgets.gpu_panel import GpuPanel
from gpumon.ui.widgets.graphs import GRAPHED_GPU_FIELDS, GRAPHED_PROCESS_FIELDS
from gpumon.ui.widgets.lines import Glyphs
from gpumon.ui.widgets.process_table import ProcessTable

if TYPE_CHECKING:
    from gpumon.config import Settings
    from gpumon.ui.dashboard.probe_panel import ProbePanel
    from gpumon.ui.widgets.gpu_notes import NoteSource

INTERVAL_STEPS_S = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0)
#: Start-up is over once the first sample is drawn, or this long after the app started: a
#: first sample that never comes (a driver stuck in its init) must not leave the garbage
#: collector off for the days the dashboard stays open (:mod:`gpumon.startup`).
SETTLED_AT_LATEST_S = 5.0


class GpumonApp(HistoryKeys, MonitorApp):
    """gpumon's dashboard."""

    CSS_PATH = "../app.tcss"  # relative to this file: gpumon/ui/app.tcss
    TITLE = "gpumon"
    ENABLE_COMMAND_PALETTE = True

    BINDINGS = [
        Binding("q", "quit", "Quit", tooltip="quit"),
        # Ctrl+C quits, as in htop, also from the help screen and the command palette (modal
        # screens, which only priority bindings reach); text selected with the mouse is copied
        # instead (the screen's copy_text skips when nothing is selected, and the next binding
        # for the key runs). These replace Textual's "press ctrl+q to quit" notice.
        Binding(
            "ctrl+c",
            "screen.copy_text",
            "Copy",
            show=False,
            priority=True,
            tooltip="quit (copies instead while text is selected with the mouse)",
        ),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True, tooltip="quit"),
        Binding("question_mark", "help", "Help", tooltip="this help"),
        Binding("enter", "details", "Details", tooltip="details of the selected GPU or process"),
        Binding("f", "gpu_filter", "GPU", tooltip="only the selected GPU's processes (again: all)"),
        Binding("m", "mine", "Mine", tooltip="only my processes (again: everyone's)"),
        Binding(
            "slash",
            "search",
            "Filter",
            key_display="/",
            tooltip="filter processes by user, command or PID, live (Esc clears)",
        ),
        Binding("u", "users", "Users", tooltip="per-user summary: GPUs, GPU memory, processes"),
        Binding("z", "zoom", "Zoom", tooltip="process table on the whole screen (again: back)"),
        Binding("escape", "clear_filters", "Clear", show=False, tooltip="clear the filters"),
        Binding("s", "sort", "Sort", tooltip="cycle the sort column"),
        Binding("r", "reverse_sort", "Reverse", show=False, tooltip="reverse the sort"),
        Binding("space", "toggle_pause", "Pause", tooltip="pause / resume updates"),
        Binding(
            "plus,equals_sign",
            "change_interval(1)",
            "Slower",
            key_display="+",
            show=False,
            tooltip="longer refresh interval (up to 60 s)",
        ),
        Binding(
            "minus",
            "change_interval(-1)",
            "Faster",
            key_display="-",
            show=False,
            tooltip="shorter refresh interval (down to 0.25 s)",
        ),
        Binding(
            "P",
            "probe",
            "Probe",
            key_display="P",
            tooltip="torch probe on the selected GPU (needs torch in the probe's Python)",
        ),
        *SIGNAL_BINDINGS,
        *HISTORY_BINDINGS,
    ]

    def __init__(
        self,
        source: GpuSource,
        *,
        interval_s: float = 1.0,
        ascii_only: bool | None = None,
        probe_python: str | None = None,
        autostart: bool = True,
        probe_child_command: Sequence[str] | None = None,
        settings: Settings | None = None,
        early: EarlySample | None = None,
    ) -> None:
        super().__init__()
        from gpumon.config import Settings

        self.settings = settings or Settings(interval_s=interval_s)
        exact_updates.install()
        self.source = source
        # Fields only the GPU screen shows are read while it is open (want_details).
        read_details(source, False)
        self._detail_screens = 0
        self.glyphs = Glyphs(wants_ascii() if ascii_only is None else ascii_only)
        self.probe_python = probe_python or sys.executable
        self.samples_received = 0
        self.first_sample_at: float | None = None
        self.started_at = time.perf_counter()
        self.store = Store(
            interval_s,
            history_s=60.0 * self.settings.history_minutes,
            gpu_fields=GRAPHED_GPU_FIELDS,  # what is drawn: a field nobody reads costs nothing
            process_fields=GRAPHED_PROCESS_FIELDS,
        )
        self.store.subscribe(self._on_sample)
        self.poller = Poller(
            source, interval_s, self.receive_sample, on_error=self._on_poll_error, early=early
        )
        self.autostart = autostart
        #: Seconds the poll in flight has taken when NVML is not answering, or the last good
        #: sample's age when every read since has failed, past three intervals; else ``None``.
        self.stalled_s: int | None = None
        #: Which of the two ``stalled_s`` is (said in the header's banner).
        self.stall_reason = STALL_NOT_ANSWERING
        self.shown_gpus = ShownGpus(self)  # --only, --only-visible: each sample is cut first
        self.watches = DashboardWatches(self)  # w: tell me when a GPU is FREE, a process ends
        #: What is said of each GPU beside its readings (processes unknown, watches, claims,
        #: idle holders).
        self.note_sources: list[NoteSource] = [unknown_process_notes, self.watches.notes]
        self.note_sources.append(ClaimNotes(self, self.settings.claims_dir))  # pick's claims
        self.idle = watch_idleness(self)  # held idle: the SM% cells, GPU notes, idle memory
        self.history = DashboardHistory(self)  # gpumon record's database: idle since, U, [ ]
        self._probe_child_command = probe_child_command

    # -- screens ---------------------------------------------------------------------

    def get_default_screen(self) -> Screen[None]:
        self.dashboard = DashboardScreen()
        return self.dashboard

    def on_mount(self) -> None:
        if self.autostart:
            self.run_worker(self.poller.run(), group="poller", exclusive=True)
            self.set_interval(1.0, self._check_stalled)
        self.set_timer(SETTLED_AT_LATEST_S, startup.settled)
        self.start_common()

    # -- samples in ------------------------------------------------------------------

    @property
    def sample(self) -> Sample | None:
        """The latest sample (the store's); ``None`` before the first."""
        return self.store.latest

    def _on_sample(self, sample: Sample) -> None:
        # Subscribed before the screens: they see the counters and the stall reset.
        self.stalled_s = None
        if not self.is_running:
            return
        self.samples_received += 1
        if self.first_sample_at is None:
            self.first_sample_at = time.perf_counter()
            self.call_after_refresh(startup.settled)  # once this first sample is drawn

    @property
    def stale(self) -> bool:
        """The last sample is no longer current: NVML has not answered for three intervals,
        or every read since it has failed for as long. Stale is not free."""
        return self.poller.stalled_s() is not None or self.poller.failing_s() is not None

    def _check_stalled(self) -> None:
        """Once a second: say so when NVML has not answered for three intervals (a driver
        stuck in an ioctl) or every read has failed as long, and stop saying it when samples
        resume. Keys keep working."""
        stalled = self.poller.stalled_s()
        reason = STALL_NOT_ANSWERING
        if stalled is None:
            stalled = self.poller.failing_s()
            reason = STALL_READS_FAILING
        shown = None if stalled is None else int(stalled)
        if (shown, reason) != (self.stalled_s, self.stall_reason):
            self.stalled_s = shown
            self.stall_reason = reason
            self._refresh_all()
            self._tell_store_screens()

    def _tell_store_screens(self) -> None:
        """Attributes down: the detail screens say in their titles that what they show is
        the last sample's, while it is stale."""
        from gpumon.ui.dashboard.store_screen import StoreScreen

        text = ""
        sample = self.sample
        if self.stalled_s is not None and sample is not None:
            taken = time.strftime("%H:%M:%S", time.localtime(sample.timestamp_s))
            text = f"{self.stall_reason} for {self.stalled_s} s: readings of {taken}"
        for screen in self.screen_stack:
            if isinstance(screen, StoreScreen) and screen.stale_text != text:
                screen.stale_text = text
                if screen.is_current:
                    screen.refresh_from_store()

    def _on_poll_error(self, error: BaseException) -> None:
        if not self.is_running:
            return
        self.notify(f"Reading the GPUs failed: {error}", severity="error", timeout=5, markup=False)

    def receive_sample(self, sample: Sample) -> None:
        """Show a sample now (tests, snapshots): the same path the poller uses."""
        self.store.push(self.shown_gpus.select(sample))

    def _refresh_all(self) -> None:
        """Redraw the dashboard (after a key changed what it shows)."""
        if self.is_running:
            self.dashboard.refresh_all()

    # -- actions ---------------------------------------------------------------------

    def action_help(self) -> None:
        self.push_screen(DashboardHelpScreen(self.glyphs.ascii_only))

    # Keys that act on the dashboard's panels: off (and out of the footer) while a detail or
    # help screen is on top of it.
    _DASHBOARD_ACTIONS = frozenset(
        {"details", "sort", "reverse_sort", "probe", "gpu_filter", "mine", "search", "users"}
        | {"zoom", "clear_filters", "signal"}
    )

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action not in self._DASHBOARD_ACTIONS:
            return True
        # Off while another screen is on top, and while the terminal is too small to show
        # what they would act on (the footer offers only what works).
        dashboard = getattr(self, "dashboard", None)
        too_small = dashboard is not None and dashboard.too_small
        return len(self.screen_stack) == 1 and not too_small

    def action_gpu_filter(self) -> None:
        filtered = self.dashboard.process_filter.gpu_index is not None
        if not filtered and self.dashboard.query_one(GpuPanel).selected_gpu is None:
            self.notify("No GPU to filter by yet.", severity="warning")
            return
        self.dashboard.toggle_gpu_filter()

    def action_mine(self) -> None:
        self.dashboard.toggle_mine()

    def action_search(self) -> None:
        self.dashboard.open_search()

    def action_clear_filters(self) -> None:
        self.dashboard.clear_filters()

    def action_zoom(self) -> None:
        self.dashboard.toggle_zoom()

    def action_users(self) -> None:
        from gpumon.ui.dashboard.user_summary import UserSummaryScreen

        self.push_screen(UserSummaryScreen(self.store))

    def action_signal(self, name: str) -> None:
        """T, K, I: signal the process under the cursor, after a confirmation; only the
        user's own processes (root: any), never a PID that now names another process."""
        import signal

        from gpumon.ui.dashboard.signal_dialog import request_signal

        table = self.dashboard.query_one(ProcessTable)
        request_signal(
            self, table.cursor_process, signal.Signals[name], readonly=self.settings.readonly
        )

    def action_details(self) -> None:
        """Enter: the selected GPU's detail, or the process under the cursor's."""
        from gpumon.ui.dashboard.gpu_detail import GpuDetailScreen
        from gpumon.ui.dashboard.process_detail import ProcessDetailScreen

        ascii_only = self.glyphs.ascii_only
        table = self.dashboard.query_one(ProcessTable)
        if self.focused is table and table.cursor_key is not None:
            chosen = table.cursor_process  # the row on the screen, not the latest sample's
            self.push_screen(
                ProcessDetailScreen(
                    self.store, table.cursor_key, ascii_only=ascii_only, chosen=chosen
                )
            )
            return
        gpu = self.dashboard.query_one(GpuPanel).selected_gpu
        if gpu is None:
            self.notify("No GPU to show yet.", severity="warning")
            return
        self.push_screen(GpuDetailScreen(self.store, gpu.index, ascii_only=ascii_only))

    def want_details(self, wanted: bool) -> None:
        """A screen that shows :data:`~gpumon.data.model.ON_DEMAND_GPU_FIELDS` opened (or
        closed): they are read while one is open, from a sample taken at once."""
        self._detail_screens = max(0, self._detail_screens + (1 if wanted else -1))
        if read_details(self.source, self._detail_screens > 0) and wanted:
            self.poller.poll_now()

    def action_sort(self) -> None:
        self.dashboard.query_one(ProcessTable).cycle_sort()

    def action_reverse_sort(self) -> None:
        self.dashboard.query_one(ProcessTable).reverse_sort()

    def action_toggle_pause(self) -> None:
        self.poller.paused = not self.poller.paused
        self._refresh_all()
        if self.screen is not self.dashboard:  # its PAUSED badge is not on this screen
            said = "Paused: no new readings (space resumes)" if self.poller.paused else "Resumed"
            self.notify(said, timeout=3)

    def action_change_interval(self, direction: int) -> None:
        current = self.poller.interval_s
        if direction > 0:
            bigger = [step for step in INTERVAL_STEPS_S if step > current]
            new = bigger[0] if bigger else INTERVAL_STEPS_S[-1]
        else:
            smaller = [step for step in INTERVAL_STEPS_S if step < current]
            new = smaller[-1] if smaller else INTERVAL_STEPS_S[0]
        if new == current:
            limit = "longest" if direction > 0 else "shortest"
            self.notify(f"Already every {current:g} s, the {limit} interval.", timeout=3)
            return
        self.poller.interval_s = new
        self.store.resize(self.poller.interval_s)
        self._refresh_all()
        if self.screen is not self.dashboard:  # its header's "every 2s" is not on this screen
            self.notify(f"Reading the GPUs every {new:g} s.", timeout=3)

    # -- the torch probe -------------------------------------------------------------

    async def action_probe(self) -> None:
        """Run the torch probe on the selected GPU in a child process, in a side panel."""
        sample = self.sample
        gpu = self.dashboard.query_one(GpuPanel).selected_gpu
        if sample is None or gpu is None:
            self.notify("No GPU to probe yet.", severity="warning")
            return
        if sample.simulated:
            self.notify(
                "The probe needs a real GPU: these GPUs are simulated (--demo), and probing "
                "them would prove nothing. Run gpumon on a machine with NVIDIA GPUs.",
                severity="warning",
                timeout=8,
            )
            return
        if gpu.lost:
            self.notify(f"GPU {gpu.index} is lost: nothing to probe.", severity="error")
            return
        await self.open_probe(gpu, sample)

    async def open_probe(self, gpu: GpuStats, sample: Sample) -> None:
        """Open the probe panel on ``gpu`` (replacing a running probe, which is killed)."""
        from gpumon.ui.dashboard.probe_panel import ProbePanel

        for old in self.dashboard.query(ProbePanel):
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
            python=self.probe_python,
            next_sample=self._sample_now,
            child_command=self._probe_child_command,
        )
        panel.id = "probe"
        await self.dashboard.mount(panel, before=self.dashboard.query_one(Footer))
        self._refresh_all()

    @property
    def probing(self) -> bool:
        """True while a probe panel is on the dashboard."""
        return self.is_running and bool(self.dashboard.query("#probe"))

    def _sample_now(self) -> Awaitable[Sample]:
        """The first sample after this call (the probe's NVML check), taken now."""
        waiting = self.store.next_sample()
        # Sample now rather than on schedule: the probe holds GPU memory while it waits, and
        # a paused dashboard or a 60 s interval must not turn a good probe into a skip.
        self.run_worker(self.poller.poll_once(), group="probe-sample")
        return waiting

    # A probe message can arrive while the app shuts down: its widgets are gone by then.

    def on_probe_panel_probe_holding(self, message: ProbePanel.ProbeHolding) -> None:
        if self.is_running:
            self.dashboard.query_one(ProcessTable).highlight(frozenset({message.pid}))

    def on_probe_panel_finished(self, message: ProbePanel.Finished) -> None:
        if self.is_running:
            self.dashboard.query_one(ProcessTable).highlight(frozenset())

    async def on_probe_panel_closed(self, message: ProbePanel.Closed) -> None:
        if message.panel.is_attached:
            await message.panel.remove()
        if not self.is_running:
            return
        # Escape then P typed ahead: a new panel may already run; this is only the old one.
        if not self.probing:
            self.dashboard.query_one(ProcessTable).highlight(frozenset())
            self.dashboard.query_one(GpuPanel).focus()
        self._refresh_all()


def create_app(
    source: GpuSource | None = None,
    *,
    demo: bool = False,
    demo_gpus: int = 4,
    demo_processes: int | None = None,
    interval_s: float = 1.0,
    probe_python: str | None = None,
    ascii_only: bool | None = None,
    autostart: bool = True,
    source_factory: Callable[..., GpuSource] = open_source,
    probe_child_command: Sequence[str] | None = None,
    settings: Settings | None = None,
    early: EarlySample | None = None,
) -> GpumonApp:
    """The one way the CLI, the tests and the screenshot script build the app. ``settings``
    (the CLI's) gives the demo, interval, probe interpreter, theme, thresholds and history
    length; without it, the keyword arguments and the defaults. ``early``: the first sample,
    started by the CLI before Textual was imported (its source is the app's)."""
    if settings is not None:
        demo, demo_gpus, demo_processes = settings.demo, settings.demo_gpus, settings.demo_processes
        interval_s, probe_python = settings.interval_s, settings.probe_python
    if early is not None:
        source = early.source
    elif source is None:
        source = source_factory(demo=demo, demo_gpus=demo_gpus, demo_processes=demo_processes)
    return GpumonApp(
        source,
        interval_s=interval_s,
        ascii_only=ascii_only,
        probe_python=probe_python,
        autostart=autostart,
        probe_child_command=probe_child_command,
        settings=settings,
        early=early,
    )
