"""Which processes hold GPU memory idle: a tracker fed every sample (see
:mod:`gpumon.data.idle` for what IDLE means).

The dashboard feeds :class:`IdleTracker` from its store before the screens draw (they read
:attr:`IdleTracker.view`); the exporter feeds one on its sampling thread. One sample is not
enough to call anything idle, so ``gpumon once`` has none.

A process is known by (GPU, PID, create time): a reused PID starts afresh. Only the processes
of the latest sample are remembered, so memory stays bounded however many come and go. The
clock is injected (monotonic by default: a wall-clock step must not make a process idle).
gpumon knows a quiet spell only from when it saw it begin: a process already quiet when
gpumon started (or when its GPU's process list became readable, or after an N/A reading) is
quiet for *at least* the time seen (:attr:`Activity.at_least`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from gpumon.data.idle import Activity, IdleRule, IdleView, ProcessKey, held_idle_gpus
from gpumon.data.model import Sample
from gpumon.data.views import processes_known

if TYPE_CHECKING:
    from gpumon.settings import Settings

__all__ = ["IdleTracker", "idle_rule"]

#: A process's identity: (NVML index of its GPU, PID, create time); see the module docstring.
_Identity = tuple[int, int, float | None]
#: What is remembered of one process: when its current quiet spell began (``None``: it is not
#: quiet), and whether a spell beginning now began at a time gpumon cannot tell.
_Spell = tuple[float | None, bool]


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
    """

    def __init__(
        self, rule: IdleRule | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rule = rule or IdleRule()
        self.clock = clock
        #: Who is idle in the latest sample observed; empty before the first.
        self.view = IdleView()
        self._spells: dict[_Identity, _Spell] = {}
        # GPUs whose process lists were read in the previous sample: a process first listed on
        # one of them has just appeared, so its quiet spell is timed from its start.
        self._listed_gpus: frozenset[int] = frozenset()

    def observe(self, sample: Sample) -> None:
        """Take in the next sample: update each process's quiet spell and :attr:`view`."""
        now = self.clock()
        rule = self.rule
        previous = self._spells
        spells: dict[_Identity, _Spell] = {}
        activities: dict[ProcessKey, Activity] = {}
        for process in sample.processes:
            identity = (process.gpu_index, process.pid, process.create_time_s)
            if identity in spells:
                continue  # listed twice: the first entry counts
            # Unknown before: a spell beginning now began when gpumon could not see it.
            since, unknown_before = previous.get(identity) or (
                None,
                process.gpu_index not in self._listed_gpus,
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
            spells[identity] = (since, unknown_before)
            quiet_s = max(0.0, now - since)
            idle = quiet_s >= rule.after_s and rule.holds(process)
            activities[process.key] = Activity(quiet_s, idle, unknown_before)
        self._spells = spells
        self._listed_gpus = frozenset(
            gpu.index for gpu in sample.gpus if processes_known(gpu, sample)
        )
        self.view = IdleView(activities, held_idle_gpus(sample, activities, rule))
