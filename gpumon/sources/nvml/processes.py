"""The processes NVML lists on one GPU (compute and graphics, v3 and v2 ABIs, MIG)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from gpumon.data.model import ProcessKind
from gpumon.sources.nvml.device import MAX_PID
from gpumon.sources.nvml.errors import NVML_ERROR_NOT_FOUND, PROCESSES_NOT_SUPPORTED

if TYPE_CHECKING:
    from gpumon.sources.nvml.device import Device

#: What NVML puts in a process's instance ids when it runs outside MIG (``0xFFFFFFFF``).
INSTANCE_ID_NOT_SET = 0xFFFFFFFF


#: Why a GPU's processes are unknown when NVML listed a PID outside 1 .. 2**22.
IMPOSSIBLE_PID = "NVML listed an impossible PID (nvidia-ml-py and the driver disagree?)"

#: One PID as a GPU's process lists give it: (kind, GPU memory, GPU instance id, compute
#: instance id); the instance ids name the MIG instance it runs in (``None`` without MIG). A
#: plain tuple: one is built per process per sample.
ListedProcess = tuple[ProcessKind, int | None, int | None, int | None]


def read_processes(device: Device) -> dict[int, ListedProcess] | None:
    """PID -> its kind, GPU memory and MIG instance (a PID in both lists is C+G).

    ``None``, never "no processes", when they are unknown (the reason in
    :attr:`Device.processes_error`): a list failed, holds an impossible PID, or the compute list
    is not supported. An unsupported graphics list alone leaves the compute list's answer.
    """
    device.processes_error = None
    found: dict[int, ListedProcess] = {}
    mig = device.mig_enabled  # without MIG, NVML sets no instance id: not even looked at
    compute_unsupported = False
    for field, function, kind in (
        ("compute_processes", "nvmlDeviceGetComputeRunningProcesses", ProcessKind.COMPUTE),
        ("graphics_processes", "nvmlDeviceGetGraphicsRunningProcesses", ProcessKind.GRAPHICS),
    ):
        # The _v3 ABI is R535+ (the binding's unversioned call); drivers before R535 answer _v2.
        entries = device.read_newest(
            [
                (field, device.lists.processes(f"{function}_v3"), ()),
                (f"{field}_v2", device.lists.processes(f"{function}_v2"), ()),
            ]
        )
        if entries is None:
            error = device.errors.get(field) or device.errors.get(f"{field}_v2")
            if error is not None:
                device.processes_error = f"NVML: {error}"
                return None
            compute_unsupported = compute_unsupported or kind is ProcessKind.COMPUTE
        for pid, memory, gpu_instance_id, compute_instance_id in entries or ():
            if not 0 < pid <= MAX_PID:
                # No process has this PID: the binding reads the driver's list with another
                # layout (nvitop #75), so none of its entries can be trusted, nor "none".
                device.processes_error = IMPOSSIBLE_PID
                return None
            if memory is not None and memory >= 1 << 62:
                memory = None
            previous = found.get(pid)
            if previous is None:
                if mig:
                    found[pid] = (
                        kind,
                        memory,
                        _instance_id(gpu_instance_id),
                        _instance_id(compute_instance_id),
                    )
                else:
                    found[pid] = (kind, memory, None, None)
                continue
            previous_kind, previous_memory, gpu_instance, compute_instance = previous
            if previous_kind is kind:
                # Listed twice in one list: one process on several MIG instances. The model
                # holds one instance per process: the first listed is kept.
                total = _add_known(previous_memory, memory)
                found[pid] = (kind, total, gpu_instance, compute_instance)
            else:
                # In both lists (C+G): the same memory reported twice, count it once.
                both = max((m for m in (previous_memory, memory) if m is not None), default=None)
                found[pid] = (ProcessKind.BOTH, both, gpu_instance, compute_instance)
    if compute_unsupported:
        device.processes_error = PROCESSES_NOT_SUPPORTED
        return None
    return found


#: A PID's last per-process sample stands for this long when a window brings none: NVML
#: samples every second or so, and a faster interval must not read a busy job as 0 % in
#: the windows between (nvitop does the same).
SM_SAMPLE_HOLD_S = 2.0
#: A per-process sample dated further ahead of this host's clock than this is from before
#: the clock stepped back.
CLOCK_STEP_SLACK_S = 5.0


def read_sm_utilization(
    device: Device, listed: Mapping[int, ListedProcess], clock: Callable[[], float] = time.time
) -> dict[int, int]:
    """PID -> SM utilisation % over the window since the last call, for the ``listed`` PIDs.

    Each call reports only samples newer than the last seen. A compute process with no sample
    keeps its last one for :data:`SM_SAMPLE_HOLD_S`, then reads 0 %, but only when NVML answered
    for the window; a graphics-only process without a sample, and every process when the call
    failed or is not supported (MIG: not asked), is N/A, never 0 %. Values are clamped to 0-100.
    Raises :class:`~gpumon.sources.nvml.errors.GpuLost`.
    """
    if not listed or device.mig_enabled:
        return {}
    now_us = clock() * 1e6  # NVML's timestamps: µs since the epoch, this host's clock
    future_us = now_us + CLOCK_STEP_SLACK_S * 1e6
    if device._process_samples_seen > future_us:
        # The clock stepped back: asking for samples newer than the old "newest" would get
        # none for as long as the step (a busy job read 0 % and went IDLE). Start afresh.
        device._process_samples_seen = 0
        device.last_sm_samples.clear()
    seen = device._process_samples_seen
    field = "process_utilization"
    samples = device.read(field, device.lists.sm_samples(), seen)
    if samples is None and device.failure_code(field) != NVML_ERROR_NOT_FOUND:
        return {}  # not supported, or failed: unknown
    newest: dict[int, tuple[int, int]] = {}  # pid -> (timestamp, sm %)
    for pid, timestamp, sm in samples or ():
        if timestamp <= seen or timestamp > future_us:
            continue  # older than asked for (a driver that ignores it), or from before a step
        device._process_samples_seen = max(device._process_samples_seen, timestamp)
        if pid in listed and (pid not in newest or timestamp >= newest[pid][0]):
            newest[pid] = (timestamp, max(0, min(100, sm)))
    last = device.last_sm_samples
    for gone in last.keys() - listed.keys():
        del last[gone]
    last.update(newest)
    utilization = {pid: value for pid, (_, value) in newest.items()}
    hold_from_us = now_us - SM_SAMPLE_HOLD_S * 1e6
    for pid, (kind, *_) in listed.items():
        if kind is not ProcessKind.GRAPHICS and pid not in utilization:
            stamp, value = last.get(pid, (0, 0))
            utilization[pid] = value if stamp >= hold_from_us else 0
    return utilization


def _instance_id(value: object) -> int | None:
    """A MIG instance id from a process entry; ``None`` when not set (no MIG) or absent (a
    binding whose struct lacks the field)."""
    if not isinstance(value, int) or value == INSTANCE_ID_NOT_SET or value < 0:
        return None
    return value


def _add_known(first: int | None, second: int | None) -> int | None:
    if first is None or second is None:
        return first if second is None else second
    return first + second
