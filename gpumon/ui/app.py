"""What the one-machine and the cluster dashboards share: :class:`MonitorApp` (the ASCII look,
the theme the user chose, quitting on signals, closing the poller, alerts) and
:func:`wants_ascii`.

The apps themselves, which this module never imports: ``ui.dashboard.app`` (``gpumon``) and
``ui.cluster.app`` (``gpumon --prometheus URL``). Their shared stylesheet is
``app.tcss``, next to this file.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING

from textual.app import App
from textual.binding import Binding, BindingType
from textual.command import CommandPalette
from textual.filter import Monochrome, NoColor
from textual.keys import KEY_DISPLAY_ALIASES
from textual.notifications import Notification, Notify

from gpumon.data import format as fmt
from gpumon.data.alerts import alert_sequence
from gpumon.ui.textual_source import NO_COLOR_FILTER, PALETTE_TYPED_AHEAD, is_on

if TYPE_CHECKING:
    from textual.driver import Driver

    from gpumon.config import Settings
    from gpumon.sampling.poller import Poller
    from gpumon.ui.signals import QuitOnSignals
    from gpumon.ui.widgets.lines import Glyphs


#: The keys both dashboards bind app-wide, first in their footers.
APP_BINDINGS: list[BindingType] = [
    Binding("q", "quit", "Quit", tooltip="quit"),
    # Ctrl+C quits, as in htop, also from the help screen and the command palette (modal
    # screens, which only priority bindings reach); text selected with the mouse is copied
    # instead (the screen's copy_text skips when nothing is selected, and the next binding
    # for the key runs). These replace Textual's "press ctrl+q to quit" notice.
    Binding("ctrl+c", "screen.copy_text", "Copy", show=False, priority=True,
            tooltip="quit (copies instead while text is selected with the mouse)"),
    Binding("ctrl+c", "quit", "Quit", show=False, priority=True, tooltip="quit"),
    Binding("question_mark", "help", "Help", tooltip="this help"),
    Binding("space", "toggle_pause", "Pause", tooltip="pause / resume updates"),
]  # fmt: skip


def wants_ascii(environ: Mapping[str, str] = os.environ) -> bool:
    """True when the locale is not UTF-8 (bars and borders then fall back to ASCII)."""
    return not fmt.locale_is_utf8(environ)


class CommandPaletteTypedAhead(CommandPalette):
    """Textual's command palette, safe against keys typed ahead of its first layout.

    Ctrl+P and PageDown in one read (a laggy SSH link, ``tmux send-keys C-p PageDown``) reach
    the palette before its option list has laid out its lines, and Textual 8's
    ``OptionList._move_page`` then raises ``KeyError`` and ends the app. Such a key does what
    it does on an empty list: nothing. Used only where Textual's palette and option list are
    ones it was tested with (:data:`gpumon.ui.textual_source.PALETTE_TYPED_AHEAD`; see
    docs/textual-replacements.md).
    """

    def _action_command_list(self, action: str) -> None:
        try:
            super()._action_command_list(action)
        except KeyError:
            pass


#: How long an alert's notification stays on screen (a click dismisses it sooner).
ALERT_NOTICE_S = 600.0


class MonitorApp(App[int]):
    """What the one-machine and the cluster dashboards share: the ASCII look, the theme the
    user chose, quitting on SIGTERM/SIGHUP/SIGQUIT, closing the poller at the end, and
    alerts (:meth:`alert`: ``w``'s watches).
    Subclasses set ``glyphs``, ``settings`` and ``poller`` and call :meth:`start_common`
    from ``on_mount``."""

    # SIGTERM, SIGHUP and SIGQUIT quit as q does; the CLI sets one with a watchdog.
    quit_signals: QuitOnSignals | None = None
    glyphs: Glyphs
    settings: Settings
    poller: Poller

    def get_driver_class(self) -> type[Driver]:
        """Textual's driver for this terminal; on Linux and macOS
        :class:`~gpumon.ui.input_driver.QuietLinuxDriver` (no input wake-ups while no key
        comes) instead of Textual's :class:`LinuxDriver`, unless ``TEXTUAL_DRIVER`` chose
        another or the installed Textual's input loop is not the one it follows."""
        driver = super().get_driver_class()
        if sys.platform == "win32":
            return driver
        from textual.drivers.linux_driver import LinuxDriver

        if driver is not LinuxDriver:
            return driver
        try:
            from gpumon.ui.input_driver import QuietLinuxDriver, follows_textual
        except ImportError:  # a Textual 8 without the parser modules it uses
            return driver
        # Another Textual's input loop: its own driver, as it is.
        return QuietLinuxDriver if follows_textual() else driver

    def get_key_display(self, binding: Binding) -> str:
        """Textual's, with its arrows and ``⏎`` spelled out when the look is ASCII."""
        shown = super().get_key_display(binding)
        if not self.glyphs.ascii_only or shown.isascii():
            return shown
        for name, glyph in KEY_DISPLAY_ALIASES.items():
            shown = shown.replace(glyph, name)
        return shown

    def start_common(self) -> None:
        if self.glyphs.ascii_only:
            self.add_class("-ascii")
        if self.no_color:
            self.add_class("-no-color")
        if self.settings.origins.get("theme"):  # chosen by the user; else Textual's default
            self.theme = self.settings.theme
        if self.quit_signals is None:
            from gpumon.ui.signals import QuitOnSignals

            self.quit_signals = QuitOnSignals(self)
        self.quit_signals.install()

    def __init__(self) -> None:
        super().__init__()
        # Textual's Monochrome still writes greys; NO_COLOR means none (where Textual builds
        # and reads its filters as it was tested: NO_COLOR_FILTER).
        if self.no_color and is_on(NO_COLOR_FILTER):
            self._filters[:] = [
                NoColor() if isinstance(f, Monochrome) else f for f in self._filters
            ]
        #: The alerts on screen that say something may stop being true, by what they say.
        self._alerts: dict[Hashable, Notification] = {}

    def alert(self, message: str, about: Hashable | None = None) -> None:
        """Tell the user now, also when they look elsewhere: a notification that stays
        :data:`ALERT_NOTICE_S`, the bell and a desktop notification
        (:func:`~gpumon.data.alerts.alert_sequence`), written to the terminal the app draws on
        (Textual's driver: stderr, never stdout) in one write. ``about``: what the alert
        says, for :meth:`withdraw_alerts` to take its notification down once untrue."""
        notification = Notification(message, "gpumon", timeout=ALERT_NOTICE_S, markup=False)
        self.post_message(Notify(notification))
        if about is not None:
            self._alerts[about] = notification
        if self.is_running and self._driver is not None:
            self._driver.write(alert_sequence("gpumon", message, tmux=bool(os.environ.get("TMUX"))))

    def withdraw_alerts(self, untrue: Callable[[Hashable], bool]) -> None:
        """Take down the notifications of the alerts whose ``about`` is ``untrue`` now (a GPU
        said FREE that is taken again): ten minutes of a stale "FREE" would mislead."""
        for about, notification in list(self._alerts.items()):
            if notification.has_expired or untrue(about):
                del self._alerts[about]
                # Textual's one way to take a notification down is private: without it the
                # notice stays until its timeout, still saying when it was true.
                unnotify = getattr(self, "_unnotify", None)
                if unnotify is not None:
                    unnotify(notification)

    def action_command_palette(self) -> None:
        """Ctrl+P: the command palette (:class:`CommandPaletteTypedAhead`, or Textual's own
        where that is not one it was tested with)."""
        if self.use_command_palette and not isinstance(self.screen, CommandPalette):
            palette = CommandPaletteTypedAhead if is_on(PALETTE_TYPED_AHEAD) else CommandPalette
            self.push_screen(palette(id="--command-palette"))

    def on_unmount(self) -> None:
        self.poller.close()
        if self.quit_signals is not None:
            self.quit_signals.uninstall()
