"""The real probe child, end to end: torch's CPU build (as in CI), an interpreter without torch,
and a stand-in torch with simulated GPUs that takes the child through all nine steps."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from gpumon.data.model import Sample
from gpumon.probe import steps as S
from gpumon.probe.protocol import Hello, Request, decode
from gpumon.probe.runner import ProbeOutcome, run_probe
from tests.support.fake_children import (
    FAKE_TORCH_UUIDS,
    MIB,
    NVML_GPUS,
    children_sample,
    real_child,
)

ROOT = Path(__file__).resolve().parents[2]
# Found, not imported: the test process itself stays free of torch.
HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(
    not HAS_TORCH,
    reason="torch is not installed (the README's test command installs torch==2.13.0)",
)


def statuses(outcome: ProbeOutcome) -> dict[int, str]:
    return {step: event.status for step, event in outcome.steps.items()}


# --- torch's CPU build: what CI runs ---------------------------------------------------------


@needs_torch
async def test_the_real_child_under_cpu_only_torch_fails_at_cuda_and_skips_the_rest() -> None:
    outcome = await run_probe(Request(cuda_index=0), timeout_s=120)
    assert outcome.returncode == 0
    assert not outcome.ok
    step1 = outcome.steps[1]
    assert step1.status == S.PASS and "torch 2." in step1.value
    assert sys.executable in step1.value
    # CI's torch is the CPU build: step 2 names it, step 3 says why CUDA is unavailable.
    assert outcome.steps[2].status == S.FAIL
    assert outcome.steps[2].value.startswith("CPU-only build")
    assert outcome.steps[3].status == S.FAIL
    assert outcome.steps[3].value.startswith("CUDA not available: CPU-only build")
    assert "CUDA_VISIBLE_DEVICES=" in outcome.steps[3].value
    assert all(outcome.steps[i].status == S.SKIP for i in range(4, 10))
    assert outcome.steps[4].value == "skipped: CUDA is not available"


@needs_torch
def test_gpumon_probe_exits_1_under_cpu_only_torch() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gpumon", "probe"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 1, result.stderr
    assert "[FAIL] 3. torch.cuda.is_available()    CUDA not available: CPU-only build" in (
        result.stdout
    )
    assert "[SKIP] 5. Tensors on cuda:N" in result.stdout
    assert result.stdout.rstrip().splitlines()[-1].startswith("FAIL: step 2")


@needs_torch
def test_gpumon_probe_json_prints_protocol_lines_ending_with_the_verdict() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gpumon", "probe", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert result.returncode == 1, result.stderr
    events = [decode(line) for line in result.stdout.splitlines()]
    assert isinstance(events[0], Hello)
    last = json.loads(result.stdout.splitlines()[-1])
    assert last["event"] == "done" and last["ok"] is False


# --- an interpreter without torch (and without gpumon) ---------------------------------------


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A fresh virtual environment: no torch, no gpumon, nothing but the standard library."""
    where = tmp_path_factory.mktemp("bare-venv")
    venv.EnvBuilder(with_pip=False, symlinks=True).create(where)
    return str(where / "bin" / "python")


async def test_an_interpreter_without_torch_gets_the_exact_install_command(
    bare_python: str,
) -> None:
    outcome = await run_probe(Request(cuda_index=0), python=bare_python)
    assert outcome.returncode == 0, outcome.steps[1]
    step1 = outcome.steps[1]
    assert step1.status == S.FAIL
    assert step1.value.startswith(f"torch is not installed for {bare_python}")
    # The command on a line of its own: a panel folds only a line longer than its width.
    assert step1.detail == f"Install it with:\n{bare_python} -m pip install torch"
    assert all(outcome.steps[i].status == S.SKIP for i in range(2, 10))


def test_a_system_python_that_refuses_pip_gets_a_virtual_environment_instead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PEP 668: Debian's python3 refuses `pip install torch`; the advice is a venv, whose
    interpreter the probe then runs in."""
    import sysconfig

    from gpumon.probe import child_io

    (tmp_path / "EXTERNALLY-MANAGED").write_text("[externally-managed]\n")
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(tmp_path))
    monkeypatch.setattr(sys, "base_prefix", sys.prefix)  # not in a venv
    advice = child_io.install_advice("/usr/bin/python3")
    assert "pip install torch\n" not in advice.splitlines()[0]
    assert "/usr/bin/python3 -m venv ~/.venvs/torch" in advice.splitlines()
    assert "~/.venvs/torch/bin/pip install torch" in advice.splitlines()
    assert "gpumon --probe-python ~/.venvs/torch/bin/python" in advice.splitlines()
    monkeypatch.setattr(sys, "base_prefix", "/usr")  # in a venv: pip is fine
    assert child_io.install_advice("/v/bin/python") == (
        "Install it with:\n/v/bin/python -m pip install torch"
    )


def test_gpumon_probe_python_points_the_probe_at_another_interpreter(bare_python: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gpumon", "probe", "--python", bare_python],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 1
    assert f"{bare_python} -m pip install torch" in result.stdout


# --- a stand-in torch with simulated GPUs: every step ------------------------------------------


@pytest.fixture
def fake_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_TORCH_GPUS", json.dumps(FAKE_TORCH_UUIDS))
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "FAKE_TORCH_FREE_MIB"):
        monkeypatch.delenv(name, raising=False)


async def _fake_probe(request: Request, next_sample: object = None) -> ProbeOutcome:
    return await run_probe(
        request,
        command=real_child("fake"),
        next_sample=next_sample,  # type: ignore[arg-type]
        timeout_s=30,
    )


async def _nvml_sees_the_children() -> Sample:
    return children_sample(memory=700 * MIB)


@pytest.mark.usefixtures("fake_gpus")
async def test_every_step_passes_and_maps_nvml_gpu_0_to_cuda_1() -> None:
    """NVML's GPU 0 is torch's cuda:1 here: the probe must say so and use cuda:1."""
    request = Request(gpu_uuid=NVML_GPUS[0][1], gpu_index=0, gpus=NVML_GPUS)
    outcome = await _fake_probe(request, _nvml_sees_the_children)
    assert outcome.ok, outcome.summary
    assert statuses(outcome) == {i: S.PASS for i in S.STEP_IDS}
    assert outcome.steps[4].value == "GPU 0 is cuda:1 in this environment (not cuda:0: use cuda:1)"
    assert f"cuda:1 = GPU 0 ({NVML_GPUS[0][1]})" in outcome.steps[4].detail
    assert "randn on cuda:1, .to(device), get_device()==1" in outcome.steps[5].value
    assert "on_cpu itself is still on cpu" in outcome.steps[5].detail
    assert outcome.holding is not None
    assert outcome.holding.cuda_index == 1
    assert outcome.holding.gpu_uuid == NVML_GPUS[0][1]
    assert outcome.holding.allocated_bytes >= 256 * MIB
    assert "Expected all tensors to be on the same device" in outcome.steps[7].value
    assert outcome.steps[8].value.startswith("H2D ")
    assert "matmul 4096x4096 fp32" in outcome.steps[8].value
    assert outcome.steps[9].value.startswith("freed ")
    assert outcome.summary == "every step passed on cuda:1"


@pytest.mark.usefixtures("fake_gpus")
async def test_cuda_visible_devices_hiding_the_gpu_is_explained(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # CUDA's 0 is NVML's GPU 1
    request = Request(gpu_uuid=NVML_GPUS[0][1], gpus=NVML_GPUS)
    outcome = await _fake_probe(request)
    assert outcome.steps[3].status == S.PASS
    assert "CUDA_VISIBLE_DEVICES='0'" in outcome.steps[3].value
    step4 = outcome.steps[4]
    assert step4.status == S.FAIL
    assert step4.value.startswith(
        "GPU 0 is not visible to torch in this environment: CUDA_VISIBLE_DEVICES='0' hides it"
    )
    assert "GPU-bbbb2222" in step4.value  # what to add instead
    assert "MIG" not in step4.value
    assert all(outcome.steps[i].status == S.SKIP for i in range(5, 10))


async def test_torch_devices_nvml_does_not_list_point_at_mig_instances(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With MIG on, torch's devices are MIG instances whose UUIDs are no NVML GPU's."""
    mig_instances = ["dddd3333-0000-4000-8000-000000000000", "eeee4444-0000-4000-8000-000000000000"]
    monkeypatch.setenv("FAKE_TORCH_GPUS", json.dumps(mig_instances))
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "FAKE_TORCH_FREE_MIB"):
        monkeypatch.delenv(name, raising=False)
    outcome = await _fake_probe(Request(gpu_uuid=NVML_GPUS[0][1], gpus=NVML_GPUS))
    step4 = outcome.steps[4]
    assert step4.status == S.FAIL
    assert "torch sees MIG instances" in step4.value
    assert "cuda:0 = GPU-dddd3333-0000-4000-8000-000000000000 (not in NVML's list)" in step4.detail


@pytest.mark.usefixtures("fake_gpus")
async def test_a_cuda_index_that_does_not_exist_fails_the_mapping() -> None:
    outcome = await _fake_probe(Request(cuda_index=5, gpus=NVML_GPUS))
    assert outcome.steps[4].value == "cuda:5 does not exist: torch sees 2 GPU(s)"


@pytest.mark.usefixtures("fake_gpus")
async def test_selecting_by_cuda_index_names_the_nvml_gpu() -> None:
    outcome = await _fake_probe(Request(cuda_index=0, gpus=NVML_GPUS))
    assert outcome.ok
    assert outcome.steps[4].value == f"cuda:0 is GPU 1 ({NVML_GPUS[1][1]})"


@pytest.mark.usefixtures("fake_gpus")
async def test_too_little_free_memory_allocates_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_TORCH_FREE_MIB", "100")  # 10 % is 10 MiB: below the 16 MiB floor
    outcome = await _fake_probe(Request(cuda_index=0, gpus=NVML_GPUS))
    step5 = outcome.steps[5]
    assert step5.status == S.FAIL
    assert (
        step5.value
        == "too little free memory on cuda:0: 100 MiB free of 16384 MiB; nothing allocated"
    )
    assert outcome.holding is None
    assert [outcome.steps[i].status for i in (6, 7, 8)] == [S.SKIP] * 3
    assert outcome.steps[9].status == S.PASS  # a CUDA context exists: cleanup still runs


@pytest.mark.usefixtures("fake_gpus")
async def test_the_allocation_is_capped_at_a_tenth_of_the_free_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_TORCH_FREE_MIB", "1000")
    outcome = await _fake_probe(Request(cuda_index=0, gpus=NVML_GPUS))
    assert outcome.ok
    assert "holding 100 MiB (capped at 10% of free memory)" in outcome.steps[5].value
    assert outcome.holding is not None
    assert outcome.holding.allocated_bytes < 101 * MIB


@pytest.mark.usefixtures("fake_gpus")
async def test_one_visible_gpu_skips_the_cross_device_step_and_still_passes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"GPU-{FAKE_TORCH_UUIDS[1]}")
    outcome = await _fake_probe(Request(gpu_uuid=NVML_GPUS[0][1], gpus=NVML_GPUS))
    assert outcome.ok, outcome.summary
    assert outcome.steps[4].value == "GPU 0 is cuda:0 in this environment"
    assert outcome.steps[7].status == S.SKIP
    assert outcome.steps[7].value == "only one GPU is visible to torch (cuda:0)"


@pytest.mark.usefixtures("fake_gpus")
async def test_a_cross_device_operation_that_does_not_raise_is_a_failure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_TORCH_CROSS_DEVICE_OK", "1")
    outcome = await _fake_probe(Request(cuda_index=0, gpus=NVML_GPUS))
    assert outcome.steps[7].status == S.FAIL
    assert outcome.steps[7].value == "cuda:0 + cuda:1 did not raise an error"


@pytest.mark.usefixtures("fake_gpus")
async def test_a_second_gpu_that_refuses_tensors_skips_the_cross_device_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """cuda:1 in exclusive-process mode, held by someone else: not a failure of the setup."""
    monkeypatch.setenv("FAKE_TORCH_BUSY", "[1]")
    outcome = await _fake_probe(Request(cuda_index=0, gpus=NVML_GPUS))
    assert outcome.ok, outcome.summary
    assert outcome.steps[7].status == S.SKIP
    assert outcome.steps[7].value.startswith("cuda:1 cannot be used here: RuntimeError: CUDA")
    assert outcome.steps[8].status == S.PASS


@pytest.mark.usefixtures("fake_gpus")
async def test_another_error_than_the_device_mismatch_is_not_a_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAKE_TORCH_CROSS_DEVICE_ERROR", "CUDA error: an illegal memory access")
    outcome = await _fake_probe(Request(cuda_index=0, gpus=NVML_GPUS))
    assert outcome.steps[7].status == S.FAIL
    assert "not with the device error" in outcome.steps[7].value


def test_the_child_keeps_stray_prints_off_the_protocol_stream() -> None:
    """Anything printed to stdout inside the child (a library's print) goes to stderr."""
    code = (
        "from gpumon.probe.child_io import Channel\n"
        "from gpumon.probe.protocol import Done\n"
        "channel = Channel()\n"
        "print('stray output from a library')\n"
        "channel.send(Done(True, 'fine'))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30, cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert result.stdout.splitlines() == [
        '{"v": 1, "event": "done", "ok": true, "summary": "fine"}'
    ]
    assert "stray output from a library" in result.stderr


def test_the_child_exits_when_its_stdin_closes() -> None:
    """End of file on stdin means the parent is gone: the child leaves at once."""
    env = {**os.environ, "PYTHONPATH": str(Path(real_child("hanging")[1]).parent / "hanging_torch")}
    child = subprocess.Popen(
        [sys.executable, "-m", "gpumon.probe.child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
        env=env,
    )
    assert child.stdout is not None and child.stdin is not None
    assert b'"event": "hello"' in child.stdout.readline()
    child.stdin.close()
    assert child.wait(10) == 3
