"""The one-machine dashboard's app: app-wide keys, the poller's lifecycle, and screens.

Messages up, state down: the poller posts :class:`SampleTaken`; the app runs the sample
through its headless :class:`~gpumon.sampling.pipeline.DashboardPipeline` (select, store,
idle, watches, claims), says what the steps found (notices, alerts) and sets :attr:`state`,
which the dashboard screen and the detail screens watch. The dashboard's own keys are the
screen's (:mod:`gpumon.ui.dashboard.keys`).
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from textual.binding import Binding
from textual.message import Message
from textual.reactive import var
from textual.screen import Screen

from gpumon import startup
from gpumon.data.model import Sample
from gpumon.sampling.pipeline import DashboardPipeline, DashboardState, Stall, stall_of
from gpumon.sampling.poller import EarlySample, Poller
from gpumon.sampling.store import Store
from gpumon.sampling.watches import Watch
from gpumon.sources.base import GpuSource, open_source, read_details
from gpumon.ui import exact_updates
from gpumon.ui.app import APP_BINDINGS, MonitorApp, wants_ascii
from gpumon.ui.dashboard.help import DashboardHelpScreen
from gpumon.ui.dashboard.history import DashboardHistory, RecordedIdle
from gpumon.ui.dashboard.screen import DashboardScreen
from gpumon.ui.widgets.graphs import GRAPHED_GPU_FIELDS, GRAPHED_PROCESS_FIELDS
from gpumon.ui.widgets.lines import Glyphs

if TYPE_CHECKING:
    from gpumon.config import Settings

INTERVAL_STEPS_S = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0)
#: Start-up is over once the first sample is drawn, or this long after the app started: a
#: first sample that never comes (a driver stuck in its init) must not leave the garbage
#: collector off for the days the dashboard stays open (:mod:`gpumon.startup`).
SETTLED_AT_LATEST_S = 5.0
#: How long a line about the start-up GPU filter stays on screen.
NOTICE_S = 15.0


class SampleTaken(Message):
    """The poller took a sample (messages up)."""

    def __init__(self, sample: Sample) -> None:
        super().__init__()
        self.sample = sample


class GpumonApp(MonitorApp):
    """gpumon's dashboard."""

    CSS_PATH = "../app.tcss"  # relative to this file: gpumon/ui/app.tcss
    TITLE = "gpumon"
    ENABLE_COMMAND_PALETTE = True
    #: What the screens draw (state down): set after each sample, stall, pause or key.
    state: var[DashboardState] = var(DashboardState, init=False)

    BINDINGS = [
        *APP_BINDINGS,
        Binding("plus,equals_sign", "change_interval(1)", "Slower", key_display="+", show=False,
                tooltip="longer refresh interval (up to 60 s)"),
        Binding("minus", "change_interval(-1)", "Faster", key_display="-", show=False,
                tooltip="shorter refresh interval (down to 0.25 s)"),
        # In the help; the footer stays as it was.
        Binding("U", "usage", "Usage", key_display="U", show=False,
                tooltip="GPU-hours per user, 24 h and 7 days (the history database)"),
    ]  # fmt: skip

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
        self.store = Store(
            interval_s,
            history_s=60.0 * self.settings.history_minutes,
            gpu_fields=GRAPHED_GPU_FIELDS,  # what is drawn: a field nobody reads costs nothing
            process_fields=GRAPHED_PROCESS_FIELDS,
        )
        self.poller = Poller(
            source,
            interval_s,
            self._sample_taken,
            on_error=self._on_poll_error,
            early=early,
        )
        self.autostart = autostart
        self.pipeline = DashboardPipeline(
            self.settings,
            self.store,
            interval_s=lambda: self.poller.interval_s,
            ascii_only=self.glyphs.ascii_only,
        )
        self.history = DashboardHistory(self)  # gpumon record's database: idle since, U, [ ]
        self.probe_child_command = probe_child_command
        self._stall: Stall | None = None
        self.set_reactive(GpumonApp.state, self._state())

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

    # -- samples in, state down ------------------------------------------------------

    @property
    def sample(self) -> Sample | None:
        """The latest sample (the store's); ``None`` before the first."""
        return self.store.latest

    def _sample_taken(self, sample: Sample) -> None:
        self.post_message(SampleTaken(sample))  # messages up: handled in its turn

    def on_sample_taken(self, message: SampleTaken) -> None:
        self.receive_sample(message.sample)

    def receive_sample(self, sample: Sample) -> None:
        """Run ``sample`` through the pipeline and show it (the poller's message; tests and
        snapshots call it directly)."""
        sample = self.pipeline.run(sample)
        self._stall = None
        if not self.is_running:
            return
        self.samples_received += 1
        if self.samples_received == 1:
            self.call_after_refresh(startup.settled)  # once this first sample is drawn
        self.history.on_sample(sample)  # after the idle step: it asks about quiet spells
        self._say(sample)
        self.refresh_state()

    def _say(self, sample: Sample) -> None:
        """The notices and alerts the steps found in ``sample``."""
        for line in self.pipeline.selection.notices():
            self.notify(line, severity="warning", timeout=NOTICE_S, markup=False)
        if said := self.pipeline.claims.notice():
            self.notify(said, severity="warning", timeout=10, markup=False)  # a path: brackets
        watches = self.pipeline.watches
        self.withdraw_alerts(
            lambda about: isinstance(about, Watch) and about.gpu_index not in watches.free
        )
        for watch in watches.done:
            about = watch if watch.pid is None else None  # an ended process stays ended
            self.alert(watch.done_text(sample.host.hostname, sample.timestamp_s), about)

    def _state(self) -> DashboardState:
        return self.pipeline.state(
            stall=self._stall,
            stale=stall_of(self.poller) is not None,
            paused=self.poller.paused,
            interval_s=self.poller.interval_s,
            polling=self.autostart,
        )

    def refresh_state(self) -> None:
        """Set :attr:`state` anew: the screens watching it redraw, in one batch."""
        if self.is_running:
            with self.batch_update():
                self.state = self._state()

    def _check_stalled(self) -> None:
        """Once a second: say so when NVML has not answered for three intervals (a driver
        stuck in an ioctl) or every read has failed as long, and stop saying it when samples
        resume. Keys keep working."""
        stall = stall_of(self.poller)
        if stall != self._stall:
            self._stall = stall
            self.refresh_state()

    def _on_poll_error(self, error: BaseException) -> None:
        if not self.is_running:
            return
        self.notify(f"Reading the GPUs failed: {error}", severity="error", timeout=5, markup=False)

    # -- actions ---------------------------------------------------------------------

    def action_help(self) -> None:
        self.push_screen(DashboardHelpScreen(self.glyphs.ascii_only))

    def want_details(self, wanted: bool) -> None:
        """A screen that shows :data:`~gpumon.data.model.ON_DEMAND_GPU_FIELDS` opened (or
        closed): they are read while one is open, from a sample taken at once."""
        self._detail_screens = max(0, self._detail_screens + (1 if wanted else -1))
        if read_details(self.source, self._detail_screens > 0) and wanted:
            self.poller.poll_now()

    def action_toggle_pause(self) -> None:
        self.poller.paused = not self.poller.paused
        self.refresh_state()
        if not isinstance(self.screen, DashboardScreen):  # its PAUSED badge is not on this screen
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
        self.refresh_state()
        if not isinstance(self.screen, DashboardScreen):  # "every 2s" is in its header only
            self.notify(f"Reading the GPUs every {new:g} s.", timeout=3)

    def action_usage(self) -> None:
        from gpumon.ui.dashboard.usage_screen import UsageScreen

        self.push_screen(UsageScreen(self.history))

    def on_recorded_idle(self, message: RecordedIdle) -> None:
        self.history.take_idle(message)

    def sample_now(self) -> Awaitable[Sample]:
        """The first sample after this call (the probe's NVML check), taken now."""
        waiting = self.store.next_sample()
        # Sample now rather than on schedule: the probe holds GPU memory while it waits, and
        # a paused dashboard or a 60 s interval must not turn a good probe into a skip.
        self.run_worker(self.poller.poll_once(), group="probe-sample")
        return waiting


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
