"""The ``/`` box under a table: the table follows each key, Enter keeps the text, Escape clears
it. Shown and hidden by its own ``display``: a class on the screen would restyle every widget
on it at each open and close.
"""

from __future__ import annotations

from collections.abc import Callable

from textual import events
from textual.widget import Widget
from textual.widgets import Input


class SearchBox(Input):
    """``follow`` gets the stripped text at each key; ``table`` gets the focus back."""

    DEFAULT_CSS = """
    SearchBox { display: none; height: 1; border: none; padding: 0 1; }
    """

    def __init__(
        self,
        placeholder: str,
        follow: Callable[[str], None],
        table: type[Widget],
        *,
        id: str | None = None,
    ) -> None:
        super().__init__(placeholder=placeholder, id=id)
        self._follow = follow
        self._table = table

    @property
    def open(self) -> bool:
        return self.display

    def start(self, text: str) -> None:
        """Show the box with ``text``, the focus in it."""
        self.display = True
        self.value = text
        self.focus()

    def close(self) -> None:
        """Hide the box; the table has the focus."""
        if self.open:
            self.display = False
            self.screen.query_one(self._table).focus()

    def watch_value(self, value: str) -> None:
        # The table follows the key in the same frame as its echo (reacting to Input.Changed,
        # which bubbles up after the box repainted, drew it one frame later).
        if self.open:
            self._follow(value.strip())

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.close()

    def on_key(self, event: events.Key) -> None:
        if event.key == "escape" and self.open:
            event.stop()
            self._follow("")
            self.close()
