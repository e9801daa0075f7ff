"""Immutable samples: what every source produces and every view reads.

Units live in field names (``memory_used_bytes``, ``power_draw_w``). ``None`` always means
"not supported by this GPU / not readable here" and is shown as N/A, never as 0.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpumon.data.format import NA
from gpumon.data.format import short_uuid as _short_uuid

# NVML's utilisation counters average over 1/6 s to 1 s: polling faster adds cost, not data.
MIN_INTERVAL_S = 0.25
MAX_INTERVAL_S = 60.0


class ProcessKind(str, enum.Enum):
    """How a process uses a GPU, as nvidia-smi's "Type"; UNKNOWN (``?``, JSON ``null``) where the
    source cannot tell.
    """

    COMPUTE = "C"
    GRAPHICS = "G"
    BOTH = "C+G"
    UNKNOWN = "?"


class UnavailableReason(str, enum.Enum):
    """Why no GPU data can be read at all."""

    LIBRARY_NOT_FOUND = "library_not_found"
    DRIVER_NOT_LOADED = "driver_not_loaded"
    VERSION_MISMATCH = "version_mismatch"
    NO_PERMISSION = "no_permission"
    SHADOWED_BINDING = "shadowed_binding"
    NO_DEVICES = "no_devices"
    NOT_ANSWERING = "not_answering"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class GpuUnavailable:
    """NVML could not be used; ``headline`` says why in words, ``detail`` is NVML's own text."""

    reason: UnavailableReason
    headline: str
    detail: str
    hint: str = ""


@dataclass(frozen=True, slots=True)
class DriverInfo:
    """Versions that apply to the whole machine."""

    driver_version: str | None
    cuda_driver_version: str | None
    nvml_version: str | None


@dataclass(frozen=True, slots=True)
class HostStats:
    """The host strip: CPU, load, RAM and swap; ``None`` where not read."""

    hostname: str
    cpu_pct: float | None = None
    load_average: tuple[float, float, float] | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    swap_used_bytes: int | None = None
    swap_total_bytes: int | None = None
    cpu_count: int | None = None


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG device of a GPU in MIG mode: ``index`` is NVML's MIG device index, ``profile`` the
    name after "MIG" (``3g.40gb``), ``uuid`` its ``MIG-...`` UUID; memory is the GPU instance's.
    """

    gpu_index: int
    index: int
    gpu_instance_id: int | None
    compute_instance_id: int | None
    profile: str | None
    uuid: str | None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None

    @property
    def memory_used_fraction(self) -> float | None:
        return _fraction(self.memory_used_bytes, self.memory_total_bytes)


@dataclass(frozen=True, slots=True)
class GpuStats:
    """One GPU at one instant. A lost GPU keeps its identity; every reading is ``None``.

    ``lost_reason`` says why in words a user can act on. ``uuid`` is ``None`` while NVML has
    not told it. ``processes_error`` is set when the process list could not be read: its
    processes are unknown, not none. ``mig_instances`` is ``()`` without MIG, ``None`` when MIG
    is on but its instances could not be read; under MIG the device utilisation is ``None``.
    ``clock_event_reasons`` is ``()`` when nothing holds the clocks, ``None`` when NVML cannot
    tell. PCIe throughput and the health counters may be older than the sample (read every few
    seconds). ``xid_last``/``xid_count``: the last Xid code (0: none) and how many since gpumon
    began watching; ``None`` where not watched, and in a source's first sample.
    """

    index: int
    uuid: str | None
    name: str | None = None
    pci_bus_id: str | None = None
    lost: bool = False
    lost_reason: str | None = None
    processes_error: str | None = None
    persistence_mode: bool | None = None
    display_active: bool | None = None
    performance_state: int | None = None
    fan_pct: int | None = None
    temperature_c: int | None = None
    temperature_slowdown_c: int | None = None
    temperature_shutdown_c: int | None = None
    temperature_memory_c: int | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    energy_j: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    memory_free_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    utilization_gpu_pct: int | None = None
    utilization_memory_pct: int | None = None
    utilization_encoder_pct: int | None = None
    utilization_decoder_pct: int | None = None
    pcie_rx_bytes_per_s: int | None = None
    pcie_tx_bytes_per_s: int | None = None
    clock_graphics_mhz: int | None = None
    clock_sm_mhz: int | None = None
    clock_memory_mhz: int | None = None
    clock_event_reasons: tuple[str, ...] | None = None
    compute_mode: str | None = None
    ecc_errors_uncorrected_volatile: int | None = None
    pcie_replays: int | None = None
    remapped_rows_correctable: int | None = None
    remapped_rows_uncorrectable: int | None = None
    remapped_rows_pending: bool | None = None
    remapped_rows_failed: bool | None = None
    xid_last: int | None = None
    xid_count: int | None = None
    mig_mode: bool | None = None
    mig_instances: tuple[MigInstance, ...] | None = ()

    @property
    def short_uuid(self) -> str:
        """``GPU-1a2b3c4d`` instead of the full 40-character UUID; N/A when not known."""
        return NA if self.uuid is None else _short_uuid(self.uuid)

    @property
    def memory_used_fraction(self) -> float | None:
        return _fraction(self.memory_used_bytes, self.memory_total_bytes)

    @property
    def power_fraction(self) -> float | None:
        return _fraction(self.power_draw_w, self.power_limit_w)


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process using a GPU, joined with what the host can tell about it.

    ``visible`` is False when NVML's PID is not on this host's ``/proc`` (another PID namespace,
    or ``exited``): its memory is real, its host details absent. ``sm_utilization_pct`` is its
    share of the SMs in NVML's latest window, 0 for a compute process with no sample, ``None``
    when NVML cannot tell. ``create_time_s`` with the PID is its identity (a signal is sent only
    while it matches). ``job_id``, ``container_id`` come from ``/proc/PID/cgroup``;
    ``gpu_instance_id``, ``compute_instance_id`` name its MIG instance (``None`` without MIG).
    """

    gpu_index: int
    gpu_uuid: str | None
    pid: int
    kind: ProcessKind
    gpu_memory_bytes: int | None
    user: str | None = None
    command: str | None = None
    cpu_pct: float | None = None
    rss_bytes: int | None = None
    elapsed_s: float | None = None
    visible: bool = True
    is_current_user: bool = False
    # Last: callers build GpuProcess positionally up to ``command``.
    sm_utilization_pct: int | None = None
    create_time_s: float | None = None
    job_id: str | None = None
    container_id: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    exited: bool = False

    @property
    def key(self) -> tuple[int, int]:
        """Stable identity across samples: (NVML index of the GPU, PID). NVML indices do not
        change while the driver stays loaded; the UUID may not be known yet."""
        return (self.gpu_index, self.pid)


@dataclass(frozen=True, slots=True)
class Sample:
    """Everything gpumon knows at one instant."""

    timestamp_s: float
    host: HostStats
    driver: DriverInfo | None
    gpus: tuple[GpuStats, ...]
    processes: tuple[GpuProcess, ...] = ()
    simulated: bool = False
    unavailable: GpuUnavailable | None = None
    duration_s: float = field(default=0.0, compare=False)
    #: False when the source was asked not to read process lists (``status``, ``once
    #: --no-processes``): then ``processes`` is empty because nothing was read, not because
    #: no process runs, and no GPU may be called free.
    processes_read: bool = True
    #: GPU fields the source was asked not to read this time (the dashboard reads
    #: :data:`ON_DEMAND_GPU_FIELDS` only while a screen shows them): there ``None`` means
    #: "not read", never N/A.
    unread_gpu_fields: frozenset[str] = frozenset()

    def processes_on(self, gpu_index: int) -> tuple[GpuProcess, ...]:
        """The processes listed on the GPU with this NVML index."""
        return tuple(p for p in self.processes if p.gpu_index == gpu_index)


#: GPU fields a source may leave unread while nothing shows them (NVML: a call or two each per
#: GPU, every sample or every few seconds): the graphics clock (the SM clock, read always, is
#: the cards' and graphs'), why the clocks are held down, the memory's temperature, the video
#: engines, the energy counter, PCIe replays and remapped rows. The dashboard's GPU screen and
#: every output show them; those always read them.
ON_DEMAND_GPU_FIELDS = frozenset(
    {
        "clock_graphics_mhz",
        "clock_event_reasons",
        "temperature_memory_c",
        "utilization_encoder_pct",
        "utilization_decoder_pct",
        "energy_j",
        "pcie_replays",
        "remapped_rows_correctable",
        "remapped_rows_uncorrectable",
        "remapped_rows_pending",
        "remapped_rows_failed",
    }
)


#: Memory in use that no listed process accounts for is worth a word when it is more than this
#: and more than half of the memory in use: processes of another container or PID namespace
#: that NVML does not list here, or a driver that lists none.
UNLISTED_MEMORY_NOTABLE_BYTES = 1024**3


def unlisted_memory_bytes(gpu: GpuStats, processes: Sequence[GpuProcess]) -> int | None:
    """GPU memory in use (NVML's v2 "used") that the listed ``processes`` do not account for;
    ``None`` when the processes or a memory reading are unknown.
    """
    if gpu.lost or gpu.processes_error is not None or gpu.memory_used_bytes is None:
        return None
    listed = 0
    for process in processes:
        if process.gpu_memory_bytes is None:
            return None
        listed += process.gpu_memory_bytes
    return max(0, gpu.memory_used_bytes - listed)


def notable_unlisted_memory_bytes(gpu: GpuStats, processes: Sequence[GpuProcess]) -> int | None:
    """:func:`unlisted_memory_bytes` when it is worth telling the user (more than 1 GiB and more
    than half of the memory in use), else ``None``."""
    unlisted = unlisted_memory_bytes(gpu, processes)
    if unlisted is None or gpu.memory_used_bytes is None:
        return None
    if unlisted > UNLISTED_MEMORY_NOTABLE_BYTES and 2 * unlisted > gpu.memory_used_bytes:
        return unlisted
    return None


def _fraction(used: float | None, total: float | None) -> float | None:
    if used is None or not total:
        return None
    return max(0.0, min(1.0, used / total))
