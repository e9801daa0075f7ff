"""The NVML source: the only module in gpumon that imports ``pynvml``.

NVML is initialised once and device handles are cached. Every NVML call goes through
:meth:`Device.read`, the single choke point that turns an ``NVMLError`` into ``None``,
remembers NOT_SUPPORTED per device and field so it is not asked again every tick, and turns
``NVML_ERROR_GPU_IS_LOST`` into a LOST GPU while the others keep updating.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from gpumon.data.format import safe_text
from gpumon.data.model import (
    ON_DEMAND_GPU_FIELDS,
    DriverInfo,
    GpuProcess,
    GpuStats,
    GpuUnavailable,
    HostStats,
    Sample,
    UnavailableReason,
)
from gpumon.sources.nvml.device import Device
from gpumon.sources.nvml.errors import (
    FELL_OFF_THE_BUS,
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NO_PERMISSION,
    GpuLost,
    error_code,
    log_debug,
    nvml_text,
)
from gpumon.sources.nvml.health import XidWatch
from gpumon.sources.nvml.processes import ListedProcess, read_processes, read_sm_utilization

if TYPE_CHECKING:
    from gpumon.sources.host.inspector import HostProcessInfo, ProcessInspector

# A GPU's processes as NVML lists them (PID -> kind, memory, MIG instance) and their SM
# utilisation.
_DeviceProcesses = tuple[Device, dict[int, ListedProcess], dict[int, int]]

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


class NvmlSource:
    """Samples every NVIDIA GPU through NVML; never raises for a missing or broken driver."""

    simulated = False

    def __init__(
        self,
        *,
        nvml: ModuleType | None = None,
        inspector: ProcessInspector | None = None,
        host_sampler: Callable[[], HostStats] | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        read_processes: bool = True,
        read_pcie: bool = True,
        read_host_details: bool = True,
    ) -> None:
        """``clock`` stamps samples; ``monotonic`` paces what is not read every sample.
        ``read_processes``, ``read_pcie`` and ``read_host_details`` False skip those reads.
        """
        # Without processes or their details (status, once --no-processes) nothing but the
        # host name is shown: psutil is not even imported (a one-shot command pays its import
        # on every call).
        if read_processes and read_host_details:
            from gpumon.sources.host.inspector import ProcessInspector, sample_host

            self._inspector: ProcessInspector | None = inspector or ProcessInspector()
            self._host_sampler = host_sampler or sample_host
        else:
            self._inspector = None
            self._host_sampler = host_sampler or hostname_only
        self._read_processes = read_processes
        # Per-process SM utilisation is a detail too: `status` only needs the lists.
        self._read_sm_utilization = read_processes and read_host_details
        self._clock = clock
        self._monotonic = monotonic
        self._read_pcie = read_pcie
        #: Read :data:`~gpumon.data.model.ON_DEMAND_GPU_FIELDS` (the dashboard turns it off
        #: while no screen shows them; a plain attribute: set from any thread, taken by the
        #: next sample).
        self.read_details = True
        self._devices: list[Device] = []
        self._driver: DriverInfo | None = None
        self._initialised = False
        self._unavailable: GpuUnavailable | None = None
        self._given_nvml = nvml
        self._nvml: ModuleType | None = None
        self._xid: XidWatch | None = None
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
            code = error_code(error)
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
                log_debug("GPU %d handle: %s", index, error)
                handle = None  # no readings from it: shown as LOST with the reason, not retried
                lost = error_code(error) == NVML_ERROR_GPU_IS_LOST
                lost_reason = FELL_OFF_THE_BUS if lost else f"NVML cannot open this GPU: {error}"
            self._devices.append(
                Device(
                    nvml,
                    index,
                    handle,
                    lost_reason,
                    monotonic=self._monotonic,
                    read_pcie=self._read_pcie,
                )
            )
        self._xid = XidWatch(nvml)
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
        return nvml_text(value) if isinstance(value, (bytes, str)) else value

    def sample(self) -> Sample:
        """Read every GPU and its processes. A lost GPU never stops the others."""
        started = time.perf_counter()
        self._start()
        gpus: list[GpuStats] = []
        raw: list[_DeviceProcesses] = []
        if self._xid is not None:  # never waits: see gpumon.sources.nvml.health
            self._xid.drain(self._devices)
        details = self.read_details
        for device in self._devices:
            try:
                stats = device.stats(details=details)
                found = read_processes(device) if self._read_processes else {}
                sm_utilization = (
                    read_sm_utilization(device, found)
                    if found and self._read_sm_utilization
                    else {}
                )
            except GpuLost:
                gpus.append(device.lost_stats())
                continue
            if found is None:
                stats = dataclasses.replace(stats, processes_error=device.processes_error)
            gpus.append(stats)
            raw.append((device, found or {}, sm_utilization))
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
            processes_read=self._read_processes,
            unread_gpu_fields=frozenset() if details else ON_DEMAND_GPU_FIELDS,
        )

    def _join_processes(self, raw: list[_DeviceProcesses]) -> tuple[GpuProcess, ...]:
        """Each listed process with what the host tells of it; NVML's part alone without an
        inspector (``read_host_details=False``)."""
        details: dict[int, HostProcessInfo] = {}
        host_fields: tuple[str, ...] = ()  # without an inspector: GpuProcess's defaults
        if self._inspector is not None:
            from gpumon.sources.host.inspector import HOST_FIELDS, NOT_VISIBLE

            details = self._inspector.inspect({pid for _, found, _ in raw for pid in found})
            host_fields = HOST_FIELDS
        processes: list[GpuProcess] = []
        # Each GpuProcess built once, with its host part (a replace() per process costs ~2 µs).
        for device, found, sm_utilization in raw:
            for pid, (kind, memory, gpu_instance, compute_instance) in found.items():
                host = details.get(pid, NOT_VISIBLE) if host_fields else None
                processes.append(
                    GpuProcess(
                        gpu_index=device.index,
                        gpu_uuid=device.uuid,
                        pid=pid,
                        kind=kind,
                        gpu_memory_bytes=memory,
                        sm_utilization_pct=sm_utilization.get(pid),
                        gpu_instance_id=gpu_instance,
                        compute_instance_id=compute_instance,
                        **{name: getattr(host, name) for name in host_fields},
                    )
                )
        return tuple(processes)

    def close(self) -> None:
        if self._initialised and self._nvml is not None:
            self._initialised = False
            if self._xid is not None:
                self._xid.close()
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlShutdown()


def hostname_only() -> HostStats:
    """The host as modes that show no host strip need it: its name, every reading N/A."""
    return HostStats(safe_text(os.uname().nodename))


def _cuda_version(value: Any) -> str | None:
    """NVML reports the CUDA driver version as 12040 for 12.4."""
    if not isinstance(value, int) or value <= 0:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"
