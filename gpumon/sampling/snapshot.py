"""One sample for the headless modes, and that sample as plain JSON-able data.

``once``, ``once --json``, ``status`` and ``export`` share how a sample is taken, what "no
driver" looks like, and the JSON shape of ``docs/json-schema.md``. Kept light: the sources
(psutil, pynvml) are imported inside :func:`take_sample`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TextIO

import gpumon  # gpumon.__version__, read when a document is built
from gpumon.data.format import known_time
from gpumon.data.free import free_gpu_indices, processes_known
from gpumon.data.model import (
    GpuProcess,
    GpuStats,
    GpuUnavailable,
    HostStats,
    ProcessKind,
    Sample,
    UnavailableReason,
    unlisted_memory_bytes,
)

if TYPE_CHECKING:
    from gpumon.config import Settings
    from gpumon.data.views import ProcessFilter, UserUsage
    from gpumon.sources.base import GpuSource

#: Bumped only for breaking changes (a field removed, renamed, or changing type, unit or
#: meaning). New fields may appear without a bump; consumers ignore keys they do not know.
SCHEMA_VERSION = 1

#: ``Settings.free_threshold_mib``'s default, for callers without settings (a test checks
#: that the two agree): less memory in use than this, and no process, is FREE.
DEFAULT_FREE_THRESHOLD_MIB = 1024

# A plain path: pathlib costs `gpumon status` milliseconds on every call.
SCHEMA_PATH = os.path.join(os.path.dirname(os.path.dirname(__file__)), "schema", "once.schema.json")

# Every GpuStats field goes into the JSON under its own name: a field added to the model
# shows up here at once, and the strict schema test then asks for it to be documented.
_GPU_FIELDS = tuple(field.name for field in dataclasses.fields(GpuStats))


#: How long a one-shot command waits for its sample. Far beyond a healthy read (NVML's first
#: init on a server without persistence mode can take seconds per GPU), and finite: a stuck
#: driver must not hang a script's ``CUDA_VISIBLE_DEVICES=$(gpumon pick)`` for ever.
SAMPLE_TIMEOUT_S = 30.0


def take_sample(
    settings: Settings,
    *,
    processes: bool = True,
    pcie: bool = True,
    host_details: bool = True,
    details: bool = True,
    timeout_s: float | None = None,
) -> Sample:
    """Open the source the settings ask for, read it once, close it; never sleeps.

    ``processes``, ``pcie``, ``host_details`` and ``details`` False skip what a mode does not
    show (as :func:`~gpumon.sources.base.open_source`; ``details``: the on-demand fields, named
    in ``sample.unread_gpu_fields``). Past ``timeout_s`` the driver is *not answering*: the
    sample is ``unavailable``, with no GPU reading at all, as it is without a driver.
    """
    from gpumon.sources.base import read_details, source_for

    source = source_for(settings, processes=processes, pcie=pcie, host_details=host_details)
    read_details(source, details)
    reader = SampleReader(source)
    try:
        return reader.read(timeout_s)
    finally:
        reader.close()


class SampleReader:
    """One source read again and again, each read bounded (``pick --wait`` opens NVML once). A read
    past its timeout gives a *not answering* sample, and the source is never read or closed again.
    """

    def __init__(self, source: GpuSource) -> None:
        self.source = source
        self.simulated = source.simulated
        #: True once a read did not end in time.
        self.stuck = False

    def read(self, timeout_s: float | None = None) -> Sample:
        """One sample within ``timeout_s`` (default :data:`SAMPLE_TIMEOUT_S`)."""
        wait_s = SAMPLE_TIMEOUT_S if timeout_s is None else timeout_s
        if self.stuck:
            return not_answering(self.simulated, wait_s)
        if self.simulated:  # nothing to get stuck in
            return self.source.sample()
        import threading  # pynvml has imported it already

        outcome: list[Sample] = []
        failure: list[BaseException] = []

        def read() -> None:
            try:
                outcome.append(self.source.sample())
            except BaseException as error:  # handed to the caller's thread
                failure.append(error)

        reader = threading.Thread(target=read, name="gpumon-sample", daemon=True)
        reader.start()
        reader.join(wait_s)
        if reader.is_alive():
            self.stuck = True
            return not_answering(self.simulated, wait_s)
        if failure:
            raise failure[0]
        return outcome[0]

    def close(self) -> None:
        """Release the source, unless a read of it is stuck."""
        if not self.stuck:
            self.source.close()


def not_answering(simulated: bool, timeout_s: float) -> Sample:
    """A sample with no GPU data: the driver did not answer within ``timeout_s``."""
    import socket
    import time

    return Sample(
        timestamp_s=time.time(),
        host=HostStats(socket.gethostname(), None, None, None, None, None, None),
        driver=None,
        gpus=(),
        simulated=simulated,
        unavailable=GpuUnavailable(
            UnavailableReason.NOT_ANSWERING,
            f"NVML did not answer within {timeout_s:g} s",
            "a driver call is stuck",
            "check dmesg for Xid errors and nvidia-smi; a GPU may need a reset",
        ),
    )


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


def iso_timestamp(timestamp_s: float | None) -> str | None:
    """``2024-06-10T12:00:00.123Z``: ISO 8601 / RFC 3339 in UTC, millisecond precision;
    ``None`` (JSON ``null``: not known) for ``None`` and for a number that is not a real
    moment (:func:`gpumon.data.format.known_time`: NaN, Inf, negative, past the year 9999)."""
    from datetime import datetime, timezone  # only the JSON output needs it

    known = known_time(timestamp_s)
    if known is None:
        return None
    moment = datetime.fromtimestamp(known, tz=timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def process_to_dict(process: GpuProcess, idle_s: float | None = None) -> dict[str, Any]:
    """One entry of a GPU's ``processes`` array; ``idle_s``: how long it has held its memory
    idle, from the history database (``None``: not known)."""
    return {
        "pid": process.pid,
        "user": process.user,
        "command": process.command,
        "gpu_memory_bytes": process.gpu_memory_bytes,
        "type": None if process.kind is ProcessKind.UNKNOWN else process.kind.value,
        "cpu_pct": process.cpu_pct,
        "rss_bytes": process.rss_bytes,
        "elapsed_s": process.elapsed_s,
        "visible": process.visible,
        "exited": process.exited,
        "sm_utilization_pct": process.sm_utilization_pct,
        "job_id": process.job_id,
        "container_id": process.container_id,
        "gpu_instance_id": process.gpu_instance_id,
        "compute_instance_id": process.compute_instance_id,
        "idle_s": idle_s,
    }


def gpu_to_dict(
    gpu: GpuStats,
    processes: tuple[GpuProcess, ...] | None,
    *,
    free: bool = False,
    listed: tuple[GpuProcess, ...] | None = None,
    idle_s: Mapping[tuple[int, int], float | None] | None = None,
) -> dict[str, Any]:
    """One entry of ``gpus``: every model field, unlisted memory, FREE, and its processes.

    ``processes`` is ``None`` (not known) for a lost GPU, a refused list or when not asked;
    ``free`` is then False. ``listed``: the processes a filter keeps; ``idle_s``: per process key.
    """
    data = {name: getattr(gpu, name) for name in _GPU_FIELDS}
    if gpu.lost or gpu.mig_instances is None:  # a lost GPU's instances are unknown too
        data["mig_instances"] = None
    else:
        data["mig_instances"] = [  # each under its GPU: no gpu_index of its own
            {key: value for key, value in dataclasses.asdict(m).items() if key != "gpu_index"}
            for m in gpu.mig_instances
        ]
    data["memory_unlisted_bytes"] = (
        None if processes is None else unlisted_memory_bytes(gpu, processes)
    )
    known = not gpu.lost and gpu.processes_error is None and processes is not None
    data["free"] = free and known
    shown = processes if listed is None else listed
    idle = idle_s or {}
    data["processes"] = (
        [process_to_dict(p, idle.get(p.key)) for p in shown or ()] if known else None
    )
    return data


def user_summary_of(sample: Sample) -> tuple[tuple[UserUsage, ...], tuple[int, ...]]:
    """Per user, what the GPUs whose process lists are known hold; and the NVML indices of
    the GPUs left out because theirs are not (lost, refused; every GPU when the sample
    carries no process lists)."""
    from gpumon.data.views import user_summary  # as in sample_to_dict

    known = {gpu.index for gpu in sample.gpus if processes_known(gpu, sample)}
    usages = user_summary(p for p in sample.processes if p.gpu_index in known)
    left_out = tuple(gpu.index for gpu in sample.gpus if gpu.index not in known)
    return usages, left_out


def usage_to_dict(usage: UserUsage) -> dict[str, Any]:
    """One entry of ``users``: an unknown owner and another PID namespace are ``null``
    users (``visible`` tells them apart), never a made-up name."""
    from gpumon.data.views import OTHER_NAMESPACE, UNKNOWN_USER  # as in sample_to_dict

    named = usage.user not in (UNKNOWN_USER, OTHER_NAMESPACE)
    return {
        "user": usage.user if named else None,
        "visible": usage.user != OTHER_NAMESPACE,
        "current_user": usage.is_current_user,
        "gpus": list(usage.gpu_indices),
        "gpu_memory_bytes": usage.gpu_memory_bytes,
        "gpu_memory_partial": usage.memory_partial,
        "process_count": usage.process_count,
    }


def sample_to_dict(
    sample: Sample,
    *,
    include_processes: bool = True,
    free_threshold_mib: int = DEFAULT_FREE_THRESHOLD_MIB,
    process_filter: ProcessFilter | None = None,
    idle_s: Mapping[tuple[int, int], float | None] | None = None,
) -> dict[str, Any]:
    """The whole sample as JSON-able data, following ``gpumon/schema/once.schema.json``.

    Without ``include_processes`` every ``processes`` and ``users`` is ``null`` and no GPU is
    free. ``process_filter`` (``--user``) limits what is listed and summed, not FREE or unlisted
    memory. ``idle_s``: per process key, from the history; otherwise ``idle_s`` is null.
    """
    # Here, not at the top: `gpumon status` takes its sample through this module and needs
    # none of the views' classes (their dataclasses cost its start-up a millisecond).
    from gpumon.data.views import ProcessFilter, filter_processes

    include_processes = include_processes and sample.processes_read
    free = free_gpu_indices(sample, free_threshold_mib) if include_processes else frozenset()
    process_filter = process_filter or ProcessFilter()
    shown = filter_processes(sample.processes, process_filter)
    users = None
    if include_processes and sample.unavailable is None:
        summed = dataclasses.replace(sample, processes=shown)
        users = [usage_to_dict(usage) for usage in user_summary_of(summed)[0]]
    driver, error = sample.driver, sample.unavailable
    return {
        "schema_version": SCHEMA_VERSION,
        "gpumon_version": gpumon.__version__,
        "simulated": sample.simulated,
        "hostname": sample.host.hostname,
        "driver_version": driver.driver_version if driver else None,
        "cuda_driver_version": driver.cuda_driver_version if driver else None,
        "nvml_version": driver.nvml_version if driver else None,
        "timestamp": iso_timestamp(sample.timestamp_s),
        "timestamp_s": sample.timestamp_s,
        "error": None
        if error is None
        else {**dataclasses.asdict(error), "reason": error.reason.value},
        "gpus": [
            gpu_to_dict(
                gpu,
                sample.processes_on(gpu.index) if include_processes else None,
                free=gpu.index in free,
                listed=(
                    tuple(p for p in shown if p.gpu_index == gpu.index)
                    if process_filter.active
                    else None
                ),
                idle_s=idle_s,
            )
            for gpu in sample.gpus
        ],
        "users": users,
    }
