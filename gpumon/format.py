"""Turning sample values into short strings. Shared by the dashboard and headless modes.

Every function takes ``None`` (not supported / not readable) and returns :data:`NA`.
"""

from __future__ import annotations

NA = "N/A"
MIB = 1024**2
GIB = 1024**3


def bytes_short(value: int | None) -> str:
    """``1.5G``, ``812M``, ``64K``: compact binary units for tables."""
    if value is None:
        return NA
    if value >= 100 * GIB:
        return f"{value / GIB:.0f}G"
    if value >= GIB:
        return f"{value / GIB:.1f}G"
    if value >= MIB:
        return f"{value / MIB:.0f}M"
    if value >= 1024:
        return f"{value / 1024:.0f}K"
    return f"{value}B"


def mib(value: int | None) -> str:
    """``11019MiB``, as nvidia-smi prints memory."""
    return NA if value is None else f"{value // MIB}MiB"


def memory_pair(used: int | None, total: int | None) -> str:
    """``12.3/48.0 GiB``; N/A when either side is unknown."""
    if used is None or total is None:
        return NA
    return f"{used / GIB:.1f}/{total / GIB:.1f}G"


def percent(value: float | None, width: int = 0) -> str:
    text = NA if value is None else f"{value:.0f}%"
    return text.rjust(width)


def celsius(value: int | None) -> str:
    return NA if value is None else f"{value}°C"


def watts_pair(draw: float | None, limit: float | None) -> str:
    """``178/300W``; a known draw with an unknown cap still shows the draw."""
    if draw is None and limit is None:
        return NA
    left = "N/A" if draw is None else f"{draw:.0f}"
    right = "N/A" if limit is None else f"{limit:.0f}"
    return f"{left}/{right}W"


def mhz(value: int | None) -> str:
    return NA if value is None else f"{value}MHz"


def on_off(value: bool | None) -> str:
    return NA if value is None else ("On" if value else "Off")


def pstate(value: int | None) -> str:
    return NA if value is None else f"P{value}"


def duration(seconds: float | None) -> str:
    """``42s``, ``17:03``, ``5h17m``, ``3d04h``: elapsed time, as precise as is useful.

    Past an hour the seconds are dropped: nobody needs them, and a column that changes
    every second on every row costs bytes over SSH for nothing.
    """
    if seconds is None:
        return NA
    total = int(seconds)
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}:{secs:02d}"
    return f"{secs}s"


def truncate(text: str, width: int) -> str:
    """Cut ``text`` to ``width`` cells with an ellipsis (``...`` when ASCII is wanted)."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    return text[: max(0, width - 1)] + "…"


def watts(value: float | None) -> str:
    """``178W``: a power reading on its own, rounded to whole watts."""
    return NA if value is None else f"{value:.0f}W"
