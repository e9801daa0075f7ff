"""Shared fakes: an NVML module driven by per-GPU dicts, and psutil processes.

The fake NVML exposes the ``pynvml`` names that ``gpumon.sources.nvml.source`` uses. Its error
class, error codes and constants are the real ``pynvml`` ones, so
``FakeNvml(...).NVMLError(3)`` is a real ``pynvml.NVMLError_NotSupported`` and a wrong constant
in the code under test shows up as a wrong answer here.

A GPU is a dict from field name (see :data:`DEVICE_FIELDS`) to the value NVML returns. A value
may instead be :class:`Fail` (raise ``NVMLError(code)``) or an exception instance (raised as is).
A field missing from the dict answers NOT_SUPPORTED. Tests change values between samples by
assigning into ``fake.gpus[i]``. Every device call is counted per function, GPU and arguments.

MIG: a GPU's ``mig_devices`` lists its MIG device slots (:func:`make_mig_gpu`): each a dict of
:data:`MIG_DEVICE_FIELDS` (a MIG device), ``None`` (an empty slot: NOT_FOUND) or a :class:`Fail`
(the handle call raises). Calls on a MIG device handle are counted under ``(gpu, slot)`` instead
of the GPU's index, so that counts on a GPU are of calls on its own handle.
``FakeNvml.non_root = True`` answers NO_PERMISSION as NVML does for a non-root user on a GPU in
MIG mode (see :data:`REFUSED_TO_NON_ROOT_UNDER_MIG`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import pwd
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psutil
import pynvml

MIB = 1024**2
GIB = 1024**3

# The fields a GPU dict may hold, and the pynvml call (with arguments) that returns each.
DEVICE_FIELDS = {
    "handle": "nvmlDeviceGetHandleByIndex",
    "uuid": "nvmlDeviceGetUUID",
    "name": "nvmlDeviceGetName",
    "pci": "nvmlDeviceGetPciInfo",
    "temperature_slowdown": "nvmlDeviceGetTemperatureThreshold(SLOWDOWN)",
    "temperature_shutdown": "nvmlDeviceGetTemperatureThreshold(SHUTDOWN)",
    "memory": "nvmlDeviceGetMemoryInfo",
    "memory_v2": "nvmlDeviceGetMemoryInfo(nvmlMemory_v2)",
    "utilization": "nvmlDeviceGetUtilizationRates",
    "power": "nvmlDeviceGetPowerUsage",
    "power_limit": "nvmlDeviceGetEnforcedPowerLimit",
    "energy": "nvmlDeviceGetTotalEnergyConsumption",
    "persistence": "nvmlDeviceGetPersistenceMode",
    "display": "nvmlDeviceGetDisplayActive",
    "pstate": "nvmlDeviceGetPerformanceState",
    "compute_mode": "nvmlDeviceGetComputeMode",
    "mig": "nvmlDeviceGetMigMode",
    "fan": "nvmlDeviceGetFanSpeed",
    "temperature": "nvmlDeviceGetTemperature(GPU)",
    # The versioned call of newer drivers; a GPU dict without it answers NOT_SUPPORTED, so
    # most tests read "temperature" through the deprecated call.
    "temperature_v": "nvmlDeviceGetTemperatureV(GPU)",
    "encoder": "nvmlDeviceGetEncoderUtilization",  # [percent, sampling period in us]
    "decoder": "nvmlDeviceGetDecoderUtilization",
    "pcie_rx": "nvmlDeviceGetPcieThroughput(RX_BYTES)",  # KB/s
    "pcie_tx": "nvmlDeviceGetPcieThroughput(TX_BYTES)",
    "clock_graphics": "nvmlDeviceGetClockInfo(GRAPHICS)",
    "clock_sm": "nvmlDeviceGetClockInfo(SM)",
    "clock_memory": "nvmlDeviceGetClockInfo(MEM)",
    # A bitmask; the newer call (R535+) first. A GPU dict without "clock_events" answers
    # NOT_SUPPORTED there, as an older driver would answer FUNCTION_NOT_FOUND.
    "clock_events": "nvmlDeviceGetCurrentClocksEventReasons",
    "clock_throttle": "nvmlDeviceGetCurrentClocksThrottleReasons",
    "ecc_uncorrected_volatile": "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)",
    # The unversioned calls are the _v3 ABI (R535+), as in nvidia-ml-py.
    "compute_processes": "nvmlDeviceGetComputeRunningProcesses",
    "graphics_processes": "nvmlDeviceGetGraphicsRunningProcesses",
    "compute_processes_v2": "nvmlDeviceGetComputeRunningProcesses_v2",
    "graphics_processes_v2": "nvmlDeviceGetGraphicsRunningProcesses_v2",
    # A list of ProcessUtilizationSample; as NVML, only those newer than the timestamp asked
    # for are returned, and NOT_FOUND when there is none.
    "process_utilization": "nvmlDeviceGetProcessUtilization(lastSeenTimeStamp)",
    "mig_max_count": "nvmlDeviceGetMaxMigDeviceCount",
    # Slots below mig_max_count: a MIG device dict, None (empty: NOT_FOUND) or a Fail; past
    # mig_max_count, INVALID_ARGUMENT.
    "mig_devices": "nvmlDeviceGetMigDeviceHandleByIndex(index)",
    # Health readings; make_gpu leaves them out, so they answer NOT_SUPPORTED unless a test
    # sets them. The memory temperature is answered as NVML does for a GDDR board: the call
    # succeeds, the field says NOT_SUPPORTED (a Fail there fails the whole call).
    "memory_temperature": "nvmlDeviceGetFieldValues([NVML_FI_DEV_MEMORY_TEMP])",
    "pcie_replays": "nvmlDeviceGetPcieReplayCounter",
    # (correctable rows, uncorrectable rows, remapping pending, remapping failed)
    "remapped_rows": "nvmlDeviceGetRemappedRows",
    # Any value: registering for Xid events answers (see FakeNvml.xid_events).
    "xid_events": "nvmlDeviceRegisterEvents(XidCriticalError, set)",
}

# The fields a MIG device dict may hold (calls on a MIG device handle).
MIG_DEVICE_FIELDS = {
    "gpu_instance_id": "nvmlDeviceGetGpuInstanceId",
    "compute_instance_id": "nvmlDeviceGetComputeInstanceId",
    "uuid": "nvmlDeviceGetUUID",
    "name": "nvmlDeviceGetName",  # "<GPU name> MIG <profile>"
    "memory": "nvmlDeviceGetMemoryInfo",
    "memory_v2": "nvmlDeviceGetMemoryInfo(nvmlMemory_v2)",
}

#: What NVML refuses (NO_PERMISSION) to a non-root user on a GPU whose MIG mode is on: the
#: MIG device handles, every call on one, and the parent's process lists. The mode and the
#: maximum MIG device count are answered.
REFUSED_TO_NON_ROOT_UNDER_MIG = frozenset(
    {
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetGraphicsRunningProcesses",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetGraphicsRunningProcesses_v2",
    }
)

#: The NVML functions that only MIG asks of a GPU.
MIG_FUNCTIONS = frozenset(
    {
        "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId",
    }
)

#: NVML's "not set" instance id: a process outside MIG.
NO_INSTANCE_ID = 0xFFFFFFFF


@dataclass(frozen=True)
class Fail:
    """A field value meaning: this call raises ``pynvml.NVMLError(code)``."""

    code: int


@dataclass
class Utilization:
    gpu: int
    memory: int


@dataclass
class Memory:
    total: int
    free: int
    used: int


@dataclass
class MemoryV2:
    total: int
    reserved: int
    free: int
    used: int
    version: int = pynvml.nvmlMemory_v2


@dataclass
class FieldValue:
    """``nvmlFieldValue_t``: ``value`` holds the member of the union ``valueType`` names."""

    fieldId: int
    nvmlReturn: int
    valueType: int = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    value: Any = None


@dataclass
class _FieldUnion:
    uiVal: int = 0


@dataclass
class EventData:
    """``nvmlEventData_t``: for an Xid error, ``eventData`` is the Xid."""

    device: Any
    eventType: int
    eventData: int
    gpuInstanceId: int = NO_INSTANCE_ID
    computeInstanceId: int = NO_INSTANCE_ID


@dataclass
class PciInfo:
    busId: Any
    busIdLegacy: Any


@dataclass
class ProcessInfo:
    """nvidia-ml-py's process entry (_v2/_v3 struct): the instance ids are set under MIG."""

    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int = NO_INSTANCE_ID
    computeInstanceId: int = NO_INSTANCE_ID


@dataclass
class ProcessUtilizationSample:
    """``nvmlProcessUtilizationSample_t``: ``timeStamp`` is CPU time in microseconds."""

    pid: int
    timeStamp: int
    smUtil: int
    memUtil: int = 0
    encUtil: int = 0
    decUtil: int = 0


def make_gpu(index: int, **overrides: Any) -> dict[str, Any]:
    """A healthy R535-era data-centre GPU whose every field answers."""
    used, reserved, total = (1000 + index) * MIB, 500 * MIB, 80 * GIB
    free = total - used - reserved
    gpu: dict[str, Any] = {
        "handle": None,
        "uuid": f"GPU-{index:08x}-1111-2222-3333-444455556666",
        "name": "NVIDIA H100 80GB HBM3",
        "pci": PciInfo(busId=f"00000000:{0x18 + index:02X}:00.0", busIdLegacy="legacy"),
        "temperature_slowdown": 87,
        "temperature_shutdown": 92,
        # v1 counts reserved memory as used (R510+); v2 separates it.
        "memory": Memory(total=total, free=free, used=used + reserved),
        "memory_v2": MemoryV2(total=total, reserved=reserved, free=free, used=used),
        "utilization": Utilization(gpu=40 + index, memory=20 + index),
        "power": 150_250 + index,
        "power_limit": 700_000,
        "energy": 86_400_000_000 + index,  # mJ since the driver was loaded
        "persistence": pynvml.NVML_FEATURE_ENABLED,
        "display": pynvml.NVML_FEATURE_DISABLED,
        "pstate": pynvml.NVML_PSTATE_0,
        "compute_mode": pynvml.NVML_COMPUTEMODE_DEFAULT,
        "mig": [pynvml.NVML_DEVICE_MIG_DISABLE, pynvml.NVML_DEVICE_MIG_DISABLE],
        "fan": 30 + index,
        "temperature": 50 + index,
        "encoder": [index, 167_000],
        "decoder": [10 + index, 167_000],
        "pcie_rx": 1_500_000 + index,  # KB/s
        "pcie_tx": 250_000 + index,
        "clock_graphics": 1755,
        "clock_sm": 1980,
        "clock_memory": 2619,
        "clock_events": 0,  # nothing holds the clocks down
        "clock_throttle": 0,
        "ecc_uncorrected_volatile": 0,
        "compute_processes": [],
        "graphics_processes": [],
        "process_utilization": [],
        "mig_max_count": 7,  # MIG capable (A100/H100); no slot is used while MIG is off
        "mig_devices": [],
    }
    gpu.update(overrides)
    return gpu


A100_40GB = "NVIDIA A100-SXM4-40GB"


def make_mig_device(
    gpu_index: int,
    gpu_instance_id: int,
    profile: str,
    *,
    compute_instance_id: int = 0,
    gpu_name: str = A100_40GB,
    used: int = 13 * MIB,
    total: int | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """A MIG device as NVML shows it; ``total`` defaults to the profile's size (``3g.20gb``:
    20 GiB)."""
    if total is None:
        total = int(profile.split(".")[-1].removesuffix("gb")) * GIB
    device: dict[str, Any] = {
        "gpu_instance_id": gpu_instance_id,
        "compute_instance_id": compute_instance_id,
        "uuid": f"MIG-{gpu_index:04x}{gpu_instance_id:02x}{compute_instance_id:02x}-aaaa-bbbb-cccc-"
        f"{gpu_instance_id:012x}",
        "name": f"{gpu_name} MIG {profile}",
        "memory": Memory(total=total, free=total - used, used=used),
        "memory_v2": MemoryV2(total=total, reserved=0, free=total - used, used=used),
    }
    device.update(overrides)
    return device


def make_mig_gpu(index: int, devices: list[Any], **overrides: Any) -> dict[str, Any]:
    """An A100 40GB in MIG mode with these MIG device slots. As the real driver, it has no
    device-level or per-process utilisation (NOT_SUPPORTED)."""
    gpu = make_gpu(
        index,
        name=A100_40GB,
        mig=[pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE],
        mig_devices=devices,
        **overrides,
    )
    for unsupported in ("utilization", "process_utilization"):
        if unsupported not in overrides:
            del gpu[unsupported]
    return gpu


@dataclass(frozen=True)
class _Handle:
    index: int


@dataclass(frozen=True)
class _MigHandle:
    """A MIG device handle: slot ``slot`` of GPU ``gpu``, naming the device dict it was made
    for (a handle kept after its instance is gone answers INVALID_ARGUMENT)."""

    gpu: int
    slot: int
    device: dict[str, Any] = field(compare=False, repr=False)


class FakeNvml:
    """A stand-in for the ``pynvml`` module (pass it as ``NvmlSource(nvml=...)``)."""

    NVMLError = pynvml.NVMLError
    NVMLLibraryMismatchError = pynvml.NVMLLibraryMismatchError

    def __init__(
        self,
        gpus: list[dict[str, Any]],
        *,
        init_error: int | None = None,
        driver_version: Any = "535.183.01",
        cuda_driver_version: Any = 12020,
        nvml_version: Any = "12.535.183.01",
    ) -> None:
        for name in dir(pynvml):
            if name.startswith("NVML_"):
                setattr(self, name, getattr(pynvml, name))
        # An instance attribute so a test can delete it (a binding older than memory v2).
        self.nvmlMemory_v2 = pynvml.nvmlMemory_v2
        self.gpus = gpus
        self.init_error = init_error
        self.system: dict[str, Any] = {
            "driver_version": driver_version,
            "cuda_driver_version": cuda_driver_version,
            "nvml_version": nvml_version,
        }
        self.device_count: Any = None  # None: len(gpus)
        # False: nvmlDeviceGetProcessUtilization returns every sample, however old (a driver
        # that ignores the timestamp it is given).
        self.honours_last_seen = True
        self.initialised = False
        self.shutdowns = 0
        # True: NO_PERMISSION as a non-root user gets on a GPU in MIG mode.
        self.non_root = False
        # Keyed by (function, GPU index or (GPU index, MIG slot), arguments).
        self.calls: Counter[tuple[str, Any, tuple[Any, ...]]] = Counter()
        # Xid events NVML will deliver, (GPU index, Xid), oldest first: only for a GPU
        # registered in a set that is not freed. A Fail in the list makes that wait fail.
        self.xid_events: list[tuple[int, int] | Fail] = []
        self.event_sets_created = 0
        self.event_sets_freed = 0
        self.event_waits: list[int] = []  # the timeout (ms) of each wait
        self._registered: set[int] = set()

    # -- what tests ask ----------------------------------------------------------------------

    def count(self, function: str, index: int | None = None, *args: Any) -> int:
        """Calls made to ``function`` (on GPU ``index``, with ``args``, when given)."""
        return sum(
            n
            for (name, gpu, call_args), n in self.calls.items()
            if name == function
            and (index is None or gpu == index)
            and (not args or call_args == args)
        )

    def device_calls(self, index: int) -> int:
        """Every call made on GPU ``index`` so far (not on its MIG devices)."""
        return sum(n for (_, gpu, _), n in self.calls.items() if gpu == index)

    def mig_calls(self, index: int) -> int:
        """Calls only MIG makes on GPU ``index``, and every call on one of its MIG devices."""
        return sum(
            n
            for (name, gpu, _), n in self.calls.items()
            if (gpu == index and name in MIG_FUNCTIONS)
            or (isinstance(gpu, tuple) and gpu[0] == index)
        )

    def mig_device_calls(self, index: int, slot: int, function: str | None = None) -> int:
        """Calls made on MIG device ``slot`` of GPU ``index`` (to ``function``, when given)."""
        return sum(
            n
            for (name, gpu, _), n in self.calls.items()
            if gpu == (index, slot) and (function is None or name == function)
        )

    # -- init and system ---------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    def nvmlInitWithFlags(self, flags: int) -> None:
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._check_initialised()
        self.shutdowns += 1
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> Any:
        return self._system("driver_version")

    def nvmlSystemGetCudaDriverVersion(self) -> Any:
        return self._system("cuda_driver_version")

    def nvmlSystemGetNVMLVersion(self) -> Any:
        return self._system("nvml_version")

    def nvmlDeviceGetCount(self) -> int:
        self._check_initialised()
        return _answer(self.device_count) if self.device_count is not None else len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._check_initialised()
        self.calls["nvmlDeviceGetHandleByIndex", index, ()] += 1
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        _answer(self.gpus[index]["handle"])
        return _Handle(index)

    # -- device fields -----------------------------------------------------------------------

    def nvmlDeviceGetUUID(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetUUID", handle, "uuid")

    def nvmlDeviceGetName(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetName", handle, "name")

    def nvmlDeviceGetPciInfo(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetPciInfo", handle, "pci")

    def nvmlDeviceGetTemperatureThreshold(self, handle: _Handle, threshold: int) -> Any:
        fields = {
            pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN: "temperature_slowdown",
            pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN: "temperature_shutdown",
        }
        return self._device("nvmlDeviceGetTemperatureThreshold", handle, fields, threshold)

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: Any = None) -> Any:
        if not version:
            return self._device("nvmlDeviceGetMemoryInfo", handle, "memory")
        # Any other version number is a caller bug: the real library refuses it.
        fields = {pynvml.nvmlMemory_v2: "memory_v2"}
        return self._device("nvmlDeviceGetMemoryInfo", handle, fields, version)

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetUtilizationRates", handle, "utilization")

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetPowerUsage", handle, "power")

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetTotalEnergyConsumption", handle, "energy")

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetEnforcedPowerLimit", handle, "power_limit")

    def nvmlDeviceGetPersistenceMode(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetPersistenceMode", handle, "persistence")

    def nvmlDeviceGetDisplayActive(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetDisplayActive", handle, "display")

    def nvmlDeviceGetPerformanceState(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetPerformanceState", handle, "pstate")

    def nvmlDeviceGetComputeMode(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetComputeMode", handle, "compute_mode")

    def nvmlDeviceGetMigMode(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetMigMode", handle, "mig")

    def nvmlDeviceGetFanSpeed(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetFanSpeed", handle, "fan")

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> Any:
        fields = {pynvml.NVML_TEMPERATURE_GPU: "temperature"}
        return self._device("nvmlDeviceGetTemperature", handle, fields, sensor)

    def nvmlDeviceGetTemperatureV(
        self, handle: _Handle, sensor: int, version: int = pynvml.nvmlTemperature_v1
    ) -> Any:
        if version != pynvml.nvmlTemperature_v1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        fields = {pynvml.NVML_TEMPERATURE_GPU: "temperature_v"}
        return self._device("nvmlDeviceGetTemperatureV", handle, fields, sensor)

    def nvmlDeviceGetClockInfo(self, handle: _Handle, clock: int) -> Any:
        fields = {
            pynvml.NVML_CLOCK_GRAPHICS: "clock_graphics",
            pynvml.NVML_CLOCK_SM: "clock_sm",
            pynvml.NVML_CLOCK_MEM: "clock_memory",
        }
        return self._device("nvmlDeviceGetClockInfo", handle, fields, clock)

    def nvmlDeviceGetEncoderUtilization(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetEncoderUtilization", handle, "encoder")

    def nvmlDeviceGetDecoderUtilization(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetDecoderUtilization", handle, "decoder")

    def nvmlDeviceGetPcieThroughput(self, handle: _Handle, counter: int) -> Any:
        fields = {
            pynvml.NVML_PCIE_UTIL_RX_BYTES: "pcie_rx",
            pynvml.NVML_PCIE_UTIL_TX_BYTES: "pcie_tx",
        }
        return self._device("nvmlDeviceGetPcieThroughput", handle, fields, counter)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetCurrentClocksEventReasons", handle, "clock_events")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetCurrentClocksThrottleReasons", handle, "clock_throttle")

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetMaxMigDeviceCount", handle, "mig_max_count")

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: _Handle, index: int) -> _MigHandle:
        slots = self._device("nvmlDeviceGetMigDeviceHandleByIndex", handle, "mig_devices", index)
        count = self.gpus[handle.index].get("mig_max_count")
        if not isinstance(count, int) or not 0 <= index < count:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        device = _answer(slots[index]) if index < len(slots) else None
        if device is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return _MigHandle(handle.index, index, device)

    def nvmlDeviceGetGpuInstanceId(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetGpuInstanceId", handle, "gpu_instance_id")

    def nvmlDeviceGetComputeInstanceId(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetComputeInstanceId", handle, "compute_instance_id")

    def nvmlDeviceGetProcessUtilization(self, handle: _Handle, timeStamp: int) -> Any:
        samples = self._device(
            "nvmlDeviceGetProcessUtilization", handle, "process_utilization", timeStamp
        )
        if self.honours_last_seen:
            samples = [sample for sample in samples if sample.timeStamp > timeStamp]
        if not samples:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return list(samples)

    def nvmlDeviceGetTotalEccErrors(
        self, handle: _Handle, error_type: int, counter_type: int
    ) -> Any:
        fields = {
            (
                pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                pynvml.NVML_VOLATILE_ECC,
            ): "ecc_uncorrected_volatile"
        }
        return self._device("nvmlDeviceGetTotalEccErrors", handle, fields, error_type, counter_type)

    def nvmlDeviceGetFieldValues(self, handle: _Handle, field_ids: list[int]) -> list[FieldValue]:
        keys = {pynvml.NVML_FI_DEV_MEMORY_TEMP: "memory_temperature"}
        answers = []
        for field_id in field_ids:
            try:
                value = self._device("nvmlDeviceGetFieldValues", handle, keys, field_id)
            except pynvml.NVMLError_NotSupported:
                answers.append(FieldValue(field_id, pynvml.NVML_ERROR_NOT_SUPPORTED))
                continue
            answers.append(FieldValue(field_id, pynvml.NVML_SUCCESS, value=_FieldUnion(value)))
        return answers

    def nvmlDeviceGetPcieReplayCounter(self, handle: _Handle) -> Any:
        return self._device("nvmlDeviceGetPcieReplayCounter", handle, "pcie_replays")

    def nvmlDeviceGetRemappedRows(self, handle: _Handle) -> Any:
        return tuple(self._device("nvmlDeviceGetRemappedRows", handle, "remapped_rows"))

    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:
        self._check_initialised()
        return handle.index

    # -- Xid events ----------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> object:
        self._check_initialised()
        self.event_sets_created += 1
        return object()

    def nvmlDeviceRegisterEvents(self, handle: _Handle, event_types: int, event_set: Any) -> None:
        if event_types != pynvml.nvmlEventTypeXidCriticalError:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._device("nvmlDeviceRegisterEvents", handle, "xid_events")
        self._registered.add(handle.index)

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> EventData:
        self._check_initialised()
        self.event_waits.append(timeout_ms)
        while self.xid_events:
            event = self.xid_events.pop(0)
            if isinstance(event, Fail):
                raise pynvml.NVMLError(event.code)
            index, xid = event
            if index in self._registered:
                return EventData(_Handle(index), pynvml.nvmlEventTypeXidCriticalError, xid)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: Any) -> None:
        self._check_initialised()
        self.event_sets_freed += 1
        self._registered.clear()

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> Any:
        with _version_mismatch("nvmlDeviceGetComputeRunningProcesses"):
            return self._device("nvmlDeviceGetComputeRunningProcesses", handle, "compute_processes")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: _Handle) -> Any:
        with _version_mismatch("nvmlDeviceGetGraphicsRunningProcesses"):
            return self._device(
                "nvmlDeviceGetGraphicsRunningProcesses", handle, "graphics_processes"
            )

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: _Handle) -> Any:
        return self._device(
            "nvmlDeviceGetComputeRunningProcesses_v2", handle, "compute_processes_v2"
        )

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle: _Handle) -> Any:
        return self._device(
            "nvmlDeviceGetGraphicsRunningProcesses_v2", handle, "graphics_processes_v2"
        )

    # -- plumbing ----------------------------------------------------------------------------

    def _check_initialised(self) -> None:
        if not self.initialised:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def _system(self, key: str) -> Any:
        self._check_initialised()
        return _answer(self.system[key])

    def _device(
        self, function: str, handle: _Handle, fields: str | dict[Any, str], *args: Any
    ) -> Any:
        self._check_initialised()
        if isinstance(handle, _MigHandle):
            return self._mig_device(function, handle, fields, *args)
        if not isinstance(handle, _Handle):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self.calls[function, handle.index, args] += 1
        gpu = self.gpus[handle.index]
        if function in REFUSED_TO_NON_ROOT_UNDER_MIG and self._refused(gpu):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        return self._field(gpu, fields, args)

    def _mig_device(
        self, function: str, handle: _MigHandle, fields: str | dict[Any, str], *args: Any
    ) -> Any:
        self.calls[function, (handle.gpu, handle.slot), args] += 1
        gpu = self.gpus[handle.gpu]
        if self._refused(gpu):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        slots = gpu.get("mig_devices")
        if not isinstance(slots, list) or handle.slot >= len(slots):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if slots[handle.slot] is not handle.device:  # destroyed since the handle was made
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._field(handle.device, fields, args)

    def _refused(self, gpu: dict[str, Any]) -> bool:
        """NO_PERMISSION for a non-root user: on a GPU whose current MIG mode is on."""
        mig = gpu.get("mig")
        return self.non_root and isinstance(mig, list) and bool(mig[0])

    @staticmethod
    def _field(values: dict[str, Any], fields: str | dict[Any, str], args: tuple[Any, ...]) -> Any:
        if isinstance(fields, str):
            key: str | None = fields
        else:
            key = fields.get(args[0] if len(args) == 1 else args)
        if key is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if key not in values:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return _answer(values[key])


def _answer(value: Any) -> Any:
    if isinstance(value, Fail):
        raise pynvml.NVMLError(value.code)
    if isinstance(value, BaseException):
        raise value
    return value


@contextlib.contextmanager
def _version_mismatch(function: str) -> Iterator[None]:
    """What nvidia-ml-py's ``throwOnVersionMismatch`` does to its unversioned calls."""
    try:
        yield
    except pynvml.NVMLError_FunctionNotFound as error:
        raise pynvml.NVMLLibraryMismatchError(
            f"Unversioned function called and the pyNVML version does not match the NVML lib "
            f"version. Use a versioned function such as {function}_v2"
        ) from error


# -- psutil ------------------------------------------------------------------------------------


def user_name(uid: int) -> str:
    """What a user should see for ``uid`` on this machine: its login name, else the number."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


@dataclass
class _Uids:
    real: int
    effective: int
    saved: int


@dataclass
class _MemoryInfo:
    rss: int
    vms: int


@dataclass
class FakeProcess:
    """A ``psutil.Process`` look-alike living in a :class:`FakeProcessTable`.

    ``errors`` maps a method name to the exception it raises. ``cpu_percents`` are returned by
    successive ``cpu_percent()`` calls (the first of which, as in psutil, primes the counter).
    Once removed from its table, or replaced by a process with another create time, every
    method raises ``NoSuchProcess`` and ``is_running()`` is False, as with a real process.
    """

    pid: int
    create_time_s: float = 1_000.0
    uid: int = 1000
    user: str = "alice"
    cmdline_parts: list[str] = field(default_factory=lambda: ["python", "train.py"])
    process_name: str = "python"
    cpu_percents: list[float] = field(default_factory=lambda: [0.0, 50.0, 75.0, 25.0])
    rss: int = 2 * GIB
    state: str = psutil.STATUS_RUNNING
    errors: dict[str, BaseException] = field(default_factory=dict)
    table: FakeProcessTable | None = None
    cpu_calls: int = 0

    def _call(self, method: str) -> None:
        if not self.is_running():
            raise psutil.NoSuchProcess(self.pid)
        if method in self.errors:
            raise self.errors[method]

    def is_running(self) -> bool:
        current = self.table.processes.get(self.pid) if self.table is not None else self
        return current is not None and current.create_time_s == self.create_time_s

    @contextlib.contextmanager
    def oneshot(self) -> Iterator[None]:
        yield

    def create_time(self) -> float:
        self._call("create_time")
        return self.create_time_s

    def uids(self) -> _Uids:
        self._call("uids")
        return _Uids(self.uid, self.uid, self.uid)

    def username(self) -> str:
        self._call("username")
        return self.user

    def cmdline(self) -> list[str]:
        self._call("cmdline")
        return list(self.cmdline_parts)

    def name(self) -> str:
        self._call("name")
        return self.process_name

    def status(self) -> str:
        self._call("status")
        return self.state

    def cpu_percent(self, interval: float | None = None) -> float:
        self._call("cpu_percent")
        value = self.cpu_percents[min(self.cpu_calls, len(self.cpu_percents) - 1)]
        self.cpu_calls += 1
        return value

    def memory_info(self) -> _MemoryInfo:
        self._call("memory_info")
        return _MemoryInfo(rss=self.rss, vms=4 * self.rss)


class FakeProcessTable:
    """The host's process table, as ``process_factory`` for ``ProcessInspector``.

    Like ``psutil.Process(pid)``, each lookup returns a new object (with its own
    ``cpu_percent`` counter) for the process now holding that PID; ``handed_out[pid]`` lists
    them. A PID not in the table raises ``NoSuchProcess``, as psutil does for a process that
    has exited or lives in another PID namespace.
    """

    def __init__(self, *processes: FakeProcess) -> None:
        self.processes: dict[int, FakeProcess] = {}
        self.handed_out: dict[int, list[FakeProcess]] = {}
        self.attempts: Counter[int] = Counter()
        for process in processes:
            self.add(process)

    def add(self, process: FakeProcess) -> FakeProcess:
        process.table = self
        self.processes[process.pid] = process
        return process

    def remove(self, pid: int) -> None:
        del self.processes[pid]

    def lookups(self, pid: int) -> int:
        """How many times ``pid`` was looked up, found or not."""
        return self.attempts[pid]

    def __call__(self, pid: int) -> FakeProcess:
        self.attempts[pid] += 1
        if pid not in self.processes:
            raise psutil.NoSuchProcess(pid)
        handle = dataclasses.replace(self.processes[pid], cpu_calls=0)
        self.handed_out.setdefault(pid, []).append(handle)
        return handle
