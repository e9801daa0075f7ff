"""The help screen's frame, shared by both dashboards: keys, what the fields mean, and how
they map to nvidia-smi, built from the bindings (:func:`keys_section`) and the field table
(:func:`fields_section`), so a key or a field added there shows up here. Each dashboard's
help subclasses :class:`HelpScreen` with its keys and the prose neither can give.
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
from gpumon.ui.textual_source import off_line

#: Lines are kept to this width: the dialog fits an 80-column terminal.
WIDTH = 76
_KEY_COLUMN = 16

#: How the help names keys; in ASCII, the arrows are named ("Up").
_KEY_NAMES = {
    "up": "↑", "down": "↓", "left": "←", "right": "→", "pageup": "PgUp", "pagedown": "PgDn",
    "home": "Home", "end": "End", "escape": "Esc", "question_mark": "?", "space": "space",
    "minus": "-", "plus": "+", "equals_sign": "=", "tab": "Tab", "enter": "Enter",
}  # fmt: skip
_ARROWS = frozenset({"up", "down", "left", "right"})

#: Keys Textual itself provides (its screen's and app's bindings), as the help names them.
TEXTUAL_BINDINGS = (
    Binding("tab", "focus_next", "switch panel (GPUs / processes)"),
    Binding("ctrl+p", "command_palette", "command palette: themes, keys, quit"),
)


def key_text(binding: Binding, ascii_only: bool) -> str:
    """``↑ / k`` for ``up,k`` (``Up / k`` in ASCII); a binding's own key_display wins."""
    if binding.key_display:
        return binding.key_display
    names = []
    for key in binding.key.split(","):
        key = key.strip()
        if ascii_only and key in _ARROWS:
            names.append(key.title())
        elif key in _KEY_NAMES:
            names.append(_KEY_NAMES[key])
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
            if not what:  # a key that forwards to one the help lists where it belongs
                continue
            described = rows.setdefault(key_text(binding, ascii_only), [])
            # Ctrl+C's "quit (copies instead ...)" already says its fallback's "quit".
            if not any(other == what or other.startswith(what + " ") for other in described):
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


class HelpScreen(ModalScreen[None]):
    """Keys and field meanings, in a dialog; subclasses say what (:meth:`build_text`)."""

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

    def build_text(self) -> str:
        """The whole help, as plain text: each dashboard's help says what it holds."""
        raise NotImplementedError

    def compose(self) -> ComposeResult:
        text = self.build_text()
        off = off_line(WIDTH)  # a replaced piece of Textual left as it is: said first
        if off is not None:
            text = f"{off}\n\n{text}"
        # Plain Text, not markup: the [nvidia-smi names] in brackets must stay literal.
        content = Text()
        for line in text.splitlines(keepends=True):
            heading = bool(line.strip()) and not line.startswith(" ")
            content.append(line, style="bold" if heading else "")
        with VerticalScroll():
            yield Static(content, id="help-text")

    def action_dismiss_help(self) -> None:
        self.dismiss()
