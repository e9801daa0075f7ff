"""Who uses what, as pure functions of a sample: filters, the per-user summary, staleness
(FREE GPUs are :mod:`gpumon.data.free`).

The dashboard's process table, ``gpumon once`` and ``gpumon pick`` all use these, so a filter
means the same everywhere. No Textual, no NVML, no psutil here.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from gpumon.data.model import GpuProcess, MigInstance, ProcessKind


@dataclass(frozen=True, slots=True)
class ProcessFilter:
    """What the process table shows: those that pass every part (``gpu_index``, ``mine``,
    ``text`` in user, command or PID case-blind, ``user`` exactly).
    """

    gpu_index: int | None = None
    mine: bool = False
    text: str = ""
    user: str | None = None

    @property
    def active(self) -> bool:
        return self.gpu_index is not None or self.mine or bool(self.text) or bool(self.user)

    def matches(self, process: GpuProcess) -> bool:
        if self.gpu_index is not None and process.gpu_index != self.gpu_index:
            return False
        if self.mine and not process.is_current_user:
            return False
        if self.user and process.user != self.user:
            return False
        if self.text:
            needle = self.text.casefold()
            haystacks = (process.user or "", process.command or "", str(process.pid))
            if not any(needle in haystack.casefold() for haystack in haystacks):
                return False
        return True

    def describe(self) -> str:
        """The active parts in words (``GPU 3 · user alice · mine · "train"``); empty when
        none."""
        parts = (
            "" if self.gpu_index is None else f"GPU {self.gpu_index}",
            f"user {self.user}" if self.user else "",
            "mine" if self.mine else "",
            f'"{self.text}"' if self.text else "",
        )
        return " · ".join(part for part in parts if part)


def filter_processes(
    processes: Iterable[GpuProcess], process_filter: ProcessFilter
) -> tuple[GpuProcess, ...]:
    if not process_filter.active:
        return tuple(processes)
    return tuple(p for p in processes if process_filter.matches(p))


def shorten_command(command: str) -> str:
    """The program's path becomes its basename, the rest is kept:
    ``/opt/conda/bin/python3 train.py --lr 3e-4`` reads ``python3 train.py --lr 3e-4``."""
    program, space, rest = command.partition(" ")
    if "/" not in program:
        return command
    name = os.path.basename(program.rstrip("/")) or program
    return name + space + rest


@dataclass(frozen=True, slots=True)
class UserUsage:
    """One user's share of the GPUs. ``gpu_memory_bytes`` is ``None`` when none of the memory is
    known, ``memory_partial`` when some is N/A; ``idle_memory_bytes`` is what IDLE processes
    hold, a lower bound when ``idle_unknown`` (some have no SM utilisation).
    """

    user: str
    gpu_indices: tuple[int, ...]
    gpu_memory_bytes: int | None
    process_count: int
    memory_partial: bool = False
    is_current_user: bool = False
    idle_memory_bytes: int = 0
    idle_unknown: bool = False


#: The summary's name for processes whose owner cannot be read here.
UNKNOWN_USER = "?"
#: And for processes outside this PID namespace (another container).
OTHER_NAMESPACE = "(other namespace)"


def user_summary(
    processes: Iterable[GpuProcess], idle: Collection[tuple[int, int]] = frozenset()
) -> tuple[UserUsage, ...]:
    """Per user: GPUs used, GPU memory, process count, and the memory of those whose
    :attr:`GpuProcess.key` is in ``idle``; most memory first, then by name."""
    groups: dict[str, list[GpuProcess]] = {}
    for process in processes:
        outside = not process.visible and not process.exited  # an exited one was ours
        name = OTHER_NAMESPACE if outside else (process.user or UNKNOWN_USER)
        groups.setdefault(name, []).append(process)
    usages = []
    for name, group in groups.items():
        known = [p.gpu_memory_bytes for p in group if p.gpu_memory_bytes is not None]
        usages.append(
            UserUsage(
                user=name,
                gpu_indices=tuple(sorted({p.gpu_index for p in group})),
                gpu_memory_bytes=sum(known) if known else None,
                process_count=len(group),
                memory_partial=bool(known) and len(known) < len(group),
                is_current_user=any(p.is_current_user for p in group),
                idle_memory_bytes=sum(p.gpu_memory_bytes or 0 for p in group if p.key in idle),
                idle_unknown=any(
                    p.sm_utilization_pct is None
                    and p.kind is not ProcessKind.GRAPHICS  # a desktop is never called idle
                    and p.key not in idle
                    for p in group
                ),
            )
        )
    # Known memory first, most first; unknown (N/A) after a known 0 B.
    usages.sort(key=lambda u: (u.gpu_memory_bytes is None, -(u.gpu_memory_bytes or 0), u.user))
    return tuple(usages)


#: Data older than this many intervals is stale: never shown, exported or picked as current,
#: locally (a sampler stuck in a driver call) or in the cluster (a node's last scrape).
STALE_AFTER_INTERVALS = 3


def is_stale(timestamp_s: float | None, now_s: float, interval_s: float) -> bool:
    """True when data read at ``timestamp_s`` (None: never) is older than
    :data:`STALE_AFTER_INTERVALS` intervals of ``interval_s`` at ``now_s``."""
    return timestamp_s is None or now_s - timestamp_s > STALE_AFTER_INTERVALS * interval_s


def instance_processes(
    instance: MigInstance, processes: Iterable[GpuProcess]
) -> tuple[GpuProcess, ...]:
    """The processes that run in MIG ``instance`` (same GPU, GPU and compute instance)."""
    return tuple(
        p
        for p in processes
        if p.gpu_index == instance.gpu_index
        and p.gpu_instance_id is not None
        and p.gpu_instance_id == instance.gpu_instance_id
        and (
            instance.compute_instance_id is None
            or p.compute_instance_id is None
            or p.compute_instance_id == instance.compute_instance_id
        )
    )
