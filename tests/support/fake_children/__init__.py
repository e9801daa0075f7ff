"""Fake probe children (scripts in this folder) and helpers shared by the probe tests."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from gpumon.data.model import GpuProcess, GpuStats, GpuUnavailable, HostStats, ProcessKind, Sample

HERE = Path(__file__).resolve().parent
MIB = 2**20

# Physical GPUs of the fake torch, as torch prints their UUIDs (no "GPU-" prefix), and the
# NVML view of the same machine: NVML's order differs from CUDA's, as it may on real servers.
FAKE_TORCH_UUIDS = [
    "aaaa1111-0000-4000-8000-000000000000",
    "bbbb2222-0000-4000-8000-000000000000",
]
NVML_GPUS = (
    (0, "GPU-bbbb2222-0000-4000-8000-000000000000"),
    (1, "GPU-aaaa1111-0000-4000-8000-000000000000"),
)


def script(name: str) -> list[str]:
    """The argv that runs the fake child ``name`` (e.g. ``"slow"``) in this interpreter."""
    return [sys.executable, str(HERE / f"{name}.py")]


def real_child(torch: str | None = None) -> list[str]:
    """The real probe child, with the ``fake`` or ``hanging`` stand-in torch, or the real one."""
    argv = [sys.executable, str(HERE / "real_child.py")]
    return argv + (["--torch", torch] if torch else [])


def gone(pid: int, within_s: float = 5.0) -> bool:
    """True once ``pid`` no longer runs (a zombie awaiting its reaper counts as gone)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def sample(
    gpus: tuple[tuple[int, str], ...] = NVML_GPUS,
    processes: Sequence[tuple[int, int, int | None]] = (),
    unavailable: GpuUnavailable | None = None,
) -> Sample:
    """A sample of ``gpus``; ``processes`` holds (PID, NVML GPU index, GPU memory bytes)."""
    uuid_of = dict(gpus)
    return Sample(
        timestamp_s=0.0,
        host=HostStats("fakehost", None, None, None, None, None, None),
        driver=None,
        gpus=tuple(
            GpuStats(index=index, uuid=uuid, memory_used_bytes=1024 * MIB) for index, uuid in gpus
        ),
        processes=tuple(
            GpuProcess(index, uuid_of[index], pid, ProcessKind.COMPUTE, memory)
            for pid, index, memory in processes
        ),
        unavailable=unavailable,
    )


def children_sample(memory: int | None = 600 * MIB) -> Sample:
    """NVML as it would look with every child of this process on every GPU."""
    pids = [child.pid for child in psutil.Process().children(recursive=True)]
    return sample(processes=[(pid, index, memory) for pid in pids for index, _ in NVML_GPUS])
