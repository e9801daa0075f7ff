"""argparse types for the subcommands' own options (sizes, durations, percentages, counts):
plain ASCII decimals only (``int()`` takes ``1_0``, ``٣``, ``1e1``, ``nan``, which no person
means); each error is one line saying what was expected.
"""

from __future__ import annotations

import argparse
import re

from gpumon.config.checks import DECIMAL, WHOLE


def whole_number(text: str, what: str = "a whole number") -> int:
    """``text`` as an int, from ASCII digits only; :class:`argparse.ArgumentTypeError`
    naming ``what`` was expected otherwise."""
    stripped = text.strip()
    if not WHOLE.fullmatch(stripped):
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}")
    return int(stripped)


def decimal_number(text: str, what: str = "a number") -> float:
    """``text`` as a float, from an ASCII decimal (``2``, ``0.25``, ``.5``) only."""
    stripped = text.strip()
    if not DECIMAL.fullmatch(stripped):
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}")
    return float(stripped)


#: No GPU comes near a PiB: a bigger size is a typo (and a float overflow, past 1e308).
MAX_SIZE_BYTES = 1024**5
_SIZE = re.compile(r"(?P<number>[0-9]+\.?[0-9]*|\.[0-9]+)\s*(?P<unit>[A-Za-z]*)")
#: Size units, all powers of 1024: GPU memory is sold that way (an "80GB" A100 has 80 GiB),
#: so ``20G``, ``20GB`` and ``20GiB`` mean the same, as they do to a person reading nvidia-smi.
_SIZE_UNITS = {
    "b": 1,
    **{
        f"{prefix}{suffix}": 1024**power
        for power, prefix in enumerate("kmgt", 1)
        for suffix in ("", "b", "ib")
    },
}


def size_bytes(text: str) -> int:
    """A memory size with a unit, in bytes: ``20G``, ``20GiB``, ``512M``, ``1.5GB``,
    ``4096B`` (powers of 1024, any case). A bare number but zero is refused: 20000 could
    mean bytes (nvitop) or MiB (nvidia-smi)."""
    stripped = text.strip()
    match = _SIZE.fullmatch(stripped)
    expected = "a size such as 20G, 20GiB or 512MiB"
    if match is None:
        raise argparse.ArgumentTypeError(f"not {expected}: {text!r}")
    number = float(match.group("number"))
    unit = match.group("unit").lower()
    if not unit:
        if number == 0:
            return 0
        raise argparse.ArgumentTypeError(f"{text!r} needs a unit: {expected} (B for bytes)")
    multiplier = _SIZE_UNITS.get(unit)
    if multiplier is None:
        raise argparse.ArgumentTypeError(f"unknown unit {match.group('unit')!r}: {expected}")
    size = number * multiplier
    if size > MAX_SIZE_BYTES:
        raise argparse.ArgumentTypeError(f"must be at most 1024T (got {text})")
    return int(size)


def percentage(text: str) -> float:
    """A percentage from 0 to 100 (``50``, ``12.5``; a trailing ``%`` is allowed)."""
    stripped = text.strip().removesuffix("%")
    value = decimal_number(stripped, "a percentage from 0 to 100")
    if value > 100:
        raise argparse.ArgumentTypeError(f"must be from 0 to 100 (got {text})")
    return value


#: A wait longer than a year is a typo.
MAX_DURATION_S = 366 * 86_400.0
_DURATION = re.compile(r"(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)[smhd])+", re.ASCII)
_DURATION_PART = re.compile(r"([0-9]+\.?[0-9]*|\.[0-9]+)([smhd])", re.ASCII)
_DURATION_UNITS_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0}


def duration_seconds(text: str) -> float:
    """A length of time in seconds: ``90s``, ``30m``, ``2h``, ``1h30m``, ``1d``; a bare
    number is seconds. More than zero, at most a year."""
    stripped = text.strip()
    expected = "a duration such as 90s, 30m, 2h or 1h30m (a bare number is seconds)"
    if DECIMAL.fullmatch(stripped):
        seconds = float(stripped)
    elif _DURATION.fullmatch(stripped):
        seconds = sum(
            float(number) * _DURATION_UNITS_S[unit]
            for number, unit in _DURATION_PART.findall(stripped)
        )
    else:
        raise argparse.ArgumentTypeError(f"not {expected}: {text!r}")
    if not 0 < seconds <= MAX_DURATION_S:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 366d (got {text})")
    return seconds
