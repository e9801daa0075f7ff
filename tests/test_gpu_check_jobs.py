"""The real-GPU check's processes and probe sections, with their children and nvidia-smi
stubbed: the logic that only a lent GPU runs for real (FREE before, during and after the torch
job, its PID, user and memory; the probe's steps and its child's PID) is checked here."""

from __future__ import annotations

import json
import os
import pwd
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from gpumon.probe import steps as S
from gpumon.probe.protocol import Done, Hello, Holding, StepEvent, encode
from tests.gpu_check import jobs
from tests.gpu_check.smi import NvidiaSmi

MIB = 1024**2
UUID = "GPU-1d1ae532-0000-4000-8000-000000000000"
JOB_PID = 4242
RESERVED = 4096 * MIB
CONTEXT = 530 * MIB
USER = pwd.getpwuid(os.getuid()).pw_name


class Machine:
    """What NVML shows, and whether the job (or the probe child) holds GPU 0."""

    def __init__(self, smi_memory_mib: int = (RESERVED + CONTEXT) // MIB) -> None:
        self.running = False
        self.smi_memory_mib = smi_memory_mib
        self.pid = JOB_PID

    def snapshot(self, python: str, timeout_s: float = 60) -> dict[str, Any]:
        processes = (
            [{"pid": self.pid, "user": USER, "type": "C", "gpu_memory_bytes": RESERVED + CONTEXT}]
            if self.running
            else []
        )
        gpu = {"index": 0, "uuid": UUID, "free": not self.running, "processes": processes}
        return {"gpus": [gpu]}

    def smi(self, argv: Sequence[str], timeout_s: float) -> tuple[int, str]:
        assert argv[1].startswith("--query-compute-apps=")
        return 0, f"{self.pid}, {self.smi_memory_mib}, {UUID}\n" if self.running else ""


class FakeChild:
    """Stands in for :class:`tests.gpu_check.children.Child`: the lines it prints."""

    machine: Machine
    lines: list[str] = []

    def __init__(self, argv: Sequence[str], **options: object) -> None:
        self.argv = list(argv)
        self.queue: Iterator[str] = iter(self.lines)
        self.machine.running = True

    def __enter__(self) -> FakeChild:
        return self

    def __exit__(self, *exc: object) -> None:
        self.machine.running = False

    def line(self, timeout_s: float) -> str | None:
        return next(self.queue, None)

    def all_lines(self, timeout_s: float) -> tuple[list[str], bool]:
        self.machine.running = False  # the probe has ended, and its child with it
        return list(self.queue), True

    def send(self, text: str) -> None:
        self.machine.running = False

    def wait(self, timeout_s: float) -> int:
        return 0

    def stderr_tail(self, count: int = 15) -> list[str]:
        return []


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch) -> Machine:
    machine = Machine()
    FakeChild.machine = machine
    monkeypatch.setattr(jobs, "Child", FakeChild)
    monkeypatch.setattr(jobs, "once_json", machine.snapshot)
    monkeypatch.setattr(jobs, "_POLL_S", 0.01)
    return machine


def job_line() -> str:
    uuid = UUID.removeprefix("GPU-")  # torch prints it without the prefix
    report = {"pid": JOB_PID, "allocated_bytes": RESERVED, "reserved_bytes": RESERVED, "uuid": uuid}
    return json.dumps(report)


def test_the_job_is_listed_and_the_gpu_free_before_and_after(machine: Machine) -> None:
    FakeChild.lines = [job_line()]
    shots = []
    section = jobs.check_processes(
        "python", NvidiaSmi(machine.smi), job_mib=4096, while_holding=lambda: shots.append(1)
    )
    assert section.status == "pass", section.text()
    assert shots == [1]  # the screenshot is taken while the job holds its memory
    text = section.text()
    for expected in (
        f"cuda:0 is GPU 0 ({UUID})",
        "ok      FREE before the job",
        f"ok      once --json lists PID {JOB_PID}",
        f"ok      its user: {USER}",
        "ok      the GPU is not FREE while it runs",
        "ok      gpumon's memory within 2 % of nvidia-smi's: 4626 MiB against 4626 MiB",
        "ok      FREE again after the job",
        f"ok      PID {JOB_PID} gone from nvidia-smi's compute apps",
    ):
        assert expected in text


def test_memory_that_disagrees_with_nvidia_smi_fails(machine: Machine) -> None:
    machine.smi_memory_mib = 4300  # gpumon says 4626 MiB: 7 % more
    FakeChild.lines = [job_line()]
    section = jobs.check_processes("python", NvidiaSmi(machine.smi), job_mib=4096)
    assert section.status == "fail"
    assert "FAILED: gpumon's memory within 2 % of nvidia-smi's: 4626 MiB against 4300" in (
        section.text()
    )


def test_a_job_that_prints_nothing_fails_with_its_stderr(machine: Machine) -> None:
    FakeChild.lines = []
    section = jobs.check_processes("python", NvidiaSmi(machine.smi), job_mib=64)
    assert section.status == "fail" and "the torch job printed nothing" in section.summary


def probe_lines(pid: int, fail_step: int | None = None) -> list[str]:
    events: list[Any] = [Hello(pid, "/usr/bin/python3", "3.12.3")]
    for step in S.STEP_IDS:
        status = S.FAIL if step == fail_step else S.SKIP if step == S.CROSS_DEVICE.id else S.PASS
        events.append(StepEvent(step, S.RUNNING))
        events.append(
            StepEvent(step, status, f"value {step}", 12.5, "figures" if step == 8 else "")
        )
        if step == S.TENSORS.id:
            events.append(Holding(pid, 0, UUID, 256 * MIB, 256 * MIB))
    failed = f"step {fail_step} failed" if fail_step else "every step passed on cuda:0"
    events.append(Done(fail_step is None, failed))
    return [encode(event) for event in events]


def test_the_probe_reports_every_step_and_its_child_is_gone(machine: Machine) -> None:
    machine.pid = 777
    FakeChild.lines = probe_lines(777)
    section = jobs.check_probe("python", NvidiaSmi(machine.smi))
    assert section.status == "pass", section.text()
    assert "[PASS] 1. Interpreter and torch" in section.text()
    assert "[SKIP] 7. Cross-device error" in section.text()
    assert "          figures" in section.lines  # a step's detail, under it
    assert "ok      the probe child (PID 777) gone from NVML's processes" in section.lines
    assert section.summary == "every step passed on cuda:0"


def test_a_failed_probe_step_fails_the_section(machine: Machine) -> None:
    FakeChild.lines = probe_lines(777, fail_step=S.NVML.id)
    section = jobs.check_probe("python", NvidiaSmi(machine.smi))
    assert section.status == "fail"
    assert "[FAIL] 6. NVML sees the probe" in section.text()
