"""Turning sample values into short strings. Shared by the dashboard and headless modes.

Every function takes ``None`` (not supported / not readable) and returns :data:`NA`.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator, Mapping
from typing import Literal

NA = "N/A"
MIB = 1024**2
GIB = 1024**3

#: Without a slowdown threshold from NVML, colour as if the GPU slowed down at this temperature.
DEFAULT_SLOWDOWN_C = 90
#: Within this many degrees of the slowdown threshold a temperature is "warm" (yellow).
WARM_MARGIN_C = 15
#: Within this many degrees of the slowdown threshold a temperature is "hot" (red).
HOT_MARGIN_C = 5

TemperatureLevel = Literal["na", "normal", "warm", "hot"]

ELLIPSIS = "…"
#: The ellipsis where the locale is not UTF-8 (the dashboard's ASCII glyphs use it too).
ASCII_ELLIPSIS = "~"


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


def unlisted_memory(value: int) -> str:
    """What every mode says when processes it cannot see hold a GPU's memory."""
    return f"{bytes_short(value)} used by processes not listed"


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


def celsius(value: int | None, ascii_only: bool = False) -> str:
    """``61°C``, or ``61C`` for a terminal without UTF-8."""
    if value is None:
        return NA
    return f"{value}C" if ascii_only else f"{value}°C"


def watts_pair(draw: float | None, limit: float | None) -> str:
    """Power draw and cap as every mode shows them: ``178 / 300W``, ``178W / N/A``,
    ``N/A / 300W`` or ``N/A``. A known side keeps its unit, so N/A never reads as watts."""
    if draw is None and limit is None:
        return NA
    if limit is None:
        return f"{draw:.0f}W / {NA}"
    if draw is None:
        return f"{NA} / {limit:.0f}W"
    return f"{draw:.0f} / {limit:.0f}W"


def mhz(value: int | None) -> str:
    return NA if value is None else f"{value}MHz"


def on_off(value: bool | None) -> str:
    return NA if value is None else ("On" if value else "Off")


def yes_no(value: bool | None) -> str:
    return NA if value is None else ("Yes" if value else "No")


def pstate(value: int | None) -> str:
    return NA if value is None else f"P{value}"


#: 9999-12-31T23:59:59Z: the last moment ISO 8601 and strftime write with a 4-digit year.
LAST_KNOWN_TIME_S = 253402300799.0


def known_time(timestamp_s: object) -> float | None:
    """``timestamp_s`` when it is a real moment (after 1970, before the year 10000), else
    ``None``: another machine's times may be NaN, Inf or 1e300. Every shown time passes here."""
    if isinstance(timestamp_s, bool) or not isinstance(timestamp_s, (int, float)):
        return None
    if not 0 < timestamp_s <= LAST_KNOWN_TIME_S:  # also False for NaN
        return None
    return float(timestamp_s)


def duration(seconds: float | None, *, precise: bool = False) -> str:
    """``42s``, ``17m``, ``5h17m``, ``3d04h``: elapsed time, seconds only in the first
    minute (a cell that changes every second costs bytes over SSH). ``precise``: to the
    second, ``17m04s``, ``5h17m04s``, ``3d04h05m06s``."""
    if seconds is None:
        return NA
    total = int(seconds)
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if precise:
        units = [(days, "d"), (hours, "h"), (minutes, "m"), (secs, "s")]
        while len(units) > 1 and not units[0][0]:
            del units[0]
        (first, unit), *rest_units = units
        return f"{first}{unit}" + "".join(f"{value:02d}{name}" for value, name in rest_units)
    if days:
        return f"{days}d{hours:02d}h"
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m"
    return f"{secs}s"


def running_time(seconds: float | None, *, precise: bool = False) -> str:
    """:func:`duration` for a table that refreshes: ``<1m`` for the whole first minute, so
    a young job's cell does not change every second; ``precise``: to the second."""
    if seconds is not None and seconds < 60 and not precise:
        return "<1m"
    return duration(seconds, precise=precise)


def truncate(text: str, width: int, ellipsis: str = ELLIPSIS) -> str:
    """Cut ``text`` to ``width`` terminal cells (:func:`cell_len`), its last cell replaced
    by ``ellipsis`` (:data:`ASCII_ELLIPSIS` where the terminal is not UTF-8).

    Text that fits is returned as is; a cut result is exactly ``width`` cells (a wide
    character that would straddle the ellipsis is dropped, a space pads its cell).
    """
    if width <= 0:
        return ""
    if text.isascii():  # the common case: one cell per character
        if len(text) <= width:
            return text
        return text[: width - 1] + ellipsis
    clusters = list(_clusters(text))
    if sum(cells for _, cells in clusters) <= width:
        return text
    budget = width - 1
    used = end = 0
    for cluster_end, cells in clusters:
        if used + cells > budget:
            break
        used += cells
        end = cluster_end
    return text[:end] + ellipsis + " " * (budget - used)


#: Longest text kept from another process (a command line may be up to 2 MiB long): enough
#: for any command a person reads, and a bound on what a hostile one costs every output.
SAFE_TEXT_MAX_CHARS = 4096


#: Default-ignorable code points (Unicode's DerivedCoreProperties) outside the categories
#: escaped anyway (Cf, Zl, Zp): drawn as nothing, yet not nothing. A command with one looks
#: like another command, and terminals disagree on their width (U+3164: 0 or 2 cells).
_IGNORABLE_RANGES = (
    (0x034F, 0x034F),  # combining grapheme joiner
    (0x115F, 0x1160),  # Hangul choseong and jungseong fillers
    (0x17B4, 0x17B5),  # Khmer inherent vowels
    (0x180B, 0x180F),  # Mongolian free variation selectors
    (0x2065, 0x2065),  # unassigned, among the invisible operators
    (0x3164, 0x3164),  # Hangul filler
    (0xFE00, 0xFE0F),  # variation selectors
    (0xFFA0, 0xFFA0),  # halfwidth Hangul filler
    (0xFFF0, 0xFFF8),  # unassigned specials
    (0xE0000, 0xE0FFF),  # tags and variation selectors supplement, assigned or not
)


class _SafeCharacters(dict[int, str]):
    """``str.translate`` table built lazily: each code point is classified once."""

    def __missing__(self, code: int) -> str:
        char = chr(code)
        if code < 0x20 or 0x7F <= code < 0xA0:
            # C0, DEL and C1 controls: escape sequences (CSI 0x9b, OSC 0x9d, ESC ...) meant
            # for whoever displays the text; shown as ps shows them.
            replacement = "?"
        elif 0xDC80 <= code <= 0xDCFF:
            # A byte that is not UTF-8, as Python's surrogateescape decodes it: lone
            # surrogates break JSON readers and prometheus_client, and the raw byte could be
            # a C1 control to a terminal. Shown as the byte it was.
            replacement = f"\\x{code - 0xDC00:02x}"
        elif 0xD800 <= code <= 0xDFFF:
            replacement = f"\\u{code:04x}"
        else:
            import unicodedata  # only for non-ASCII text: `gpumon status` stays lean

            # Format characters (bidi overrides and isolates, zero-width spaces and joiners,
            # BOM, tags), line/paragraph separators and the other invisible characters can
            # disguise what a command is: shown visibly escaped, never interpreted.
            if unicodedata.category(char) in ("Cf", "Zl", "Zp") or any(
                first <= code <= last for first, last in _IGNORABLE_RANGES
            ):
                replacement = f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
            else:
                replacement = char
        if len(self) < 65536:  # bounded, whatever text arrives
            self[code] = replacement
        return replacement


_SAFE_CHARACTERS = _SafeCharacters()


def safe_text(text: str, max_chars: int = SAFE_TEXT_MAX_CHARS) -> str:
    """Text from another user (command line, user name) made valid and safe for every output.

    Controls become ``?``, non-UTF-8 bytes ``\\xff``, invisible and reordering characters
    ``\\u202e``; text longer than ``max_chars`` ends in ``…``. Applied once, where it is read.
    """
    if len(text) > max_chars:
        text = text[:max_chars] + ELLIPSIS
    if text.isascii() and text.isprintable():  # the common case, in C
        return text
    return text.translate(_SAFE_CHARACTERS)


def safe_lines(text: str, max_chars: int = SAFE_TEXT_MAX_CHARS) -> str:
    """:func:`safe_text` for text of several lines (a traceback): each line is made safe on
    its own and cut at ``max_chars``; the newlines between them are kept."""
    return "\n".join(safe_text(line, max_chars) for line in text.split("\n"))


def error_text(error: BaseException) -> str:
    """The system's words for an error (``Operation not permitted``), else its text."""
    strerror = getattr(error, "strerror", None)
    if isinstance(strerror, str) and strerror:
        return strerror
    return str(error) or type(error).__name__


def ascii_int(text: str | None, max_digits: int = 18) -> int | None:
    """``text`` as a number when it is 1 to ``max_digits`` ASCII digits, else ``None``.

    ``str.isdigit()`` alone also takes ``²``, ``①`` or Arabic-Indic digits, which ``int()``
    either refuses or reads: a label or argument from elsewhere is checked here instead."""
    if text is None or not 0 < len(text) <= max_digits or not text.isascii():
        return None
    return int(text) if text.isdigit() else None


_DIGIT_RUNS = re.compile(r"([0-9]+)")


def natural_key(name: str) -> tuple[tuple[int, int, str], ...]:
    """Sort key for names with numbers: ``node2`` before ``node10`` (ASCII digit runs compare
    as numbers, the rest case-blind; a digit run and text never meet at the same place)."""
    # re.split with a group alternates text and digit runs: the odd places are the runs.
    return tuple(
        (0, int(part), "") if place % 2 else (1, 0, part.casefold())
        for place, part in enumerate(_DIGIT_RUNS.split(name))
        if part
    )


def cell_len(text: str) -> int:
    """How many terminal cells ``text`` takes (2 wide, 0 zero-width, else 1), from the standard
    library's tables so the headless modes need no rich.
    """
    if text.isascii():
        return len(text)
    return sum(cells for _, cells in _clusters(text))


def ljust_cells(text: str, width: int) -> str:
    """``str.ljust`` in terminal cells (see :func:`cell_len`)."""
    if text.isascii():
        return text.ljust(width)
    return text + " " * (width - cell_len(text))


def rjust_cells(text: str, width: int) -> str:
    """``str.rjust`` in terminal cells (see :func:`cell_len`)."""
    if text.isascii():
        return text.rjust(width)
    return " " * (width - cell_len(text)) + text


_ZERO_WIDTH_JOINER = "\u200d"
_EMOJI_PRESENTATION = "\ufe0f"  # variation selector 16: draw the character before as emoji


@functools.lru_cache(maxsize=4096)
def _char_cells(char: str) -> int:
    import unicodedata  # only for non-ASCII text; `gpumon status` stays lean

    if char < " " or "\x7f" <= char < "\xa0":
        return 0
    if unicodedata.category(char) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


@functools.lru_cache(maxsize=256)
def _widens_as_emoji(char: str) -> bool:
    import unicodedata

    return unicodedata.category(char) == "So"


def _clusters(text: str) -> Iterator[tuple[int, int]]:
    """``(end, cells)`` per character together with the zero-width ones that belong to it
    (combining marks, a zero-width joiner and what it joins, an emoji selector), so that a
    cut never separates them. Close to what rich (and so the dashboard) measures."""
    index, length = 0, len(text)
    base = ""
    cells = 0
    while index < length:
        char = text[index]
        if base and char == _ZERO_WIDTH_JOINER:
            index = min(length, index + 2)  # the joined character draws inside this one
            continue
        if base and char == _EMOJI_PRESENTATION:
            if cells == 1 and _widens_as_emoji(base):
                cells = 2
            index += 1
            continue
        width = _char_cells(char)
        if base and not width:
            index += 1
            continue
        if base:
            yield index, cells
        base, cells = char, width
        index += 1
    if base:
        yield length, cells


def temperature_level(
    temperature_c: int | None,
    slowdown_c: int | None,
    hot_margin_c: int = HOT_MARGIN_C,
    warm_margin_c: int = WARM_MARGIN_C,
) -> TemperatureLevel:
    """How close a GPU is to its own slowdown threshold; every mode colours by this.

    ``"na"`` without a temperature, ``"hot"`` within ``hot_margin_c`` of ``slowdown_c`` (or
    :data:`DEFAULT_SLOWDOWN_C` when unknown) or above, ``"warm"`` within ``warm_margin_c``,
    else ``"normal"``.
    """
    if temperature_c is None:
        return "na"
    limit = slowdown_c or DEFAULT_SLOWDOWN_C
    if temperature_c >= limit - hot_margin_c:
        return "hot"
    if temperature_c >= limit - warm_margin_c:
        return "warm"
    return "normal"


#: A GPU or MIG UUID as NVIDIA writes them (``GPU-`` and 8-4-4-4-12 hex digits; ``MIG-<uuid>``;
#: before driver R470 ``MIG-GPU-<uuid>/<gi>/<ci>``), in characters a shell takes as they are.
_GPU_UUID = re.compile(r"(?:GPU|MIG)-[0-9A-Za-z_/-]{1,96}", re.ASCII)


def gpu_uuid(text: str | None) -> str | None:
    """``text`` when it reads as a GPU or MIG UUID, else ``None``: ``pick --format uuid``
    prints UUIDs into a shell's command line, so one with a ``;``, space or comma is none."""
    return text if text is not None and _GPU_UUID.fullmatch(text) else None


def short_uuid(uuid: str) -> str:
    """``GPU-1a2b3c4d`` instead of the full UUID (``MIG-…`` likewise; no ``-``: 12 chars)."""
    head, _, tail = uuid.partition("-")
    return f"{head}-{tail[:8]}" if tail else uuid[:12]


def locale_is_utf8(environ: Mapping[str, str] = os.environ) -> bool:
    """True when the terminal's locale is UTF-8, so ``…``, bars and box lines can be drawn.

    ``GPUMON_ASCII`` (not ``""``/``0``) forces ASCII; else the first set of ``LC_ALL``,
    ``LC_CTYPE``, ``LANG`` decides; none, or Python's own PEP 538 coercion, is ASCII.
    """
    if environ.get("GPUMON_ASCII", "") not in ("", "0"):
        return False
    if (
        environ.get("LC_CTYPE") in _PEP538_TARGETS
        and not environ.get("LC_ALL")
        and environ.get("LANG", "") in ("", "C", "POSIX")
    ):
        # Python itself sets LC_CTYPE=C.UTF-8 when it starts in the C locale (PEP 538):
        # that says nothing about the terminal, which is then most likely ASCII.
        return False
    for name in ("LC_ALL", "LC_CTYPE", "LANG"):
        value = environ.get(name)
        if value:
            return "utf8" in value.lower().replace("-", "")
    return False


# What CPython's locale coercion writes into LC_CTYPE (PEP 538).
_PEP538_TARGETS = ("C.UTF-8", "C.utf8", "UTF-8")
