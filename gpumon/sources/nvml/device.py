"""One NVIDIA GPU as NVML sees it: a cached handle behind a single choke point.

Every NVML call goes through :meth:`Device.read`, which turns an ``NVMLError`` into ``None``,
remembers NOT_SUPPORTED per field, and turns ``GPU_IS_LOST`` into a LOST GPU while the others
keep updating. Never imports ``pynvml``: :class:`~gpumon.sources.nvml.source.NvmlSource`
hands each device the loaded binding.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from gpumon.data.model import GpuStats, MigInstance
from gpumon.sources.nvml.codecs import Codecs
from gpumon.sources.nvml.errors import (
    FELL_OFF_THE_BUS,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH,
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_NOT_SUPPORTED,
    GpuLost,
    error_code,
    log_debug,
    nvml_text,
)
from gpumon.sources.nvml.health import Health
from gpumon.sources.nvml.lists import ListReader
from gpumon.sources.nvml.settings import Settings

if TYPE_CHECKING:
    from gpumon.sources.nvml.mig import MigReader


# Asking again will not help: remember and stop asking.
_PERMANENT = frozenset(
    {NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_ARGUMENT_VERSION_MISMATCH}
)

# Linux pid_max can be at most 2**22; anything outside (0, 2**22] is a binding/driver ABI
# mismatch reading garbage (nvitop #75), not a process.
MAX_PID = 1 << 22
_PSTATE_UNKNOWN = 32

#: nvmlDeviceGetPcieThroughput measures a counter for 20 ms per call (two calls per GPU), so
#: it is read at most once per this many seconds per GPU; samples in between repeat the last
#: reading, which is therefore up to this old.
PCIE_REFRESH_S = 5.0
# NVML reports PCIe throughput in KB/s at 1 KB granularity; nvidia-smi and nvitop read KiB.
_PCIE_UNIT_BYTES = 1024

#: Clock event (throttle) reason bits (nvmlClocksEventReason*, nvml.h), lowest bit first. The
#: older nvmlClocksThrottleReason* bits have the same values.
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"),
    (0x080, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
_CLOCK_EVENT_NAMES = dict(CLOCK_EVENT_REASONS)
_COMPUTE_MODES = {0: "Default", 1: "Exclusive Thread", 2: "Prohibited", 3: "Exclusive Process"}


def clock_event_names(mask: int) -> tuple[str, ...]:
    """The names of the bits set in a clock event reasons bitmask, lowest bit first; an unknown
    bit is ``unknown_0x...``, shown rather than dropped.
    """
    names: list[str] = []
    bit = 1
    while bit <= mask:
        if mask & bit:
            names.append(_CLOCK_EVENT_NAMES.get(bit, f"unknown_{bit:#x}"))
        bit <<= 1
    return tuple(names)


class Device:
    """A cached handle plus what this GPU has said it does not support."""

    def __init__(
        self,
        nvml: ModuleType,
        index: int,
        handle: Any,
        lost_reason: str | None = None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        read_pcie: bool = True,
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
        # NVML's text and code for the last failure of a field that may answer later (not
        # remembered as unsupported); cleared when it answers.
        self.errors: dict[str, str] = {}
        self._error_codes: dict[str, int | None] = {}
        self.processes_error: str | None = None
        self.uuid: str | None = None  # until NVML tells it: a placeholder is not a UUID
        self.name: str | None = None
        self.pci_bus_id: str | None = None
        self.slowdown_c: int | None = None
        self.shutdown_c: int | None = None
        self._identity_missing = {"uuid", "name", "pci", "slowdown", "shutdown"}
        self.monotonic = monotonic
        self._read_pcie = read_pcie
        self._pcie_read_at: float | None = None
        self._pcie: tuple[int | None, int | None] = (None, None)
        # NVML's timestamp (microseconds) of the newest per-process sample seen so far.
        self._process_samples_seen = 0
        # Each listed PID's newest per-process sample: (its timestamp in µs, SM %).
        self.last_sm_samples: dict[int, tuple[int, int]] = {}
        # The current MIG mode as last read, and this GPU's MIG devices while it is on.
        self.mig_enabled = False
        self.mig_reader: MigReader | None = None
        self.health = Health(self)  # memory temperature, PCIe replays, remapped rows, Xid
        self.settings = Settings(self)  # power limit, modes: read every SETTINGS_REFRESH_S
        self.codecs = Codecs(self)  # video encoder/decoder: every few seconds while idle
        self.lists = ListReader(nvml)  # processes and their samples, one call a list
        if not self.lost:
            self._read_identity()

    def read(self, field: str, call: Callable[..., Any], *args: Any) -> Any:
        """The choke point: every NVML call on this device (and on its MIG devices: see
        :func:`gpumon.sources.nvml.mig.on_mig_device`) goes through here."""
        if self.lost:
            raise GpuLost
        if field in self.unsupported:
            return None
        try:
            value = call(self.handle, *args)
        except self._version_mismatch as error:
            log_debug("GPU %d %s: %s", self.index, field, error)
            self.unsupported.add(field)  # the driver lacks this ABI: as FUNCTION_NOT_FOUND
            self.errors.pop(field, None)
            return None
        except self.nvml.NVMLError as error:
            code = error_code(error)
            if code == NVML_ERROR_GPU_IS_LOST:
                self.lost = True
                self.lost_reason = FELL_OFF_THE_BUS
                raise GpuLost from error
            if code in _PERMANENT:
                self.unsupported.add(field)
                self.errors.pop(field, None)
            else:
                log_debug("GPU %d %s: %s", self.index, field, error)
                self.errors[field] = str(error)
                self._error_codes[field] = code
            return None
        self.errors.pop(field, None)
        return value

    def failure_code(self, field: str) -> int | None:
        """NVML's return code when the last read of ``field`` failed and may answer later;
        ``None`` when it answered, or is remembered as unsupported."""
        return self._error_codes.get(field) if field in self.errors else None

    def read_newest(
        self, versions: list[tuple[str, Callable[..., Any] | None, tuple[Any, ...]]]
    ) -> Any:
        """Read through the newest version of a call this driver answers (``versions``: field,
        call or None, arguments): a version it lacks is skipped from then on; a transient error
        is ``None``.
        """
        for field, call, args in versions:
            if call is None or field in self.unsupported:
                continue
            value = self.read(field, call, *args)
            if value is not None or field not in self.unsupported:
                return value
        return None

    def _read_identity(self) -> None:
        """Read what never changes, once. A field that failed transiently is read again on
        the next tick, and only that field: a value already read is never replaced."""
        nvml = self.nvml
        threshold = nvml.nvmlDeviceGetTemperatureThreshold
        calls: dict[str, tuple[Callable[..., Any], tuple[Any, ...]]] = {
            "uuid": (nvml.nvmlDeviceGetUUID, ()),
            "name": (nvml.nvmlDeviceGetName, ()),
            "pci": (nvml.nvmlDeviceGetPciInfo, ()),
            "slowdown": (threshold, (nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,)),
            "shutdown": (threshold, (nvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,)),
        }
        with contextlib.suppress(GpuLost):
            for field in [field for field in calls if field in self._identity_missing]:
                call, args = calls[field]
                value = self.read(field, call, *args)
                if value is None:
                    if field in self.unsupported:
                        self._identity_missing.discard(field)
                    continue
                self._identity_missing.discard(field)
                if field == "uuid":
                    self.uuid = nvml_text(value)
                elif field == "name":
                    self.name = nvml_text(value)
                elif field == "pci":
                    self.pci_bus_id = nvml_text(getattr(value, "busId", None) or value.busIdLegacy)
                elif field == "slowdown":
                    self.slowdown_c = int(value)
                else:
                    self.shutdown_c = int(value)

    def lost_stats(self) -> GpuStats:
        return GpuStats(
            index=self.index,
            uuid=self.uuid,
            name=self.name,
            pci_bus_id=self.pci_bus_id,
            lost=True,
            lost_reason=self.lost_reason or FELL_OFF_THE_BUS,
            mig_instances=None,
        )

    def stats(self, *, details: bool = True) -> GpuStats:
        """Read the per-tick fields; without ``details``, not
        :data:`~gpumon.data.model.ON_DEMAND_GPU_FIELDS` (``None``). Raises :class:`GpuLost`."""
        nvml = self.nvml
        if self._identity_missing:
            self._read_identity()
        settings = self.settings.read()
        self.mig_enabled = settings.mig_on
        utilization = self._utilization()
        settings = self.settings.last  # with its MIG mode read again, if it was
        mig_instances: tuple[MigInstance, ...] | None = ()
        if self.mig_enabled:
            from gpumon.sources.nvml.mig import read_mig_instances

            mig_instances = read_mig_instances(self)
        else:
            self.mig_reader = None  # MIG mode on again later: enumerate afresh
        used, total, free, reserved = self._memory()
        encoder, decoder = self.codecs.read() if details else self.codecs.skip()
        pcie_rx, pcie_tx = self._pcie_throughput()
        power_mw = self.read("power", nvml.nvmlDeviceGetPowerUsage)
        limit_mw, compute_mode = settings.power_limit_mw, settings.compute_mode
        pstate = self.read("pstate", nvml.nvmlDeviceGetPerformanceState)
        graphics = (nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_GRAPHICS)
        return GpuStats(
            index=self.index,
            uuid=self.uuid,
            name=self.name,
            pci_bus_id=self.pci_bus_id,
            persistence_mode=None if settings.persistence is None else bool(settings.persistence),
            display_active=None if settings.display is None else bool(settings.display),
            performance_state=None if pstate in (None, _PSTATE_UNKNOWN) else int(pstate),
            fan_pct=self.read("fan", nvml.nvmlDeviceGetFanSpeed),
            temperature_c=self._temperature(),
            temperature_slowdown_c=self.slowdown_c,
            temperature_shutdown_c=self.shutdown_c,
            power_draw_w=None if power_mw is None else power_mw / 1000.0,
            power_limit_w=None if limit_mw is None else limit_mw / 1000.0,
            memory_used_bytes=used,
            memory_total_bytes=total,
            memory_free_bytes=free,
            memory_reserved_bytes=reserved,
            utilization_gpu_pct=None if utilization is None else int(utilization.gpu),
            utilization_memory_pct=None if utilization is None else int(utilization.memory),
            utilization_encoder_pct=encoder,
            utilization_decoder_pct=decoder,
            pcie_rx_bytes_per_s=pcie_rx,
            pcie_tx_bytes_per_s=pcie_tx,
            clock_graphics_mhz=self.read("clock_graphics", *graphics) if details else None,
            clock_sm_mhz=self.read("clock_sm", nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_SM),
            clock_memory_mhz=self.settings.memory_clock(pstate),
            clock_event_reasons=self._clock_event_reasons() if details else None,
            compute_mode=None if compute_mode is None else _COMPUTE_MODES.get(compute_mode),
            mig_mode=None if settings.mig is None else self.mig_enabled,
            mig_instances=mig_instances,
            **self.health.read(details=details),
        )

    def _utilization(self) -> Any:
        """Device-level utilisation; ``None`` under MIG, where it is not asked. A first
        NOT_SUPPORTED may mean MIG was turned on: MIG mode is then read again at once.
        """
        if self.mig_enabled:
            return None
        known = "utilization" in self.unsupported
        value = self.read("utilization", self.nvml.nvmlDeviceGetUtilizationRates)
        if value is None and not known and "utilization" in self.unsupported:
            self.mig_enabled = self.settings.read_mig_mode().mig_on
            if self.mig_enabled:
                self.unsupported.discard("utilization")
        return value

    def _memory(self) -> tuple[int | None, int | None, int | None, int | None]:
        """(used, total, free, reserved) bytes."""
        nvml = self.nvml
        # v2 separates reserved memory; v1 counts it as used on R510+ (disagrees with nvidia-smi).
        # A transient v2 error is N/A for this tick, not a reason to fall back to v1 for good.
        v2 = getattr(nvml, "nvmlMemory_v2", None)
        call = nvml.nvmlDeviceGetMemoryInfo
        info = self.read_newest([("memory_v2", call if v2 else None, (v2,)), ("memory", call, ())])
        if info is None:
            return None, None, None, None
        used, total = int(info.used), int(info.total)
        reserved = getattr(info, "reserved", None)
        if reserved is None:  # v1: used includes reserved, so what is not used is free
            return used, total, max(0, total - used), None
        return used, total, int(info.free), int(reserved)

    def _pcie_throughput(self) -> tuple[int | None, int | None]:
        """(received, transmitted) bytes/s over PCIe, read at most every PCIE_REFRESH_S (each call
        blocks about 20 ms); the last reading is repeated in between.
        """
        if not self._read_pcie:
            return None, None
        now = self.monotonic()
        last = self._pcie_read_at
        if last is not None and 0 <= now - last < PCIE_REFRESH_S:
            return self._pcie
        self._pcie_read_at = now
        nvml = self.nvml
        rx = self.read("pcie_rx", nvml.nvmlDeviceGetPcieThroughput, nvml.NVML_PCIE_UTIL_RX_BYTES)
        tx = self.read("pcie_tx", nvml.nvmlDeviceGetPcieThroughput, nvml.NVML_PCIE_UTIL_TX_BYTES)
        self._pcie = (
            None if rx is None else int(rx) * _PCIE_UNIT_BYTES,
            None if tx is None else int(tx) * _PCIE_UNIT_BYTES,
        )
        return self._pcie

    def _clock_event_reasons(self) -> tuple[str, ...] | None:
        # "Throttle reasons" were renamed "clock event reasons" (R535); the old call is
        # deprecated. A driver without the new call answers FUNCTION_NOT_FOUND, once.
        events = getattr(self.nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        throttle = getattr(self.nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        mask = self.read_newest([("clock_events", events, ()), ("clock_throttle", throttle, ())])
        return None if mask is None else clock_event_names(int(mask))

    def _temperature(self) -> int | None:
        # nvmlDeviceGetTemperature is deprecated (to be removed in CUDA 14): ask the versioned
        # call first; a driver without it answers FUNCTION_NOT_FOUND, and a binding without
        # either call is asked nothing.
        sensor = (self.nvml.NVML_TEMPERATURE_GPU,)
        versioned = getattr(self.nvml, "nvmlDeviceGetTemperatureV", None)
        plain = getattr(self.nvml, "nvmlDeviceGetTemperature", None)
        value = self.read_newest(
            [("temperature_v", versioned, sensor), ("temperature", plain, sensor)]
        )
        return None if value is None else int(value)
