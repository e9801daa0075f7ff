"""ANSI colours for the headless text output (``gpumon once``, ``once --prometheus``).

Raw SGR codes, because importing rich or textual would cost more than the whole snapshot;
when to colour at all: :func:`use_color`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TextIO

from gpumon.data import format as fmt

# SGR codes; the dashboard's theme does not apply to a plain terminal.
RESET = "\x1b[0m"
BOLD = "1"
DIM = "2"
RED = "31"
GREEN = "32"
YELLOW = "33"
BLUE = "34"
MAGENTA = "35"
CYAN = "36"
REVERSE = "7"

#: ``--color``'s choices and what each does (:func:`use_color`): the completions show them.
COLOR_MODES = {
    "auto": "on a terminal, unless NO_COLOR is set",
    "always": "also into a pipe or a file",
    "never": "no colour codes at all",
}


def use_color(mode: str, stream: TextIO, environ: Mapping[str, str]) -> bool:
    """Whether to write ANSI colours (``mode``: ``always``, ``never`` or ``auto``).

    In ``auto`` the command line wins, then a non-empty ``NO_COLOR`` (off), then a non-empty
    ``FORCE_COLOR`` (on, into a pipe or ``TERM=dumb`` too), then whether ``stream`` is a
    terminal, as CPython decides for its tracebacks.
    """
    if mode == "always":
        return True
    if mode == "never":
        return False
    if environ.get("NO_COLOR", ""):
        return False
    if environ.get("FORCE_COLOR", ""):
        return True
    if environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


#: Splits a painted line into text (even indices) and the SGR codes between (odd ones): the
#: only escape sequences :class:`Painter` writes.
_SGR_PARTS = re.compile(r"(\x1b\[[0-9;]*m)")


def fit_line(line: str, width: int, ellipsis: str = fmt.ELLIPSIS) -> str:
    """``line`` (painted or not) cut to ``width`` terminal cells, its last cell ``ellipsis``;
    a line that fits is returned as it is. Colour codes are kept whole, and a cut painted
    line ends with a reset."""
    if width < 1:
        return ""
    parts = _SGR_PARTS.split(line)
    plain = "".join(parts[::2])
    if fmt.cell_len(plain) <= width:
        return line
    cut = fmt.truncate(plain, width, ellipsis)
    # truncate() keeps a prefix of the text, then the ellipsis (and a space where it dropped
    # a wide character that would have straddled the edge): keep that prefix, painted.
    tail = ellipsis + " " if cut.endswith(ellipsis + " ") else ellipsis
    left = len(cut) - len(tail)
    kept: list[str] = []
    for index, part in enumerate(parts):
        if index % 2:
            kept.append(part)
            continue
        kept.append(part[:left])
        left -= len(kept[-1])
        if left <= 0:
            break
    painted = len(kept) > 1
    return "".join(kept) + tail + (RESET if painted else "")


class Painter:
    """Wraps text in SGR codes, or leaves it alone when colour is off."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    def __call__(self, text: str, *codes: str) -> str:
        if not self.enabled or not codes:
            return text
        return f"\x1b[{';'.join(codes)}m{text}{RESET}"


_TEMPERATURE_CODES: dict[fmt.TemperatureLevel, tuple[str, ...]] = {
    "na": (),
    "normal": (GREEN,),
    "warm": (YELLOW,),
    "hot": (BOLD, RED),
}


def temperature_codes(temperature_c: int | None, slowdown_c: int | None) -> tuple[str, ...]:
    """Colours of :func:`gpumon.data.format.temperature_level`, as in the dashboard.

    Red within 5 °C of the GPU's own slowdown threshold, yellow within 15 °C, green below.
    """
    return _TEMPERATURE_CODES[fmt.temperature_level(temperature_c, slowdown_c)]
