"""The MIG devices of a GPU in MIG mode, read through its :class:`Device`'s choke point.

Handles, instance ids, UUIDs and profiles are read once and kept while the MIG configuration
stands; memory every sample. The slots are enumerated again when a kept handle stops
answering and every :data:`MIG_RESCAN_S` seconds. Never imports ``pynvml``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpumon.data.model import MigInstance
from gpumon.sources.nvml.errors import nvml_text

if TYPE_CHECKING:
    from gpumon.sources.nvml.device import Device

#: How often, at most, a GPU's MIG slots are enumerated again to find instances created since
#: the last enumeration (one destroyed is noticed at once: its handle stops answering).
MIG_RESCAN_S = 10.0

# nvml.h return codes: NVML's answers for a MIG slot that holds no instance (NOT_FOUND below
# the maximum count, INVALID_ARGUMENT past it), and for a kept handle whose instance is gone.
_NVML_ERROR_INVALID_ARGUMENT = 2
_NVML_ERROR_NOT_FOUND = 6
_NO_INSTANCE = frozenset({_NVML_ERROR_INVALID_ARGUMENT, _NVML_ERROR_NOT_FOUND})

# "NVIDIA A100-SXM4-40GB MIG 3g.20gb", "NVIDIA H100 80GB HBM3 MIG 1g.10gb", "... MIG 1c.3g.20gb"
_PROFILE = re.compile(r"(?:^|\s)MIG\s+(\S+)\s*$")


def on_mig_device(handle: Any, call: Callable[..., Any] | None) -> Callable[..., Any] | None:
    """``call`` made on a MIG device rather than its GPU, through the GPU's choke point
    (:meth:`Device.read` passes the GPU's handle first: this puts the MIG device's in its
    place). ``None`` for a binding that lacks the call."""
    if call is None:
        return None
    return lambda _gpu_handle, *args: call(handle, *args)


def mig_profile(name: str | None) -> str | None:
    """The profile a MIG device's NVML name ends with (``3g.20gb``); ``None`` without one."""
    match = _PROFILE.search(name) if name else None
    return match.group(1) if match else None


@dataclass(frozen=True, slots=True)
class _Slot:
    """What one MIG device says of itself that stays while the configuration stands."""

    index: int
    memory_info: Callable[..., Any] | None  # nvmlDeviceGetMemoryInfo on this MIG device
    gpu_instance_id: int | None
    compute_instance_id: int | None
    profile: str | None
    uuid: str | None


class MigReader:
    """The MIG devices of one GPU whose current MIG mode is on."""

    def __init__(self, device: Device, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._device = device
        self._monotonic = monotonic
        self._max_count: int | None = None
        self._slots: tuple[_Slot, ...] | None = None  # None: enumerate on the next read
        self._enumerated_at = 0.0

    def instances(self) -> tuple[MigInstance, ...] | None:
        """The MIG devices in NVML's order with their memory now; ``None`` when they cannot
        be told (NVML refuses or does not support enumerating them). A field that fails
        reads ``None``. Raises :class:`~gpumon.sources.nvml.errors.GpuLost`."""
        now = self._monotonic()
        if self._slots is not None and not 0 <= now - self._enumerated_at < MIG_RESCAN_S:
            self._slots = None
        for _ in range(2):  # a kept handle whose instance is gone: enumerate again, once
            if self._slots is None:
                self._slots, self._enumerated_at = self._enumerate(), now
                if self._slots is None:
                    return None
            instances = self._read_memory(self._slots)
            if instances is not None:
                return instances
            self._slots = None
        return None

    def _enumerate(self) -> tuple[_Slot, ...] | None:
        device = self._device
        nvml = device.nvml
        if self._max_count is None:
            count_call = getattr(nvml, "nvmlDeviceGetMaxMigDeviceCount", None)
            count = None if count_call is None else device.read("mig_max_count", count_call)
            if count is None:
                return None
            self._max_count = int(count)
        handle_call = getattr(nvml, "nvmlDeviceGetMigDeviceHandleByIndex", None)
        if handle_call is None:
            return None
        slots: list[_Slot] = []
        for index in range(self._max_count):
            handle = device.read("mig_handle", handle_call, index)
            if handle is None:
                if device.failure_code("mig_handle") in _NO_INSTANCE:
                    continue  # an empty slot
                return None  # refused (NO_PERMISSION for a non-root user) or unsupported
            slots.append(self._slot(index, handle))
        return tuple(slots)

    def _slot(self, index: int, handle: Any) -> _Slot:
        device = self._device
        nvml = device.nvml

        def read(field: str, function: str) -> Any:
            # read_newest asks nothing of a binding that lacks the function.
            call = on_mig_device(handle, getattr(nvml, function, None))
            return device.read_newest([(field, call, ())])

        gpu_instance = read("mig_gpu_instance_id", "nvmlDeviceGetGpuInstanceId")
        compute_instance = read("mig_compute_instance_id", "nvmlDeviceGetComputeInstanceId")
        uuid = read("mig_uuid", "nvmlDeviceGetUUID")
        name = read("mig_name", "nvmlDeviceGetName")
        return _Slot(
            index=index,
            memory_info=on_mig_device(handle, nvml.nvmlDeviceGetMemoryInfo),
            gpu_instance_id=None if gpu_instance is None else int(gpu_instance),
            compute_instance_id=None if compute_instance is None else int(compute_instance),
            profile=None if name is None else mig_profile(nvml_text(name)),
            uuid=None if uuid is None else nvml_text(uuid),
        )

    def _read_memory(self, slots: tuple[_Slot, ...]) -> tuple[MigInstance, ...] | None:
        """Every slot with its memory now; ``None`` when a kept handle no longer names an
        instance."""
        device = self._device
        nvml = device.nvml
        v2 = getattr(nvml, "nvmlMemory_v2", None)
        instances: list[MigInstance] = []
        for slot in slots:
            call = slot.memory_info
            info = device.read_newest(
                [("mig_memory_v2", call if v2 else None, (v2,)), ("mig_memory", call, ())]
            )
            if info is None and (
                device.failure_code("mig_memory_v2") in _NO_INSTANCE
                or device.failure_code("mig_memory") in _NO_INSTANCE
            ):
                return None
            instances.append(
                MigInstance(
                    gpu_index=device.index,
                    index=slot.index,
                    gpu_instance_id=slot.gpu_instance_id,
                    compute_instance_id=slot.compute_instance_id,
                    profile=slot.profile,
                    uuid=slot.uuid,
                    memory_used_bytes=None if info is None else int(info.used),
                    memory_total_bytes=None if info is None else int(info.total),
                )
            )
        return tuple(instances)


def read_mig_instances(device: Device) -> tuple[MigInstance, ...] | None:
    """The MIG devices of ``device``, whose current MIG mode is on (see
    :meth:`MigReader.instances`); what stays is kept on the device between samples."""
    if device.mig_reader is None:
        device.mig_reader = MigReader(device, monotonic=device.monotonic)
    return device.mig_reader.instances()
