"""SVG snapshot of the signal dialog (pytest-textual-snapshot).

Regenerate after an intended change with:
pytest tests/ui/dashboard/test_signal_dialog_snapshot.py --snapshot-update
"""

from __future__ import annotations

import signal

from textual.app import App, ComposeResult
from textual.pilot import Pilot
from textual.widgets import Static

from gpumon.data.model import GpuProcess, ProcessKind
from gpumon.ui.dashboard.signal_dialog import SignalDialog

GIB = 1024**3


class DialogApp(App[None]):
    """A bare screen under the dialog: the snapshot shows the dialog, nothing that moves."""

    def compose(self) -> ComposeResult:
        yield Static("the process table would be here")


async def open_dialog(pilot: Pilot[None]) -> None:
    process = GpuProcess(
        gpu_index=1,
        gpu_uuid="GPU-00000001-aaaa-bbbb-cccc-dddddddddddd",
        pid=4242,
        kind=ProcessKind.COMPUTE,
        gpu_memory_bytes=18 * GIB + 512 * 1024**2,
        user="alice",
        command="python train.py --config configs/[large].yaml --epochs 90",
        is_current_user=True,
        create_time_s=1_700_000_000.0,
    )
    pilot.app.push_screen(SignalDialog(process, signal.SIGTERM))
    await pilot.pause()


def test_signal_dialog_80x24(snap_compare) -> None:  # type: ignore[no-untyped-def]
    """T on PID 4242: the process named (a bracketed command shown literally), Cancel
    focused, "Send SIGTERM" in the error colour."""
    assert snap_compare(DialogApp(), terminal_size=(80, 24), run_before=open_dialog)
