"""Against a real GPU and driver: NvmlSource agrees with nvidia-smi. Skipped without one."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator

import pytest

from gpumon.sources.nvml.source import NvmlSource

pytestmark = pytest.mark.gpu

MIB = 1024**2


@pytest.fixture
def source() -> Iterator[NvmlSource]:
    nvml_source = NvmlSource()
    try:
        if nvml_source.unavailable is not None:
            pytest.skip(f"no usable NVIDIA GPU: {nvml_source.unavailable.headline}")
        yield nvml_source
    finally:
        nvml_source.close()


def nvidia_smi(*fields: str) -> list[list[str]]:
    """One row per GPU, in NVML index order."""
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi is not on PATH")
    output = subprocess.run(
        ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    return [[cell.strip() for cell in line.split(",")] for line in output.strip().splitlines()]


def test_first_gpu_agrees_with_nvidia_smi(source: NvmlSource) -> None:
    sample = source.sample()
    name, memory_total_mib, driver_version = nvidia_smi("name", "memory.total", "driver_version")[0]

    gpu = sample.gpus[0]
    assert gpu.lost is False
    assert gpu.name == name
    assert gpu.memory_total_bytes is not None
    assert gpu.memory_total_bytes // MIB == int(memory_total_mib)
    assert sample.driver is not None
    assert sample.driver.driver_version == driver_version


def test_every_gpu_is_listed_in_nvidia_smi_order(source: NvmlSource) -> None:
    rows = nvidia_smi("index", "uuid")

    gpus = source.sample().gpus

    assert [(gpu.index, gpu.uuid) for gpu in gpus] == [(int(i), uuid) for i, uuid in rows]


def test_readings_are_plausible(source: NvmlSource) -> None:
    source.sample()
    gpu = source.sample().gpus[0]

    assert gpu.memory_used_bytes is not None
    assert gpu.memory_total_bytes is not None
    assert 0 <= gpu.memory_used_bytes <= gpu.memory_total_bytes
    if gpu.utilization_gpu_pct is not None:  # N/A with MIG enabled
        assert 0 <= gpu.utilization_gpu_pct <= 100
    if gpu.temperature_c is not None:
        assert 0 < gpu.temperature_c < 120
