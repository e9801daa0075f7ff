"""The NVML source: the only module in gpumon that imports ``pynvml``.

NVML is initialised once and device handles are cached. Every NVML call goes through
:meth:`_Device.read`, the single choke point that turns an ``NVMLError`` into ``None``,
remembers NOT_SUPPORTED per device and field so it is not asked again every tick, and turns
``NVML_ERROR_GPU_IS_LOST`` into a LOST GPU while the others keep updating.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from gpumon.model import (
    DriverInfo,
    GpuProcess,
    GpuStats,
    GpuUnavailable,
    ProcessKind,
    Sample,
    UnavailableReason,
)
from gpumon.sources.host import NOT_VISIBLE, ProcessInspector, sample_host

log = logging.getLogger(__name__)

# NVML return codes (nvml.h); spelled out so this module works with any binding version.
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25

# Asking again will not help: remember and stop asking.
_PERMANENT = frozenset(
    {NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_ARGUMENT_VERSION_MISMATCH}
)

# Linux pid_max can be at most 2**22; anything outside (0, 2**22] is a binding/driver ABI
# mismatch reading garbage (nvitop #75), not a process.
_MAX_PID = 1 << 22
_PSTATE_UNKNOWN = 32
_COMPUTE_MODES = {0: "Default", 1: "Exclusive Thread", 2: "Prohibited", 3: "Exclusive Process"}

_UNAVAILABLE_TEXT: dict[int, tuple[UnavailableReason, str, str]] = {
    NVML_ERROR_LIBRARY_NOT_FOUND: (
        UnavailableReason.LIBRARY_NOT_FOUND,
        "No NVIDIA driver: libnvidia-ml.so could not be loaded.",
        "Install the NVIDIA driver, or try `gpumon --demo` for a simulated server.",
    ),
    NVML_ERROR_DRIVER_NOT_LOADED: (
        UnavailableReason.DRIVER_NOT_LOADED,
        "The NVIDIA kernel driver is not loaded.",
        "Load it (`sudo modprobe nvidia`) or check `dmesg`; `gpumon --demo` shows a simulation.",
    ),
    NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        UnavailableReason.VERSION_MISMATCH,
        "Driver/library version mismatch: the driver was updated but the old kernel module "
        "is still loaded.",
        "Reboot (or reload the nvidia kernel modules) to finish the driver update.",
    ),
    NVML_ERROR_NO_PERMISSION: (
        UnavailableReason.NO_PERMISSION,
        "No permission to access the NVIDIA devices.",
        "Check the permissions of /dev/nvidia* (a container may need --gpus).",
    ),
}


class _GpuLost(Exception):
    """Raised inside a device read when NVML says the GPU fell off the bus."""


FELL_OFF_THE_BUS = "fell off the bus (NVML: GPU is lost); check dmesg for Xid 79"


def _unopened(error: BaseException) -> str:
    return f"NVML cannot open this GPU: {error}"


def _error_code(error: BaseException) -> int | None:
    value = getattr(error, "value", None)
    return value if isinstance(value, int) else None


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class _Device:
    """A cached handle plus what this GPU has said it does not support."""

    def __init__(
        self, nvml: ModuleType, index: int, handle: Any, lost_reason: str | None = None
    ) -> None:
        self.nvml = nvml
        # nvidia-ml-py raises this (not an NVMLError) when an unversioned call such as
        # nvmlDeviceGetComputeRunningProcesses (the R535 _v3 ABI) is missing from an older
        # driver. An empty tuple catches nothing, for bindings that predate it.
        self._version_mismatch: type[Exception] | tuple[()] = getattr(
            nvml, "NVMLLibraryMismatchError", ()
        )
        self.index = index
        self.handle = handle
        self.lost = handle is None
        self.lost_reason = lost_reason if self.lost else None
        self.unsupported: set[str] = set()
        self.uuid = f"LOST-{index}"
        self.name: str | None = None
        self.pci_bus_id: str | None = None
        self.slowdown_c: int | None = None
        self.shutdown_c: int | None = None
        self._identity_pending = False
        if not self.lost:
            self._read_identity()

    def read(self, field: str, call: Callable[..., Any], *args: Any) -> Any:
        """The choke point: every NVML call on this device goes through here."""
        if self.lost:
            raise _GpuLost
        if field in self.unsupported:
            return None
        try:
            return call(self.handle, *args)
        except self._version_mismatch as error:
            log.debug("GPU %d %s: %s", self.index, field, error)
            self.unsupported.add(field)  # the driver lacks this ABI: as FUNCTION_NOT_FOUND
            return None
        except self.nvml.NVMLError as error:
            code = _error_code(error)
            if code == NVML_ERROR_GPU_IS_LOST:
                self.lost = True
                self.lost_reason = FELL_OFF_THE_BUS
                raise _GpuLost from error
            if code in _PERMANENT:
                self.unsupported.add(field)
            else:
                log.debug("GPU %d %s: %s", self.index, field, error)
            return None

    def read_newest(
        self, versions: list[tuple[str, Callable[..., Any] | None, tuple[Any, ...]]]
    ) -> Any:
        """Read through the newest version of a call that this driver answers.

        ``versions`` are (field, call or None when the binding lacks it, arguments), newest
        first. A version the driver lacks is remembered as unsupported and skipped from then
        on; a transient error gives ``None`` without trying an older version.
        """
        for field, call, args in versions:
            if call is None or field in self.unsupported:
                continue
            value = self.read(field, call, *args)
            if value is not None or field not in self.unsupported:
                return value
        return None

    def _read_identity(self) -> None:
        """Read what never changes. A field that failed transiently is read again next tick."""
        nvml = self.nvml
        try:
            uuid = self.read("uuid", nvml.nvmlDeviceGetUUID)
            self.uuid = _text(uuid) if uuid is not None else f"GPU-index-{self.index}"
            name = self.read("name", nvml.nvmlDeviceGetName)
            self.name = _text(name) if name is not None else None
            pci = self.read("pci", nvml.nvmlDeviceGetPciInfo)
            if pci is not None:
                self.pci_bus_id = _text(getattr(pci, "busId", None) or pci.busIdLegacy)
            self._identity_pending = (
                (uuid is None and "uuid" not in self.unsupported)
                or (name is None and "name" not in self.unsupported)
                or (pci is None and "pci" not in self.unsupported)
            )
            self.slowdown_c = self.read(
                "slowdown",
                nvml.nvmlDeviceGetTemperatureThreshold,
                nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
            )
            self.shutdown_c = self.read(
                "shutdown",
                nvml.nvmlDeviceGetTemperatureThreshold,
                nvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
            )
        except _GpuLost:
            pass

    def lost_stats(self) -> GpuStats:
        return GpuStats(
            index=self.index,
            uuid=self.uuid,
            name=self.name,
            pci_bus_id=self.pci_bus_id,
            lost=True,
            lost_reason=self.lost_reason or FELL_OFF_THE_BUS,
        )

    def stats(self) -> GpuStats:
        """Read the per-tick fields. Raises :class:`_GpuLost`."""
        nvml = self.nvml
        if self._identity_pending:
            self._read_identity()
        used, total, reserved = self._memory()
        utilization = self.read("utilization", nvml.nvmlDeviceGetUtilizationRates)
        power_mw = self.read("power", nvml.nvmlDeviceGetPowerUsage)
        limit_mw = self.read("power_limit", nvml.nvmlDeviceGetEnforcedPowerLimit)
        persistence = self.read("persistence", nvml.nvmlDeviceGetPersistenceMode)
        display = self.read("display", nvml.nvmlDeviceGetDisplayActive)
        pstate = self.read("pstate", nvml.nvmlDeviceGetPerformanceState)
        compute_mode = self.read("compute_mode", nvml.nvmlDeviceGetComputeMode)
        mig = self.read("mig", nvml.nvmlDeviceGetMigMode)
        return GpuStats(
            index=self.index,
            uuid=self.uuid,
            name=self.name,
            pci_bus_id=self.pci_bus_id,
            persistence_mode=None if persistence is None else bool(persistence),
            display_active=None if display is None else bool(display),
            performance_state=None if pstate in (None, _PSTATE_UNKNOWN) else int(pstate),
            fan_pct=self.read("fan", nvml.nvmlDeviceGetFanSpeed),
            temperature_c=self.read(
                "temperature", nvml.nvmlDeviceGetTemperature, nvml.NVML_TEMPERATURE_GPU
            ),
            temperature_slowdown_c=self.slowdown_c,
            temperature_shutdown_c=self.shutdown_c,
            power_draw_w=None if power_mw is None else power_mw / 1000.0,
            power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
            memory_used_bytes=used,
            memory_total_bytes=total,
            memory_reserved_bytes=reserved,
            utilization_gpu_pct=None if utilization is None else int(utilization.gpu),
            utilization_memory_pct=None if utilization is None else int(utilization.memory),
            clock_sm_mhz=self.read("clock_sm", nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_SM),
            clock_memory_mhz=self.read(
                "clock_memory", nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_MEM
            ),
            compute_mode=None if compute_mode is None else _COMPUTE_MODES.get(compute_mode),
            ecc_errors_uncorrected_volatile=self.read(
                "ecc_volatile",
                nvml.nvmlDeviceGetTotalEccErrors,
                nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                nvml.NVML_VOLATILE_ECC,
            ),
            mig_mode=None if mig is None else bool(mig[0]),
        )

    def _memory(self) -> tuple[int | None, int | None, int | None]:
        nvml = self.nvml
        # v2 separates reserved memory; v1 counts it as used on R510+ (disagrees with nvidia-smi).
        # A transient v2 error is N/A for this tick, not a reason to fall back to v1 for good.
        v2 = getattr(nvml, "nvmlMemory_v2", None)
        info = self.read_newest(
            [
                ("memory_v2", nvml.nvmlDeviceGetMemoryInfo if v2 else None, (v2,)),
                ("memory", nvml.nvmlDeviceGetMemoryInfo, ()),
            ]
        )
        if info is None:
            return None, None, None
        reserved = getattr(info, "reserved", None)
        return int(info.used), int(info.total), None if reserved is None else int(reserved)

    def processes(self) -> dict[int, tuple[ProcessKind, int | None]]:
        """PID -> (kind, GPU memory). A PID in both lists is C+G, counted once."""
        nvml = self.nvml
        found: dict[int, tuple[ProcessKind, int | None]] = {}
        for field, function, kind in (
            ("compute_processes", "nvmlDeviceGetComputeRunningProcesses", ProcessKind.COMPUTE),
            ("graphics_processes", "nvmlDeviceGetGraphicsRunningProcesses", ProcessKind.GRAPHICS),
        ):
            # The unversioned call is the R535+ (_v3) ABI; drivers before R535 answer _v2.
            entries = self.read_newest(
                [
                    (field, getattr(nvml, function, None), ()),
                    (f"{field}_v2", getattr(nvml, f"{function}_v2", None), ()),
                ]
            )
            for entry in entries or ():
                pid = int(entry.pid)
                if not 0 < pid <= _MAX_PID:
                    continue
                memory = getattr(entry, "usedGpuMemory", None)
                memory = int(memory) if isinstance(memory, int) and memory < (1 << 62) else None
                if pid in found:
                    previous_kind, previous_memory = found[pid]
                    if previous_kind is kind:
                        # Listed twice in one list: one process on several MIG instances.
                        total = _add_known(previous_memory, memory)
                        found[pid] = (previous_kind, total)
                    else:
                        # In both lists (C+G): the same memory reported twice, count it once.
                        both = max(
                            (m for m in (previous_memory, memory) if m is not None), default=None
                        )
                        found[pid] = (ProcessKind.BOTH, both)
                else:
                    found[pid] = (kind, memory)
        return found


class NvmlSource:
    """Samples every NVIDIA GPU through NVML; never raises for a missing or broken driver."""

    simulated = False

    def __init__(
        self,
        *,
        nvml: ModuleType | None = None,
        inspector: ProcessInspector | None = None,
        host_sampler: Callable[[], Any] = sample_host,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._inspector = inspector or ProcessInspector()
        self._host_sampler = host_sampler
        self._clock = clock
        self._devices: list[_Device] = []
        self._driver: DriverInfo | None = None
        self._initialised = False
        self._unavailable: GpuUnavailable | None = None
        self._given_nvml = nvml
        self._nvml: ModuleType | None = None
        self._started = False

    def _start(self) -> None:
        """Load and initialise NVML, once. Deferred to the first sample so that it runs on
        the sampling thread: without persistence mode nvmlInit can take seconds."""
        if self._started:
            return
        self._started = True
        self._nvml = self._given_nvml if self._given_nvml is not None else self._import()
        if self._nvml is not None:
            self._init()

    @property
    def unavailable(self) -> GpuUnavailable | None:
        """Why NVML cannot be used, or None when it can (initialises NVML if needed)."""
        self._start()
        return self._unavailable

    def _import(self) -> ModuleType | None:
        try:
            import pynvml
        except ImportError as error:
            self._unavailable = GpuUnavailable(
                UnavailableReason.LIBRARY_NOT_FOUND,
                "The NVML Python binding is not installed.",
                str(error),
                "pip install nvidia-ml-py",
            )
            return None
        if not hasattr(pynvml, "nvmlInitWithFlags"):
            self._unavailable = GpuUnavailable(
                UnavailableReason.SHADOWED_BINDING,
                "An old `pynvml` package shadows NVIDIA's nvidia-ml-py binding.",
                f"pynvml was imported from {getattr(pynvml, '__file__', '?')}",
                "pip uninstall -y pynvml nvidia-ml-py3 py3nvml && pip install -U nvidia-ml-py",
            )
            return None
        return pynvml

    def _init(self) -> None:
        nvml = self._nvml
        assert nvml is not None
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as error:
            code = _error_code(error)
            reason, headline, hint = _UNAVAILABLE_TEXT.get(
                code if code is not None else -1,
                (UnavailableReason.OTHER, "NVML could not be initialised.", ""),
            )
            self._unavailable = GpuUnavailable(reason, headline, f"NVML: {error}", hint)
            return
        self._initialised = True
        self._driver = DriverInfo(
            driver_version=self._system(nvml.nvmlSystemGetDriverVersion),
            cuda_driver_version=_cuda_version(self._system(nvml.nvmlSystemGetCudaDriverVersion)),
            nvml_version=self._system(nvml.nvmlSystemGetNVMLVersion),
        )
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as error:
            self._unavailable = GpuUnavailable(
                UnavailableReason.OTHER, "NVML could not count the GPUs.", f"NVML: {error}"
            )
            return
        for index in range(count):
            lost_reason = None
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
            except nvml.NVMLError as error:
                log.debug("GPU %d handle: %s", index, error)
                handle = None  # no readings from it: shown as LOST with the reason, not retried
                lost = _error_code(error) == NVML_ERROR_GPU_IS_LOST
                lost_reason = FELL_OFF_THE_BUS if lost else _unopened(error)
            self._devices.append(_Device(nvml, index, handle, lost_reason))
        if not self._devices:
            self._unavailable = GpuUnavailable(
                UnavailableReason.NO_DEVICES,
                "The NVIDIA driver is loaded but reports no GPUs.",
                "nvmlDeviceGetCount() returned 0",
            )

    def _system(self, call: Callable[[], Any]) -> Any:
        assert self._nvml is not None
        try:
            value = call()
        except (self._nvml.NVMLError, AttributeError):
            return None
        return _text(value) if isinstance(value, (bytes, str)) else value

    def sample(self) -> Sample:
        """Read every GPU and its processes. A lost GPU never stops the others."""
        started = time.perf_counter()
        self._start()
        gpus: list[GpuStats] = []
        raw: list[tuple[_Device, dict[int, tuple[ProcessKind, int | None]]]] = []
        for device in self._devices:
            try:
                stats = device.stats()
                found = device.processes()
            except _GpuLost:
                gpus.append(device.lost_stats())
                continue
            gpus.append(stats)
            raw.append((device, found))
        processes = self._join_processes(raw)
        return Sample(
            timestamp_s=self._clock(),
            host=self._host_sampler(),
            driver=self._driver,
            gpus=tuple(gpus),
            processes=processes,
            simulated=False,
            unavailable=self._unavailable,
            duration_s=time.perf_counter() - started,
        )

    def _join_processes(
        self, raw: list[tuple[_Device, dict[int, tuple[ProcessKind, int | None]]]]
    ) -> tuple[GpuProcess, ...]:
        details = self._inspector.inspect({pid for _, found in raw for pid in found})
        processes: list[GpuProcess] = []
        for device, found in raw:
            for pid, (kind, memory) in found.items():
                host = details.get(pid, NOT_VISIBLE)
                processes.append(
                    GpuProcess(
                        gpu_index=device.index,
                        gpu_uuid=device.uuid,
                        pid=pid,
                        kind=kind,
                        gpu_memory_bytes=memory,
                        user=host.user,
                        command=host.command,
                        cpu_pct=host.cpu_pct,
                        rss_bytes=host.rss_bytes,
                        elapsed_s=host.elapsed_s,
                        visible=host.visible,
                        is_current_user=host.is_current_user,
                    )
                )
        return tuple(processes)

    def close(self) -> None:
        if self._initialised and self._nvml is not None:
            self._initialised = False
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass


def _add_known(first: int | None, second: int | None) -> int | None:
    if first is None or second is None:
        return first if second is None else second
    return first + second


def _cuda_version(value: Any) -> str | None:
    """NVML reports the CUDA driver version as 12040 for 12.4."""
    if not isinstance(value, int) or value <= 0:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"
