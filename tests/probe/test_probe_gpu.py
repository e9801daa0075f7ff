"""The torch probe on a real NVIDIA GPU. Skipped without a driver, a GPU, or a CUDA build of
torch (CI's torch is the CPU build: these run on a GPU machine, e.g. ``pytest -m gpu``)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.data.model import Sample
from gpumon.probe import steps as S
from gpumon.probe.protocol import Request, StepEvent, decode
from gpumon.probe.runner import ProbeOutcome, run_probe
from gpumon.sources.nvml.source import NvmlSource
from tests.support.fake_children import MIB, gone

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[2]


def _torch_cuda_build() -> str | None:
    """torch's CUDA version, asked in a child process: this process stays free of torch."""
    result = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.version.cuda)"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    text = result.stdout.strip()
    return None if result.returncode != 0 or text == "None" else text


@pytest.fixture
def source(monkeypatch: pytest.MonkeyPatch) -> Iterator[NvmlSource]:
    nvml_source = NvmlSource()
    try:
        if nvml_source.unavailable is not None:
            pytest.skip(f"no usable NVIDIA GPU: {nvml_source.unavailable.headline}")
        if _torch_cuda_build() is None:
            pytest.skip("torch is missing or a CPU-only build in this environment")
        # PCI order and every GPU visible: torch's cuda:i is then NVML's GPU i, which lets the
        # tests know the right answer independently of the probe.
        monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        yield nvml_source
    finally:
        nvml_source.close()


def _gpus(sample: Sample) -> tuple[tuple[int, str], ...]:
    return tuple((gpu.index, gpu.uuid) for gpu in sample.gpus)


async def _probe(source: NvmlSource, request: Request) -> ProbeOutcome:
    async def next_sample() -> Sample:
        await asyncio.sleep(0.5)
        return await asyncio.to_thread(source.sample)

    return await run_probe(request, next_sample=next_sample, timeout_s=180)


async def test_probe_on_cuda_0_passes_every_step(source: NvmlSource) -> None:
    sample = source.sample()
    outcome = await _probe(source, Request(cuda_index=0, gpus=_gpus(sample)))
    failed = {i: e.value for i, e in outcome.steps.items() if e.status == S.FAIL}
    assert outcome.ok, failed
    expected = {i: S.PASS for i in S.STEP_IDS}
    if len(sample.gpus) < 2:
        expected[S.CROSS_DEVICE.id] = S.SKIP
    assert {i: e.status for i, e in outcome.steps.items()} == expected
    if len(sample.gpus) >= 2:
        assert "Expected all tensors to be on the same device" in outcome.steps[7].value


async def test_the_uuid_the_probe_maps_is_nvmls_for_that_gpu(source: NvmlSource) -> None:
    sample = source.sample()
    outcome = await _probe(source, Request(cuda_index=0, gpus=_gpus(sample)))
    assert outcome.holding is not None, outcome.summary
    assert outcome.holding.cuda_index == 0
    assert outcome.holding.gpu_uuid == sample.gpus[0].uuid
    assert outcome.steps[4].value == f"cuda:0 is GPU 0 ({sample.gpus[0].uuid})"


async def test_nvml_saw_the_probes_pid_with_the_allocated_memory(source: NvmlSource) -> None:
    sample = source.sample()
    outcome = await _probe(source, Request(cuda_index=0, gpus=_gpus(sample)))
    holding = outcome.holding
    assert holding is not None, outcome.summary
    assert holding.allocated_bytes >= 16 * MIB
    step6 = outcome.steps[6]
    assert step6.status == S.PASS, step6.value
    assert f"NVML lists PID {holding.pid} on GPU 0" in step6.value
    # After the probe, the PID is gone from the GPU.
    assert gone(holding.pid)
    assert f"PID {holding.pid} gone from GPU 0" in outcome.steps[9].value


async def test_selecting_by_nvml_uuid_follows_cuda_visible_devices(
    source: NvmlSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    sample = source.sample()
    if len(sample.gpus) < 2:
        pytest.skip("needs two GPUs")
    last = sample.gpus[-1]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", last.uuid)
    outcome = await _probe(source, Request(gpu_uuid=last.uuid, gpus=_gpus(sample)))
    assert outcome.steps[4].status == S.PASS
    assert outcome.steps[4].value.startswith(f"GPU {last.index} is cuda:0 in this environment")
    # And a GPU hidden by CUDA_VISIBLE_DEVICES is reported as not visible, with the reason.
    first = sample.gpus[0]
    hidden = await _probe(source, Request(gpu_uuid=first.uuid, gpus=_gpus(sample)))
    assert hidden.steps[4].status == S.FAIL
    assert "CUDA_VISIBLE_DEVICES=" in hidden.steps[4].value


def test_gpumon_probe_on_gpu_0_exits_0(source: NvmlSource) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gpumon", "probe", "--gpu", "0", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    events = [decode(line) for line in result.stdout.splitlines()]
    failed = [e for e in events if isinstance(e, StepEvent) and e.status == S.FAIL]
    assert result.returncode == 0, failed
