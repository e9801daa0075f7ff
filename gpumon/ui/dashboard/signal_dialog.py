"""T, K and I on a process: ask before sending SIGTERM, SIGKILL or SIGINT, then say what happened.

The dialog names the process and defaults to Cancel (Enter, Escape or ``n`` send nothing;
the "Send" button or ``y`` sends). What may be signalled is decided by
:mod:`gpumon.sources.host.signals`, asked before the dialog opens and again right before sending.
"""

from __future__ import annotations

import signal
from typing import Any

from rich.table import Table
from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.notifications import SeverityLevel
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from gpumon.data import format as fmt
from gpumon.data.model import GpuProcess
from gpumon.sources.host.signals import SignalResult, refusal, send_signal

#: A command line longer than this many cells is cut: three lines of the dialog are enough to
#: recognise it (the process detail screen shows it whole).
COMMAND_MAX_CELLS = 3 * 60


def describe(process: GpuProcess, ascii_only: bool = False) -> Table:
    """The process as the dialog shows it, a label column and a value column. Every value is
    plain text, never markup: a command containing ``[bold]`` shows literally."""
    ellipsis = fmt.ASCII_ELLIPSIS if ascii_only else fmt.ELLIPSIS
    # The command is already safe text from the host source; safe_text again costs nothing
    # and keeps an escape sequence from ever reaching the terminal from here.
    command = fmt.truncate(fmt.safe_text(process.command or fmt.NA), COMMAND_MAX_CELLS, ellipsis)
    gpu = f"{process.gpu_index}"
    if process.gpu_instance_id is not None:
        gpu += f" (MIG GPU instance {process.gpu_instance_id})"
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    table.add_row(Text("PID"), Text(str(process.pid)))
    table.add_row(Text("User"), Text(fmt.safe_text(process.user or fmt.NA)))
    table.add_row(Text("Command"), Text(command))
    table.add_row(Text("GPU memory"), Text(fmt.bytes_short(process.gpu_memory_bytes)))
    table.add_row(Text("GPU"), Text(gpu))
    return table


class SignalDialog(ModalScreen[bool]):
    """Ask whether to send ``sig`` to ``process``: dismissed with True to send, else False."""

    AUTO_FOCUS = "#signal-cancel"

    BINDINGS = [
        Binding("escape,n", "cancel", "Cancel", show=False),
        Binding("y", "confirm", "Send", show=False),
        Binding("left", "app.focus_previous", show=False),
        Binding("right", "app.focus_next", show=False),
    ]

    DEFAULT_CSS = """
    SignalDialog { align: center middle; }
    SignalDialog > #signal-dialog {
        width: 72;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        border: round $error;
        border-title-color: $error;
        border-title-style: bold;
        background: $surface;
        padding: 0 1;
    }
    SignalDialog.-ascii > #signal-dialog { border: ascii $error; }
    SignalDialog #signal-title { text-style: bold; margin-bottom: 1; }
    SignalDialog #signal-process { margin-bottom: 1; }
    SignalDialog #signal-body { height: auto; }
    SignalDialog #signal-buttons { dock: bottom; height: auto; align-horizontal: right; }
    SignalDialog #signal-buttons > Button { margin-left: 2; }
    """

    def __init__(self, process: GpuProcess, sig: signal.Signals) -> None:
        super().__init__()
        self.process = process
        self.sig = sig

    @property
    def title_text(self) -> str:
        return f"Send {self.sig.name} to PID {self.process.pid}?"

    def compose(self) -> ComposeResult:
        # The app marks a terminal that is not UTF-8 with -ascii: no box-drawing glyphs then,
        # and buttons without their half-block borders.
        ascii_only = self.app.has_class("-ascii")
        self.set_class(ascii_only, "-ascii")
        with Vertical(id="signal-dialog") as dialog:
            dialog.border_title = self.sig.name
            with VerticalScroll(id="signal-body", can_focus=False):
                yield Static(Text(self.title_text), id="signal-title")
                yield Static(describe(self.process, ascii_only), id="signal-process")
            with Horizontal(id="signal-buttons"):
                yield Button("Cancel", id="signal-cancel", compact=ascii_only)
                yield Button(
                    f"Send {self.sig.name}", variant="error", id="signal-send", compact=ascii_only
                )

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "signal-send")

    def action_cancel(self) -> None:
        self.dismiss(False)

    def action_confirm(self) -> None:
        self.dismiss(True)


#: T, K, I on the selected process; under --readonly they only say so.
SIGNAL_BINDINGS = (
    Binding("T", "signal('SIGTERM')", "Term", key_display="T", show=False,
            tooltip="send SIGTERM to the selected process (yours only; asks first)"),
    Binding("K", "signal('SIGKILL')", "Kill", key_display="K", show=False,
            tooltip="send SIGKILL to the selected process (yours only; asks first)"),
    Binding("I", "signal('SIGINT')", "Interrupt", key_display="I", show=False,
            tooltip="send SIGINT to the selected process (yours only; asks first)"),
)  # fmt: skip


#: What T, K and I say under --readonly (the help says it too).
READONLY_NOTICE = "Read-only mode (--readonly): nothing sent"


def request_signal(
    app: App[Any],
    process: GpuProcess | None,
    sig: signal.Signals,
    *,
    readonly: bool,
    current_uid: int | None = None,
) -> None:
    """What T, K and I do on the selected ``process`` (None: none): refuse with a
    notification, or ask with a :class:`SignalDialog` and, on yes, send ``sig`` for
    ``current_uid`` (default ``os.getuid()``) and notify the result."""
    if readonly:
        app.notify(READONLY_NOTICE, severity="warning")
        return
    if process is None:
        app.notify("No process selected", severity="warning")
        return
    reason = refusal(process, readonly=readonly, current_uid=current_uid)
    if reason is not None:
        app.notify(reason, severity="warning", markup=False)
        return

    def answered(confirmed: bool | None) -> None:
        if confirmed:
            result = send_signal(process, sig, readonly=readonly, current_uid=current_uid)
            notify_result(app, result)

    app.push_screen(SignalDialog(process, sig), answered)


def notify_result(app: App[Any], result: SignalResult) -> None:
    """Sent is news; gone or refused is a warning."""
    severity: SeverityLevel = "information" if result.outcome == "sent" else "warning"
    app.notify(result.message, severity=severity, markup=False)
