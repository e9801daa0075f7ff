"""A screen that draws from the app's store: on opening, on every new state and on resize."""

from __future__ import annotations

from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Static

from gpumon.sampling.pipeline import DashboardState
from gpumon.sampling.store import Store


class StoreScreen(Screen[None]):
    """Subclasses draw in :meth:`refresh_from_store`; ``Escape`` goes back."""

    BINDINGS = [Binding("escape", "back", "Back", tooltip="back to the dashboard")]
    #: The id of the subclass's one-line title (a Static).
    TITLE_ID = ""

    def __init__(self, store: Store) -> None:
        super().__init__()
        self.store = store
        self._title: str | None = None
        #: While the latest sample is stale (NVML not answering, reads failing): said first
        #: in the title, so no reading here passes for current.
        self.stale_text = ""

    def show_title(self, text: str) -> None:
        """Set the title, only when it changed: a Static's update lays the whole screen out
        again, which repaints every cell (14 kB per sample at 200x50)."""
        if self.stale_text:
            text = f" {self.stale_text} |{text}"
        if text != self._title:
            self._title = text
            self.query_one(f"#{self.TITLE_ID}", Static).update(text)

    def content_width(self) -> int:
        """The cells a line of the screen's scroll area gets: the screen's width less the
        area's padding and its scrollbar (left free whether shown or not, so the newest
        column of a right-aligned chart is never under it)."""
        styles = self.query_one(VerticalScroll).styles
        return max(1, self.size.width - styles.gutter.width - styles.scrollbar_size_vertical)

    def on_mount(self) -> None:
        self.before_first_draw()
        state = getattr(self.app, "state", None)
        if isinstance(state, DashboardState):
            self.stale_text = state.stale_text
            self.watch(self.app, "state", self._on_state, init=False)
        self.refresh_from_store()

    def _on_state(self, state: DashboardState) -> None:
        self.stale_text = state.stale_text
        if self.is_attached:
            self.refresh_from_store()

    def on_resize(self) -> None:
        # Drawn for a width: redraw now, not at the next sample (paused, or a 60 s interval).
        self.refresh_from_store()

    def before_first_draw(self) -> None:
        """Called once when the screen opens, before it first draws."""

    def refresh_from_store(self) -> None:
        """Redraw everything from the store's history and latest sample."""
        raise NotImplementedError

    def action_back(self) -> None:
        self.app.pop_screen()
