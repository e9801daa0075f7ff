"""Runs the probe child and turns everything it does, or fails to do, into step results.

Never imports torch: the child does that, in its own process, started from a bootstrap that
exposes only the ``gpumon`` package to a foreign interpreter (``--probe-python``). The child
runs in its own session; a timeout, bad output or cancelling :func:`run_probe` kills the
group, and no child outlives gpumon (docs/probe-protocol.md, "Running the child").
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from gpumon.data.format import safe_lines
from gpumon.probe import steps as S
from gpumon.probe.child_process import (
    child_command,
    end_child,
    kill_group,
    parent_death_preexec,
    track_group,
)
from gpumon.probe.confirm import CONFIRM_TIMEOUT_S, NextSample, check_holding, check_released
from gpumon.probe.protocol import (
    Done,
    Event,
    Holding,
    ProtocolError,
    Request,
    StepEvent,
    decode,
    encode,
    encode_continue,
)

EventCallback = Callable[[Event], "Awaitable[None] | None"]

# A line longer than this is garbage, not a protocol message.
MAX_LINE_BYTES = 1 << 20
STDERR_TAIL_CHARS = 2000


@dataclass
class ProbeOutcome:
    """How a probe ended. ``steps`` holds every step's final event (all nine)."""

    ok: bool
    summary: str
    steps: dict[int, StepEvent] = field(default_factory=dict)
    pid: int | None = None
    returncode: int | None = None
    timed_out: bool = False
    holding: Holding | None = None


class _Garbage(Exception):
    """The child wrote a line that is not a protocol message."""


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


class _ProbeRun:
    def __init__(
        self,
        argv: list[str],
        timeout_s: float,
        next_sample: NextSample | None,
        on_event: EventCallback | None,
        confirm_timeout_s: float,
    ) -> None:
        self.argv = argv
        self.timeout_s = timeout_s
        self.next_sample = next_sample
        self.on_event = on_event
        self.confirm_timeout_s = confirm_timeout_s
        self.steps: dict[int, StepEvent] = {}
        self.started: dict[int, float] = {}
        self.holding: Holding | None = None
        self.child_done: Done | None = None
        self.stderr_tail = ""

    async def emit(self, event: Event) -> None:
        if isinstance(event, StepEvent):
            self.steps[event.step] = event
            if event.status == S.RUNNING:
                self.started[event.step] = time.monotonic()
        if self.on_event is not None:
            result = self.on_event(event)
            if inspect.isawaitable(result):
                await result

    async def step(self, step_id: int, status: str, value: str, detail: str = "") -> None:
        started = self.started.get(step_id)
        duration_ms = 0.0 if started is None else (time.monotonic() - started) * 1000
        await self.emit(StepEvent(step_id, status, value, duration_ms, detail))

    async def run(self) -> ProbeOutcome:
        try:
            process = await asyncio.create_subprocess_exec(
                *self.argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                preexec_fn=parent_death_preexec(),
                limit=MAX_LINE_BYTES,
            )
        except OSError as error:
            await self.settle(f"cannot start {self.argv[0]}: {error.strerror or error}")
            return await self.finish(None, None, timed_out=False)
        track_group(process.pid)
        stderr_task = asyncio.ensure_future(self.drain_stderr(process))
        failure: str | None = None
        timed_out = False
        try:
            try:
                await asyncio.wait_for(self.converse(process), self.timeout_s)
            except asyncio.TimeoutError:
                timed_out = True
                kill_group(process.pid)
                failure = (
                    f"timed out after {self.timeout_s:g} s: "
                    f"the child (PID {process.pid}) was killed"
                )
            except _Garbage as garbage:
                kill_group(process.pid)
                failure = f"the child's output is not the probe protocol: {garbage}"
        finally:
            await end_child(process, stderr_task)
        # None only if a killed child could not even be reaped (stuck in the driver).
        returncode = process.returncode
        if failure is None and returncode is not None and returncode != 0:
            failure = f"the child {_describe_exit(returncode)}"
        if failure is None and self.child_done is None:
            failure = "the child exited without finishing"
        await self.settle(failure, self.stderr_detail() if failure else "")
        if failure is None:
            await self.confirm_released()
        return await self.finish(process.pid, returncode, timed_out=timed_out)

    async def converse(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None and process.stdin is not None
        while True:
            try:
                line = await process.stdout.readline()
            except ValueError:  # longer than MAX_LINE_BYTES
                raise _Garbage(f"a line longer than {MAX_LINE_BYTES} bytes") from None
            if not line:
                break
            try:
                event = decode(line)
            except ProtocolError as error:
                text = line.decode("utf-8", "replace").strip()
                shown = text if len(text) <= 80 else text[:77] + "..."
                raise _Garbage(f"{shown!r} ({error})") from None
            if isinstance(event, Done):
                self.child_done = event
                continue
            await self.emit(event)
            if isinstance(event, Holding):
                self.holding = event
                await self.confirm_holding(event)
                with contextlib.suppress(ConnectionError, RuntimeError):
                    process.stdin.write((encode_continue() + "\n").encode())
                    await process.stdin.drain()
        await process.wait()

    async def drain_stderr(self, process: asyncio.subprocess.Process) -> None:
        assert process.stderr is not None
        while chunk := await process.stderr.read(4096):
            tail = self.stderr_tail + chunk.decode("utf-8", "replace")
            self.stderr_tail = tail[-STDERR_TAIL_CHARS:]

    def stderr_detail(self) -> str:
        tail = safe_lines(self.stderr_tail.strip())
        return f"stderr (last lines):\n{tail}" if tail else "(nothing on stderr)"

    async def confirm_holding(self, holding: Holding) -> None:
        """Step 6, while the child holds its tensors."""
        await self.step(S.NVML.id, S.RUNNING, "")
        verdict = await check_holding(holding, self.next_sample, self.confirm_timeout_s)
        await self.step(S.NVML.id, verdict.status, verdict.value, verdict.detail)

    async def confirm_released(self) -> None:
        """The end of step 9, after the child exited: NVML no longer lists its PID."""
        cleanup = self.steps.get(S.CLEANUP.id)
        step6 = self.steps.get(S.NVML.id)
        if (
            cleanup is None
            or cleanup.status != S.PASS
            or self.holding is None
            or step6 is None
            or step6.status != S.PASS
        ):
            return
        verdict = await check_released(self.holding, self.next_sample, self.confirm_timeout_s)
        if verdict is not None:
            value = (
                f"{cleanup.value}; {verdict.value}" if verdict.status == S.PASS else verdict.value
            )
            await self.emit(StepEvent(S.CLEANUP.id, verdict.status, value, cleanup.duration_ms))

    async def settle(self, failure: str | None, detail: str = "") -> None:
        """Give every step a final status: the first unfinished one fails with ``failure``."""
        pending = [
            step for step in S.STEP_IDS if step not in self.steps or not self.steps[step].final
        ]
        if failure is None:
            failure = "the child ended without reporting this step" if pending else None
        if failure is None:
            return
        if not pending:
            # Every step reported, then the child misbehaved: that is step 9 ("the child exits").
            last = self.steps[S.CLEANUP.id]
            value = failure if last.status != S.FAIL else f"{last.value}; {failure}"
            await self.emit(StepEvent(S.CLEANUP.id, S.FAIL, value, last.duration_ms, detail))
            return
        first, rest = pending[0], pending[1:]
        await self.step(first, S.FAIL, failure, detail)
        for step in rest:
            await self.step(step, S.SKIP, f"not run: step {first} failed")

    async def finish(
        self, pid: int | None, returncode: int | None, *, timed_out: bool
    ) -> ProbeOutcome:
        failed = [event for event in self.steps.values() if event.status == S.FAIL]
        skipped = sum(event.status == S.SKIP for event in self.steps.values())
        if failed:
            first = min(failed, key=lambda event: event.step)
            summary = f"step {first.step} ({first.title}) failed: {first.value}"
        else:
            summary = "every step passed"
            if self.holding is not None:
                summary += f" on cuda:{self.holding.cuda_index}"
            if skipped:
                summary += f" ({skipped} skipped)"
        ok = not failed
        await self.emit(Done(ok, summary))
        return ProbeOutcome(
            ok=ok,
            summary=summary,
            steps=dict(sorted(self.steps.items())),
            pid=pid,
            returncode=returncode,
            timed_out=timed_out,
            holding=self.holding,
        )


async def run_probe(
    request: Request,
    *,
    python: str | None = None,
    timeout_s: float = S.DEFAULT_TIMEOUT_S,
    next_sample: NextSample | None = None,
    on_event: EventCallback | None = None,
    command: Sequence[str] | None = None,
    confirm_timeout_s: float = CONFIRM_TIMEOUT_S,
) -> ProbeOutcome:
    """Run the probe child once (in ``python``, default gpumon's; ``command`` replaces its argv
    before ``--request``, for tests) and report every step through ``on_event`` (a function or
    coroutine function), in order.

    Never raises for anything the child does: each failure is a failed step and the rest are
    skipped; the last event is always the runner's own :class:`Done`. Past ``timeout_s`` the
    child's group is killed; cancelling kills and reaps it. Without ``next_sample`` (the next
    NVML sample) step 6 is skipped; it waits ``confirm_timeout_s`` for NVML at most.
    """
    argv = [*(command if command is not None else child_command(python))]
    argv += ["--request", encode(request)]
    run = _ProbeRun(argv, timeout_s, next_sample, on_event, confirm_timeout_s)
    return await run.run()
