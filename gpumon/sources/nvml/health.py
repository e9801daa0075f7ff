"""A GPU's health readings, read through its :class:`Device`'s choke point: memory
temperature, PCIe replays, remapped rows, ECC and Xid errors.

Memory temperature is read every sample; the slow counters (replays, remapped rows, ECC,
energy) at most every :data:`HEALTH_REFRESH_S`; Xid events are drained without waiting by
:class:`XidWatch`. Never imports ``pynvml``. Costs: docs/sources.md.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

from gpumon.sources.nvml.errors import (
    NVML_ERROR_FUNCTION_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    GpuLost,
    error_code,
    log_debug,
)

if TYPE_CHECKING:
    from gpumon.sources.nvml.device import Device

#: Remapped rows, the PCIe replay counter, the uncorrected ECC error count and the energy
#: counter are read at most once per this many seconds per GPU; samples in between repeat
#: the last reading.
HEALTH_REFRESH_S = 5.0
#: Xid events taken from NVML per sample at most (a storm waits for the next samples).
MAX_XID_EVENTS_PER_SAMPLE = 64

# nvml.h, spelled out so that any binding version works: the field id of the memory
# temperature, the event type of Xid errors, the wait's "no event pending", and the value
# types of a field value with the member of its union that holds each.
NVML_FI_DEV_MEMORY_TEMP = 82
NVML_EVENT_TYPE_XID_CRITICAL_ERROR = 0x8
NVML_ERROR_TIMEOUT = 10
_VALUE_MEMBERS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")


def _field_value(nvml: ModuleType, field_id: int) -> Any:
    """A call (for :meth:`Device.read`) that reads one field value: an ``NVMLError`` with the
    field's own return code when NVML answers the call but not the field."""

    def call(handle: Any) -> Any:
        (value,) = nvml.nvmlDeviceGetFieldValues(handle, [field_id])
        if value.nvmlReturn != 0:
            raise nvml.NVMLError(value.nvmlReturn)
        member = _VALUE_MEMBERS[value.valueType] if value.valueType < len(_VALUE_MEMBERS) else ""
        return getattr(value.value, member, None)

    return call


class Health:
    """One GPU's health readings and the Xid errors :class:`XidWatch` saw for it."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self._read_at: float | None = None
        self._counters: dict[str, Any] = {}
        self._details_read = False  # whether the counters last read include the details
        #: Set by :class:`XidWatch`: ``None`` while this GPU's Xid errors are not watched.
        self.xid_last: int | None = None
        self.xid_count: int | None = None

    def read(self, *, details: bool = True) -> dict[str, Any]:
        """The readings, by their :class:`~gpumon.data.model.GpuStats` name; without
        ``details``, only the ECC error count (the cards show it): the rest
        (:data:`~gpumon.data.model.ON_DEMAND_GPU_FIELDS`) ``None``, not read. Raises
        :class:`GpuLost`."""
        device = self.device
        nvml = device.nvml
        temperature = None
        if details and getattr(nvml, "nvmlDeviceGetFieldValues", None) is not None:
            temperature = device.read("memory_temp", _field_value(nvml, NVML_FI_DEV_MEMORY_TEMP))
        now = device.monotonic()
        due = self._read_at is None or not 0 <= now - self._read_at < HEALTH_REFRESH_S
        if due or (details and not self._details_read):
            self._read_at = now
            self._counters = self._read_counters(details)
            self._details_read = details
        # Without details only the ECC count (GpuStats' own None for the counters not read).
        counters = self._counters if details else {_ECC: self._counters.get(_ECC)}
        return {
            "temperature_memory_c": None if temperature is None else int(temperature),
            **counters,
            "xid_last": self.xid_last,
            "xid_count": self.xid_count,
        }

    def _read_counters(self, details: bool) -> dict[str, Any]:
        device = self.device
        nvml = device.nvml
        ecc = device.read(
            "ecc_volatile",
            nvml.nvmlDeviceGetTotalEccErrors,
            nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            nvml.NVML_VOLATILE_ECC,
        )
        if not details:
            return {_ECC: ecc}
        energy = device.read("energy", nvml.nvmlDeviceGetTotalEnergyConsumption)
        replays = device.read("pcie_replays", _call(nvml, "nvmlDeviceGetPcieReplayCounter"))
        rows = device.read("remapped_rows", _call(nvml, "nvmlDeviceGetRemappedRows"))
        # (correctable, uncorrectable, remapping pending, remapping failed)
        correctable, uncorrectable, pending, failed = (None,) * 4 if rows is None else rows
        return {
            _ECC: ecc,
            "energy_j": None if energy is None else energy / 1000.0,
            "pcie_replays": None if replays is None else int(replays),
            "remapped_rows_correctable": None if correctable is None else int(correctable),
            "remapped_rows_uncorrectable": None if uncorrectable is None else int(uncorrectable),
            "remapped_rows_pending": None if pending is None else bool(pending),
            "remapped_rows_failed": None if failed is None else bool(failed),
        }


#: The one counter the cards show, read with or without details.
_ECC = "ecc_errors_uncorrected_volatile"


def _call(nvml: ModuleType, name: str) -> Any:
    """``nvml.<name>``, or a call that answers FUNCTION_NOT_FOUND for a binding without it
    (remembered as unsupported, as a driver without the function is)."""
    call = getattr(nvml, name, None)
    if call is not None:
        return call

    def missing(handle: Any) -> Any:
        raise nvml.NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)

    return missing


class XidWatch:
    """Every GPU's Xid errors, from one NVML event set, never waited for: :meth:`drain` once per
    sample (the second call registers the GPUs), :meth:`close` before NVML shuts down.
    """

    def __init__(self, nvml: ModuleType) -> None:
        self.nvml = nvml
        self._set: Any = None
        self._calls = 0
        self._watched: dict[int, Device] = {}

    def drain(self, devices: list[Device]) -> None:
        """Register the GPUs (second call), or take the Xid events pending for them."""
        self._calls += 1
        if self._calls <= 2:
            if self._calls == 2:
                self._register(devices)
            return
        for device in self._watched.values():
            if device.health.xid_count is None:  # watched for a whole interval now
                device.health.xid_last, device.health.xid_count = 0, 0
        for _ in range(MAX_XID_EVENTS_PER_SAMPLE):
            if self._set is None or not self._take_one():
                return

    def _register(self, devices: list[Device]) -> None:
        nvml = self.nvml
        create = getattr(nvml, "nvmlEventSetCreate", None)
        register = getattr(nvml, "nvmlDeviceRegisterEvents", None)
        if create is None or register is None or getattr(nvml, "nvmlEventSetWait_v2", None) is None:
            return
        try:
            self._set = create()
        except nvml.NVMLError as error:
            log_debug("Xid events: cannot create an event set: %s", error)
            return
        for device in devices:
            try:
                registered = device.read(
                    "xid_events", register, NVML_EVENT_TYPE_XID_CRITICAL_ERROR, self._set
                )
            except GpuLost:
                continue
            # nvmlDeviceRegisterEvents returns nothing: an answer is "no error" (None).
            if "xid_events" not in device.unsupported and "xid_events" not in device.errors:
                self._watched[device.index] = device
            else:
                log_debug("GPU %d: Xid events not watched (%s)", device.index, registered)

    def _take_one(self) -> bool:
        """One pending event (True), or none pending or the wait failed (False)."""
        nvml = self.nvml
        try:
            event = nvml.nvmlEventSetWait_v2(self._set, 0)
        except nvml.NVMLError as error:
            code = error_code(error)
            if code in (NVML_ERROR_FUNCTION_NOT_FOUND, NVML_ERROR_NOT_SUPPORTED):
                self._stop_watching()
            elif code != NVML_ERROR_TIMEOUT:
                log_debug("Xid events: waiting failed: %s", error)
            return False
        if int(event.eventType) & NVML_EVENT_TYPE_XID_CRITICAL_ERROR:
            try:
                index = int(nvml.nvmlDeviceGetIndex(event.device))
            except nvml.NVMLError as error:
                log_debug("Xid event %s on an unknown GPU: %s", event.eventData, error)
                return True
            device = self._watched.get(index)
            if device is not None:
                health = device.health
                health.xid_last = int(event.eventData)
                health.xid_count = (health.xid_count or 0) + 1
        return True

    def _stop_watching(self) -> None:
        for device in self._watched.values():
            device.health.xid_last = device.health.xid_count = None
        self._watched.clear()
        self.close()

    def close(self) -> None:
        """Free the event set; idempotent. NVML must still be initialised."""
        event_set, self._set = self._set, None
        if event_set is not None:
            try:
                self.nvml.nvmlEventSetFree(event_set)
            except (self.nvml.NVMLError, AttributeError) as error:
                log_debug("Xid events: freeing the set failed: %s", error)
