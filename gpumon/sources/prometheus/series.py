"""Prometheus' answers turned into gpumon's model.

An instant query's result becomes :class:`_Series` (labels made safe, NaN and impossible
readings ``None``); a target's series become a :class:`~gpumon.data.model.Sample` for
gpumon's exporter, dcgm-exporter or a down node's identity. One bad series spoils only
itself; a process count that is not a count leaves the GPU's processes unknown, never FREE;
a UUID label that is no GPU or MIG UUID is unknown.
"""

from __future__ import annotations

import math
import typing
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gpumon.data.cluster import ExporterKind
from gpumon.data.format import ascii_int, gpu_uuid, known_time, safe_text
from gpumon.data.model import (
    DriverInfo,
    GpuProcess,
    GpuStats,
    HostStats,
    MigInstance,
    ProcessKind,
    Sample,
)
from gpumon.sources.prometheus.queries import DCGM_IDENTITY, DCGM_READINGS, GPUMON_READINGS


class _Series(NamedTuple):
    """One series of an answer. A named tuple, not a frozen dataclass: an answer holds one
    per node and fact (100,000 at 5,000 nodes), and a tuple is made three times faster."""

    name: str | None
    labels: dict[str, str]  # as Prometheus gave them, ``__name__`` included
    value: float | None
    time_s: float | None  # when Prometheus evaluated it; None: not a real moment

    def label(self, name: str) -> str | None:
        """The label's value made safe, or None when absent or empty."""
        value = self.labels.get(name)
        return safe_text(value) if value else None

    def uuid(self, name: str) -> str | None:
        """The label's value when it reads as a GPU or MIG UUID (:func:`gpu_uuid`), else None."""
        return gpu_uuid(self.labels.get(name))


def _number(text: Any) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


#: No NVML reading is negative or this large (an unsigned 64-bit counter at most).
_LARGEST_READING = 2.0**64


def _reading(value: float | None) -> float | None:
    """A reading as a GPU could give it, else None: no count, size, clock or temperature
    NVML reports is negative or beyond 2**64."""
    if value is None or not 0 <= value < _LARGEST_READING:
        return None
    return value


def _count(value: float | None) -> int | None:
    """A count of processes (a whole number from 0 to a million), else None."""
    if value is None or not 0 <= value <= 1_000_000 or value != int(value):
        return None
    return int(value)


def _vector(data: Any) -> list[_Series]:
    """An instant query's result as series; malformed entries are skipped."""
    return list(_series(data.get("result", ())))


def _series(entries: Iterable[Any]) -> Iterator[_Series]:
    """An instant query's result entries as series, one at a time; malformed ones are
    skipped."""
    moments: dict[Any, float | None] = {}  # every series of an answer has the same time
    for item in entries:
        try:
            labels, (time_s, text) = item["metric"], item["value"]
            # Label names and values are text in every answer Prometheus gives (a JSON
            # object's names always are; join() refuses anything but text): a series with
            # anything else is not one, and only it is dropped.
            if type(labels) is not dict or not isinstance("".join(labels.values()), str):
                continue
        except (KeyError, TypeError, ValueError):
            continue
        try:
            moment = moments[time_s]
        except KeyError:
            moment = moments[time_s] = known_time(_number(time_s))
        except TypeError:  # not a time at all
            moment = None
        yield _Series(labels.get("__name__"), labels, _number(text), moment)


def _kind(series: Iterable[_Series]) -> ExporterKind:
    names = {item.name or _identity_name(item) for item in series}
    if any(name.startswith("gpumon_") for name in names):
        return ExporterKind.GPUMON
    if any(name.startswith("DCGM_") for name in names):
        return ExporterKind.DCGM
    return ExporterKind.UNKNOWN


def _identity_name(item: _Series) -> str:
    """The metric an identity series came from, where the server dropped its name."""
    if "UUID" in item.labels or "modelName" in item.labels:
        return DCGM_IDENTITY
    return "gpumon_gpu_info" if "gpu" in item.labels else "gpumon_host_info"


def _host(series: Iterable[_Series]) -> str | None:
    for item in series:
        name = item.name or _identity_name(item)
        host = item.label("hostname" if name == "gpumon_host_info" else "Hostname")
        if host and (name == "gpumon_host_info" or name.startswith("DCGM_")):
            return host
    return None


def _gpu_index(item: _Series) -> int | None:
    return ascii_int(item.labels.get("gpu"), 6)


_TYPES = typing.get_type_hints(GpuStats)

#: Readings with a ceiling NVML never passes (the JSON schema's too).
_HIGHEST = {
    "utilization_gpu_pct": 100.0,
    "utilization_memory_pct": 100.0,
    "utilization_encoder_pct": 100.0,
    "utilization_decoder_pct": 100.0,
    "performance_state": 15.0,
}


def _as_model(attribute: str, value: float | None) -> Any:
    """A reading in the model's type (ints rounded, booleans from 1/0); None for one that
    no GPU gives."""
    value = _reading(value)
    if value is None or value > _HIGHEST.get(attribute, value):
        return None
    kind = str(_TYPES[attribute])
    if kind.startswith("bool") or "bool |" in kind:
        return value != 0
    if kind.startswith("int") or "int |" in kind:
        return round(value)
    return value


@dataclass(slots=True)
class _Gpu:
    index: int
    values: dict[str, Any] = field(default_factory=dict)
    states: dict[str, list[str]] = field(default_factory=dict)
    processes: int | None = None
    processes_bad: bool = False  # served, and not a count
    lost: bool = False
    mig: list[_Series] = field(default_factory=list)

    def identify(self, item: _Series, uuid: str, name: str) -> None:
        if "pci_bus_id" in self.values and "name" in self.values and "uuid" in self.values:
            return
        if "uuid" not in self.values and (value := item.uuid(uuid)) is not None:
            self.values["uuid"] = value
        for attribute, label in (("name", name), ("pci_bus_id", "pci_bus_id")):
            if attribute not in self.values and (value := item.label(label)) is not None:
                self.values[attribute] = value


def _gpumon_gpus(series: list[_Series]) -> dict[int, _Gpu]:
    gpus: dict[int, _Gpu] = {}
    for item in series:
        index = _gpu_index(item)
        if index is None or item.name in ("gpumon_process_gpu_memory_bytes", None):
            continue
        gpu = gpus.setdefault(index, _Gpu(index))
        if item.name.startswith("gpumon_mig_"):
            gpu.mig.append(item)
            continue
        gpu.identify(item, "uuid", "name")
        if item.name == "gpumon_gpu_up":
            gpu.lost = item.value == 0
        elif item.name == "gpumon_gpu_processes":
            gpu.processes = _count(item.value)
            gpu.processes_bad = gpu.processes is None
        elif (reading := GPUMON_READINGS.get(item.name)) is not None:
            spec = reading.prometheus
            assert spec is not None  # GPUMON_READINGS holds only exported fields
            if spec.kind == "state":
                state = item.label(spec.label or "")
                if state is not None and item.value:
                    gpu.states.setdefault(reading.attribute, []).append(state)
            elif item.value is not None:
                value = _as_model(reading.attribute, item.value / spec.scale)
                if value is not None:
                    gpu.values[reading.attribute] = value
    return gpus


def _gpumon_sample(series: list[_Series], host: str, when: float) -> Sample:
    gpus = _gpumon_gpus(series)
    processes = _processes(series)
    listed = Counter(process.gpu_index for process in processes)
    stats = tuple(_gpumon_stats(gpus[index], listed.get(index, 0)) for index in sorted(gpus))
    scalars = {item.name: item for item in series if "gpu" not in item.labels}
    stamp = sample_time(series)
    simulated = scalars.get("gpumon_simulated")
    return Sample(
        timestamp_s=stamp if stamp is not None else when,
        host=HostStats(host),
        driver=_driver(series),
        gpus=stats,
        processes=tuple(p for p in processes if p.gpu_index in gpus),
        simulated=simulated is not None and bool(simulated.value),
        processes_read=any(gpu.processes is not None for gpu in gpus.values()),
    )


def _gpumon_stats(gpu: _Gpu, listed: int) -> GpuStats:
    values = dict(gpu.values)
    for attribute, states in gpu.states.items():
        ordered = tuple(sorted(set(states)))
        values[attribute] = ordered if "tuple" in str(_TYPES[attribute]) else ordered[0]
    if gpu.lost:
        identity = {key: values.get(key) for key in ("uuid", "name", "pci_bus_id")}
        reason = "lost: the exporter reports that it stopped answering (gpumon_gpu_up 0)"
        return GpuStats(gpu.index, lost=True, lost_reason=reason, **identity)
    if gpu.processes_bad:
        values["processes_error"] = "the exporter's process count for this GPU is not a count"
    elif gpu.processes is None:
        values["processes_error"] = "the exporter does not report this GPU's processes"
    elif gpu.processes > listed:
        values["processes_error"] = (
            f"the exporter counts {gpu.processes} processes and lists {listed} "
            "(a process's GPU memory is not reported)"
        )
    values["mig_instances"] = _mig(gpu) if values.get("mig_mode") else ()
    return GpuStats(gpu.index, values.pop("uuid", None), **values)


def _mig(gpu: _Gpu) -> tuple[MigInstance, ...] | None:
    """MIG instances in (GPU instance, compute instance) order; None when none is served."""
    instances: dict[tuple[str, str, str], dict[str, Any]] = {}
    for item in gpu.mig:
        labels = item.labels
        key = (
            labels.get("gpu_instance_id", ""),
            labels.get("compute_instance_id", ""),
            labels.get("uuid", ""),
        )
        entry = instances.setdefault(
            key, {"uuid": item.uuid("uuid"), "profile": item.label("profile")}
        )
        size = _reading(item.value)
        if size is not None and item.name is not None:
            entry[item.name] = round(size)
    if not instances:
        return None
    ordered = sorted(
        instances.items(),
        key=lambda pair: (ascii_int(pair[0][0], 9) or 0, ascii_int(pair[0][1], 9) or 0),
    )
    return tuple(
        MigInstance(
            gpu.index,
            number,
            ascii_int(key[0], 9),
            ascii_int(key[1], 9),
            entry["profile"],
            entry["uuid"],
            entry.get("gpumon_mig_memory_used_bytes"),
            entry.get("gpumon_mig_memory_total_bytes"),
        )
        for number, (key, entry) in enumerate(ordered)
    )


#: The ``type`` label of a process series: nvidia-smi's Type column. Absent: not known.
_PROCESS_KINDS = {kind.value: kind for kind in ProcessKind if kind is not ProcessKind.UNKNOWN}


def sample_time(series: list[_Series]) -> float | None:
    """When the exporter read the sample it serves (``gpumon_sample_timestamp_seconds``), if
    it says so with a real moment."""
    for item in series:
        if item.name == "gpumon_sample_timestamp_seconds" and "gpu" not in item.labels:
            return known_time(item.value)
    return None


def _processes(series: list[_Series]) -> list[GpuProcess]:
    found = []
    for item in series:
        if item.name != "gpumon_process_gpu_memory_bytes":
            continue
        index, pid = _gpu_index(item), ascii_int(item.labels.get("pid"), 9)
        if index is None or not pid:
            continue  # not a process gpumon's exporter would serve
        memory = _reading(item.value)
        found.append(
            GpuProcess(
                gpu_index=index,
                gpu_uuid=item.uuid("uuid"),
                pid=pid,
                kind=_PROCESS_KINDS.get(item.labels.get("type", ""), ProcessKind.UNKNOWN),
                gpu_memory_bytes=None if memory is None else round(memory),
                user=item.label("user"),
                command=item.label("process"),  # the executable's base name only
                job_id=item.label("job_id"),
                container_id=item.label("container_id"),
            )
        )
    return sorted(found, key=lambda process: (process.gpu_index, process.pid))


def _driver(series: list[_Series]) -> DriverInfo | None:
    for item in series:
        if item.name == "gpumon_driver_info":
            names = ("driver_version", "cuda_driver_version", "nvml_version")
            return DriverInfo(*(item.label(name) for name in names))
    return None


def _dcgm_sample(series: list[_Series], host: str, when: float) -> Sample:
    gpus: dict[int, _Gpu] = {}
    for item in series:
        index = _gpu_index(item)
        reading = DCGM_READINGS.get(item.name or "")
        if index is None or reading is None:
            continue
        gpu = gpus.setdefault(index, _Gpu(index))
        gpu.identify(item, "UUID", "modelName")
        attribute, factor = reading
        value = None if item.value is None else _as_model(attribute, item.value * factor)
        if value is not None:
            gpu.values[attribute] = value
    return Sample(
        timestamp_s=when,
        host=HostStats(host),
        driver=None,
        gpus=tuple(_dcgm_stats(gpus[index]) for index in sorted(gpus)),
        processes_read=False,
    )


def _dcgm_stats(gpu: _Gpu) -> GpuStats:
    values = dict(gpu.values)
    used, free = values.get("memory_used_bytes"), values.get("memory_free_bytes")
    if "memory_total_bytes" not in values and used is not None and free is not None:
        values["memory_total_bytes"] = used + free + (values.get("memory_reserved_bytes") or 0)
    return GpuStats(gpu.index, values.pop("uuid", None), **values)


def _identity_sample(series: list[_Series], host: str, when: float) -> Sample:
    """The GPUs a node's identity series named, without readings (the node is down)."""
    gpus: dict[int, _Gpu] = {}
    for item in series:
        index = _gpu_index(item)
        if index is not None:
            dcgm = (item.name or _identity_name(item)).startswith("DCGM_")
            gpus.setdefault(index, _Gpu(index)).identify(
                item, *(("UUID", "modelName") if dcgm else ("uuid", "name"))
            )
    stats = []
    for index in sorted(gpus):
        values = gpus[index].values
        stats.append(GpuStats(index, values.pop("uuid", None), **values))
    return Sample(when, HostStats(host), None, tuple(stats), processes_read=False)
