"""The probe runner against fake children: slow, crashing, hanging, garbage, and dying parents."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import psutil
import pytest

from gpumon.data.model import GpuUnavailable, Sample, UnavailableReason
from gpumon.probe import runner
from gpumon.probe import steps as S
from gpumon.probe.child_io import EXIT_PARENT_GONE
from gpumon.probe.confirm import check_holding, check_released
from gpumon.probe.protocol import Done, Event, Hello, Holding, Request, StepEvent
from gpumon.probe.runner import ProbeOutcome, child_command, run_probe
from tests.support.fake_children import HERE, MIB, NVML_GPUS, gone, real_child, sample, script

REQUEST = Request(cuda_index=0)


class Recorder:
    """Collects the runner's events; ``hello`` is set once the child said hello."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.hello = asyncio.Event()

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        if isinstance(event, Hello):
            self.hello.set()

    @property
    def pid(self) -> int:
        return next(event.pid for event in self.events if isinstance(event, Hello))

    def final(self) -> dict[int, StepEvent]:
        return {e.step: e for e in self.events if isinstance(e, StepEvent) and e.final}


def statuses(outcome: ProbeOutcome) -> dict[int, str]:
    return {step: event.status for step, event in outcome.steps.items()}


async def probe(name: str, **options: object) -> tuple[ProbeOutcome, Recorder]:
    recorder = Recorder()
    outcome = await run_probe(REQUEST, command=script(name), on_event=recorder, **options)  # type: ignore[arg-type]
    return outcome, recorder


async def test_a_slow_healthy_child_streams_every_step_and_passes() -> None:
    seen: list[tuple[int, str]] = []
    recorder = Recorder()

    def on_event(event: Event) -> None:
        recorder(event)
        if isinstance(event, StepEvent):
            seen.append((event.step, event.status))

    outcome = await run_probe(REQUEST, command=script("slow"), on_event=on_event)
    assert outcome.ok, outcome.summary
    assert outcome.returncode == 0
    assert statuses(outcome) == {**{i: S.PASS for i in S.STEP_IDS}, 6: S.SKIP}
    # Streamed: each step's "running" arrives before its result, in order.
    assert seen[:4] == [(1, S.RUNNING), (1, S.PASS), (2, S.RUNNING), (2, S.PASS)]
    assert isinstance(recorder.events[0], Hello)
    assert isinstance(recorder.events[-1], Done) and recorder.events[-1].ok
    assert sum(isinstance(e, Done) for e in recorder.events) == 1  # the child's is replaced
    assert outcome.steps[6].value == "skipped: no NVML sampler in this mode"
    assert outcome.holding is not None and outcome.holding.allocated_bytes == 256 * MIB


async def test_step_6_passes_when_nvml_lists_the_childs_pid_with_its_memory() -> None:
    recorder = Recorder()
    calls = 0

    async def next_sample() -> Sample:
        nonlocal calls
        calls += 1
        if calls == 1:  # the first sample predates the allocation: not there yet
            return sample(gpus=((0, "GPU-00000000-0000-0000-0000-000000000000"),))
        if calls == 2:
            return sample(
                gpus=((0, "GPU-00000000-0000-0000-0000-000000000000"),),
                processes=[(recorder.pid, 0, 700 * MIB)],
            )
        return sample(gpus=((0, "GPU-00000000-0000-0000-0000-000000000000"),))

    started = time.monotonic()
    outcome = await run_probe(
        REQUEST, command=script("slow"), on_event=recorder, next_sample=next_sample
    )
    assert outcome.ok, outcome.summary
    assert outcome.steps[6].status == S.PASS
    assert f"PID {recorder.pid} on GPU 0 using 700 MiB" in outcome.steps[6].value
    # The child waited for our "continue" rather than its own 10 s hold timeout.
    assert time.monotonic() - started < 8
    # After the child exited, the next sample no longer lists it: step 9 says so.
    assert f"PID {recorder.pid} gone from GPU 0" in outcome.steps[9].value
    order = [e.step for e in recorder.events if isinstance(e, StepEvent) and e.final]
    assert order.index(6) < order.index(7)


async def test_step_6_fails_when_nvml_does_not_list_the_child() -> None:
    async def next_sample() -> Sample:
        return sample(
            gpus=((0, "GPU-00000000-0000-0000-0000-000000000000"),),
            processes=[(1, 0, 900 * MIB)],
        )

    outcome, _ = await probe("slow", next_sample=next_sample, confirm_timeout_s=2.0)
    assert not outcome.ok
    assert outcome.steps[6].status == S.FAIL
    assert "PID 1 (900 MiB)" in outcome.steps[6].detail
    assert statuses(outcome)[9] == S.PASS  # the child still went on and cleaned up


async def test_step_6_is_skipped_in_a_container_whose_pids_nvml_cannot_match() -> None:
    """Without --pid=host NVML lists host PIDs: the probe cannot find its own, which is no
    failure of the user's setup; and its absence after exit proves nothing either."""
    container = sample(
        gpus=((0, "GPU-00000000-0000-0000-0000-000000000000"),),
        processes=[(3_999_999, 0, 900 * MIB)],  # the child, under its host PID
    )
    container = dataclasses.replace(
        container,
        processes=tuple(dataclasses.replace(p, visible=False) for p in container.processes),
    )

    async def next_sample() -> Sample:
        return container

    started = time.monotonic()
    outcome, _ = await probe("slow", next_sample=next_sample, confirm_timeout_s=5.0)
    assert outcome.ok, outcome.summary
    assert outcome.steps[6].status == S.SKIP
    assert "another PID namespace" in outcome.steps[6].value
    assert "PID 3999999 (900 MiB)" in outcome.steps[6].detail
    assert time.monotonic() - started < 5  # decided on the first sample, no wait
    assert "gone from GPU" not in outcome.steps[9].value


async def test_step_6_is_skipped_when_nvml_refuses_the_process_list() -> None:
    refused = sample(gpus=((0, "GPU-00000000-0000-0000-0000-000000000000"),))
    gpu = dataclasses.replace(refused.gpus[0], processes_error="NVML: Insufficient Permissions")
    refused = dataclasses.replace(refused, gpus=(gpu,))

    async def next_sample() -> Sample:
        return refused

    outcome, _ = await probe("slow", next_sample=next_sample, confirm_timeout_s=5.0)
    assert outcome.steps[6].status == S.SKIP
    assert "Insufficient Permissions" in outcome.steps[6].value


async def test_step_6_fails_when_nvml_shows_less_memory_than_torch_reserved() -> None:
    recorder = Recorder()

    async def next_sample() -> Sample:
        return sample(
            gpus=((0, "GPU-00000000-0000-0000-0000-000000000000"),),
            processes=[(recorder.pid, 0, 10 * MIB)],
        )

    outcome = await run_probe(
        REQUEST, command=script("slow"), on_event=recorder, next_sample=next_sample,
        confirm_timeout_s=2.0,
    )  # fmt: skip
    assert outcome.steps[6].status == S.FAIL


async def test_step_6_is_skipped_when_nvml_is_unavailable() -> None:
    unavailable = GpuUnavailable(UnavailableReason.LIBRARY_NOT_FOUND, "No NVIDIA driver.", "")

    async def next_sample() -> Sample:
        return sample(gpus=(), unavailable=unavailable)

    outcome, _ = await probe("slow", next_sample=next_sample)
    assert outcome.ok
    assert outcome.steps[6].value == "skipped: NVML unavailable: No NVIDIA driver."


async def test_a_crashing_child_fails_the_running_step_with_its_stderr() -> None:
    outcome, _ = await probe("crashing")
    assert not outcome.ok
    assert outcome.returncode == -signal.SIGSEGV
    assert statuses(outcome) == {
        1: S.PASS, 2: S.PASS, 3: S.FAIL, **{i: S.SKIP for i in range(4, 10)}
    }  # fmt: skip
    assert outcome.steps[3].value == "the child was killed by SIGSEGV"
    assert "simulated driver crash in cuInit" in outcome.steps[3].detail
    assert outcome.steps[4].value == "not run: step 3 failed"
    assert outcome.summary.startswith("step 3 (torch.cuda.is_available()) failed")


async def test_escapes_from_the_child_reach_no_terminal() -> None:
    """Its protocol text and its stderr come out with every control character shown as ``?``
    and the bidi override escaped; the stderr tail keeps its lines."""
    outcome, recorder = await probe("hostile_text")
    hello = next(event for event in recorder.events if isinstance(event, Hello))
    assert (hello.python, hello.python_version) == ("/opt/?[8mtrain/bin/python", "3.11.0?]0;owned?")
    shown = "?[2J?[H?]52;c;cm0gLXJmIH4K?"
    assert outcome.steps[1].value == f"Python 3.11.0, torch 2.13.0{shown}"
    assert outcome.steps[1].detail == f"first{shown}\nsecond \\u202elive"
    assert outcome.steps[2].value == "the child was killed by SIGSEGV"
    assert outcome.steps[2].detail == (
        f"stderr (last lines):\nwarning: {shown} \\u202eevil\nTraceback line two"
    )


async def test_a_hanging_child_is_killed_with_its_process_group_at_the_timeout() -> None:
    started = time.monotonic()
    outcome, recorder = await probe("hanging", timeout_s=1.0)
    assert time.monotonic() - started < 4
    assert outcome.timed_out and not outcome.ok
    assert outcome.steps[1].status == S.FAIL
    assert (
        outcome.steps[1].value == f"timed out after 1 s: the child (PID {recorder.pid}) was killed"
    )
    assert all(outcome.steps[i].status == S.SKIP for i in range(2, 10))
    grandchild = int(next(e.value.split()[1] for e in recorder.events if isinstance(e, StepEvent)))
    assert gone(recorder.pid) and gone(grandchild)


async def test_garbage_on_stdout_is_a_failed_step_and_the_child_is_killed_at_once() -> None:
    started = time.monotonic()
    outcome, recorder = await probe("garbage", timeout_s=30.0)
    assert time.monotonic() - started < 5  # not the 30 s timeout
    assert outcome.steps[1].status == S.FAIL
    assert "not the probe protocol" in outcome.steps[1].value
    assert "Segmentation fault (core dumped)" in outcome.steps[1].value
    assert gone(recorder.pid)


async def test_a_child_that_exits_without_finishing_fails_the_next_step() -> None:
    outcome, _ = await probe("exits_early")
    assert outcome.returncode == 0
    assert statuses(outcome)[1] == S.PASS
    assert outcome.steps[2].status == S.FAIL
    assert outcome.steps[2].value == "the child exited without finishing"


async def test_an_interpreter_that_does_not_exist_is_a_failed_step_1() -> None:
    recorder = Recorder()
    outcome = await run_probe(REQUEST, python="/nonexistent/python3", on_event=recorder)
    assert outcome.steps[1].status == S.FAIL
    assert outcome.steps[1].value.startswith("cannot start /nonexistent/python3")
    assert outcome.pid is None
    assert isinstance(recorder.events[-1], Done) and not recorder.events[-1].ok


async def test_an_interpreter_that_cannot_run_the_bootstrap_is_a_crash_with_stderr() -> None:
    fake_python = HERE / "not_python.sh"
    outcome = await run_probe(REQUEST, command=["/bin/sh", str(fake_python)])
    assert outcome.steps[1].status == S.FAIL
    assert outcome.steps[1].value == "the child exited with code 127"
    assert "python: command not found" in outcome.steps[1].detail


async def test_cancelling_the_runner_mid_probe_kills_the_child_and_its_group() -> None:
    recorder = Recorder()
    task = asyncio.ensure_future(run_probe(REQUEST, command=script("hanging"), on_event=recorder))
    await asyncio.wait_for(recorder.hello.wait(), 10)
    while not any(isinstance(e, StepEvent) for e in recorder.events):
        await asyncio.sleep(0.05)
    grandchild = int(next(e.value.split()[1] for e in recorder.events if isinstance(e, StepEvent)))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # Killed and reaped before the cancellation finished: not even a zombie is left.
    with pytest.raises(ProcessLookupError):
        os.kill(recorder.pid, 0)
    assert gone(grandchild)


async def test_cancelling_while_step_6_waits_for_nvml_kills_the_child() -> None:
    recorder = Recorder()
    holding = asyncio.Event()

    async def next_sample() -> Sample:
        holding.set()
        await asyncio.sleep(3600)
        raise AssertionError

    task = asyncio.ensure_future(
        run_probe(REQUEST, command=script("slow"), on_event=recorder, next_sample=next_sample)
    )
    await asyncio.wait_for(holding.wait(), 10)
    assert any(isinstance(e, Holding) for e in recorder.events)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(ProcessLookupError):
        os.kill(recorder.pid, 0)


PARENT = """
import asyncio, sys
from gpumon.probe.protocol import Hello, Request
from gpumon.probe.runner import run_probe

def on_event(event):
    if isinstance(event, Hello):
        print(event.pid, flush=True)

async def main():
    task = asyncio.ensure_future(run_probe(Request(cuda_index=0), command={command!r},
                                           on_event=on_event, timeout_s=600))
    await asyncio.sleep({exit_after})
    {then}

asyncio.run(main())
"""


def _start_parent(
    command: list[str], then: str, exit_after: float = 3600
) -> tuple[subprocess.Popen[str], int]:
    code = textwrap.dedent(PARENT.format(command=command, then=then, exit_after=exit_after))
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    line = parent.stdout.readline()
    assert line.strip().isdigit(), line
    return parent, int(line)


def test_a_child_exits_by_itself_when_its_parent_is_killed() -> None:
    """SIGKILL gives the parent no chance to clean up: the real child notices that its stdin
    reached end of file and exits (here while stuck importing a torch that never loads)."""
    parent, child = _start_parent(real_child("hanging"), then="pass")
    try:
        time.sleep(0.5)
        assert not gone(child, within_s=0)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert gone(child, within_s=5)
    finally:
        parent.kill()
        parent.wait()


def test_the_atexit_hook_kills_a_child_that_ignores_its_stdin() -> None:
    """The parent exits normally while a probe is still running, without cancelling it."""
    parent, child = _start_parent(script("hanging"), then="sys.exit(0)", exit_after=1.0)
    try:
        assert parent.wait(10) == 0
        assert gone(child, within_s=5)
    finally:
        parent.kill()


LINUX_ONLY = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's"
)


@LINUX_ONLY
def test_a_child_that_ignores_its_stdin_dies_with_its_parent() -> None:
    """SIGKILL of gpumon while the child does not watch its stdin (as an interpreter busy
    before the child's code runs, or a child of another gpumon version, would): the
    parent-death signal kills the direct child. The grandchild it started itself is not
    covered (documented in docs/probe-protocol.md) and is cleaned up here."""
    parent, child = _start_parent(script("hanging"), then="pass")
    try:
        grandchild = _grandchild_of(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        assert gone(child, within_s=5), f"the probe child {child} outlived its parent"
        # The grandchild may still run (it is in the child's group; killed below).
        assert grandchild != child
    finally:
        parent.kill()
        parent.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child, signal.SIGKILL)  # the grandchild is in the child's group


def _grandchild_of(pid: int, within_s: float = 10.0) -> int:
    """The PID of the process the hanging fake child starts (once it runs)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        with contextlib.suppress(psutil.NoSuchProcess):
            children = psutil.Process(pid).children()
            if children:
                return children[0].pid
        time.sleep(0.05)
    raise AssertionError(f"the fake child {pid} started no grandchild")


@LINUX_ONLY
def test_the_parent_death_signal_is_set_in_the_child_and_survives_exec() -> None:
    # prctl(PR_GET_PDEATHSIG) from inside the exec'd child: SIGKILL.
    code = (
        "import ctypes; libc = ctypes.CDLL(None); value = ctypes.c_int(); "
        "libc.prctl(2, ctypes.byref(value), 0, 0, 0); print(value.value)"
    )
    child = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=runner.parent_death_preexec(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert child.stdout.strip() == str(int(signal.SIGKILL)), child


@LINUX_ONLY
def test_a_child_whose_parent_died_before_the_signal_was_set_exits_at_once() -> None:
    """The race: gpumon dies between fork and prctl, so the signal would never come. The
    child sees a parent that is not the one that forked it and exits before exec."""
    preexec = runner.parent_death_preexec(parent_pid=os.getpid() + 1_000_000)  # not our PID
    child = subprocess.Popen(["sleep", "3600"], preexec_fn=preexec)
    try:
        assert child.wait(10) == EXIT_PARENT_GONE
    finally:
        child.kill()
        child.wait()


def test_the_child_command_loads_gpumon_by_path_without_touching_the_environment() -> None:
    argv = child_command("/opt/envs/train/bin/python")
    assert argv[0] == "/opt/envs/train/bin/python"
    assert argv[1] == "-c"
    package_dir = argv[3]
    assert os.path.isfile(os.path.join(package_dir, "__init__.py"))
    assert os.path.isfile(os.path.join(package_dir, "probe", "child.py"))


def plant_modules(directory: Path, *names: str) -> Path:
    """Modules another user could leave in /tmp: each, if imported, leaves a mark."""
    mark = directory / "planted-module-ran"
    for name in names:
        (directory / f"{name}.py").write_text(f"open({str(mark)!r}, 'a').write({name!r})\n")
    return mark


def test_the_child_never_imports_a_module_from_the_directory_it_starts_in(tmp_path: Path) -> None:
    """The probe may be started from /tmp: an argparse.py someone left there must not run."""
    mark = plant_modules(tmp_path, "argparse", "json", "dataclasses", "runpy", "traceback")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PYTHONPATH"] = ""  # an empty entry means the working directory too
    done = subprocess.run(
        [*child_command(), "--help"], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert not mark.exists(), mark.read_text()
    assert done.returncode == 0 and "--request" in done.stdout, done.stderr


# --- the parent's NVML checks on their own ---------------------------------------------------

# As torch prints it: no "GPU-" prefix (upper case here), while NVML says "GPU-bbbb...".
HOLDING = Holding(
    pid=4242,
    cuda_index=1,
    gpu_uuid=NVML_GPUS[0][1][4:].upper(),
    allocated_bytes=256 * MIB,
    reserved_bytes=258 * MIB,
)


def samples_of(*samples: Sample) -> Callable[[], Awaitable[Sample]]:
    queue = list(samples)

    async def next_sample() -> Sample:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return next_sample


async def test_check_holding_accepts_a_pid_whose_memory_nvml_cannot_read() -> None:
    """WSL and some MIG setups list the PID without its memory: that is still a sighting."""
    verdict = await check_holding(HOLDING, samples_of(sample(processes=[(4242, 0, None)])))
    assert verdict.status == S.PASS
    assert verdict.value == "NVML lists PID 4242 on GPU 0 (memory N/A; the probe holds 256 MiB)"


async def test_check_holding_matches_uuids_whatever_their_case_or_prefix() -> None:
    verdict = await check_holding(HOLDING, samples_of(sample(processes=[(4242, 0, 900 * MIB)])))
    assert verdict.status == S.PASS


async def test_check_holding_skips_on_simulated_gpus_and_sampling_errors() -> None:
    demo = dataclasses.replace(sample(), simulated=True)
    assert (await check_holding(HOLDING, samples_of(demo))).value == (
        "skipped: the GPUs are simulated (--demo)"
    )

    async def broken() -> Sample:
        raise RuntimeError("NVML went away")

    verdict = await check_holding(HOLDING, broken)
    assert (verdict.status, verdict.value) == (
        S.SKIP,
        "skipped: NVML sampling failed: NVML went away",
    )


async def test_check_holding_skips_when_no_sample_arrives_in_time() -> None:
    async def never() -> Sample:
        await asyncio.sleep(3600)
        raise AssertionError

    started = time.monotonic()
    verdict = await check_holding(HOLDING, never, timeout_s=0.2)
    assert time.monotonic() - started < 2
    assert verdict.status == S.SKIP
    assert verdict.value.startswith("skipped: no NVML sample of")


async def test_check_released() -> None:
    still_there = sample(processes=[(4242, 0, 700 * MIB)])
    gone_now = sample()
    verdict = await check_released(HOLDING, samples_of(still_there, gone_now))
    assert verdict is not None and verdict.status == S.PASS
    assert verdict.value == "NVML: PID 4242 gone from GPU 0, 1024 MiB in use"
    verdict = await check_released(HOLDING, samples_of(still_there), timeout_s=1)
    assert verdict is not None and verdict.status == S.FAIL
    assert await check_released(HOLDING, None) is None


async def test_check_released_cannot_tell_without_a_sample() -> None:
    """A paused or stalled sampler is not evidence that the memory leaked."""

    async def never() -> Sample:
        await asyncio.sleep(3600)
        raise AssertionError

    assert await check_released(HOLDING, never, timeout_s=0.2) is None
