"""The dashboard's history keys: ``U`` (the usage screen) and the handler of the idle spells
a worker read, mixed into the app (:class:`HistoryKeys`) so that the app module only names
them. What they use: :mod:`gpumon.ui.dashboard.history`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from textual.binding import Binding

from gpumon.ui.dashboard.history import RecordedIdle

if TYPE_CHECKING:
    from gpumon.ui.dashboard.app import GpumonApp

HISTORY_BINDINGS = [
    Binding(
        "U",
        "usage",
        "Usage",
        key_display="U",
        show=False,  # in the help; the footer stays as it was
        tooltip="GPU-hours per user, 24 h and 7 days (the history database)",
    )
]


class HistoryKeys:
    """Mixed into the dashboard's app: ``U`` and the history's messages."""

    def action_usage(self) -> None:
        from gpumon.ui.dashboard.usage_screen import UsageScreen

        app = cast("GpumonApp", self)
        app.push_screen(UsageScreen(app.history))

    def on_recorded_idle(self, message: RecordedIdle) -> None:
        cast("GpumonApp", self).history.take_idle(message)
