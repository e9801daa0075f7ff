"""The help screen: keys, what the fields mean, and how they map to nvidia-smi."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

HELP_TEXT = """\
gpumon: live NVIDIA GPU monitor.  Press Esc, q or ? to close.

Keys
  q / Ctrl+C   quit                      ?        this help
  Tab          switch panel (GPUs / processes)
  ↑ ↓ / j k    select a GPU or a process  ← →      select a GPU
  s            cycle the sort column     r        reverse the sort
  space        pause / resume updates    + / -    slower / faster refresh
  P            torch probe on the selected GPU (needs torch in the probe's Python)
  Ctrl+P       command palette           mouse: click a GPU, a row or a column title

GPU fields (nvidia-smi's name in brackets)
  Fan          fan speed % [Fan]; N/A on passively cooled (SXM / server) boards
  Temp         GPU temperature [Temp]; yellow within 15 °C, red within 5 °C of the
               GPU's own slowdown threshold [nvidia-smi -q: GPU Slowdown Temp]
  P0..P12      performance state [Perf]
  Persist      persistence mode [Persistence-M]
  GPU bar      utilisation [GPU-Util]: green < 50 %, yellow < 80 %, red above
  MemBW        memory-controller utilisation [nvidia-smi -q: Memory Util]
  MEM bar      memory used / total [Memory-Usage]; read with NVML's memory info v2
               like nvidia-smi on R510+ drivers; rsv = memory reserved by the driver
  PWR bar      power draw / enforced limit [Pwr:Usage/Cap]
  SM / Mem     current SM and memory clocks [nvidia-smi -q: Clocks]
  ECC          volatile uncorrected ECC errors [Volatile Uncorr. ECC]
  MIG          MIG mode [MIG M.]; with MIG on, utilisation is N/A by design
  Compute      compute mode [Compute M.]
  N/A          this GPU or driver does not report the field (never shown as 0)
  LOST         no readings: the GPU fell off the bus (Xid 79) or NVML cannot open it
               (the reason is shown); the others keep updating

Processes (nvidia-smi's Processes table, plus host details)
  TYPE         C compute, G graphics, C+G both
  GPU-MEM      GPU memory used by the process (N/A where the driver does not say)
  CPU% / RSS   host CPU (of one core) and resident memory, from psutil
  TIME         time since the process started
  Bold rows are your own processes. Other users' processes show what is readable.
  "not visible here": NVML reports a PID that does not exist in this PID namespace,
  typically because gpumon runs in a container without --pid=host. Its GPU memory is
  real; its owner and command line can only be seen from the host.
  <defunct>: a process that exited but was not reaped by its parent.
  "GPU n: processes N/A": NVML refused that GPU's process list (with MIG on, it lists
  processes only to root), or the GPU or driver lists none; its processes are unknown,
  not none.
  "GPU n: 22.0G used by processes not listed": most of that GPU's memory is held by
  processes NVML does not list here (another container or PID namespace): it is not free.
  Other users' commands are shown safely: control characters read "?", bytes that are
  not UTF-8 read \\xff, and invisible or text-reversing characters read \\u202e.

Header
  DEMO         simulated data (gpumon --demo), never a real GPU
  NVML not answering for N s: the driver has not returned a sample for three refresh
  intervals; the screen shows the last sample until it does. Keys keep working.
"""


class HelpScreen(ModalScreen[None]):
    """Keys and field meanings."""

    BINDINGS = [
        Binding("escape,q,question_mark", "dismiss_help", "Close", show=True),
    ]

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 90;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        border: round $accent;
        background: $surface;
        padding: 0 1;
    }
    """

    def __init__(self, ascii_only: bool = False) -> None:
        super().__init__()
        self._ascii_only = ascii_only

    def compose(self) -> ComposeResult:
        text = HELP_TEXT
        if self._ascii_only:
            text = text.replace("↑ ↓", "Up/Dn").replace("← →", "Lf/Rt").replace("°C", " C")
        # Plain Text, not markup: the [nvidia-smi names] in brackets must stay literal.
        content = Text()
        for line in text.splitlines(keepends=True):
            heading = bool(line.strip()) and not line.startswith(" ")
            content.append(line, style="bold" if heading else "")
        with VerticalScroll():
            yield Static(content, id="help-text")

    def action_dismiss_help(self) -> None:
        self.dismiss()
