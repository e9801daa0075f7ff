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
    """One row of a report: one user (or Slurm job, container, GPU UUID: ``key``; ``None``
    for what has none) over the period, on ``node`` in a cluster report.

    ``gpu_hours_held``: GPU-hours during which its processes held memory on a GPU (two on one
    GPU for an hour: one). ``gpu_hours_used``: the same weighted by their SM utilisation (0 to
    1) over the time it was known, and ``idle_held_hours`` the part held by idle processes
    (judged over that same time); both ``None`` when it was never known (MIG instances,
    boards that do not report it): unknown is never 0. ``peak_memory_bytes``: the most one
    process held at once. ``processes``: process sessions (PID and start time).
    ``used_known_hours``: the part of ``gpu_hours_held`` with the SM utilisation known;
    ``None`` when not tracked (the recording rules of an older gpumon). ``gpu_index``,
    ``gpu_name``: a GPU row's NVML index and name as last recorded (a database's only).
    """

    key: str | None
    gpu_hours_held: float
    gpu_hours_used: float | None
    idle_held_hours: float | None
    peak_memory_bytes: int | None
    processes: int
    node: str | None = None
    used_known_hours: float | None = None
    gpu_index: int | None = None
    gpu_name: str | None = None

    @property
    def used_partly_known(self) -> bool:
        """The SM utilisation was known for only part of the time held (by more than a
        hundredth of it): ``gpu_hours_used`` counts that part only."""
        known = self.used_known_hours
        if known is None or self.gpu_hours_used is None:
            return False
        return known < self.gpu_hours_held * 0.99
