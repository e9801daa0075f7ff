"""The history database on the dashboard: what ``gpumon record`` wrote, read on worker threads.

:class:`DashboardHistory` (the app's ``history``) opens the database on a worker thread for
each read, and closes it: nothing waits on SQLite on the event loop, and a database created
while the dashboard runs is found. One that cannot be read is said once, in a notice. It adds
idle spells as recorded (``idle 2h13m``, not ``idle ≥ 12m``), ``U``
(:mod:`~gpumon.ui.dashboard.usage_screen`) and the GPU detail's longer spans.
"""

from __future__ import annotations

import math
import textwrap
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from textual.message import Message

from gpumon.data.model import Sample
from gpumon.sampling.idle import RecordedKey
from gpumon.sampling.usage_history import (
    START_RECORDING,
    HistoryError,
    history_path,
    no_database,
    open_reader,
)
from gpumon.ui.widgets.help import WIDTH

if TYPE_CHECKING:
    from gpumon.sampling.history.reader import HistoryReader
    from gpumon.ui.dashboard.app import GpumonApp

Result = TypeVar("Result")
#: Open the database at a path: ``None`` when there is none (``open_reader``'s contract).
Opener = Callable[[str], "HistoryReader | None"]

#: Above the recorded graphs ([ ]) and the U screen of a simulated history: never taken for
#: the server's own.
DEMO_LINE = " DEMO: simulated history (gpumon record --demo), not this server's "

#: What a recorder adds to the idle times, said where there is no database (help, U).
IDLE_FROM_RECORDER = (
    "A recorder that runs as a service times idle processes from when they went quiet, "
    "from the dashboard's first second: idle 2h13m, not idle >=12m counted from when "
    "gpumon started."
)

#: Ask the database about idle processes at most this often.
IDLE_LOOKUP_S = 30.0


class NoDatabase(Exception):
    """There is no database at the path (nothing recorded yet)."""


class RecordedIdle(Message):
    """A worker read when the quiet spells of some processes began (``None``: no database;
    ``error``: it could not be read)."""

    def __init__(self, starts: dict[RecordedKey, float] | None, error: str | None) -> None:
        super().__init__()
        self.starts = starts
        self.error = error


class DashboardHistory:
    """The dashboard's view of the history database (see the module docstring).

    Args:
        app: the dashboard; it calls :meth:`on_sample` after its idle step.
        path: the database (default: the settings' :func:`history_path`).
        opener: opens it (tests hand in a fake).
        clock: monotonic seconds, for how often idle spells are looked up.
    """

    def __init__(
        self,
        app: GpumonApp,
        path: str | None = None,
        opener: Opener = open_reader,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.app = app
        self.path = path or history_path(app.settings)
        self.opener = opener
        self.clock = clock
        #: Whether a database was found at the last read; ``None`` before the first.
        self.present: bool | None = None
        #: Why it could not be read, at the last read; ``None`` when it could.
        self.error: str | None = None
        self._warned = False
        self._looked_up_at = -math.inf
        self._looking = False
        #: The processes asked about, when (the tracker's clock): asked again after a while.
        self._asked: dict[RecordedKey, float] = {}

    @property
    def help_line(self) -> str:
        """What the help says about the history: where it is read, or how to start one."""
        if self.present is False:
            return f"No history database yet ({self.path}): {START_RECORDING}. {IDLE_FROM_RECORDER}"
        if self.error is not None:
            return f"The history database cannot be read: {self.error}"
        return (
            f"History database: {self.path} (gpumon record writes it; without one, "
            f"{START_RECORDING})."
        )

    @property
    def missing_text(self) -> str:
        """One line for a screen that needs the database and has none (or a broken one)."""
        return self.error if self.error is not None else no_database(self.path) + "."

    def read(self, work: Callable[[HistoryReader], Result]) -> Result:
        """Open the database, run ``work`` on it, close it. For worker threads only.

        Raises:
            NoDatabase: there is none at :attr:`path`.
            HistoryError: it cannot be read (one line), also for what the reader did not
                foresee.
        """
        try:
            reader = self.opener(self.path)
            if reader is None:
                raise NoDatabase(self.path)
            with reader:
                return work(reader)
        except (HistoryError, NoDatabase):
            raise
        except Exception as error:  # whatever else the file does, the dashboard goes on
            raise HistoryError(f"{self.path}: cannot read it: {error}") from None

    def settle(self, present: bool | None, error: str | None) -> None:
        """Take in what a read found (on the event loop): a database that cannot be read is
        said once, in one notice."""
        self.present = present
        self.error = error
        if error is not None and not self._warned and self.app.is_running:
            self._warned = True
            self.app.notify(
                f"History database: {error}. Going on without it.",
                severity="warning",
                timeout=10,
                markup=False,  # a path or SQLite's text may hold brackets
            )

    # -- idle spells --------------------------------------------------------------------

    def on_sample(self, sample: Sample) -> None:
        """After the idle step: look up, now and then, when quiet spells began."""
        now = self.clock()
        if self._looking or now - self._looked_up_at < IDLE_LOOKUP_S:
            return
        if self.error is not None or not self.app.is_running:
            return
        wanted = self._unknown_spells(sample, now)
        if not wanted and self.present is not None:
            return
        self._looked_up_at = now
        self._looking = True
        for key in wanted:
            self._asked[key] = now
        self.app.run_worker(
            lambda: self._look_up(wanted),
            thread=True,
            group="history-idle",
            exit_on_error=False,
        )

    def _unknown_spells(self, sample: Sample, now: float) -> list[RecordedKey]:
        """The quiet processes whose spell began before the tracker saw it, not asked
        about in the last :data:`IDLE_LOOKUP_S` times ten."""
        view = self.app.pipeline.idle.view.processes
        wanted = []
        keys = set()
        for process in sample.processes:
            key = (process.gpu_uuid, process.pid, process.create_time_s)
            keys.add(key)
            activity = view.get(process.key)
            if activity is None or not activity.at_least or activity.quiet_s <= 0:
                continue
            if (
                process.gpu_uuid is None
                or now - self._asked.get(key, -math.inf) < 10 * IDLE_LOOKUP_S
            ):
                continue
            wanted.append(key)
        self._asked = {key: when for key, when in self._asked.items() if key in keys}
        return wanted

    def _look_up(self, wanted: list[RecordedKey]) -> None:
        """On a worker thread: when each quiet spell began, as recorded."""

        def starts(reader: HistoryReader) -> dict[RecordedKey, float]:
            found = {}
            for key in wanted:
                uuid, pid, created = key
                since = reader.idle_since(uuid or "", pid, created)
                if since is not None:
                    found[key] = since
            return found

        try:
            message = RecordedIdle(self.read(starts), None)
        except NoDatabase:
            message = RecordedIdle(None, None)
        except HistoryError as error:
            message = RecordedIdle(None, str(error))
        self.app.post_message(message)

    def take_idle(self, message: RecordedIdle) -> None:
        """On the event loop: hand the recorded starts to the idle tracker."""
        self._looking = False
        self.settle(message.starts is not None or message.error is not None, message.error)
        if message.starts:
            self.app.pipeline.idle.recorded_since.update(message.starts)


def history_help(history: DashboardHistory | None) -> str:
    """The help's section on the history database: what it adds, and where it is read or
    how to start one."""
    lines = ["History (gpumon record writes it; README: History)"]
    rows = (
        ("[ / ]", "in a GPU's detail (Enter): its graphs over 10 min, 1 h, 24 h, 7 days"),
        ("idle 2h13m", "timed from when the process went quiet as recorded, also when that "
         "was before gpumon started"),
    )  # fmt: skip
    for key, what in rows:
        wrapped = textwrap.wrap(what, WIDTH - 18)
        lines.append(f"  {key:<15} {wrapped[0]}")
        lines += [f"  {'':<15} {more}" for more in wrapped[1:]]
    if history is not None:
        lines += ["  " + line for line in textwrap.wrap(history.help_line, WIDTH - 2)]
    return "\n".join(lines) + "\n"
