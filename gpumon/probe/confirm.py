"""What NVML says about the probe child: step 6 and the end of step 9, run by the parent.

The child never touches NVML. While it holds its tensors, the parent looks at NVML samples:
both the dashboard and ``gpumon probe`` pass their :class:`~gpumon.sampling.store.Store`'s
``next_sample`` (the dashboard also asks its poller to poll at once; ``gpumon probe`` runs a
poller every 0.5 s). Both are judged here, by the same code.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from gpumon.data.model import GpuStats, Sample
from gpumon.probe import steps as S
from gpumon.probe.protocol import Holding
from gpumon.probe.steps import Outcome

NextSample = Callable[[], Awaitable[Sample]]
"""Returns the first NVML sample pushed after the call, never one already there (a store's
``next_sample``); a poll already in flight at the call may be the one."""

# How long step 6 (and the check after step 9) may wait for NVML, and for how many samples.
CONFIRM_TIMEOUT_S = 10.0
CONFIRM_SAMPLES = 5


def _mib(value: int) -> str:
    return f"{value / 2**20:.0f} MiB"


class _Sampler:
    """Up to CONFIRM_SAMPLES samples within a time limit; None when time or samples run out."""

    def __init__(self, next_sample: NextSample, timeout_s: float) -> None:
        self.next_sample = next_sample
        self.deadline = time.monotonic() + timeout_s
        self.left = CONFIRM_SAMPLES

    async def next(self) -> Sample | None:
        remaining = self.deadline - time.monotonic()
        if self.left <= 0 or remaining <= 0:
            return None
        self.left -= 1
        try:
            return await asyncio.wait_for(self.next_sample(), remaining)
        except asyncio.TimeoutError:
            return None


def _find_gpu(sample: Sample, uuid: str) -> GpuStats | None:
    key = S.uuid_key(uuid)
    return next((gpu for gpu in sample.gpus if S.uuid_key(gpu.uuid) == key), None)


def _why_pids_cannot_match(gpu: GpuStats, sample: Sample) -> str:
    """Why NVML's PIDs on ``gpu`` cannot be matched with the child's, or "" when they can."""
    if gpu.processes_error is not None:
        return f"NVML did not list GPU {gpu.index}'s processes ({gpu.processes_error})"
    if any(not p.visible and not p.exited for p in sample.processes_on(gpu.index)):
        return (
            "NVML lists PIDs from another PID namespace (a container without --pid=host), "
            "so the probe's PID cannot be matched"
        )
    return ""


async def check_holding(
    holding: Holding, next_sample: NextSample | None, timeout_s: float = CONFIRM_TIMEOUT_S
) -> Outcome:
    """Step 6: NVML lists the child's PID on its GPU using at least what torch reserved, within
    ``timeout_s``. Skip when there is no ``next_sample``, the GPUs are simulated or no sample came.
    """
    if next_sample is None:
        return Outcome(S.SKIP, "skipped: no NVML sampler in this mode")
    if not S.uuid_key(holding.gpu_uuid):
        return Outcome(S.SKIP, "skipped: the GPU's UUID is unknown")
    sampler = _Sampler(next_sample, timeout_s)
    gpu_index: int | None = None
    listed = ""
    cannot_match = ""
    while True:
        try:
            sample = await sampler.next()
        except Exception as error:
            return Outcome(S.SKIP, f"skipped: NVML sampling failed: {error}")
        if sample is None:
            break
        if sample.unavailable is not None:
            return Outcome(S.SKIP, f"skipped: NVML unavailable: {sample.unavailable.headline}")
        if sample.simulated:
            return Outcome(S.SKIP, "skipped: the GPUs are simulated (--demo)")
        gpu = _find_gpu(sample, holding.gpu_uuid)
        if gpu is None:
            continue
        gpu_index = gpu.index
        cannot_match = _why_pids_cannot_match(gpu, sample)
        on_gpu = sample.processes_on(gpu.index)
        listed = ", ".join(
            f"PID {p.pid} ({_mib(p.gpu_memory_bytes) if p.gpu_memory_bytes else 'N/A'})"
            for p in on_gpu
        )
        ours = [p for p in on_gpu if p.pid == holding.pid]
        if not ours:
            if cannot_match:
                break  # more samples will not change that
            continue
        memory = ours[0].gpu_memory_bytes
        where = f"PID {holding.pid} on GPU {gpu.index}"
        holds = f"the probe holds {_mib(holding.allocated_bytes)}"
        if memory is None:  # WSL, some MIG setups: NVML cannot say
            return Outcome(S.PASS, f"NVML lists {where} (memory N/A; {holds})")
        # NVML's figure includes the CUDA context, so it is at least what torch reserved.
        if memory >= holding.reserved_bytes * 0.95:
            return Outcome(S.PASS, f"NVML lists {where} using {_mib(memory)} ({holds})")
    if gpu_index is None:
        return Outcome(
            S.SKIP, f"skipped: no NVML sample of {holding.gpu_uuid} within {timeout_s:g} s"
        )
    if cannot_match:
        return Outcome(S.SKIP, f"skipped: {cannot_match}", f"Processes NVML lists: {listed}.")
    return Outcome(
        S.FAIL,
        f"NVML does not list PID {holding.pid} on GPU {gpu_index} with "
        f"{_mib(holding.reserved_bytes)} or more",
        f"Processes NVML lists on that GPU: {listed or 'none'}. In a container without "
        "--pid=host NVML reports host PIDs, which differ from the child's.",
    )


async def check_released(
    holding: Holding, next_sample: NextSample | None, timeout_s: float = CONFIRM_TIMEOUT_S
) -> Outcome | None:
    """After the child exited: pass (with a note for step 9) when NVML no longer lists its PID,
    fail when it does, None when NVML cannot tell.
    """
    if next_sample is None:
        return None
    sampler = _Sampler(next_sample, timeout_s)
    still_listed = False
    while True:
        try:
            sample = await sampler.next()
        except Exception:
            return None
        if sample is None:
            break
        gpu = _find_gpu(sample, holding.gpu_uuid)
        if gpu is None or _why_pids_cannot_match(gpu, sample):
            return None  # a PID NVML could never list is no proof that it is gone
        still_listed = True
        if all(p.pid != holding.pid for p in sample.processes_on(gpu.index)):
            used = f", {_mib(gpu.memory_used_bytes)} in use" if gpu.memory_used_bytes else ""
            return Outcome(S.PASS, f"NVML: PID {holding.pid} gone from GPU {gpu.index}{used}")
    if not still_listed:
        return None  # no sample in time: NVML cannot tell, which is not a failure
    return Outcome(S.FAIL, f"NVML still lists PID {holding.pid} after the child exited")
