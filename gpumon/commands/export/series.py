"""The series of one sample: per GPU, per process, per MIG instance, and their labels
(``gpumon export``; the families are put together in :mod:`gpumon.commands.export.collector`).

A value that is N/A, and every reading of a lost GPU, is left out rather than exported as a
fake 0; ``gpumon_gpu_up`` says which GPUs answered. Every label value passes
:func:`label_value`. The per-GPU metrics follow the field table (:mod:`gpumon.data.fields`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpumon.data.fields import FIELDS, Field
from gpumon.data.format import safe_text
from gpumon.data.free import free_gpu_indices, processes_known
from gpumon.data.idle import Activity, ProcessKey
from gpumon.data.model import GpuProcess, GpuStats, MigInstance, Sample

GPU_LABELS = ("gpu", "uuid", "name")
#: ``type`` is how the process uses the GPU, as nvidia-smi's Type column: C, G or C+G.
PROCESS_LABELS = ("gpu", "uuid", "pid", "user", "process", "job_id", "container_id", "type")
#: A MIG instance's series: its GPU's index, its own MIG UUID, its ids and profile.
MIG_LABELS = ("gpu", "uuid", "gpu_instance_id", "compute_instance_id", "profile")
_PROCESS_NAME_MAX = 64


@dataclass(frozen=True, slots=True)
class GpuMetric:
    """One per-GPU metric: the :class:`GpuStats` field it reads, times ``scale``.

    A ``state`` metric has one series per GPU and state, value 1, the state in ``label``.
    """

    name: str
    help: str
    field: str
    scale: float = 1.0
    kind: str = "gauge"
    label: str | None = None

    def read(self, gpu: GpuStats) -> float | None:
        """The value to export, or ``None`` (N/A: no series)."""
        value = getattr(gpu, self.field)
        return None if value is None else float(value) * self.scale

    def states(self, gpu: GpuStats) -> tuple[str, ...]:
        """A ``state`` metric's states now (none when N/A)."""
        value = getattr(gpu, self.field)
        if value is None:
            return ()
        return tuple(value) if isinstance(value, tuple) else (str(value),)


def _metric(field: Field) -> GpuMetric:
    spec = field.prometheus
    assert spec is not None
    text = field.help[0].upper() + field.help[1:] + "."
    return GpuMetric(spec.name, text, field.attribute, spec.scale, spec.kind, spec.label)


#: Every field of the field table that the exporter serves, in its order.
GPU_METRICS: tuple[GpuMetric, ...] = tuple(
    _metric(field) for field in FIELDS if field.prometheus is not None
)


def process_name(command: str | None) -> str:
    """The executable's base name (``python``), not the full command line: keeps labels short."""
    if not command:
        return ""
    return os.path.basename(command.split()[0])[:_PROCESS_NAME_MAX]


def label_value(text: str | None) -> str:
    """Every label value passes here: ``""`` for unknown, and text that is always valid UTF-8
    (made safe again, so no way in can make prometheus_client fail a scrape).
    """
    return "" if text is None else safe_text(text)


#: Makes a family (name, help, label names), adds it to the scrape, returns it.
NewFamily = Callable[[str, str, Iterable[str]], Any]


def add_gpu_series(sample: Sample, gauge: NewFamily, counter: NewFamily) -> None:
    """Identity and up for every GPU; every field table reading of the GPUs that answered."""
    gpu_info = gauge(
        "gpumon_gpu_info", "GPU identity (value always 1).", (*GPU_LABELS, "pci_bus_id")
    )
    up = gauge("gpumon_gpu_up", "1 when the GPU answered, 0 when it is lost.", GPU_LABELS)
    for gpu in sample.gpus:
        labels = _gpu_labels(gpu)
        gpu_info.add_metric([*labels, label_value(gpu.pci_bus_id)], 1.0)
        up.add_metric(labels, 0.0 if gpu.lost else 1.0)
    readable = [gpu for gpu in sample.gpus if not gpu.lost]
    for metric in GPU_METRICS:
        if metric.kind == "state":
            assert metric.label is not None
            family = gauge(metric.name, metric.help, (*GPU_LABELS, metric.label))
            for gpu in readable:
                for state in metric.states(gpu):
                    family.add_metric([*_gpu_labels(gpu), label_value(state)], 1.0)
            continue
        make = counter if metric.kind == "counter" else gauge
        family = make(metric.name, metric.help, GPU_LABELS)
        for gpu in readable:
            value = metric.read(gpu)
            if value is not None:
                family.add_metric(_gpu_labels(gpu), value)


def add_usage_series(sample: Sample, gauge: NewFamily, free_threshold_mib: int) -> None:
    """Who uses the GPUs: process counts, FREE, each process's GPU memory."""
    count = gauge("gpumon_gpu_processes", "Processes using the GPU.", GPU_LABELS)
    free = gauge(
        "gpumon_gpu_free",
        f"1 when the GPU has no process and less than {free_threshold_mib} MiB of memory in "
        "use, 0 when it is in use; no series when its processes are unknown.",
        GPU_LABELS,
    )
    free_indices = free_gpu_indices(sample, free_threshold_mib)
    for gpu in sample.gpus:
        if not processes_known(gpu, sample):  # unknown is no series, never a fake 0
            continue
        on_gpu = sample.processes_on(gpu.index)
        count.add_metric(_gpu_labels(gpu), float(len(on_gpu)))
        if on_gpu or (gpu.memory_used_bytes is not None and gpu.mig_instances is not None):
            free.add_metric(_gpu_labels(gpu), 1.0 if gpu.index in free_indices else 0.0)
    memory = gauge(
        "gpumon_process_gpu_memory_bytes", "GPU memory used by one process.", PROCESS_LABELS
    )
    lost = {gpu.index for gpu in sample.gpus if gpu.lost}  # joined by index: a UUID may be None
    for process in sample.processes:
        if process.gpu_memory_bytes is not None and process.gpu_index not in lost:
            memory.add_metric(_process_labels(process), process.gpu_memory_bytes)


def add_activity_series(
    sample: Sample, gauge: NewFamily, activities: Mapping[ProcessKey, Activity]
) -> None:
    """Each process's SM utilisation and how long it has held its memory idle; no series where
    the utilisation is N/A (MIG, not supported, a graphics-only process without a sample)."""
    utilization = gauge(
        "gpumon_process_sm_utilization_ratio",
        "Share of the GPU's SMs the process kept busy over the last sampling interval (NVML's "
        "per-process utilisation; 0 for a compute process with no sample in it).",
        PROCESS_LABELS,
    )
    idle = gauge(
        "gpumon_process_idle_seconds",
        "How long the process has held its GPU memory idle: 0 while it is not idle; once it "
        "is (see gpumon's --idle-* settings), the seconds since its SM utilisation fell to "
        "the threshold, counted from when the exporter started for a process already quiet "
        "then.",
        PROCESS_LABELS,
    )
    lost = {gpu.index for gpu in sample.gpus if gpu.lost}
    for process in sample.processes:
        if process.sm_utilization_pct is None or process.gpu_index in lost:
            continue
        labels = _process_labels(process)
        utilization.add_metric(labels, process.sm_utilization_pct / 100.0)
        activity = activities.get(process.key)
        if activity is not None:
            idle.add_metric(labels, activity.idle_s)


def add_mig_series(sample: Sample, gauge: NewFamily) -> None:
    """Each MIG instance's memory; none where the instances are unknown."""
    used = gauge(
        "gpumon_mig_memory_used_bytes",
        "GPU memory in use in a MIG instance (its GPU instance's).",
        MIG_LABELS,
    )
    total = gauge(
        "gpumon_mig_memory_total_bytes",
        "GPU memory of a MIG instance (its GPU instance's).",
        MIG_LABELS,
    )
    for gpu in sample.gpus:
        if gpu.lost:
            continue
        for instance in gpu.mig_instances or ():  # None: MIG on, instances unknown
            labels = _mig_labels(instance)
            if instance.memory_used_bytes is not None:
                used.add_metric(labels, instance.memory_used_bytes)
            if instance.memory_total_bytes is not None:
                total.add_metric(labels, instance.memory_total_bytes)


def _gpu_labels(gpu: GpuStats) -> list[str]:
    # An unknown UUID (a GPU lost before NVML told it) is "": join on gpu and instance then.
    return [str(gpu.index), label_value(gpu.uuid), label_value(gpu.name)]


def _process_labels(process: GpuProcess) -> list[str]:
    # No job or container is "", which Prometheus reads as no label at all.
    return [
        str(process.gpu_index),
        label_value(process.gpu_uuid),
        str(process.pid),
        label_value(process.user),
        label_value(process_name(process.command)),
        label_value(process.job_id),
        label_value(process.container_id),
        process.kind.value,  # C, G or C+G: one value per process, so no extra series
    ]


def _mig_labels(instance: MigInstance) -> list[str]:
    return [
        str(instance.gpu_index),
        label_value(instance.uuid),
        _id_label(instance.gpu_instance_id),
        _id_label(instance.compute_instance_id),
        label_value(instance.profile),
    ]


def _id_label(value: int | None) -> str:
    return "" if value is None else str(value)
