"""A GPU's settings: what changes only when someone changes it, read through its
:class:`Device`'s choke point at the first sample and then every :data:`SETTINGS_REFRESH_S`.

The memory clock is read with them and whenever the performance state changes; MIG mode
every sample while it is on, and when utilisation newly answers NOT_SUPPORTED while off.
Never imports ``pynvml``. Why: docs/sources.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpumon.sources.nvml.device import Device

#: A GPU's settings (power limit, persistence, display, compute and MIG mode) are read at the
#: first sample, then at most once per this many seconds; a change shows within this time.
SETTINGS_REFRESH_S = 10.0


@dataclass(frozen=True, slots=True)
class SettingsReading:
    """NVML's raw answers (``None``: N/A)."""

    mig: Any  # (current, pending) MIG mode
    power_limit_mw: int | None
    persistence: int | None
    display: int | None
    compute_mode: int | None

    @property
    def mig_on(self) -> bool:
        """The current MIG mode (a pending one takes effect only after a GPU reset)."""
        return self.mig is not None and bool(self.mig[0])


class Settings:
    """One GPU's settings, as last read."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self._reading: SettingsReading | None = None
        self._read_at = 0.0
        self._readings = 0  # how many times the settings were read
        # The memory clock, and (readings, performance state) when it was read.
        self._memory_clock: int | None = None
        self._memory_clock_read: tuple[int, int] | None = None

    def read(self) -> SettingsReading:
        """The settings: read now at the first call and when the last reading is
        :data:`SETTINGS_REFRESH_S` old, else the last reading (its MIG mode read again while
        it is on). Raises :class:`~gpumon.sources.nvml.errors.GpuLost`."""
        now = self.device.monotonic()
        reading = self._reading
        if reading is None or not 0 <= now - self._read_at < SETTINGS_REFRESH_S:
            reading = self._read_all()
            self._read_at = now
            self._readings += 1
        elif reading.mig_on:
            reading = dataclasses.replace(reading, mig=self._mig_mode())
        self._reading = reading
        return reading

    @property
    def last(self) -> SettingsReading:
        """The last reading (after :meth:`read`)."""
        assert self._reading is not None
        return self._reading

    def read_mig_mode(self) -> SettingsReading:
        """The last reading with its MIG mode read now. Raises
        :class:`~gpumon.sources.nvml.errors.GpuLost`."""
        reading = self._reading if self._reading is not None else self._read_all()
        self._reading = dataclasses.replace(reading, mig=self._mig_mode())
        return self._reading

    def memory_clock(self, performance_state: int | None) -> int | None:
        """The memory clock in MHz, read again only when the settings were read since, or the
        performance state differs from the one it was read in (every sample while that is
        unknown). Raises :class:`~gpumon.sources.nvml.errors.GpuLost`."""
        read = self._memory_clock_read
        if (
            performance_state is None
            or read is None
            or read != (self._readings, performance_state)
            or "clock_memory" in self.device.errors
        ):
            nvml = self.device.nvml
            self._memory_clock = self.device.read(
                "clock_memory", nvml.nvmlDeviceGetClockInfo, nvml.NVML_CLOCK_MEM
            )
            state = -1 if performance_state is None else performance_state
            self._memory_clock_read = (self._readings, state)
        return self._memory_clock

    def _mig_mode(self) -> Any:
        return self.device.read("mig", self.device.nvml.nvmlDeviceGetMigMode)

    def _read_all(self) -> SettingsReading:
        device = self.device
        nvml = device.nvml
        return SettingsReading(
            mig=self._mig_mode(),
            power_limit_mw=device.read("power_limit", nvml.nvmlDeviceGetEnforcedPowerLimit),
            persistence=device.read("persistence", nvml.nvmlDeviceGetPersistenceMode),
            display=device.read("display", nvml.nvmlDeviceGetDisplayActive),
            compute_mode=device.read("compute_mode", nvml.nvmlDeviceGetComputeMode),
        )
