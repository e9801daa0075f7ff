"""Idle held: processes that hold GPU memory without using the GPU, as pure data.

A process is IDLE when it holds at least :attr:`IdleRule.min_memory_bytes` with SM
utilisation at or below :attr:`IdleRule.below_pct` for :attr:`IdleRule.after_s`; a GPU is
held idle when one process is IDLE and no other holds memory or keeps the SMs busy. An N/A
utilisation never makes a process idle. The clock is :class:`gpumon.sampling.idle.IdleTracker`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpumon.data import format as fmt
from gpumon.data.free import processes_known
from gpumon.data.model import GpuProcess, Sample
from gpumon.data.views import OTHER_NAMESPACE, UNKNOWN_USER

MIB = 1024**2

#: (NVML index of the GPU, PID): :attr:`GpuProcess.key`.
ProcessKey = tuple[int, int]


@dataclass(frozen=True, slots=True)
class IdleRule:
    """When a process is IDLE (the settings ``idle_min_memory_mib``, ``idle_below_pct`` and
    ``idle_after_minutes``, in bytes and seconds)."""

    min_memory_bytes: int = 1024 * MIB
    below_pct: int = 5
    after_s: float = 15 * 60.0

    def quiet(self, sm_utilization_pct: int | None) -> bool:
        """A known utilisation at or below the threshold; N/A is never quiet."""
        return sm_utilization_pct is not None and sm_utilization_pct <= self.below_pct

    def holds(self, process: GpuProcess) -> bool:
        """The process holds enough GPU memory to be idle; N/A memory does not."""
        memory = process.gpu_memory_bytes
        return memory is not None and memory >= self.min_memory_bytes


@dataclass(frozen=True, slots=True)
class Activity:
    """What gpumon has seen of one process's SM utilisation, up to one sample: ``quiet_s`` at or
    below the threshold, ``idle`` (IDLE), and ``at_least`` when the quiet began before gpumon
    could see it (``quiet_s`` is then a lower bound).
    """

    quiet_s: float
    idle: bool
    at_least: bool = False

    @property
    def idle_s(self) -> float:
        """How long it has been quiet, once it is IDLE; 0 before (and while active)."""
        return self.quiet_s if self.idle else 0.0


@dataclass(frozen=True, slots=True)
class HeldIdle:
    """A GPU held idle: ``users`` own its IDLE processes (most idle memory first); all of them
    have been quiet for ``idle_s`` seconds (the shortest), a lower bound when ``at_least``;
    together they hold ``memory_bytes``."""

    users: tuple[str, ...]
    idle_s: float
    at_least: bool
    memory_bytes: int


@dataclass(frozen=True, slots=True)
class IdleView:
    """What the tracker knows after one sample: the :class:`Activity` of each process whose
    utilisation is known (keyed by :attr:`GpuProcess.key`) and each GPU held idle (by NVML
    index). Empty before the first sample, and in one-sample modes (``once``)."""

    processes: Mapping[ProcessKey, Activity] = field(default_factory=dict)
    gpus: Mapping[int, HeldIdle] = field(default_factory=dict)

    def idle_keys(self) -> frozenset[ProcessKey]:
        """The keys of the IDLE processes."""
        return frozenset(key for key, activity in self.processes.items() if activity.idle)


def held_idle_gpus(
    sample: Sample, activities: Mapping[ProcessKey, Activity], rule: IdleRule
) -> dict[int, HeldIdle]:
    """The GPUs of ``sample`` held idle, given each process's activity: never one whose list is
    unknown, or where another process holds the minimum memory without being IDLE or keeps the
    SMs busy.
    """
    by_gpu: dict[int, list[GpuProcess]] = {}
    for process in sample.processes:
        by_gpu.setdefault(process.gpu_index, []).append(process)
    held: dict[int, HeldIdle] = {}
    for gpu in sample.gpus:
        processes = by_gpu.get(gpu.index)
        if not processes or not processes_known(gpu, sample):
            continue
        idle = []
        for process in processes:
            activity = activities.get(process.key)
            if activity is not None and activity.idle:
                idle.append((process, activity))
            elif process.gpu_memory_bytes is None or rule.holds(process):
                break  # holds memory (or may: N/A) without being IDLE
            elif process.sm_utilization_pct is not None and not rule.quiet(
                process.sm_utilization_pct
            ):
                break  # small, but keeps the SMs busy: the GPU is in use
        else:
            if idle:
                held[gpu.index] = _held(idle)
    return held


def _held(idle: list[tuple[GpuProcess, Activity]]) -> HeldIdle:
    memory: dict[str, int] = {}
    for process, _ in idle:
        name = _user_name(process)
        memory[name] = memory.get(name, 0) + (process.gpu_memory_bytes or 0)
    shortest = min(activity.quiet_s for _, activity in idle)
    # Exact only when a process known to the second has been quiet for the shortest time:
    # the GPU was busy until then.
    exact = any(not a.at_least and a.quiet_s == shortest for _, a in idle)
    users = tuple(sorted(memory, key=lambda name: (-memory[name], name)))
    return HeldIdle(users, shortest, not exact, sum(memory.values()))


def _user_name(process: GpuProcess) -> str:
    """As the per-user summary names it: another namespace's processes have no user here."""
    if not process.visible and not process.exited:
        return OTHER_NAMESPACE
    return process.user or UNKNOWN_USER


def _since(seconds: float, at_least: bool, ascii_only: bool) -> str:
    # Both marks take two cells, so a column lines up whichever the terminal gets.
    mark = (">=" if ascii_only else "≥ ") if at_least else ""
    return mark + fmt.duration(seconds)


def idle_text(activity: Activity, ascii_only: bool = False) -> str:
    """``idle 2h13m``; ``idle ≥ 12m`` (ASCII: ``idle >=12m``) when gpumon cannot tell when
    the quiet began."""
    return "idle " + _since(activity.quiet_s, activity.at_least, ascii_only)


def held_idle_text(held: HeldIdle, ascii_only: bool = False) -> str:
    """``held idle by alice 2h13m``; ``held idle by alice +2 ≥ 40m`` for three users."""
    others = f" +{len(held.users) - 1}" if len(held.users) > 1 else ""
    since = _since(held.idle_s, held.at_least, ascii_only)
    return f"held idle by {held.users[0]}{others} {since}"
