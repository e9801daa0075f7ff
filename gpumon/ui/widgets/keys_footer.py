"""The key footer, rebuilt only when the keys it shows change.

:class:`KeysFooter` is Textual's footer, except that a bindings refresh coming while a rebuild
is pending adds none, and a rebuild whose keys (bindings, enabled, tooltips, the command
palette's key) are those already shown is skipped. Against a footer it was not tested with
(:data:`gpumon.ui.textual_source.KEYS_FOOTER`) it behaves as that footer does, and
``gpumon --version`` says why; docs/textual-replacements.md has the whole story.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.widgets import Footer

from gpumon.ui.textual_source import KEYS_FOOTER, is_on

if TYPE_CHECKING:
    from textual.app import ComposeResult
    from textual.screen import Screen


def follows_textual() -> bool:
    """Whether the installed Textual's footer is one :class:`KeysFooter` was tested with."""
    return is_on(KEYS_FOOTER)


class KeysFooter(Footer):
    """Textual's footer, rebuilt only when the keys it shows change (see the module)."""

    def __init__(self, *, show_command_palette: bool = True, compact: bool = False) -> None:
        super().__init__(show_command_palette=show_command_palette, compact=compact)
        self._rebuild_pending = False
        #: What the last compose showed (see :meth:`_keys_shown`); None: nothing yet.
        self._composed: tuple[object, ...] | None = None
        #: How many times the keys were rebuilt (tests count them).
        self.rebuilds = 0

    def compose(self) -> ComposeResult:
        self._composed = self._keys_shown() if self._bindings_ready else None
        if self._composed is not None:
            self.rebuilds += 1
        yield from super().compose()

    def bindings_changed(self, screen: Screen[object]) -> None:
        if not follows_textual():
            super().bindings_changed(screen)
            return
        self._bindings_ready = True
        if not screen.app.app_focus:
            return
        if self.is_attached and screen is self.screen and not self._rebuild_pending:
            self._rebuild_pending = True
            self.call_after_refresh(self._rebuild_if_changed)

    async def _rebuild_if_changed(self) -> None:
        self._rebuild_pending = False
        if not self.is_attached or self._keys_shown() == self._composed:
            return
        await self.recompose()

    def _keys_shown(self) -> tuple[object, ...]:
        """Everything :meth:`Footer.compose` builds the keys from."""
        active = self.screen.active_bindings
        display = self.app.get_key_display
        keys = tuple(
            (binding, display(binding), enabled, tooltip)
            for (_, binding, enabled, tooltip) in active.values()
            if binding.show
        )
        palette = None
        if self.show_command_palette and self.app.ENABLE_COMMAND_PALETTE:
            found = active.get(self.app.COMMAND_PALETTE_BINDING)
            palette = None if found is None else found[1:]
        return (keys, palette)
