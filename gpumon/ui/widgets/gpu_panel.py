"""Every GPU at a glance: cards, two lines, or one line per GPU, whatever fits.

The panel keeps the selection, the scrolling and the styles; the cards are drawn by
:mod:`gpumon.ui.widgets.gpu_cards`, the line layouts by :mod:`gpumon.ui.widgets.gpu_rows`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip

from gpumon.config import Settings
from gpumon.data import format as fmt
from gpumon.data.model import GpuStats, GpuUnavailable
from gpumon.data.notes import GpuNote
from gpumon.ui.widgets.gpu_cards import card_sparks, draw_card
from gpumon.ui.widgets.gpu_layout import CARD_HEIGHT, CARD_MIN_WIDTH, Layout, mig_lines
from gpumon.ui.widgets.gpu_rows import mig_rows, one_line, two_lines
from gpumon.ui.widgets.graphs import HistorySource
from gpumon.ui.widgets.lines import ComponentStyles, Glyphs, Line, LinesWidget, add_bar

# The component style (``gpu-panel--<name>``) of each temperature level but "normal".
_TEMPERATURE_STYLES = {"na": "dim", "warm": "warn", "hot": "hot"}


class GpuPanel(ComponentStyles, LinesWidget, can_focus=True):
    """Shows the GPUs of the latest sample; the selected one is highlighted."""

    STYLE_PREFIX = "gpu-panel"

    COMPONENT_CLASSES = {
        "gpu-panel--label",
        "gpu-panel--dim",
        "gpu-panel--ok",
        "gpu-panel--warn",
        "gpu-panel--hot",
        "gpu-panel--lost",
        "gpu-panel--selected",
        "gpu-panel--border",
        "gpu-panel--border-selected",
        "gpu-panel--title",
        "gpu-panel--spark",
        "gpu-panel--free",
        "gpu-panel--note-warn",
        "gpu-panel--note-info",
    }

    DEFAULT_CSS = """
    GpuPanel {
        height: auto;
        padding: 0 0;
    }
    GpuPanel > .gpu-panel--label { color: $text-muted; }
    GpuPanel > .gpu-panel--dim { color: $text-muted; }
    GpuPanel > .gpu-panel--ok { color: $success; }
    GpuPanel > .gpu-panel--warn { color: $warning; }
    GpuPanel > .gpu-panel--hot { color: $error; text-style: bold; }
    GpuPanel > .gpu-panel--lost { color: $error; text-style: bold reverse; }
    GpuPanel > .gpu-panel--selected { text-style: bold reverse; }
    GpuPanel > .gpu-panel--border { color: $panel-lighten-2; }
    GpuPanel > .gpu-panel--border-selected { color: $accent; }
    GpuPanel > .gpu-panel--title { text-style: bold; }
    GpuPanel > .gpu-panel--spark { color: $secondary; }
    GpuPanel > .gpu-panel--free { color: $success; text-style: bold reverse; }
    GpuPanel > .gpu-panel--note-warn { color: $warning; text-style: bold; }
    GpuPanel > .gpu-panel--note-info { color: $accent; }
    GpuPanel:focus > .gpu-panel--border-selected { color: $accent; text-style: bold; }
    """

    BINDINGS = [
        Binding("up,k", "move_row(-1)", "Up", show=False, tooltip="the GPU above"),
        Binding(
            "down,j",
            "move_row(1)",
            "Down",
            show=False,
            tooltip="the GPU below (from the last row: the process table)",
        ),
        Binding("left,h", "move(-1)", "Left", show=False, tooltip="the previous GPU"),
        Binding("right,l", "move(1)", "Right", show=False, tooltip="the next GPU"),
    ]

    selected: reactive[int] = reactive(0, init=False)

    class Selected(Message):
        """The user selected another GPU."""

        def __init__(self, gpu_index: int, gpu_uuid: str | None) -> None:
            super().__init__()
            self.gpu_index = gpu_index
            self.gpu_uuid = gpu_uuid

    def __init__(self, glyphs: Glyphs, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.glyphs = glyphs
        self.gpus: tuple[GpuStats, ...] = ()
        self.unavailable: GpuUnavailable | None = None
        self.layout_mode = Layout.CARDS
        self.columns = 1
        self.height_lines: int | None = None
        # First row (of cards, or of GPUs) shown when not every GPU fits.
        self.top_row = 0
        self._cards: dict[int, tuple[tuple[object, ...], list[Strip]]] = {}
        #: The NVML indices of the GPUs marked FREE (the dashboard hands them down).
        self.free: frozenset[int] = frozenset()
        #: What else is said of a GPU (claimed, held idle, watched): NVML index -> notes,
        #: drawn in a card's bottom border or at a row's end (the dashboard hands them down).
        self.notes: Mapping[int, tuple[GpuNote, ...]] = {}
        #: Processes per MIG instance: (GPU index, GPU instance id) -> count.
        self.mig_process_counts: dict[tuple[int, int | None], int] = {}
        self._row_heights: list[int] = []
        self._rows_shown = 0  # GPU rows drawn from top_row (a last line may say what is not)
        #: The colour thresholds come from the settings; the dashboard hands them down.
        self.settings = Settings()
        #: Where sparklines read history (the app's store) and at what interval; none without.
        self.history: HistorySource | None = None
        self.interval_s = 1.0

    # -- data in -----------------------------------------------------------------------

    def show(
        self,
        gpus: Sequence[GpuStats],
        unavailable: GpuUnavailable | None,
        layout: Layout,
        columns: int,
        height_lines: int | None = None,
    ) -> None:
        """Attributes down: the app hands over the GPUs, the layout it chose and the lines it
        gave the panel (when not every GPU fits, the panel scrolls to the selected one)."""
        self.gpus = tuple(gpus)
        self.unavailable = unavailable
        self.layout_mode = layout
        self.columns = columns
        self.height_lines = height_lines
        if self.gpus and self.selected >= len(self.gpus):
            self.selected = len(self.gpus) - 1
        self.redraw()

    @property
    def selected_gpu(self) -> GpuStats | None:
        if 0 <= self.selected < len(self.gpus):
            return self.gpus[self.selected]
        return None

    def watch_selected(self) -> None:
        self.redraw()
        gpu = self.selected_gpu
        if gpu is not None:
            self.post_message(self.Selected(gpu.index, gpu.uuid))

    def action_move(self, step: int) -> None:
        """Left/Right: the previous or next GPU, across rows of cards."""
        if self.gpus:
            self.selected = (self.selected + step) % len(self.gpus)

    def action_move_row(self, step: int) -> None:
        """Up/Down: within a column of cards (the line layouts have one column, and wrap).

        No press is lost: Down on a row above a shorter last row goes to its last card, Down
        on the last row (the last GPU, in the line layouts) moves the focus on to the
        process table, and Up on the first row goes to the bottom of the column (each
        changes the screen at once)."""
        if not self.gpus:
            return
        columns = max(1, self.columns if self.layout_mode is Layout.CARDS else 1)
        count = len(self.gpus)
        target = self.selected + step * columns
        last_row = (count - 1) // columns
        if 0 <= target < count:
            self.selected = target
        elif step > 0 and self.selected // columns < last_row:
            self.selected = count - 1
        elif step > 0:
            screen = self.screen
            screen.focus_next()
            if screen.focused is self or screen.focused is None:
                self.focus()  # nothing else to go to: to the top of the column
                self.selected %= columns
        else:
            bottom = last_row * columns + self.selected % columns
            self.selected = bottom if bottom < count else bottom - columns

    def on_click(self, event: events.Click) -> None:
        index = self._index_at(event.x, event.y)
        if index is not None:
            self.selected = index

    def _index_at(self, x: int, y: int) -> int | None:
        if not self.gpus:
            return None
        top = 0
        row = None
        drawn = self._row_heights[self.top_row : self.top_row + self._rows_shown]
        for number, height in enumerate(drawn, self.top_row):  # not the "GPUs 0-11" line
            if top <= y < top + height:
                row = number
                break
            top += height
        if row is None:
            return None
        if self.layout_mode is Layout.CARDS:
            card_width = max(1, self.size.width // self.columns)
            index = row * self.columns + min(self.columns - 1, x // card_width)
        else:
            index = row
        return index if 0 <= index < len(self.gpus) else None

    def on_resize(self) -> None:
        self.redraw()

    # -- drawing -----------------------------------------------------------------------

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._cards.clear()

    def redraw(self) -> None:
        width = self.size.width or 80
        if self.unavailable is not None and not self.gpus:
            self._row_heights = []
            self.set_lines(self._unavailable_lines(self.unavailable, width))
            return
        if self.layout_mode is Layout.CARDS:
            rows = self._card_rows(width)
        elif self.layout_mode is Layout.TWO_LINES:
            rows = [
                [*two_lines(self, gpu, i == self.selected, width), *self._mig(gpu, width)]
                for i, gpu in enumerate(self.gpus)
            ]
        else:
            rows = [
                [one_line(self, gpu, i == self.selected, width), *self._mig(gpu, width)]
                for i, gpu in enumerate(self.gpus)
            ]
        self._row_heights = [len(row) for row in rows]
        self.set_lines(self._window(rows, width))

    def _mig(self, gpu: GpuStats, width: int, indent: int = 3) -> list[Strip]:
        return [line.strip(width) for line in mig_rows(self, gpu, width - indent, indent)]

    def _window(self, rows: list[list[Strip]], width: int) -> list[Strip]:
        """The rows that fit, scrolled to keep the selected GPU in view, and a line saying
        which GPUs are shown: every GPU stays reachable on a short terminal."""
        height = self.height_lines or self.size.height
        total = sum(len(row) for row in rows)
        if not height or total <= height:
            self.top_row = 0
            self._rows_shown = len(rows)
            return [line for row in rows for line in row]
        per_row = self.columns  # 1 in the line layouts
        selected_row = self.selected // per_row

        def fits(first: int, last: int) -> bool:
            return sum(len(row) for row in rows[first : last + 1]) <= height - 1

        if selected_row < self.top_row:
            self.top_row = selected_row
        while self.top_row < selected_row and not fits(self.top_row, selected_row):
            self.top_row += 1
        # Fill the room: as many rows from top_row as fit (at least one).
        end = self.top_row + 1
        while end < len(rows) and fits(self.top_row, end):
            end += 1
        # At the bottom, show as many earlier rows as fit too.
        while self.top_row > 0 and end == len(rows) and fits(self.top_row - 1, end - 1):
            self.top_row -= 1
        self._rows_shown = end - self.top_row
        shown = [line for row in rows[self.top_row : end] for line in row][: max(1, height - 1)]
        first = self.gpus[self.top_row * per_row].index
        last = self.gpus[min(len(self.gpus), end * per_row) - 1].index
        g = self.glyphs
        more = Line().add(
            f" {g.up}{g.down} GPUs {first}-{last} of {len(self.gpus)} shown: up/down (j/k) scrolls",
            self.style("dim"),
        )
        return [*shown, more.strip(width)]

    def _unavailable_lines(self, unavailable: GpuUnavailable, width: int) -> list[Strip]:
        lines = [
            Line().add(" No GPU data: ", self.style("hot")).add(unavailable.headline).strip(width),
            Line().add("   " + unavailable.detail, self.style("dim")).strip(width),
        ]
        if unavailable.hint:
            lines.append(Line().add("   " + unavailable.hint).strip(width))
        lines.append(
            Line().add("   The host strip below still updates.", self.style("dim")).strip(width)
        )
        return lines

    def temperature_style(self, gpu: GpuStats) -> Style:
        """Colour of :func:`gpumon.data.format.temperature_level`: red near slowdown, then
        yellow."""
        limits = self.settings
        level = fmt.temperature_level(
            gpu.temperature_c,
            gpu.temperature_slowdown_c,
            limits.temperature_hot_margin_c,
            limits.temperature_warm_margin_c,
        )
        if level == "normal":
            return Style()
        return self.style(_TEMPERATURE_STYLES[level])

    def load_style(self, fraction: float | None) -> Style:
        """Green when there is room, red when the GPU is taken."""
        if fraction is None:
            return self.style("dim")
        if fraction * 100 >= self.settings.load_hot_pct:
            return self.style("hot")
        if fraction * 100 >= self.settings.load_warn_pct:
            return self.style("warn")
        return self.style("ok")

    def _bar(self, line: Line, fraction: float | None, width: int) -> None:
        add_bar(line, self.glyphs, fraction, width, self.load_style(fraction), self.style("dim"))

    def _value(self, line: Line, text: str, style: Style | None = None) -> Line:
        return line.add(text, self.style("dim") if text == fmt.NA else (style or Style()))

    # Cards ----------------------------------------------------------------------------

    def _card_rows(self, width: int) -> list[list[Strip]]:
        columns = self.columns
        card_width = max(CARD_MIN_WIDTH // 2, width // columns)
        rows: list[list[Strip]] = []
        for start in range(0, len(self.gpus), columns):
            gpus = self.gpus[start : start + columns]
            extra = max(mig_lines(gpu) for gpu in gpus)
            cards = [
                self._cached_card(gpu, start + offset == self.selected, card_width, extra)
                for offset, gpu in enumerate(gpus)
            ]
            rows.append(
                [
                    Strip.join([card[y] for card in cards]).crop_extend(0, width, None)
                    for y in range(CARD_HEIGHT + extra)
                ]
            )
        return rows

    def _cached_card(
        self, gpu: GpuStats, selected: bool, width: int, extra: int = 0
    ) -> list[Strip]:
        # GpuStats is frozen and hashable: an unchanged GPU (idle, lost) is not redrawn.
        sparks = card_sparks(self, gpu, width - 4)
        free = gpu.index in self.free
        notes = self.notes.get(gpu.index, ())
        key = (gpu, selected, width, sparks, free, extra, notes)
        cached = self._cards.get(gpu.index)
        if cached is not None and cached[0] == key:
            return cached[1]
        lines = draw_card(self, gpu, selected, width, sparks, free, extra, notes)
        self._cards[gpu.index] = (key, lines)
        return lines

    def _ecc_style(self, gpu: GpuStats) -> Style:
        return self.style("hot") if gpu.ecc_errors_uncorrected_volatile else Style()
