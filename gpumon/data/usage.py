"""Who used the GPUs over a period: the rows ``gpumon report`` prints, from the history
database (one server) or from Prometheus (a cluster). Pure data, no I/O.

A GPU counts as *held* by a user while a process of theirs holds memory on it, *used* in
proportion to that process's SM utilisation, and *held idle* while that process is idle (the
live view's rule: at least ``idle_min_memory_mib`` held at or below ``idle_below_pct``).
"""

from __future__ import annotations

from dataclasses import dataclass

#: What a report groups by, and the JSON key of each row's group.
GROUPINGS = ("user", "job", "container", "gpu")


@dataclass(frozen=True, slots=True)
class UsageRow:
    """One row of a report: one user (or Slurm job, container, GPU) over the period.

    Attributes:
        key: the user name, job id, container id or GPU UUID; ``None`` for the row of what
            has none (processes in no job, or whose owner could not be read).
        node: the node, in a cluster report; ``None`` on one server.
        gpu_hours_held: GPU-hours during which the group's processes held memory on a GPU
            (two processes on one GPU for an hour: one GPU-hour).
        gpu_hours_used: the same, weighted by the processes' SM utilisation (0 to 1), over
            the time it was known; ``None`` when it was never known (MIG instances, boards
            that do not report it): unknown is never 0 used.
        idle_held_hours: GPU-hours held by processes that were idle (judged by their SM
            utilisation: counted over the same known time as ``gpu_hours_used``); ``None``
            when that was never known: unknown is never 0 idle.
        peak_memory_bytes: the most GPU memory one of its processes held at once; ``None``
            when never known.
        processes: how many process sessions (PID and start time) it had.
        used_known_hours: the part of ``gpu_hours_held`` during which the SM utilisation
            of the group's processes was known (what ``gpu_hours_used`` is counted over);
            ``None`` when not tracked (the recording rules of an older gpumon).
    """

    key: str | None
    gpu_hours_held: float
    gpu_hours_used: float | None
    idle_held_hours: float | None
    peak_memory_bytes: int | None
    processes: int
    node: str | None = None
    used_known_hours: float | None = None

    @property
    def used_partly_known(self) -> bool:
        """The SM utilisation was known for only part of the time held (by more than a
        hundredth of it): ``gpu_hours_used`` counts that part only."""
        known = self.used_known_hours
        if known is None or self.gpu_hours_used is None:
            return False
        return known < self.gpu_hours_held * 0.99
