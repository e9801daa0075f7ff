"""What ``gpumon report`` prints, as pure data: the usage rows of a period
(:class:`~gpumon.data.usage.UsageRow`), who holds GPU memory idle now (:class:`IdleHolder`),
and where both came from (:class:`UsageReport`). The history database (one server) and
Prometheus (a cluster) both end here; :mod:`gpumon.commands.report_output` prints it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpumon.data.format import safe_text
from gpumon.data.usage import UsageRow

if TYPE_CHECKING:
    from gpumon.data.periods import Period

#: What a row's key is called when it has none, per grouping.
NO_KEY = {
    "user": "(unknown)",
    "job": "(no job)",
    "container": "(no container)",
    "gpu": "(unknown GPU)",
}


@dataclass(frozen=True, slots=True)
class IdleHolder:
    """A process holding GPU memory idle now: IDLE by the idle rule (``idle_s`` seconds at
    low SM utilisation with at least the minimum memory). ``None``: not known; ``command`` is
    the command line as recorded (the executable's name in a cluster report), ``job`` its Slurm
    job, ``node`` set only in a cluster report.
    """

    user: str | None
    pid: int
    gpu_index: int | None
    gpu_uuid: str | None
    idle_s: float
    gpu_memory_bytes: int | None = None
    command: str | None = None
    node: str | None = None
    job: str | None = None


@dataclass(frozen=True, slots=True)
class UsageReport:
    """A whole report: ``rows`` most GPU-hours held first, ``holders`` (who holds GPU memory
    idle now) longest first; ``source`` ``"history"`` (a database, ``where`` its path) or
    ``"prometheus"`` (``where`` its URL, no credentials). ``None``: does not apply to that source.

    ``step_s``, ``recording_rules``: the spacing of the Prometheus samples the hours are summed
    from, and whether the contrib recording rules' series were read. ``recorded_from_s``,
    ``recorded_to_s``: a database's first and latest recorded sample (what it covers, gaps
    aside); for Prometheus the exporters' first and last sample within the period (the hours
    are summed over that). ``recording``: a database's recorder is writing now (latest sample
    at most three intervals old), so ``holders`` is who holds memory idle now; when False,
    nobody knows who does. ``bucket_s``: a database's granularity, 3600 (UTC hours) or 86400
    where part of it is kept in UTC days (before ``days_before_s``). ``prorated_s``: seconds
    of the period in buckets it covers in part, whose share is estimated (clipped to when the
    group's processes were seen, then as if used evenly). ``idle_unknown``: how many processes
    hold GPU memory now with no SM utilisation reading (MIG, some boards), so ``holders``
    cannot tell whether they are idle; ``None`` when nobody counted them (an older recorder)
    or ``holders`` is not known.
    """

    period: Period
    by: str
    rows: tuple[UsageRow, ...]
    holders: tuple[IdleHolder, ...]
    source: str
    where: str
    step_s: float | None = None
    recording_rules: bool | None = None
    simulated: bool = False
    notes: tuple[str, ...] = ()
    recorded_from_s: float | None = None
    recorded_to_s: float | None = None
    recording: bool | None = None
    bucket_s: float | None = None
    days_before_s: float | None = None
    prorated_s: float | None = None
    idle_unknown: int | None = 0

    @property
    def cluster(self) -> bool:
        return self.source == "prometheus"

    @property
    def holders_known(self) -> bool:
        """``holders`` is who holds GPU memory idle now (not: the recorder has stopped)."""
        return self.recording is not False

    @property
    def recorded(self) -> bool:
        """Some of the period is recorded (always, for Prometheus: it answers for the
        period; a database: its first and latest samples overlap the period)."""
        if self.cluster:
            return True
        first, last = self.recorded_from_s, self.recorded_to_s
        if first is None or last is None:
            return False
        return first < self.period.end_s and last > self.period.start_s


def sorted_rows(rows: list[UsageRow]) -> tuple[UsageRow, ...]:
    """Most GPU-hours held first; ties by key and node (``None`` last)."""
    return tuple(
        sorted(
            rows,
            key=lambda row: (-row.gpu_hours_held, row.key is None, row.key or "", row.node or ""),
        )
    )


def sorted_holders(holders: list[IdleHolder]) -> tuple[IdleHolder, ...]:
    """Longest idle first."""
    return tuple(sorted(holders, key=lambda h: (-h.idle_s, h.node or "", h.gpu_index or 0, h.pid)))


def bar_cells(row: UsageRow, top: float, width: int) -> tuple[int, int, int]:
    """A row's bar on the scale 0 .. ``top`` in ``width`` cells: (used, held but neither
    used nor idle, held idle) cells; a row that held a GPU at all gets one cell at least."""
    if top <= 0 or width <= 0:
        return 0, 0, 0
    held = round(min(1.0, row.gpu_hours_held / top) * width)
    if held == 0 and row.gpu_hours_held > 0:
        held = 1  # a little use never reads as none
    used = min(held, round((row.gpu_hours_used or 0.0) / top * width))  # N/A: no used cells
    idle = min(held - used, round((row.idle_held_hours or 0.0) / top * width))  # N/A: none
    return used, held - used - idle, idle


def hours_text(hours: float | None) -> str:
    """GPU-hours as short as is still useful: ``1234``, ``56.7``, ``0.25``; ``N/A``."""
    if hours is None:
        return "N/A"
    if hours >= 100:
        return f"{hours:.0f}"
    if hours >= 10:
        return f"{hours:.1f}"
    return f"{hours:.2f}"


#: How many rows a note names before "and N more".
NOTE_NAMES = 5


def _names(by: str, rows: list[UsageRow]) -> str:
    names = []
    for row in rows[:NOTE_NAMES]:
        name = NO_KEY.get(by, "(none)") if row.key is None else safe_text(row.key, 60)
        names.append(f"{name} on {safe_text(row.node, 60)}" if row.node else name)
    more = len(rows) - NOTE_NAMES
    return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def used_notes(by: str, rows: tuple[UsageRow, ...]) -> tuple[str, ...]:
    """What the reader must know about USED: the rows whose processes' SM utilisation was
    never known (USED is N/A, never 0), and those where it was known for part of the time
    held only (USED counts that part)."""
    unknown = [row for row in rows if row.gpu_hours_used is None]
    partly = [row for row in rows if row.used_partly_known]
    notes = []
    if unknown:
        notes.append(
            f"USED is N/A for {_names(by, unknown)}: the SM utilisation of their processes "
            "was never known (MIG instances, boards that do not report it)"
        )
    if partly:
        parts = [
            f"{hours_text(row.used_known_hours)} of {hours_text(row.gpu_hours_held)}"
            for row in partly[:NOTE_NAMES]
        ]
        notes.append(
            f"USED counts only the GPU-hours whose SM utilisation was known, part of those "
            f"held for {_names(by, partly)} ({', '.join(parts)})"
        )
    return tuple(notes)
