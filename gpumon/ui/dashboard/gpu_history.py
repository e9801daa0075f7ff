"""The GPU detail's spans: ``[`` and ``]`` step its graphs through 10 min, 1 h, 24 h and
7 days. The first is the store's (the samples in memory, :func:`~gpumon.ui.dashboard.
gpu_detail.render_graphs`); the longer ones come from the history database's minute and hour
rows (:meth:`~gpumon.sampling.history.reader.HistoryReader.gpu_series`), read on a worker
thread when the span is chosen and every :data:`REFRESH_S` after, and drawn by time (a column
is the largest reading of its slice: a spike stays visible; nothing recorded is a gap).

The database keeps only some readings (:data:`~gpumon.sampling.history.reader.
HISTORY_FIELDS`): the other graphs say so. Without a database a longer span is not offered:
one notice says how to start recording, and the graphs stay on the last minutes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer

from gpumon.data import format as fmt
from gpumon.data.model import GpuStats
from gpumon.sampling.history.reader import HISTORY_FIELDS, HistoryError
from gpumon.ui.dashboard.history import DEMO_LINE, DashboardHistory, NoDatabase
from gpumon.ui.widgets.gpu_fields import GRAPHS, append_chart, ascii_text, chart_width
from gpumon.ui.widgets.graphs import chart, time_columns

if TYPE_CHECKING:
    from gpumon.sampling.history.reader import HistoryReader

#: The spans, shortest first: the store's, then the database's.
SPANS_S = (600.0, 3600.0, 86400.0, 7 * 86400.0)
SPAN_NAMES = ("10 min", "1 h", "24 h", "7 days")
REFRESH_S = 60.0
CHART_ROWS = 3
SPAN_BINDINGS = [
    # One footer entry for the pair: "[ ] Span".
    Binding(
        "left_square_bracket",
        "span(-1)",
        "Span",
        key_display="[",
        show=False,
        tooltip="graphs over a shorter span (10 min, 1 h, 24 h, 7 days)",
    ),
    Binding(
        "right_square_bracket",
        "span(1)",
        "Span",
        key_display="[ ]",
        tooltip="graphs over a longer span, from the history database (1 h, 24 h, 7 days)",
    ),
]
#: Points (bucket start, mean, max) of each recorded field.
Points = list[tuple[float, float | None, float | None]]


@dataclass(frozen=True, slots=True)
class Recorded:
    """What a worker read: per field, the GPU's points over ``span_s`` up to ``end_s``."""

    uuid: str
    span_s: float
    end_s: float
    series: dict[str, Points]
    #: The database holds a simulated server's history (``gpumon record --demo``).
    simulated: bool = False


class SeriesRead(Message):
    """A worker read a span (``recorded``), found no database, or one it cannot read."""

    def __init__(self, recorded: Recorded | None, present: bool, error: str | None) -> None:
        super().__init__()
        self.recorded = recorded
        self.present = present
        self.error = error


def render_recorded(
    recorded: Recorded | None,
    name: str,
    gpu: GpuStats,
    width: int,
    ascii_only: bool = False,
    colors: tuple[str, str] = ("green", "yellow"),
) -> Text:
    """The recorded graphs of one span (``name``: how the titles say it); a line while
    they are read."""
    text = Text(no_wrap=True, overflow="crop")
    if recorded is None:
        return text.append(f"Last {name}: reading the history database...\n", "dim")
    width_cells = chart_width(width)
    start_s = recorded.end_s - recorded.span_s
    recorded_as = "recorded"
    if recorded.simulated:
        recorded_as = "recorded, DEMO"
        text.append(DEMO_LINE, "bold reverse")
        text.append("\n")
    left_out = []
    for graph in GRAPHS:
        if graph.field not in HISTORY_FIELDS:
            left_out.append(graph.title)
            continue
        points = recorded.series.get(graph.field, [])
        peaks = [(when, peak) for when, _, peak in points]
        columns = time_columns(peaks, start_s, recorded.end_s, width_cells)
        means = [mean for _, mean, _ in points if mean is not None]
        known = [value for value in columns if value is not None]
        top = graph.scale_top(gpu, known)
        latest = getattr(gpu, graph.field)
        line = Text(f"{graph.title}  ", style="bold")
        line.append(fmt.NA if latest is None else graph.text(latest))
        if means and known:
            mean = sum(means) / len(means)
            line.append(f"   mean {graph.text(mean)}  max {graph.text(max(known))}", "dim")
        else:
            line.append("   nothing recorded in this span", "dim")
        line.append(f"   (last {name}, {recorded_as})", "dim")
        text.append_text(ascii_text(line, ascii_only))
        text.append("\n")
        rows = chart(columns, width_cells, CHART_ROWS, 0.0, top, threshold=graph.threshold(gpu),
                     ascii_only=ascii_only)  # fmt: skip
        style = colors[1] if graph.field == "temperature_c" else colors[0]
        append_chart(text, rows, graph.text(top), style, ascii_only)
    if left_out:
        text.append(f"{', '.join(left_out)}: not recorded (press [ for the last minutes)\n", "dim")
    return text


class GpuSpans:
    """The span a GPU detail screen shows, and the recorded points of a longer one.

    Args:
        screen: the GPU detail screen (it handles :class:`SeriesRead` and redraws).
        clock: wall-clock seconds (the database's times).
    """

    def __init__(self, screen: Screen[None], clock: Callable[[], float] = time.time) -> None:
        self.screen = screen
        self.clock = clock
        #: Which of :data:`SPANS_S`: 0 is the store's minutes.
        self.number = 0
        self.recorded: Recorded | None = None
        self._uuid: str | None = None
        self._timer: Timer | None = None

    @property
    def history(self) -> DashboardHistory | None:
        return getattr(self.screen.app, "history", None)

    def step(self, direction: int, uuid: str | None) -> None:
        """``[`` (-1) or ``]`` (+1): the next span, read from the database."""
        history = self.history
        number = max(0, min(len(SPANS_S) - 1, self.number + direction))
        if number and (history is None or history.present is False or history.error):
            self._unavailable(history)
            return
        if number and uuid is None:
            self.screen.notify("No recorded history: this GPU's UUID is not known.")
            return
        if number == self.number:
            return
        self.number, self._uuid = number, uuid
        if number:
            self.recorded = None  # "reading" until the worker answers
            self.read()
            if self._timer is None:
                self._timer = self.screen.set_interval(REFRESH_S, self.read)

    def _unavailable(self, history: DashboardHistory | None) -> None:
        self.number, self.recorded = 0, None
        if history is not None and history.error is None:
            self.screen.notify(
                f"Only the last minutes: {history.missing_text}",
                severity="warning",
                timeout=8,
                markup=False,
            )

    def read(self) -> None:
        """Read the span's points on a worker thread (nothing on the 10-minute span)."""
        history, uuid, number = self.history, self._uuid, self.number
        if not number or history is None or uuid is None:
            return
        span_s, end_s = SPANS_S[number], self.clock()
        width = chart_width(self.screen.size.width - 5)
        bucket_s = max(60.0, span_s / width)

        def points(reader: HistoryReader) -> Recorded:
            series = {
                field: reader.gpu_series(uuid, field, end_s - span_s, end_s, bucket_s=bucket_s)
                for field in HISTORY_FIELDS
                if any(graph.field == field for graph in GRAPHS)
            }
            return Recorded(uuid, span_s, end_s, series, reader.simulated)

        def work() -> None:
            try:
                message = SeriesRead(history.read(points), True, None)
            except NoDatabase:
                message = SeriesRead(None, False, None)
            except HistoryError as error:
                message = SeriesRead(None, True, str(error))
            self.screen.post_message(message)

        self.screen.run_worker(
            work, thread=True, exclusive=True, group="gpu-history", exit_on_error=False
        )

    def take(self, message: SeriesRead) -> None:
        """On the event loop: keep what the worker read, or go back to the last minutes."""
        history = self.history
        if history is not None:
            history.settle(message.present, message.error)
        if message.recorded is None:
            if self.number:
                self._unavailable(history)
            return
        if self.number and message.recorded.span_s == SPANS_S[self.number]:
            self.recorded = message.recorded

    def render(
        self, gpu: GpuStats, width: int, ascii_only: bool, colors: tuple[str, str]
    ) -> Text | None:
        """The recorded graphs of the span; ``None`` on the store's (draw those)."""
        if not self.number:
            return None
        return render_recorded(
            self.recorded, SPAN_NAMES[self.number], gpu, width, ascii_only, colors
        )
