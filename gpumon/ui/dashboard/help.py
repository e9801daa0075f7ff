"""The one-machine dashboard's help: its keys (the app's and each panel's), the prose the
bindings and the field table cannot give, and the read-only note, in the shared frame
(:mod:`gpumon.ui.widgets.help`).
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence

from textual.binding import Binding, BindingType

from gpumon.ui.dashboard.history import history_help
from gpumon.ui.widgets.help import (
    TEXTUAL_BINDINGS,
    WIDTH,
    HelpScreen,
    fields_section,
    keys_section,
)

NOTES = """\
Colours and marks
  Temp            yellow within 15 °C, red within 5 °C of the GPU's own
                  slowdown threshold (temperature_warm/hot_margin_c)
  Bars            green below 50 %, yellow below 80 %, red above
                  (load_warn_pct, load_hot_pct)
  N/A             this GPU or driver does not report the field (never 0)
  LOST            no readings: the GPU fell off the bus (Xid 79) or NVML
                  cannot open it (the reason is shown); the others go on

Processes (nvidia-smi's Processes table, plus host details)
  TYPE            C compute, G graphics, C+G both
  GPU-MEM         GPU memory used by the process (N/A where the driver does
                  not say)
  SM%             share of the GPU's SMs the process kept busy over the last
                  interval (0: no SM work in it; N/A under MIG, or where the
                  driver cannot tell)
  idle 2h13m      held idle: the process holds at least idle_min_memory_mib
                  of GPU memory at or below idle_below_pct SM utilisation
                  for idle_after_minutes or more (--idle-*): how long it has
                  been quiet; "at least" (>=) when quiet since before gpumon
                  started. A GPU whose memory is all held idle reads "held
                  idle by alice 2h13m"; u shows each user's IDLE-MEM. Below
                  100 columns SM% shows while some process is idle, in
                  CPU%'s place: "idle 2h". Exact (not >=) with a recorder:
                  see History below.
  CPU% / RSS      host CPU (of one core) and resident memory, from psutil
  TIME            time since the process started
  Bold rows are your own processes. Other users' processes show what is
  readable. "not visible here": NVML reports a PID that does not exist in
  this PID namespace, typically because gpumon runs in a container without
  --pid=host. Its GPU memory is real; its owner and command line can only be
  seen from the host. <defunct>: a process that exited but was not reaped by
  its parent.
  "GPU n: processes N/A": NVML refused that GPU's process list (with MIG on,
  it lists processes only to root), or the GPU or driver lists none, or the
  GPU is LOST; its processes are unknown, not none: its card says "procs ?"
  and it is never FREE.
  "GPU n: 22.0G used by processes not listed": most of that GPU's memory is
  held by processes NVML does not list here (another container or PID
  namespace): it is not free.
  Other users' commands are shown safely: control characters read "?", bytes
  that are not UTF-8 read \\xff, and invisible or text-reversing characters
  read \\u202e.

Header
  DEMO            simulated data (gpumon --demo), never a real GPU
  GPUs 0,3 of 8   only these GPUs are shown (--only, --only-visible)
  NVML not answering for N s: the driver has not returned a sample for three
  refresh intervals; the screen shows the last sample until it does. Keys
  keep working. Mouse: click a GPU, a row or a column title.
"""


READONLY_NOTE = (
    "Read-only (--readonly, or readonly = true in the config): T, K and I, which signal "
    "your processes, are off."
)


def help_text(
    groups: Sequence[tuple[str, Iterable[BindingType]]],
    ascii_only: bool,
    readonly: bool = False,
) -> str:
    """The whole help, as plain text."""
    lines = ["gpumon: live NVIDIA GPU monitor.  Press Esc, q or ? to close.", ""]
    if readonly:
        lines += [*textwrap.wrap(READONLY_NOTE, WIDTH), ""]
    lines += keys_section(groups, ascii_only)
    lines += fields_section()
    lines += NOTES.splitlines()
    text = "\n".join(lines) + "\n"
    if ascii_only:
        text = text.replace("°C", " C")
    return text


def binding_groups(
    app_bindings: Iterable[BindingType], readonly: bool = False
) -> list[tuple[str, Iterable[BindingType]]]:
    """The dashboard's and the app's keys, and each panel's, as the help lists them;
    read-only leaves out the keys that signal processes."""
    from gpumon.ui.dashboard.probe_panel import ProbePanel
    from gpumon.ui.dashboard.screen import DashboardScreen
    from gpumon.ui.widgets.gpu_panel import GpuPanel
    from gpumon.ui.widgets.process_table import ProcessTable

    keys = [*DashboardScreen.BINDINGS, *app_bindings, *TEXTUAL_BINDINGS]
    if readonly:
        keys = [b for b in keys if not (isinstance(b, Binding) and b.action.startswith("signal"))]
    return [
        ("Keys", keys),
        ("GPU panel", GpuPanel.BINDINGS),
        ("Process table", ProcessTable.BINDINGS),
        ("Probe panel (P)", ProbePanel.BINDINGS),
    ]


class DashboardHelpScreen(HelpScreen):
    """The one-machine dashboard's keys and field meanings (``?``)."""

    def build_text(self) -> str:
        settings = getattr(self.app, "settings", None)
        readonly = bool(getattr(settings, "readonly", False))
        groups = binding_groups(type(self.app).BINDINGS, readonly)
        history = history_help(getattr(self.app, "history", None))
        return help_text(groups, self._ascii_only, readonly) + "\n" + history
