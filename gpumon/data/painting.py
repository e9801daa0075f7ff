"""ANSI colours for the headless text output (``gpumon once``, ``once --prometheus``).

What lives here: the SGR codes, :func:`use_color` (whether to colour at all), :class:`Painter`
(wraps text in codes, or not) and :func:`temperature_codes`. Raw SGR codes, because importing
rich or textual would cost more than the whole snapshot: only on a terminal, never when
``NO_COLOR`` is set to anything non-empty, unless ``--color always`` asks for them.
"""

from __future__ import annotations

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


def use_color(mode: str, stream: TextIO, environ: Mapping[str, str]) -> bool:
    """Decide whether to write ANSI colours.

    Args:
        mode: ``always``, ``never`` or ``auto``.
        stream: where the output goes; ``auto`` colours only a terminal.
        environ: the environment; in ``auto`` mode a non-empty ``NO_COLOR`` (no-color.org)
            or ``TERM=dumb`` turns colours off.

    Returns:
        True to colour.
    """
    if mode == "always":
        return True
    if mode == "never":
        return False
    if environ.get("NO_COLOR", ""):
        return False
    if environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


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
