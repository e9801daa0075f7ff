"""`gpumon pick` over hand-made samples: a source that answers them, opened as pick opens it.

No Textual here: a child process (the claim races) imports this module too.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpumon.data.model import (
    DriverInfo,
    GpuProcess,
    GpuStats,
    HostStats,
    ProcessKind,
    Sample,
)
from gpumon.sources import base

GIB = 1024**3
MIB = 1024**2


class SampleSource:
    """Answers the samples it is given in turn, then the last one for ever; remembers how it
    was opened, how often it was read and whether it was closed."""

    def __init__(self, *samples: Sample, simulated: bool = False) -> None:
        self.samples = list(samples)
        self.simulated = simulated
        self.reads = 0
        self.closed = False
        self.options: dict[str, Any] = {}

    def sample(self) -> Sample:
        self.reads += 1
        if len(self.samples) > 1:
            return self.samples.pop(0)
        return self.samples[0]

    def close(self) -> None:
        self.closed = True


def serve(monkeypatch: pytest.MonkeyPatch, *samples: Sample) -> list[SampleSource]:
    """Every source pick opens answers ``samples``; returns the sources opened."""
    opened: list[SampleSource] = []
    simulated = any(sample.simulated for sample in samples)

    def source_for(settings: object, **options: Any) -> SampleSource:
        source = SampleSource(*samples, simulated=simulated)
        source.options = options
        opened.append(source)
        return source

    monkeypatch.setattr(base, "source_for", source_for)
    return opened


def gpu(index: int, **fields: Any) -> GpuStats:
    """An idle 24 GiB GPU."""
    values: dict[str, Any] = dict(
        index=index,
        uuid=f"GPU-{index:08x}-aaaa-bbbb-cccc-dddddddddddd",
        name="NVIDIA Test Board",
        memory_used_bytes=4 * MIB,
        memory_free_bytes=24 * GIB - 4 * MIB,
        memory_total_bytes=24 * GIB,
        utilization_gpu_pct=0,
        mig_mode=False,
    )
    values.update(fields)
    return GpuStats(**values)


def job(on: GpuStats, pid: int, user: str = "alice", **fields: Any) -> GpuProcess:
    """A process of ``user`` holding 2 GiB on ``on`` for an hour."""
    values: dict[str, Any] = dict(
        gpu_index=on.index,
        gpu_uuid=on.uuid,
        pid=pid,
        kind=ProcessKind.COMPUTE,
        gpu_memory_bytes=2 * GIB,
        user=user,
        command="python train.py",
        elapsed_s=3600.0,
    )
    values.update(fields)
    return GpuProcess(**values)


def sample(
    gpus: tuple[GpuStats, ...], processes: tuple[GpuProcess, ...] = (), **fields: Any
) -> Sample:
    values: dict[str, Any] = dict(
        timestamp_s=1_700_000_000.0,
        host=HostStats("testhost", None, None, None, None, None, None),
        driver=DriverInfo("550.54.15", "12.4", "12.550.54.15"),
        gpus=gpus,
        processes=processes,
    )
    values.update(fields)
    return Sample(**values)
