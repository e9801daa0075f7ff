"""``U``: who used the GPUs over the last 24 hours and 7 days, per user, from the history
database: GPU-hours held, used (SM-weighted) and held idle, each row with a bar (the bars of
``gpumon report``: :func:`gpumon.data.report.bar_cells`).

Read on a worker thread when the screen opens and every :data:`REFRESH_S` after; without a
database the screen says how to start recording. Under each title, what the database does not
cover of its period (``report``'s notes); notes and hints wrap to the screen, tables are cut.
"""

from __future__ import annotations

import getpass
import textwrap
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Static

from gpumon.data import format as fmt
from gpumon.data.periods import Period
from gpumon.data.report import NO_KEY, bar_cells, hours_text
from gpumon.data.usage import UsageRow
from gpumon.sampling.usage_history import HistoryError, coverage_notes, usage
from gpumon.ui.dashboard.history import (
    DEMO_LINE,
    IDLE_FROM_RECORDER,
    DashboardHistory,
    NoDatabase,
)
from gpumon.ui.widgets.keys_footer import KeysFooter
from gpumon.ui.widgets.text_lines import TextLines

if TYPE_CHECKING:
    from gpumon.sampling.history.reader import HistoryReader

#: (title, seconds back from now) of each table.
PERIODS: tuple[tuple[str, float], ...] = (("Last 24 hours", 86400.0), ("Last 7 days", 7 * 86400.0))
REFRESH_S = 300.0
_KEY_CELLS = 20
_BAR_CELLS = 40
HEADER = f"{'USER':<{_KEY_CELLS}} {'HELD':>7} {'USED':>7} {'IDLE':>7}  GPU-hours"
#: A period's table: its title, its rows, and what the database does not cover of it.
Table = tuple[str, Sequence[UsageRow], Sequence[str]]


def wrapped(text: str, width: int) -> str:
    """``text`` as lines of at most ``width`` cells (at least 20), the later ones indented."""
    lines = textwrap.wrap(text, max(20, width), subsequent_indent="  ", break_on_hyphens=False)
    return "\n".join(lines) + "\n"


def render_usage(
    tables: Sequence[Table],
    width: int,
    ascii_only: bool = False,
    colors: tuple[str, str] = ("green", "yellow"),
    current_user: str | None = None,
    simulated: bool = False,
) -> Text:
    """Each period's table: what the database does not cover of it, then per user GPU-hours
    held, used and held idle, and a bar (used, then held, then held idle) on one scale for all
    the tables; under a DEMO line when the history is ``simulated``."""
    text = Text(no_wrap=True, overflow="crop")
    if simulated:
        text.append(DEMO_LINE, "bold reverse")
        text.append("\n\n")
    cells = ("#", "=", ".") if ascii_only else ("█", "▒", "░")
    bar_width = max(0, min(_BAR_CELLS, width - len(HEADER) - 2 + len("GPU-hours")))
    top = max((row.gpu_hours_held for _, rows, _ in tables for row in rows), default=0.0)
    for title, rows, notes in tables:
        text.append(f"{title}\n", "bold")
        for note in notes:
            text.append(wrapped(note, width), colors[1])
        text.append(HEADER + "\n", "bold")
        if not rows:
            text.append("  nobody held GPU memory\n", "dim")
        for row in rows:
            user = fmt.ljust_cells(fmt.truncate(row.key or NO_KEY["user"], _KEY_CELLS), _KEY_CELLS)
            line = (
                f"{user} {hours_text(row.gpu_hours_held):>7} {hours_text(row.gpu_hours_used):>7}"
                f" {hours_text(row.idle_held_hours):>7}  "
            )
            text.append(
                line, "bold" if current_user is not None and row.key == current_user else ""
            )
            used, held, idle = bar_cells(row, top, bar_width)
            text.append(cells[0] * used, colors[0])
            text.append(cells[1] * held, "dim")
            text.append(cells[2] * idle, colors[1])
            text.append("\n")
        text.append("\n")
    legend = (
        f"{cells[0]} used (SM-weighted)  {cells[1]} held  {cells[2]} held idle: one GPU held "
        "for an hour is one GPU-hour"
    )
    text.append(wrapped(legend, width), "dim")
    return text


class UsageScreen(Screen[None]):
    """GPU-hours per user from the history database; ``Escape`` goes back."""

    BINDINGS = [
        Binding("escape", "back", "Back", tooltip="back to the dashboard"),
        Binding("U", "back", "Back", show=False, key_display="U", tooltip="back"),
    ]

    class Read(Message):
        """The worker read the tables; ``None`` without a database (``present`` False) or
        with one that cannot be read (``error``)."""

        def __init__(
            self,
            tables: list[Table] | None,
            present: bool,
            error: str | None,
            simulated: bool = False,
        ) -> None:
            super().__init__()
            self.tables = tables
            self.simulated = simulated
            self.present = present
            self.error = error

    def __init__(self, history: DashboardHistory, clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.history = history
        self.clock = clock
        self.tables: list[Table] | None = None
        #: The database holds a simulated server's history: the tables say DEMO.
        self.simulated = False
        #: The line shown instead of the tables (wrapped again on a resize).
        self.line = ""

    def compose(self) -> ComposeResult:
        yield Static(
            f" GPU usage per user, from the history database {self.history.path}", markup=False
        )
        with VerticalScroll():
            yield TextLines(id="usage")
        yield KeysFooter()

    def on_mount(self) -> None:
        self._draw("Reading the history database...")
        self.read()
        self.set_interval(REFRESH_S, self.read)

    def read(self) -> None:
        """Read both periods on a worker thread."""
        history, now = self.history, self.clock()

        def tables(reader: HistoryReader) -> tuple[list[Table], bool]:
            span, interval = reader.span(), reader.interval_s
            read: list[Table] = [
                (
                    title,
                    usage(reader, now - back, now, "user", now),
                    coverage_notes(Period(now - back, now), span, interval),
                )
                for title, back in PERIODS
            ]
            return read, reader.simulated

        def work() -> None:
            try:
                read, simulated = history.read(tables)
                message = self.Read(read, True, None, simulated)
            except NoDatabase:
                message = self.Read(None, False, None)
            except HistoryError as error:
                message = self.Read(None, True, str(error))
            self.post_message(message)

        self.run_worker(work, thread=True, exclusive=True, group="usage", exit_on_error=False)

    def on_usage_screen_read(self, message: Read) -> None:
        self.history.settle(message.present, message.error)
        self.tables, self.simulated = message.tables, message.simulated
        if message.tables is None:
            recorder = "" if message.present else f"\n\n{IDLE_FROM_RECORDER}"
            self._draw(self.history.missing_text + recorder, self.size.width - 4)
        else:
            self.refresh_tables()

    def on_resize(self) -> None:
        if self.tables is not None:
            self.refresh_tables()
        elif self.line:
            self._draw(self.line, self.size.width - 4)

    def refresh_tables(self) -> None:
        if self.tables is None or not self.is_attached:
            return
        variables = self.app.get_css_variables()
        colors = (variables.get("success", "green"), variables.get("warning", "yellow"))
        ascii_only = bool(getattr(getattr(self.app, "glyphs", None), "ascii_only", False))
        self.query_one("#usage", TextLines).update(
            render_usage(
                self.tables,
                self.size.width - 4,
                ascii_only,
                colors,
                _current_user(),
                self.simulated,
            )
        )

    def _draw(self, line: str, width: int | None = None) -> None:
        """``line`` dim; with ``width``, each paragraph wrapped to it (a path may be long)."""
        self.line = line
        if width is None:
            text = line + "\n"
        else:
            text = "".join(wrapped(part, width) if part else "\n" for part in line.split("\n"))
        self.query_one("#usage", TextLines).update(Text(text, "dim"))

    def action_back(self) -> None:
        self.app.pop_screen()


def _current_user() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None
