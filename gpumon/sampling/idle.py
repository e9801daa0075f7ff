"""Which processes hold GPU memory idle: a tracker fed every sample (see
:mod:`gpumon.data.idle` for what IDLE means).

A process is known by (GPU, PID, create time). A quiet spell gpumon did not see begin is
quiet for *at least* the time seen (:attr:`Activity.at_least`), unless the history database
knows its start (:attr:`IdleTracker.recorded_since`). After a gap longer than
:data:`~gpumon.data.views.STALE_AFTER_INTERVALS` intervals, every spell starts afresh.
More: docs/sampling.md.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpumon.data.free import processes_known
from gpumon.data.idle import (
    Activity,
    IdleRule,
    IdleView,
    ProcessKey,
    held_idle_gpus,
    held_idle_text,
)
from gpumon.data.model import GpuProcess, Sample
from gpumon.data.notes import GpuNote, NoteSource
from gpumon.data.views import STALE_AFTER_INTERVALS

if TYPE_CHECKING:
    from gpumon.config import Settings

__all__ = ["IdleTracker", "idle_rule"]

#: A process's identity: (NVML index of its GPU, PID, create time); see the module docstring.
_Identity = tuple[int, int, float | None]
#: What is remembered of one process: when its current quiet spell began (``None``: it is not
#: quiet), and whether a spell beginning now began at a time gpumon cannot tell.
_Spell = tuple[float | None, bool]
#: A process as the history database knows it: (GPU UUID, PID, create time).
RecordedKey = tuple[str | None, int, float | None]


def idle_rule(settings: Settings) -> IdleRule:
    """The :class:`IdleRule` of ``settings`` (``idle_min_memory_mib``, ``idle_below_pct``,
    ``idle_after_minutes``)."""
    return IdleRule(
        min_memory_bytes=settings.idle_min_memory_mib * 1024**2,
        below_pct=settings.idle_below_pct,
        after_s=settings.idle_after_minutes * 60.0,
    )


class IdleTracker:
    """Feed it each sample (:meth:`observe`); :attr:`view` says who is idle in the latest.

    Args:
        rule: what IDLE means.
        clock: seconds, monotonic; read once per sample. An attribute, so a test can move it.
        interval_s: the sampling interval, or a function that says the one in force (the
            dashboard's can change); a sample more than
            :data:`~gpumon.data.views.STALE_AFTER_INTERVALS` of them after the previous one
            (of the longer of the intervals then and now) follows a gap nobody saw, and every
            quiet spell starts afresh, as *at least*. ``None``: no gap is too long. An
            attribute, like ``clock``.
    """

    def __init__(
        self,
        rule: IdleRule | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        interval_s: float | Callable[[], float] | None = None,
    ) -> None:
        self.rule = rule or IdleRule()
        self.clock = clock
        self.interval_s = interval_s
        # When the previous sample was observed, and the interval in force then.
        self._previous: tuple[float, float | None] | None = None
        #: Who is idle in the latest sample observed; empty before the first.
        self.view = IdleView()
        self._spells: dict[_Identity, _Spell] = {}
        # GPUs whose process lists were read in the previous sample: a process first listed on
        # one of them has just appeared, so its quiet spell is timed from its start.
        self._listed_gpus: frozenset[int] = frozenset()
        #: When the history database says a process's quiet spell began (seconds since the
        #: epoch), by :data:`RecordedKey`: used for a spell whose start gpumon did not see,
        #: when it is earlier. Kept only for the processes of the latest sample.
        self.recorded_since: dict[RecordedKey, float] = {}

    def observe(self, sample: Sample) -> None:
        """Take in the next sample: update each process's quiet spell and :attr:`view` (after
        a gap nobody saw, each spell starts afresh)."""
        now = self.clock()
        rule = self.rule
        previous, listed_gpus = self._spells, self._listed_gpus
        if self._after_gap(now):
            # Nobody saw the gap: whatever quiet spell is found now began at a time unknown.
            previous, listed_gpus = {}, frozenset()
        spells: dict[_Identity, _Spell] = {}
        activities: dict[ProcessKey, Activity] = {}
        for process in sample.processes:
            identity = (process.gpu_index, process.pid, process.create_time_s)
            if identity in spells:
                continue  # listed twice: the first entry counts
            # Unknown before: a spell beginning now began when gpumon could not see it.
            since, unknown_before = previous.get(identity) or (
                None,
                process.gpu_index not in listed_gpus,
            )
            utilization = process.sm_utilization_pct
            if utilization is None:
                # N/A says nothing: a quiet spell after it began at a time nobody saw.
                spells[identity] = (None, True)
                continue
            if not rule.quiet(utilization):
                spells[identity] = (None, False)
                activities[process.key] = Activity(0.0, False)
                continue
            if since is None:
                since = now
            if unknown_before:
                since, unknown_before = self._recorded(process, sample, now, since)
            spells[identity] = (since, unknown_before)
            quiet_s = max(0.0, now - since)
            idle = quiet_s >= rule.after_s and rule.holds(process)
            activities[process.key] = Activity(quiet_s, idle, unknown_before)
        self._spells = spells
        if self.recorded_since:
            keys = {(p.gpu_uuid, p.pid, p.create_time_s) for p in sample.processes}
            self.recorded_since = {k: v for k, v in self.recorded_since.items() if k in keys}
        self._listed_gpus = frozenset(
            gpu.index for gpu in sample.gpus if processes_known(gpu, sample)
        )
        self.view = IdleView(activities, held_idle_gpus(sample, activities, rule))

    def _after_gap(self, now: float) -> bool:
        """Whether the time since the previous sample is more than
        :data:`~gpumon.data.views.STALE_AFTER_INTERVALS` intervals (the longer of the one in
        force then and now); remembers this sample's time and interval."""
        interval = self.interval_s
        interval_now = interval() if callable(interval) else interval
        previous, self._previous = self._previous, (now, interval_now)
        if previous is None or interval_now is None:
            return False
        previous_s, interval_then = previous
        longest = max(interval_now, interval_then or 0.0)
        return now - previous_s > STALE_AFTER_INTERVALS * longest

    def _recorded(
        self, process: GpuProcess, sample: Sample, now: float, since: float
    ) -> tuple[float, bool]:
        """(start, still unknown) of a quiet spell gpumon did not see begin: the recorded
        start, on this tracker's clock, where it is earlier."""
        recorded = self.recorded_since.get((process.gpu_uuid, process.pid, process.create_time_s))
        if recorded is None:
            return since, True
        start = now - max(0.0, sample.timestamp_s - recorded)
        return (start, False) if start <= since else (since, True)


def held_idle_notes(tracker: IdleTracker, ascii_only: bool) -> NoteSource:
    """A note source: ``held idle by alice 2h13m`` (``note-warn``) on each GPU that
    ``tracker`` finds held idle."""

    def notes(sample: Sample | None) -> dict[int, tuple[GpuNote, ...]]:
        if sample is None:
            return {}
        return {
            index: (GpuNote(held_idle_text(held, ascii_only), "note-warn"),)
            for index, held in tracker.view.gpus.items()
        }

    return notes
