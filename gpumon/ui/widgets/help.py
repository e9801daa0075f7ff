"""The help screen: keys, what the fields mean, and how they map to nvidia-smi.

Built from the bindings (the app's and each panel's ``BINDINGS``) and the field table
(:data:`gpumon.data.fields.FIELDS`): a key or a field added there shows up here, with no second
copy to keep in step. What cannot come from either (what N/A, LOST, DEMO and the process
notes mean) is the prose below.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from gpumon.data.fields import FIELDS

#: Lines are kept to this width: the dialog fits an 80-column terminal.
WIDTH = 76
_KEY_COLUMN = 16

_KEY_NAMES = {
    "up": ("↑", "Up"),
    "down": ("↓", "Down"),
    "left": ("←", "Left"),
    "right": ("→", "Right"),
    "pageup": ("PgUp", "PgUp"),
    "pagedown": ("PgDn", "PgDn"),
    "home": ("Home", "Home"),
    "end": ("End", "End"),
    "escape": ("Esc", "Esc"),
    "question_mark": ("?", "?"),
    "space": ("space", "space"),
    "minus": ("-", "-"),
    "plus": ("+", "+"),
    "equals_sign": ("=", "="),
    "tab": ("Tab", "Tab"),
    "enter": ("Enter", "Enter"),
}

#: Keys Textual itself provides (its screen's and app's bindings), as the help names them.
TEXTUAL_BINDINGS = (
    Binding("tab", "focus_next", "switch panel (GPUs / processes)"),
    Binding("ctrl+p", "command_palette", "command palette: themes, keys, quit"),
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
  CPU% / RSS      host CPU (of one core) and resident memory, from psutil
  TIME            time since the process started
  Bold rows are your own processes. Other users' processes show what is
  readable. "not visible here": NVML reports a PID that does not exist in
  this PID namespace, typically because gpumon runs in a container without
  --pid=host. Its GPU memory is real; its owner and command line can only be
  seen from the host. <defunct>: a process that exited but was not reaped by
  its parent.
  "GPU n: processes N/A": NVML refused that GPU's process list (with MIG on,
  it lists processes only to root), or the GPU or driver lists none; its
  processes are unknown, not none.
  "GPU n: 22.0G used by processes not listed": most of that GPU's memory is
  held by processes NVML does not list here (another container or PID
  namespace): it is not free.
  Other users' commands are shown safely: control characters read "?", bytes
  that are not UTF-8 read \\xff, and invisible or text-reversing characters
  read \\u202e.

Header
  DEMO            simulated data (gpumon --demo), never a real GPU
  NVML not answering for N s: the driver has not returned a sample for three
  refresh intervals; the screen shows the last sample until it does. Keys
  keep working. Mouse: click a GPU, a row or a column title.
"""


def key_text(binding: Binding, ascii_only: bool) -> str:
    """``↑ / k`` for ``up,k`` (``Up / k`` in ASCII); a binding's own key_display wins."""
    if binding.key_display:
        return binding.key_display
    names = []
    for key in binding.key.split(","):
        key = key.strip()
        if key in _KEY_NAMES:
            names.append(_KEY_NAMES[key][1 if ascii_only else 0])
        elif key.startswith("ctrl+"):
            names.append("Ctrl+" + key[5:].upper())
        else:
            names.append(key)
    return " / ".join(names)


def keys_section(
    groups: Sequence[tuple[str, Iterable[BindingType]]], ascii_only: bool = False
) -> list[str]:
    """One block per group of bindings: the keys, then what they do."""
    lines: list[str] = []
    for title, bindings in groups:
        lines.append(title)
        rows: dict[str, list[str]] = {}
        for binding in bindings:
            if not isinstance(binding, Binding):
                continue
            what = binding.tooltip or binding.description
            described = rows.setdefault(key_text(binding, ascii_only), [])
            if what not in described:
                described.append(what)
        for keys, described in rows.items():
            lines.extend(_row(keys, "; ".join(described)))
        lines.append("")
    return lines


def fields_section() -> list[str]:
    """Every GPU field: its label, what it is and nvidia-smi's name for it."""
    lines = ["GPU fields (nvidia-smi's name in brackets)"]
    for field in FIELDS:
        smi = f" [{field.smi}]" if field.smi else ""
        lines.extend(_row(field.label, field.help + smi))
    lines.append("")
    return lines


def _row(left: str, right: str) -> list[str]:
    body = textwrap.wrap(right, WIDTH - 2 - _KEY_COLUMN) or [""]
    first = f"  {left:<{_KEY_COLUMN - 1}} {body[0]}" if len(left) < _KEY_COLUMN else None
    lines = [first] if first is not None else [f"  {left}", f"  {'':<{_KEY_COLUMN - 1}} {body[0]}"]
    lines.extend(f"  {'':<{_KEY_COLUMN - 1}} {more}" for more in body[1:])
    return lines


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
    """The app's keys and each panel's, as the help lists them; read-only leaves out the
    keys that signal processes."""
    from gpumon.ui.widgets.gpu_panel import GpuPanel
    from gpumon.ui.dashboard.probe_panel import ProbePanel
    from gpumon.ui.widgets.process_table import ProcessTable

    if readonly:
        app_bindings = [
            b
            for b in app_bindings
            if not (isinstance(b, Binding) and b.action.startswith("signal"))
        ]
    return [
        ("Keys", [*app_bindings, *TEXTUAL_BINDINGS]),
        ("GPU panel", GpuPanel.BINDINGS),
        ("Process table", ProcessTable.BINDINGS),
        ("Probe panel (P)", ProbePanel.BINDINGS),
    ]


class HelpScreen(ModalScreen[None]):
    """Keys and field meanings."""

    BINDINGS = [
        Binding("escape,q,question_mark", "dismiss_help", "Close", show=True),
    ]

    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll {
        width: 82;  /* 76 of text, padding, border and the scrollbar: no line re-wrapped */
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
        settings = getattr(self.app, "settings", None)
        readonly = bool(getattr(settings, "readonly", False))
        groups = binding_groups(type(self.app).BINDINGS, readonly)
        text = help_text(groups, self._ascii_only, readonly)
        # Plain Text, not markup: the [nvidia-smi names] in brackets must stay literal.
        content = Text()
        for line in text.splitlines(keepends=True):
            heading = bool(line.strip()) and not line.startswith(" ")
            content.append(line, style="bold" if heading else "")
        with VerticalScroll():
            yield Static(content, id="help-text")

    def action_dismiss_help(self) -> None:
        self.dismiss()
