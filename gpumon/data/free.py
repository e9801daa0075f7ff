"""FREE: which GPUs nobody uses, the same in every view (the dashboard, ``gpumon status``,
``gpumon pick``, ``gpumon once``, the exporter and the cluster).

A module of its own, apart from :mod:`gpumon.data.views`, so that ``gpumon status`` (run by
tmux every few seconds) tells FREE without building the views' classes.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpumon.data.model import GpuProcess, GpuStats, Sample

MIB = 1024**2


def processes_known(gpu: GpuStats, sample: Sample) -> bool:
    """True when ``gpu``'s process list was read: not lost, not refused, asked for."""
    return sample.processes_read and not gpu.lost and gpu.processes_error is None


def is_free(
    gpu: GpuStats, processes: Sequence[GpuProcess], threshold_bytes: int, *, known: bool
) -> bool:
    """A GPU is FREE when its process list is ``known`` and empty and its memory in use is
    below ``threshold_bytes``. Unknown is never free: a lost GPU, a refused process list, a
    memory reading N/A."""
    if not known or gpu.lost or gpu.processes_error is not None:
        return False
    if processes or gpu.memory_used_bytes is None:
        return False
    if gpu.mig_instances is None:  # MIG on, instances unreadable: memory per instance unknown
        return False
    return gpu.memory_used_bytes < threshold_bytes


def free_gpu_indices(sample: Sample | None, threshold_mib: int) -> frozenset[int]:
    """The NVML indices of the FREE GPUs of ``sample`` (none before the first sample)."""
    if sample is None:
        return frozenset()
    by_gpu: dict[int, list[GpuProcess]] = {}
    for process in sample.processes:
        by_gpu.setdefault(process.gpu_index, []).append(process)
    threshold = threshold_mib * MIB
    return frozenset(
        gpu.index
        for gpu in sample.gpus
        if is_free(gpu, by_gpu.get(gpu.index, ()), threshold, known=processes_known(gpu, sample))
    )


def free_summary(
    free: Sequence[int] | frozenset[int],
    total: int,
    unknown: int,
    *,
    counted: bool = False,
    word: str = "FREE",
) -> str | None:
    """What a header or a status line says of the FREE GPUs: ``FREE 3,6,7``, or with
    ``counted`` ``3 free of 8`` (``word`` leads the list); ``0 free`` when none is and every
    GPU's processes are known.

    ``None`` when nothing honest can be said: no GPU, or none free while ``unknown`` GPUs'
    process lists were not read (unknown is never free, nor proof that none is)."""
    if total == 0 or (not free and unknown):
        return None
    if not free:
        return "0 free"
    if counted:
        return f"{len(free)} free of {total}"
    return f"{word} " + ",".join(str(index) for index in sorted(free))
