"""Numbers on the command line: plain ASCII decimals only.

Python's ``int()`` and ``float()`` accept more than a person means: ``1_0`` is 10,
``٣٣`` (Arabic-Indic digits) is 33, ``1e1`` is 10.0, ``nan`` and ``inf`` are floats. An
option that silently reads ``--interval 1_0`` as ten seconds, or a port typed in another
script as a number, is a surprise; these parsers accept ``12``, ``0.25``, ``.5`` and ``2.``
and nothing else, and say what they expected in one line.
"""

from __future__ import annotations

import argparse
import re

from gpumon.model import MAX_INTERVAL_S, MIN_INTERVAL_S

_WHOLE = re.compile(r"[0-9]+")
_DECIMAL = re.compile(r"[0-9]+\.?[0-9]*|\.[0-9]+")


def whole_number(text: str, what: str = "a whole number") -> int:
    """``text`` as an int, from ASCII digits only; :class:`argparse.ArgumentTypeError`
    naming ``what`` was expected otherwise."""
    stripped = text.strip()
    if not _WHOLE.fullmatch(stripped):
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}")
    return int(stripped)


def decimal_number(text: str, what: str = "a number") -> float:
    """``text`` as a float, from an ASCII decimal (``2``, ``0.25``, ``.5``) only."""
    stripped = text.strip()
    if not _DECIMAL.fullmatch(stripped):
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}")
    return float(stripped)


def interval_seconds(text: str) -> float:
    """``--interval``: seconds from :data:`MIN_INTERVAL_S` to :data:`MAX_INTERVAL_S`."""
    value = decimal_number(text, "a number of seconds such as 0.5 or 2")
    if value < MIN_INTERVAL_S:
        raise argparse.ArgumentTypeError(
            f"must be at least {MIN_INTERVAL_S} seconds (got {text}): NVML's utilisation "
            "counters do not update faster"
        )
    if value > MAX_INTERVAL_S:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_INTERVAL_S:g} seconds (got {text})")
    return value
