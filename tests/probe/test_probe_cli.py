"""``gpumon probe``: arguments, exit statuses, and a full run against simulated GPUs."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gpumon.cli import main
from gpumon.data.model import Sample
from gpumon.probe import cli as probe_cli
from gpumon.probe import steps as S
from gpumon.probe.cli import _choose_gpu
from gpumon.probe.protocol import Done, Hello, Request, StepEvent, decode
from tests.support.fake_children import FAKE_TORCH_UUIDS, HERE, MIB, NVML_GPUS, children_sample

ROOT = Path(__file__).resolve().parents[2]


class ChildrenOnEveryGpu:
    """An NVML source that shows every child of this process on every GPU."""

    simulated = False

    def __init__(self) -> None:
        self.closed = False

    def sample(self) -> Sample:
        return children_sample(memory=800 * MIB)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """An executable 'interpreter' with two simulated GPUs, and NVML showing the same two."""
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE / "fake_python.py"}" "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("FAKE_TORCH_GPUS", json.dumps(FAKE_TORCH_UUIDS))
    for name in ("CUDA_VISIBLE_DEVICES", "FAKE_TORCH_FREE_MIB"):
        monkeypatch.delenv(name, raising=False)
    source = ChildrenOnEveryGpu()
    monkeypatch.setattr("gpumon.sources.base.open_source", lambda **_: source)
    return str(wrapper)


def test_every_step_passes_exit_0(fake_python: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--gpu", "0", "--python", fake_python]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"Probing GPU 0 with {fake_python} (timeout 60 s)"
    results = [line for line in out if line.startswith("[")]
    assert [line[:9] for line in results] == [f"[PASS] {i}." for i in S.STEP_IDS]
    assert (
        "[PASS] 4. cuda:N of the selected GPU   GPU 0 is cuda:1 in this environment" in results[3]
    )
    assert "PID" in results[8] and "gone from GPU 0" in results[8]
    step6 = next(line for line in results if line.startswith("[PASS] 6."))
    assert "NVML lists PID" in step6 and "using 800 MiB" in step6
    assert out[-1] == "PASS: every step passed on cuda:1"


def test_gpu_by_uuid_prefix(fake_python: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--gpu", "GPU-aaaa1111", "--python", fake_python]) == 0
    assert "GPU 1 is cuda:0 in this environment" in capsys.readouterr().out


def test_json_lines_are_the_protocol(fake_python: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--device", "cuda:1", "--json", "--python", fake_python]) == 0
    events = [decode(line) for line in capsys.readouterr().out.splitlines()]
    assert isinstance(events[0], Hello)
    assert isinstance(events[-1], Done) and events[-1].ok
    final = {e.step: e for e in events if isinstance(e, StepEvent) and e.final}
    assert final[4].value == f"cuda:1 is GPU 0 ({NVML_GPUS[0][1]})"
    assert all(event.status == S.PASS for event in final.values())


def test_a_failed_step_exits_1(
    fake_python: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FAKE_TORCH_FREE_MIB", "50")
    assert main(["probe", "--python", fake_python, "--size", "32"]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] 5. Tensors on cuda:N" in out
    assert "nothing allocated" in out


def test_escapes_from_the_child_reach_no_terminal(
    fake_python: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A child that writes OSC 52 (set the clipboard), screen clears and a bidi override into
    its protocol text and onto stderr: ``gpumon probe`` prints them visibly escaped."""
    hostile = tmp_path / "hostile-python"
    hostile.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HERE / "hostile_text.py"}"\n')
    hostile.chmod(0o700)
    assert main(["probe", "--device", "cuda:0", "--python", str(hostile)]) == 1
    out = capsys.readouterr().out
    assert "torch 2.13.0?[2J?[H?]52;c;cm0gLXJmIH4K?" in out
    assert "warning: ?[2J?[H?]52;c;cm0gLXJmIH4K? \\u202eevil" in out
    assert not any((c < " " and c != "\n") or c == "\u202e" for c in out)


def test_an_unknown_gpu_index_is_a_usage_error(
    fake_python: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["probe", "--gpu", "7", "--python", fake_python]) == 2
    assert capsys.readouterr().err == (
        "gpumon probe: error: --gpu 7: no such GPU (NVML lists: 0, 1)\n"
    )


def test_choose_gpu() -> None:
    gpus = ((0, "GPU-abc1-0"), (1, "GPU-abc2-0"), (2, "GPU-def0-0"))
    assert _choose_gpu("1", gpus, nvml_ok=True) == (1, "GPU-abc2-0")
    assert _choose_gpu("gpu-DEF", gpus, nvml_ok=True) == (2, "GPU-def0-0")
    assert _choose_gpu("abc2", gpus, nvml_ok=True) == (1, "GPU-abc2-0")
    assert "matches more than one GPU" in str(_choose_gpu("GPU-abc", gpus, nvml_ok=True))
    assert "no GPU has this UUID" in str(_choose_gpu("GPU-999", gpus, nvml_ok=True))
    # Without NVML the child is told what the user said, and reports what it can.
    assert _choose_gpu("3", (), nvml_ok=False) == (3, None)
    assert _choose_gpu("GPU-999", (), nvml_ok=False) == (None, "GPU-999")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--gpu", "0", "--device", "cuda:0"], "not allowed with argument"),
        (["--device", "gpu0"], "expected cuda:N"),
        (["--size", "0"], "must be 1 to"),
        (["--size", "lots"], "not a whole number"),
        (["--timeout", "0"], "must be 1 to"),
        (["--timeout", "nan"], "not a number of seconds"),
        (["--demo"], "--demo simulates GPUs, and the probe needs a real one"),
        (["--python", "/nonexistent/python"], "--python /nonexistent/python: not an executable"),
        (["--python", "no-such-python-here"], "not an executable file"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv: list[str], message: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gpumon", "probe", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""


def test_demo_before_the_subcommand_is_refused_too() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gpumon", "--demo", "probe"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 2


def test_probe_python_from_the_top_level_is_the_default_interpreter(
    fake_python: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--probe-python", fake_python, "probe"]) == 0
    assert f"with {fake_python}" in capsys.readouterr().out


def test_gpu_index_without_nvml_is_reported_by_the_mapping_step(
    fake_python: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpumon.data.model import GpuUnavailable, UnavailableReason
    from tests.support.fake_children import sample

    unavailable = GpuUnavailable(UnavailableReason.LIBRARY_NOT_FOUND, "No NVIDIA driver.", "")

    class NoNvml(ChildrenOnEveryGpu):
        def sample(self) -> Sample:
            return sample(gpus=(), unavailable=unavailable)

    monkeypatch.setattr("gpumon.sources.base.open_source", lambda **_: NoNvml())
    assert main(["probe", "--gpu", "1", "--python", fake_python]) == 1
    out = capsys.readouterr().out
    assert "[FAIL] 4. cuda:N of the selected GPU   NVML lists no GPU 1" in out


def test_the_probe_modules_never_import_torch_in_the_monitor_process() -> None:
    """Import hygiene: the runner, the CLI and the panel import no torch, even after a whole
    probe has run (the child imports torch in its own process)."""
    code = (
        "import asyncio, sys\n"
        "import gpumon.probe.cli, gpumon.probe.runner, gpumon.probe.protocol, gpumon.probe.steps\n"
        "import gpumon.ui.dashboard.probe_panel\n"
        "from gpumon.probe.protocol import Request\n"
        "from gpumon.probe.runner import run_probe\n"
        "asyncio.run(run_probe(Request(cuda_index=0), timeout_s=120))\n"
        "from gpumon.cli import build_parser\n"
        "build_parser()\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "print('clean')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=180, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "clean"


def test_the_cli_module_top_level_is_light() -> None:
    code = (
        "import sys\n"
        "import gpumon.probe.cli\n"
        "heavy = [m for m in ('torch', 'textual', 'pynvml', 'asyncio', 'gpumon.probe.runner')\n"
        "         if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_the_nvml_checks_get_fresh_samples_from_one_poller(monkeypatch: pytest.MonkeyPatch) -> None:
    """``gpumon probe`` samples NVML with the dashboard's poller, every 0.5 s, into a store:
    each sample asked for was taken after the ask, no two reads overlap, and none is still
    running when the probe ends (the caller closes the source next)."""

    class TimedSource(ChildrenOnEveryGpu):
        def __init__(self) -> None:
            super().__init__()
            self.active = 0
            self.max_active = 0
            self.threads: set[str] = set()

        def sample(self) -> Sample:
            started = time.monotonic()
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.threads.add(threading.current_thread().name)
            time.sleep(0.02)
            self.active -= 1
            return dataclasses.replace(super().sample(), timestamp_s=started)

    asks: list[tuple[float, float]] = []

    async def run_probe(request: Request, *, next_sample: Any, **options: Any) -> str:
        for _ in range(3):
            asked = time.monotonic()
            asks.append((asked, (await next_sample()).timestamp_s))
        return "outcome"

    monkeypatch.setattr("gpumon.probe.runner.run_probe", run_probe)
    source = TimedSource()
    printer = probe_cli._Printer(json_lines=False)
    outcome = asyncio.run(probe_cli._probe(Request(cuda_index=0), "python", 10, source, printer))
    assert outcome == "outcome"
    assert all(taken >= asked for asked, taken in asks), asks
    # Paced by the poller's interval (0.5 s from one poll's start to the next; the sampling
    # thread may pick a poll up late), not back to back (20 ms apart).
    taken = [taken for _, taken in asks]
    assert all(later - earlier > 0.4 for earlier, later in itertools.pairwise(taken)), taken
    assert source.max_active == 1 and source.active == 0
    assert source.threads == {"gpumon-poller"}
    assert not source.closed  # run() closes it, after _probe
