"""NVML's variable-length lists (a GPU's processes, their SM samples) in one call each.

nvidia-ml-py asks NVML twice per list (count, then entries); :class:`ListReader` keeps a
buffer per GPU and list, sized for the last count, and asks once, growing it on
INSUFFICIENT_SIZE. A binding without the library handle is read through its own functions,
with the same result: plain tuples either way. Never imports ``pynvml``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from types import ModuleType
from typing import Any

#: (pid, GPU memory in bytes or None, GPU instance id, compute instance id), as NVML lists a
#: process; the instance ids are NVML's raw values (0xFFFFFFFF outside MIG).
ProcessEntry = tuple[int, int | None, int, int]
#: (pid, timestamp in microseconds, SM utilisation %) of one per-process sample.
SmSample = tuple[int, int, int]

NVML_SUCCESS = 0
NVML_ERROR_INSUFFICIENT_SIZE = 7
#: What NVML puts in ``usedGpuMemory`` when it cannot tell (Windows WDDM, some containers).
VALUE_NOT_AVAILABLE = 0xFFFF_FFFF_FFFF_FFFF
#: A new buffer's entries, and the tries of one read when processes keep starting.
_FIRST_CAPACITY = 16
_TRIES = 3


class ListReader:
    """One GPU's lists, each read in one NVML call while its buffer is large enough."""

    def __init__(self, nvml: ModuleType) -> None:
        self.nvml = nvml
        get = getattr(nvml, "_nvmlGetFunctionPointer", None)
        info = getattr(nvml, "c_nvmlProcessInfo_v3_t", None)
        info_v2 = getattr(nvml, "c_nvmlProcessInfo_v2_t", None)
        sample = getattr(nvml, "c_nvmlProcessUtilizationSample_t", None)
        self._direct = get is not None and None not in (info, info_v2, sample)
        self._get: Callable[[str], Any] | None = get
        # The _v3 and _v2 process lists share one struct layout (pid, usedGpuMemory,
        # gpuInstanceId, computeInstanceId): nvml.h's nvmlProcessInfo_v2_t.
        self._structs = {"_v3": info, "_v2": info_v2}
        self._sample = sample
        self._buffers: dict[str, tuple[int, Any]] = {}  # function -> (capacity, array)

    def processes(self, function: str) -> Callable[[Any], list[ProcessEntry]] | None:
        """A call for :meth:`Device.read <gpumon.sources.nvml.device.Device.read>` that lists
        the processes of NVML's ``function`` (e.g. ``nvmlDeviceGetComputeRunningProcesses_v3``;
        the binding's unversioned name is the ``_v3`` ABI); ``None`` where the binding has
        neither the library handle nor that function."""
        if self._direct:
            return lambda handle: self._direct_processes(function, handle)
        call = getattr(self.nvml, function.removesuffix("_v3"), None)
        if call is None:
            return None
        return lambda handle: [_entry(item) for item in call(handle)]

    def _direct_processes(self, function: str, handle: Any) -> list[ProcessEntry]:
        count, array = self._fill(function, self._structs[function[-3:]], handle)
        return [
            (
                item.pid,
                None if item.usedGpuMemory == VALUE_NOT_AVAILABLE else item.usedGpuMemory,
                item.gpuInstanceId,
                item.computeInstanceId,
            )
            for item in array[:count]
        ]

    def sm_samples(self) -> Callable[[Any, int], list[SmSample]]:
        """A call (handle, newest timestamp seen) for the per-process samples newer than that
        timestamp; NOT_FOUND (an ``NVMLError``) when there is none."""
        if self._direct:
            return self._direct_samples
        call = self.nvml.nvmlDeviceGetProcessUtilization
        return lambda handle, seen: [
            (int(s.pid), int(s.timeStamp), int(s.smUtil)) for s in call(handle, seen)
        ]

    def _direct_samples(self, handle: Any, seen: int) -> list[SmSample]:
        stamp = ctypes.c_ulonglong(seen)
        count, array = self._fill(
            "nvmlDeviceGetProcessUtilization", self._sample, handle, stamp, samples=True
        )
        return [(array[i].pid, array[i].timeStamp, array[i].smUtil) for i in range(count)]

    def _fill(
        self, function: str, struct: Any, handle: Any, *extra: Any, samples: bool = False
    ) -> tuple[int, Any]:
        assert self._get is not None
        fn = self._get(function)  # NVMLError(FUNCTION_NOT_FOUND) for a driver without it
        capacity, array = self._buffers.get(function, (0, None))
        if array is None:
            capacity = _FIRST_CAPACITY
            array = (struct * capacity)()
        count = ctypes.c_uint(capacity)
        for _ in range(_TRIES):
            count.value = capacity
            if samples:  # (device, samples, count, lastSeenTimeStamp)
                ret = fn(handle, array, ctypes.byref(count), *extra)
            else:  # (device, count, infos)
                ret = fn(handle, ctypes.byref(count), array)
            if ret != NVML_ERROR_INSUFFICIENT_SIZE:
                break
            capacity = count.value * 2 + 5  # room for processes that start meanwhile (as pynvml)
            array = (struct * capacity)()
        self._buffers[function] = (capacity, array)
        if ret != NVML_SUCCESS:
            raise self.nvml.NVMLError(ret)
        return min(count.value, capacity), array


def _entry(item: Any) -> ProcessEntry:
    """A binding's process object as a :data:`ProcessEntry` (absent instance ids: not set)."""
    memory = getattr(item, "usedGpuMemory", None)
    return (
        int(item.pid),
        memory if isinstance(memory, int) and memory != VALUE_NOT_AVAILABLE else None,
        _raw_id(getattr(item, "gpuInstanceId", None)),
        _raw_id(getattr(item, "computeInstanceId", None)),
    )


def _raw_id(value: object) -> int:
    return value if isinstance(value, int) else 0xFFFFFFFF
