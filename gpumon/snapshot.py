"""One sample for the headless modes, and that sample as plain JSON-able data.

``gpumon once``, ``gpumon once --json``, ``gpumon status`` and ``gpumon export`` share this
module: how a single sample is taken, what "no driver" looks like to a script, and the JSON
shape documented in ``docs/json-schema.md`` and ``gpumon/schema/once.schema.json``.

Kept light (stdlib and gpumon.model only): the sources, and with them psutil and pynvml, are
imported inside :func:`take_sample`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import TYPE_CHECKING, Any, TextIO

from gpumon import __version__
from gpumon.model import GpuProcess, GpuStats, GpuUnavailable, Sample, unlisted_memory_bytes

if TYPE_CHECKING:
    from gpumon.settings import Settings

#: Bumped only for breaking changes (a field removed, renamed, or changing type, unit or
#: meaning). New fields may appear without a bump; consumers ignore keys they do not know.
SCHEMA_VERSION = 1

# A plain path: pathlib costs `gpumon status` milliseconds on every call.
SCHEMA_PATH = os.path.join(os.path.dirname(__file__), "schema", "once.schema.json")

# Every GpuStats field goes into the JSON under its own name: a field added to the model
# shows up here at once, and the strict schema test then asks for it to be documented.
_GPU_FIELDS = tuple(field.name for field in dataclasses.fields(GpuStats))


def take_sample(settings: Settings, *, processes: bool = True, pcie: bool = True) -> Sample:
    """Open the source the settings ask for, read it once, close it.

    Never sleeps: NVML values are instantaneous (utilisation is already an average kept by
    the driver); only per-process CPU % needs a second reading, and it stays N/A here.

    Args:
        settings: which source (``--demo`` and its sizes).
        processes: False for a mode that shows no process: no process calls at all.
        pcie: False for a mode that does not show PCIe throughput (a slow NVML call).

    Returns:
        The sample; ``sample.unavailable`` is set when there is no usable driver.
    """
    from gpumon.sources import source_for

    source = source_for(settings, processes=processes, pcie=pcie)
    try:
        return source.sample()
    finally:
        source.close()


def no_gpu_data(sample: Sample) -> bool:
    """True when the sample carries no GPU data because NVML could not be used."""
    return sample.unavailable is not None and not sample.simulated


def report_unavailable(unavailable: GpuUnavailable, stream: TextIO | None = None) -> None:
    """Say on stderr, in one line plus an optional hint line, why there is no GPU data."""
    stream = stream if stream is not None else sys.stderr
    detail = f" ({unavailable.detail})" if unavailable.detail else ""
    print(f"gpumon: no NVIDIA GPU data: {unavailable.headline}{detail}", file=stream)
    if unavailable.hint:
        print(f"gpumon: hint: {unavailable.hint}", file=stream)


def iso_timestamp(timestamp_s: float) -> str:
    """``2024-06-10T12:00:00.123Z``: ISO 8601 / RFC 3339 in UTC, millisecond precision."""
    from datetime import datetime, timezone  # only the JSON output needs it

    moment = datetime.fromtimestamp(timestamp_s, tz=timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def error_to_dict(unavailable: GpuUnavailable | None) -> dict[str, str] | None:
    """The ``error`` object of the JSON output; ``None`` when GPU data could be read."""
    if unavailable is None:
        return None
    return {
        "reason": unavailable.reason.value,
        "headline": unavailable.headline,
        "detail": unavailable.detail,
        "hint": unavailable.hint,
    }


def process_to_dict(process: GpuProcess) -> dict[str, Any]:
    """One entry of a GPU's ``processes`` array."""
    return {
        "pid": process.pid,
        "user": process.user,
        "command": process.command,
        "gpu_memory_bytes": process.gpu_memory_bytes,
        "type": process.kind.value,
        "cpu_pct": process.cpu_pct,
        "rss_bytes": process.rss_bytes,
        "elapsed_s": process.elapsed_s,
        "visible": process.visible,
        "sm_utilization_pct": process.sm_utilization_pct,
    }


def gpu_to_dict(gpu: GpuStats, processes: tuple[GpuProcess, ...] | None) -> dict[str, Any]:
    """One entry of ``gpus``: every model field, the memory its listed processes do not
    account for, and its processes.

    ``processes`` is ``None`` (JSON ``null``: not known) for a lost GPU, a GPU whose process
    list NVML refused, or when the caller did not ask for processes, and a list (maybe empty)
    otherwise.
    """
    data = {name: getattr(gpu, name) for name in _GPU_FIELDS}
    data["memory_unlisted_bytes"] = (
        None if processes is None else unlisted_memory_bytes(gpu, processes)
    )
    if gpu.lost or gpu.processes_error is not None or processes is None:
        data["processes"] = None
    else:
        data["processes"] = [process_to_dict(process) for process in processes]
    return data


def sample_to_dict(sample: Sample, *, include_processes: bool = True) -> dict[str, Any]:
    """The whole sample as JSON-able data, following ``gpumon/schema/once.schema.json``.

    Args:
        sample: what to convert.
        include_processes: when False every GPU's ``processes`` is ``null``.

    Returns:
        A dict of str, int, float, bool, None, lists and dicts only.
    """
    by_gpu: dict[int, list[GpuProcess]] = {gpu.index: [] for gpu in sample.gpus}
    for process in sample.processes:
        by_gpu.setdefault(process.gpu_index, []).append(process)
    driver = sample.driver
    return {
        "schema_version": SCHEMA_VERSION,
        "gpumon_version": __version__,
        "simulated": sample.simulated,
        "hostname": sample.host.hostname,
        "driver_version": driver.driver_version if driver else None,
        "cuda_driver_version": driver.cuda_driver_version if driver else None,
        "nvml_version": driver.nvml_version if driver else None,
        "timestamp": iso_timestamp(sample.timestamp_s),
        "timestamp_s": sample.timestamp_s,
        "error": error_to_dict(sample.unavailable),
        "gpus": [
            gpu_to_dict(gpu, tuple(by_gpu[gpu.index]) if include_processes else None)
            for gpu in sample.gpus
        ],
    }
