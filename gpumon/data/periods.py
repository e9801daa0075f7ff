"""The period a report covers: ``--since 7d``, or ``--from`` and ``--to`` as ISO dates and
times. Pure functions: the current time is handed in.

A time without a zone (``2026-11-01``, ``2026-11-01T08:00``) is local time, as a person
reading the report means it; ``Z`` or an offset (``+02:00``) says otherwise. A date alone is
its midnight. The local zone is the process's (``TZ``), read by :mod:`datetime`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

#: ``--since``'s units, in seconds.
UNITS_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SPAN = re.compile(r"([0-9]{1,6})([smhdw])", re.ASCII)
#: A date, a time of day (seconds and milliseconds or microseconds optional), a zone.
_MOMENT = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2})"
    r"(?:[T ]([0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]{3}(?:[0-9]{3})?)?)?))?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})?",
    re.ASCII,
)
#: The longest period one report covers (the hourly rows are kept a year).
MAX_PERIOD_S = 400 * 86400
DEFAULT_SINCE = "7d"


class PeriodError(ValueError):
    """A time or span that cannot be read; ``str()`` is one line for the user."""


@dataclass(frozen=True, slots=True)
class Period:
    """From ``start_s`` to ``end_s`` (Unix seconds)."""

    start_s: float
    end_s: float

    @property
    def seconds(self) -> float:
        return self.end_s - self.start_s


def span_seconds(text: str) -> float:
    """``90s``, ``30m``, ``12h``, ``7d``, ``2w`` in seconds; :class:`PeriodError` otherwise."""
    match = _SPAN.fullmatch(text.strip())
    if match is None:
        raise PeriodError(f"not a span such as 90s, 30m, 12h or 7d: {text!r}")
    seconds = int(match[1]) * UNITS_S[match[2]]
    if not 0 < seconds <= MAX_PERIOD_S:
        raise PeriodError(f"a span from 1s to {MAX_PERIOD_S // 86400}d, not {text!r}")
    return float(seconds)


def moment(text: str) -> float:
    """An ISO 8601 date or date and time as Unix seconds, local unless it says ``Z`` or an offset
    (a date alone is its midnight); :class:`PeriodError` otherwise.
    """
    match = _MOMENT.fullmatch(text.strip())
    if match is None:
        raise PeriodError(f"not a date or time such as 2026-11-01 or 2026-11-01T08:00: {text!r}")
    date, clock, zone = match.groups()
    zone = "+00:00" if zone in ("Z", "z") else zone or ""
    try:
        parsed = datetime.fromisoformat(f"{date}T{clock or '00:00'}{zone}")
        return parsed.timestamp()  # without a zone: local time
    except (ValueError, OverflowError, OSError):
        raise PeriodError(f"no such date or time: {text!r}") from None


def period(
    now_s: float, since: str | None = None, start: str | None = None, end: str | None = None
) -> Period:
    """The period of ``--since`` or ``--from``/``--to`` (nothing: :data:`DEFAULT_SINCE`;
    ``--from`` alone ends now). :class:`PeriodError` for a bad value or combination, an end not
    after the start, a start in the future or more than :data:`MAX_PERIOD_S`.
    """
    if since is not None and start is not None:
        raise PeriodError("--since and --from: choose one (--from T --to T, or --since 7d)")
    end_s = now_s if end is None else moment(end)
    span_s = None if start is not None else span_seconds(since or DEFAULT_SINCE)
    start_s = end_s - span_s if span_s is not None else moment(start or "")
    if start_s >= now_s:
        raise PeriodError("the period starts in the future: nothing is recorded yet")
    if end_s <= start_s:
        raise PeriodError("--to must be after --from")
    if end_s - start_s > MAX_PERIOD_S:
        raise PeriodError(f"a report covers at most {MAX_PERIOD_S // 86400} days")
    return Period(start_s, min(end_s, now_s))
