"""Which GPUs ``gpumon pick`` may name, freest first: pure functions of a :class:`Sample`.

A GPU qualifies when its process list was read and it is FREE, or when it passes the
thresholds given (``--busy-ok``: any); the freest come first by what the GPU itself reports.
A GPU in MIG mode offers its MIG instances, for ``-n 1`` only. The order: docs/pick.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gpumon.data import format as fmt
from gpumon.data.free import processes_known
from gpumon.data.model import GpuProcess, GpuStats, Sample
from gpumon.data.views import instance_processes, user_summary

#: A reason names at most this many users of a GPU, then how many more.
MAX_USERS_NAMED = 3


@dataclass(frozen=True, slots=True)
class Candidate:
    """A whole GPU, or one MIG instance, that a process could be given (``utilization_pct``:
    ``None`` for a MIG instance or an N/A reading).
    """

    gpu_index: int
    mig_index: int | None
    uuid: str | None
    process_count: int
    memory_used_bytes: int | None
    memory_free_bytes: int | None
    utilization_pct: int | None

    @property
    def label(self) -> str:
        """``GPU 2``, or ``GPU 3 MIG 1`` for a MIG instance."""
        mig = "" if self.mig_index is None else f" MIG {self.mig_index}"
        return f"GPU {self.gpu_index}{mig}"

    def sort_key(self) -> tuple[float, ...]:
        """Freest first: the share of memory in use (in tenths), how busy (in tens of
        percent), fewer processes, less memory used, less busy, then the lower NVML index.
        N/A sorts after every reading."""
        share = self.memory_used_share()
        busy: float | None = self.utilization_pct
        if busy is None and self.mig_index is not None and not self.process_count:
            busy = 0  # NVML reads none under MIG, and nothing runs there to keep it busy
        return (
            math.inf if share is None else math.floor(share * 10),
            math.inf if busy is None else busy // 10,
            self.process_count,
            math.inf if self.memory_used_bytes is None else self.memory_used_bytes,
            math.inf if busy is None else busy,
            self.gpu_index,
            -1 if self.mig_index is None else self.mig_index,
        )

    def memory_used_share(self) -> float | None:
        """Memory in use as a share of the total (0 to 1), by whoever holds it; None: N/A."""
        used, free = self.memory_used_bytes, self.memory_free_bytes
        if used is None or free is None or used < 0 or free < 0 or used + free <= 0:
            return None
        return min(1.0, used / (used + free))

    def value(self, output_format: str) -> str:
        """What goes into ``CUDA_VISIBLE_DEVICES`` for this candidate."""
        if output_format == "index" and self.mig_index is None:
            return str(self.gpu_index)
        if self.uuid is None:  # rank() never picks one for a format that needs its UUID
            raise ValueError(f"{self.label} has no known UUID")
        return self.uuid


def mig_on(gpu: GpuStats) -> bool:
    """True for a GPU in MIG mode (instances read or not)."""
    return gpu.mig_mode is True or gpu.mig_instances is None or bool(gpu.mig_instances)


def rank(
    sample: Sample, *, n: int = 1, **thresholds: Any
) -> tuple[tuple[Candidate, ...], tuple[str, ...]]:
    """The ``n`` freest candidates that qualify (:func:`qualify`), and why the others do not."""
    qualifying, reasons = qualify(sample, n=n, **thresholds)
    return qualifying[:n], reasons


def qualify(
    sample: Sample,
    *,
    n: int = 1,
    min_free_bytes: int | None = None,
    max_utilization_pct: float | None = None,
    output_format: str = "index",
    free_below_bytes: int | None = None,
) -> tuple[tuple[Candidate, ...], tuple[str, ...]]:
    """Every candidate of ``sample`` (read with processes) that qualifies, freest first, and
    one short phrase per GPU or MIG instance that does not, in NVML order (``GPU 1 LOST``,
    ``GPU 4: 2 processes (alice, bob)``).

    MIG instances are candidates only for ``n`` 1 and ``output_format`` ``uuid``; with
    ``uuid``, a candidate whose UUID is unknown or no UUID (:func:`~gpumon.data.format.gpu_uuid`)
    does not qualify. A threshold N/A fails, but a MIG instance that runs no process passes
    ``max_utilization_pct`` (no reading by design, nothing to keep it busy). With
    ``free_below_bytes`` only a FREE candidate qualifies: no process, and less memory in use
    (``gpumon pick`` without thresholds or ``--busy-ok``).
    """
    qualifying: list[Candidate] = []
    reasons: list[str] = []
    for gpu in sample.gpus:
        candidates, reason = _candidates(gpu, sample, n=n, output_format=output_format)
        if reason is not None:
            reasons.append(reason)
        for candidate, processes in candidates:
            problem = _threshold_problem(candidate, min_free_bytes, max_utilization_pct)
            if problem is None and free_below_bytes is not None:
                problem = _not_free(candidate, processes, free_below_bytes)
            if problem is not None:
                reasons.append(problem)
            elif output_format == "uuid" and fmt.gpu_uuid(candidate.uuid) is None:
                # None, or no UUID a shell can be handed as it is: never printed.
                reasons.append(f"{candidate.label} UUID unknown")
            else:
                qualifying.append(candidate)
    qualifying.sort(key=Candidate.sort_key)
    return tuple(qualifying), tuple(reasons)


def users_text(processes: Sequence[GpuProcess], separator: str = ", ") -> str:
    """``alice, bob``: who runs ``processes``, most GPU memory first, at most
    :data:`MAX_USERS_NAMED` named (``alice, bob, carol, 2 more``)."""
    # "(other namespace)" in parentheses of its own would read as a second list.
    users = [usage.user.strip("()") for usage in user_summary(processes)]
    named = users[:MAX_USERS_NAMED]
    if len(users) > MAX_USERS_NAMED:
        named.append(f"{len(users) - MAX_USERS_NAMED} more")
    return separator.join(named)


def _not_free(
    candidate: Candidate, processes: Sequence[GpuProcess], free_below_bytes: int
) -> str | None:
    """Why ``candidate`` is not FREE (``GPU 4: 2 processes (alice, bob)``), or None."""
    if processes:
        count = f"{len(processes)} process" + ("" if len(processes) == 1 else "es")
        return f"{candidate.label}: {count} ({users_text(processes)})"
    used = candidate.memory_used_bytes
    if used is None:
        return f"{candidate.label}: memory in use N/A"
    if used >= free_below_bytes:
        return (
            f"{candidate.label}: {fmt.bytes_short(used)} in use by no listed process "
            f"(FREE is under {fmt.bytes_short(free_below_bytes)})"
        )
    return None


def could_ever_qualify(
    sample: Sample, *, n: int, min_free_bytes: int | None, output_format: str
) -> int:
    """How many devices of ``sample`` could qualify if every process on them ended: a
    ``pick --wait`` for more than this waits for what cannot come (a LOST GPU stays lost,
    MIG mode and the boards' memory do not change while it waits)."""
    count = 0
    for gpu in sample.gpus:
        if gpu.lost:
            continue
        if mig_on(gpu):
            if n == 1 and output_format != "index":
                count += sum(
                    min_free_bytes is None
                    or instance.memory_total_bytes is None
                    or instance.memory_total_bytes >= min_free_bytes
                    for instance in gpu.mig_instances or ()
                )
            continue
        total = gpu.memory_total_bytes
        if min_free_bytes is None or total is None or total >= min_free_bytes:
            count += 1
    return count


def _candidates(
    gpu: GpuStats, sample: Sample, *, n: int, output_format: str
) -> tuple[list[tuple[Candidate, tuple[GpuProcess, ...]]], str | None]:
    """What ``gpu`` offers: itself, its MIG instances, or nothing and why."""
    label = f"GPU {gpu.index}"
    if gpu.lost:
        return [], f"{label} LOST"
    if not processes_known(gpu, sample):
        return [], f"{label} process list unknown"
    processes = sample.processes_on(gpu.index)
    if not mig_on(gpu):
        whole = Candidate(
            gpu_index=gpu.index,
            mig_index=None,
            uuid=gpu.uuid,
            process_count=len(processes),
            memory_used_bytes=gpu.memory_used_bytes,
            memory_free_bytes=gpu.memory_free_bytes,
            utilization_pct=gpu.utilization_gpu_pct,
        )
        return [(whole, processes)], None
    if gpu.mig_instances is None:
        return [], f"{label} MIG instances unreadable"
    if not gpu.mig_instances:
        return [], f"{label} in MIG mode without instances"
    if output_format == "index":
        return [], f"{label} in MIG mode (its instances need --format uuid)"
    if n > 1:
        return [], f"{label} in MIG mode (a CUDA process uses one MIG instance: -n 1)"
    placed = sum(len(instance_processes(instance, processes)) for instance in gpu.mig_instances)
    if placed < len(processes):
        # A process not placed in an instance (its id, or an instance's, not read) could be
        # in any: none of them is known idle.
        return [], f"{label} processes not matched to MIG instances"
    instances = []
    for instance in gpu.mig_instances:
        used, total = instance.memory_used_bytes, instance.memory_total_bytes
        inside = instance_processes(instance, processes)
        candidate = Candidate(
            gpu_index=gpu.index,
            mig_index=instance.index,
            uuid=instance.uuid,
            process_count=len(inside),
            memory_used_bytes=used,
            memory_free_bytes=None if used is None or total is None else total - used,
            utilization_pct=None,
        )
        instances.append((candidate, inside))
    return instances, None


def _threshold_problem(
    candidate: Candidate, min_free_bytes: int | None, max_utilization_pct: float | None
) -> str | None:
    """Why ``candidate`` misses a threshold (``GPU 0 has 2.0G free (need 20.0G)``), or None."""
    problems = []
    if min_free_bytes is not None:
        free = candidate.memory_free_bytes
        if free is None:
            problems.append("memory free N/A")
        elif free < min_free_bytes:
            shown = fmt.bytes_short(min_free_bytes)
            problems.append(f"has {fmt.bytes_short(free)} free (need {shown})")
    if max_utilization_pct is not None:
        busy = candidate.utilization_pct
        limit = f"max {max_utilization_pct:g}%"
        if candidate.mig_index is not None:
            if candidate.process_count:
                problems.append(f"runs processes, utilisation N/A under MIG ({limit})")
        elif busy is None:
            problems.append("utilisation N/A")
        elif busy > max_utilization_pct:
            problems.append(f"is {busy}% busy ({limit})")
    if not problems:
        return None
    return f"{candidate.label} {' and '.join(problems)}"
