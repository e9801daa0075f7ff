"""``gpumon watch``: wait for GPUs, or a GPU process, headless; one line per change.

Looks every ``--interval`` and prints a timestamped line whenever what it watches changes.
Exits 0 once the condition holds (``--exec``: then runs the command with ``GPUMON_GPUS`` and
exits with its status), 1 when ``--timeout`` passes (or no driver answers at the start), 2 on
bad input, 130 on Ctrl+C. Unknown is never done: a lost GPU, an unread process list or a
driver that stopped answering satisfies nothing. On a terminal the end rings and notifies as
the dashboard's ``w`` does (:func:`~gpumon.data.alerts.alert_sequence`).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

from gpumon.commands.pick_wait import read_timeout, span
from gpumon.config.text import duration_seconds
from gpumon.data import format as fmt
from gpumon.data.alerts import alert_sequence
from gpumon.data.free import free_gpu_indices, processes_known
from gpumon.data.model import GpuStats, Sample
from gpumon.data.ranking import users_text
from gpumon.sampling.watches import Watch, is_done, process_watch

if TYPE_CHECKING:
    from gpumon.config import Settings
    from gpumon.data.idle import IdleView
    from gpumon.sampling.idle import IdleTracker

PREFIX = "gpumon watch: "
CONDITIONS = ("free", "idle", "below-mem")
#: The environment variable --exec's command finds the GPUs in (``2,3``).
GPUS_VARIABLE = "GPUMON_GPUS"
SIMULATED = "[simulated] "


class BadInput(ValueError):
    """What the command line asks cannot be watched (exit 2)."""


@dataclass(frozen=True, slots=True)
class Until:
    """The condition: ``free``, ``idle`` (held idle) or ``below-mem`` (``below_mib``)."""

    kind: str = "free"
    below_mib: int | None = None

    def holds(self, gpu: GpuStats, free: frozenset[int], idle: IdleView) -> bool:
        """Whether ``gpu`` meets it; a lost GPU or an N/A reading never does."""
        if gpu.lost:
            return False
        if self.kind == "free":
            return gpu.index in free
        if self.kind == "idle":
            return gpu.index in idle.gpus
        used = gpu.memory_used_bytes
        return used is not None and self.below_mib is not None and used < self.below_mib * 1024**2

    @property
    def words(self) -> str:
        """``FREE``, ``held idle``, ``below 4000 MiB used``."""
        return {"free": "FREE", "idle": "held idle"}.get(self.kind, f"below {self.below_mib} MiB")


def parse_until(words: Sequence[str]) -> tuple[Until, list[str]]:
    """``--until``'s words: the condition (``below-mem N`` or ``below-mem=N``), then any GPUs
    argparse gave it (``--until free 3``)."""
    if not words:
        return Until(), []
    kind, _, number = words[0].partition("=")
    rest = list(words[1:])
    if kind not in CONDITIONS:
        raise BadInput(f"--until: not one of {', '.join(CONDITIONS)}: {fmt.safe_text(kind, 40)!r}")
    if kind != "below-mem":
        if number:
            raise BadInput(f"--until {kind} takes no value")
        return Until(kind), rest
    if not number:
        if not rest:
            raise BadInput("--until below-mem needs a number of MiB (below-mem 4000)")
        number = rest.pop(0)
    if not number.isdigit() or int(number) < 1:
        raise BadInput(
            f"--until below-mem: not a whole number of MiB: {fmt.safe_text(number, 40)!r}"
        )
    return Until(kind, int(number)), rest


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "gpus",
        nargs="*",
        metavar="GPU",
        help="NVML indices or GPU-... UUIDs: wait until every one meets the condition "
        "(none given: until any GPU does)",
    )
    parser.add_argument(
        "--until",
        nargs="+",
        metavar="CONDITION",
        help="free (default: FREE, as pick counts it), idle (held idle, by the idle rule), "
        "or below-mem MIB (less GPU memory in use than that)",
    )
    parser.add_argument(
        "--pid", type=int, metavar="PID", help="wait until this GPU process ends, instead"
    )
    parser.add_argument(
        "--timeout",
        type=duration_seconds,
        metavar="DURATION",
        help="give up after this long (90s, 30m, 2h; a bare number is seconds) and exit 1",
    )
    parser.add_argument(
        "--exec",
        dest="then_run",
        metavar="CMD",
        help=f"then run CMD with the shell, the GPUs in ${GPUS_VARIABLE} (2,3), and exit "
        "with its status",
    )


class Watcher:
    """What is watched, fed one sample at a time: :meth:`look` says what changed and whether
    it is done."""

    def __init__(
        self,
        until: Until,
        targets: Sequence[str],
        pid: int | None,
        free_threshold_mib: int,
        tracker: IdleTracker,
    ) -> None:
        self.until = until
        self.targets = tuple(targets)
        self.pid = pid
        self.free_threshold_mib = free_threshold_mib
        self.tracker = tracker
        self.indices: tuple[int, ...] = ()
        self.watch: Watch | None = None
        self._said: dict[str, str] = {}

    def start(self, sample: Sample) -> None:
        """Find what the command line names in the first sample (raises :class:`BadInput`)."""
        if self.pid is not None:
            if self.targets:
                raise BadInput("--pid and GPUs: choose one")
            process = next((p for p in sample.processes if p.pid == self.pid), None)
            if process is None:
                raise BadInput(f"no GPU process with PID {self.pid} is listed here")
            self.watch = process_watch(process)
            return
        self.indices = tuple(_find(sample.gpus, target) for target in self.targets)

    def look(self, sample: Sample) -> tuple[list[str], tuple[int, ...] | None]:
        """(lines for what changed, the GPUs that are done or ``None`` while not done)."""
        self.tracker.observe(sample)
        states: dict[str, str] = {}
        done: tuple[int, ...] | None = None
        if sample.unavailable is not None and not sample.gpus:
            states["GPUs"] = f"no data: {sample.unavailable.headline}"
        elif self.watch is not None:
            watch = self.watch
            ended = is_done(watch, sample, frozenset())
            listed = any(process.pid == watch.pid for process in sample.processes)
            state = "ended" if ended else "runs" if listed else "unknown (processes not read)"
            states[f"GPU {watch.gpu_index}"] = f"{watch.name} {state}"
            done = (watch.gpu_index,) if ended else None
        else:
            free = free_gpu_indices(sample, self.free_threshold_mib)
            view = self.tracker.view
            by_index = {gpu.index: gpu for gpu in sample.gpus}
            watched = self.indices or tuple(sorted(by_index))
            met = []
            for index in watched:
                gpu = by_index.get(index)
                states[f"GPU {index}"] = "gone" if gpu is None else _state(gpu, sample, free, view)
                if gpu is not None and self.until.holds(gpu, free, view):
                    met.append(index)
            if met and (not self.indices or len(met) == len(self.indices)):
                done = tuple(met)
        lines = [f"{name}: {text}" for name, text in states.items() if self._said.get(name) != text]
        self._said.update(states)
        return lines, done


def _find(gpus: Sequence[GpuStats], target: str) -> int:
    """The NVML index ``target`` names (an index or a UUID, or its start)."""
    for gpu in gpus:
        if target == str(gpu.index) or (
            target.startswith("GPU-") and gpu.uuid is not None and gpu.uuid.startswith(target)
        ):
            return gpu.index
    known = ", ".join(str(gpu.index) for gpu in gpus) or "none"
    raise BadInput(f"no GPU {fmt.safe_text(target, 60)!r} here (GPUs: {known})")


def _state(gpu: GpuStats, sample: Sample, free: frozenset[int], idle: IdleView) -> str:
    """``FREE``, ``in use by alice, bob``, ``held idle by alice``, ``LOST``..."""
    if gpu.lost:
        return f"LOST ({gpu.lost_reason or 'no answer'})"
    if not processes_known(gpu, sample):
        return f"processes unknown ({gpu.processes_error or 'not read'})"
    if gpu.index in free:
        return "FREE"
    if gpu.index in idle.gpus:
        return f"held idle by {', '.join(idle.gpus[gpu.index].users)}"
    processes = sample.processes_on(gpu.index)
    if processes:
        return f"in use by {users_text(processes)}"
    return "memory in use, no process listed"


def follow(
    read: Callable[[], Sample],
    watcher: Watcher,
    *,
    timeout_s: float | None,
    interval_s: float,
    out: TextIO,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    wall: Callable[[], float] = time.time,
) -> tuple[int, ...] | int:
    """Look until done (the GPUs returned) or not: 1 (timeout, no driver), 2 (bad input)."""
    started = clock()
    first = read()
    label = SIMULATED if first.simulated else ""
    if not first.gpus:
        reason = first.unavailable.headline if first.unavailable else "no GPU"
        print(f"{PREFIX}{label}{fmt.safe_text(reason, 200)}", file=sys.stderr)
        return 1
    try:
        watcher.start(first)
    except BadInput as error:
        print(f"{PREFIX}error: {error}", file=sys.stderr)
        return 2
    sample = first
    limit = math.inf if timeout_s is None else timeout_s
    while True:
        began = clock()
        lines, done = watcher.look(sample)
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall()))
        for line in lines:
            print(f"{stamp} {label}{fmt.safe_text(line, 300)}", file=out, flush=True)
        if done is not None:
            return done
        if clock() - started >= limit:
            print(f"{PREFIX}{label}gave up after {span(limit)}", file=sys.stderr)
            return 1
        pause = min(interval_s - (clock() - began), limit - (clock() - started))
        if pause > 0:
            sleep(pause)
        sample = read()


def run(
    settings: Settings,
    *,
    gpus: Sequence[str],
    until: Sequence[str] | None,
    pid: int | None,
    timeout: float | None,
    then_run: str | None,
) -> int:
    """``gpumon watch``: wait, then say so (exit 0, or --exec's status); see the module."""
    from gpumon.sampling.idle import IdleTracker, idle_rule
    from gpumon.sampling.snapshot import SampleReader
    from gpumon.sources.base import source_for

    try:
        condition, more = parse_until(until or ())
    except BadInput as error:
        print(f"{PREFIX}error: {error}", file=sys.stderr)
        return 2
    tracker = IdleTracker(idle_rule(settings), interval_s=settings.interval_s)
    watcher = Watcher(condition, [*gpus, *more], pid, settings.free_threshold_mib, tracker)
    reader = SampleReader(source_for(settings, processes=True, pcie=False, host_details=True))
    began = time.monotonic()

    def read() -> Sample:  # a stuck driver cannot hold the watch past its --timeout
        return reader.read(read_timeout(timeout, time.monotonic() - began))

    try:
        result = follow(read, watcher, timeout_s=timeout, interval_s=settings.interval_s,
                        out=sys.stdout)  # fmt: skip
    except KeyboardInterrupt:
        return 130
    finally:
        reader.close()
    label = SIMULATED if reader.simulated else ""
    if isinstance(result, int):
        return result
    gpus_text = ",".join(str(index) for index in result)
    if pid is not None:
        said = f"PID {pid} has ended"
    else:
        many = len(result) > 1
        said = f"GPU{'s' if many else ''} {gpus_text} {'are' if many else 'is'} {condition.words}"
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"{stamp} {label}done: {said} ({GPUS_VARIABLE}={gpus_text})", flush=True)
    _alert(f"{label}{said}")
    if then_run is None:
        return 0
    import subprocess

    try:
        return subprocess.run(
            then_run, shell=True, env={**os.environ, GPUS_VARIABLE: gpus_text}
        ).returncode
    except KeyboardInterrupt:  # the command had Ctrl+C too, and has ended
        return 130


def _alert(text: str) -> None:
    """The bell and a desktop notification, on stderr or else stdout where it is a terminal."""
    for stream in (sys.stderr, sys.stdout):
        try:
            terminal = stream.isatty()
        except (AttributeError, ValueError):
            terminal = False
        if terminal:
            stream.write(alert_sequence("gpumon", text, tmux=bool(os.environ.get("TMUX"))))
            stream.flush()
            return
