"""``w``, tell me when: what a dashboard watches until it happens, then says once.

A :class:`Watch` waits for a GPU to become FREE (``pid`` is ``None``) or for a process to end;
in the cluster view it names its node. :class:`Watches` holds them: ``w`` on the same GPU or
process again stops watching it, and each watched GPU gets a ``watching`` note.
:class:`WatchCheck` is the one-machine dashboard's step: each sample finishes the watches it
shows done (a GPU FREE by :func:`~gpumon.data.free.free_gpu_indices`; a process no longer
listed where its GPU's list was read). No Textual here; the app says the alerts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Set
from dataclasses import dataclass
from typing import Literal

from gpumon.data import format as fmt
from gpumon.data.free import free_gpu_indices, processes_known
from gpumon.data.model import GpuProcess, GpuStats, Sample
from gpumon.data.notes import GpuNote
from gpumon.data.views import shorten_command


@dataclass(frozen=True, slots=True)
class Watch:
    """One thing to be told about: GPU ``gpu_index`` becomes FREE, or, with ``pid``, that
    process (listed on that GPU) ends. ``node``: the cluster node (``None``: this machine).
    ``name`` is how the alert names it: ``GPU 3 (NVIDIA H100 80GB HBM3)``,
    ``PID 4242 (python train.py)``."""

    gpu_index: int
    name: str
    pid: int | None = None
    node: str | None = None
    #: The watched process's start, when known: a new process on its PID is not it.
    created_s: float | None = None

    @property
    def target(self) -> tuple[str | None, int, int | None]:
        """What is watched: two watches of one target are one watch."""
        return (self.node, self.gpu_index, self.pid)

    @property
    def note(self) -> GpuNote:
        """The card's note while it is watched."""
        return GpuNote("watching" if self.pid is None else f"watching PID {self.pid}")

    def done_text(self, where: str, at_s: float) -> str:
        """What the alert says once it happened, ``where`` naming the machine or node,
        ``at_s`` the time of the sample that showed it. A GPU "was FREE at 14:02": the alert
        stays on screen for minutes, and someone may take the GPU meanwhile."""
        if self.pid is None:
            clock = time.strftime("%H:%M", time.localtime(at_s))
            return f"{self.name} on {where} was FREE at {clock}"
        return f"{self.name} on GPU {self.gpu_index} of {where} has ended"


class Watches:
    """The watches a dashboard holds, in the order they were asked for."""

    def __init__(self) -> None:
        self._watches: list[Watch] = []

    def __iter__(self) -> Iterator[Watch]:
        return iter(tuple(self._watches))

    def __len__(self) -> int:
        return len(self._watches)

    def watching(self, watch: Watch) -> bool:
        """True while ``watch``'s target is watched."""
        return any(old.target == watch.target for old in self._watches)

    def toggle(self, watch: Watch) -> bool:
        """Watch ``watch``, or stop watching its target if it is watched; True when it now
        is."""
        if self.watching(watch):
            self._watches = [old for old in self._watches if old.target != watch.target]
            return False
        self._watches.append(watch)
        return True

    def notes(self, node: str | None = None) -> dict[int, tuple[GpuNote, ...]]:
        """NVML index -> the ``watching`` notes of ``node``'s GPUs (``None``: this machine)."""
        notes: dict[int, tuple[GpuNote, ...]] = {}
        for watch in self._watches:
            if watch.node == node:
                notes[watch.gpu_index] = (*notes.get(watch.gpu_index, ()), watch.note)
        return notes

    def finish(self, done: Callable[[Watch], bool]) -> list[Watch]:
        """Stop watching what ``done`` says has happened, and return those watches."""
        finished = [watch for watch in self._watches if done(watch)]
        if finished:
            self._watches = [watch for watch in self._watches if watch not in finished]
        return finished


#: A command is cut to this many characters in a watch's name.
COMMAND_CHARS = 40


def process_watch(process: GpuProcess) -> Watch:
    """A watch for ``process`` to end, named by its PID and (short) command."""
    command = fmt.truncate(shorten_command(process.command or "?"), COMMAND_CHARS)
    return Watch(
        process.gpu_index,
        f"PID {process.pid} ({command})",
        pid=process.pid,
        created_s=process.create_time_s,
    )


def gpu_watch(gpu: GpuStats) -> Watch:
    """A watch for ``gpu`` to become FREE, named by its index and model."""
    return Watch(gpu.index, f"GPU {gpu.index} ({gpu.name or fmt.NA})")


def is_done(watch: Watch, sample: Sample, free: Set[int]) -> bool:
    """Has what ``watch`` waits for happened in ``sample`` (``free``: its FREE GPUs)?"""
    if watch.pid is None:
        return watch.gpu_index in free
    listed = [
        process
        for process in sample.processes
        if process.pid == watch.pid
        and (watch.created_s is None or process.create_time_s in (None, watch.created_s))
    ]  # a new process on the PID at once (a reused number) is not the one watched
    if listed:
        return all(process.exited for process in listed)
    gpu = next((gpu for gpu in sample.gpus if gpu.index == watch.gpu_index), None)
    # Not listed where the list is unknown (a lost GPU, a refused list) is no end.
    return gpu is not None and processes_known(gpu, sample)


class WatchCheck(Watches):
    """The watches of this machine, as a pipeline step: after each sample, :attr:`free` (its
    FREE GPUs) and :attr:`done` (the watches it finished, for the app to alert)."""

    def __init__(self, free_threshold_mib: int) -> None:
        super().__init__()
        self.free_threshold_mib = free_threshold_mib
        self.free: frozenset[int] = frozenset()
        self.done: list[Watch] = []

    def __call__(self, sample: Sample) -> None:
        self.free = free_gpu_indices(sample, self.free_threshold_mib)
        self.done = self.finish(lambda watch: is_done(watch, sample, self.free))

    def toggle_one(
        self,
        gpu: GpuStats | None,
        process: GpuProcess | None,
        free: Set[int],
        latest: Sample | None,
    ) -> tuple[str, Literal["information", "warning"]]:
        """``w``: watch ``process`` (the table's cursor) or else ``gpu`` (the panel's
        selection), or stop; returns what to say, and its severity. A GPU FREE now (in
        ``free``) or a process ended is not watched; a GPU whose processes are unknown is,
        with a warning that no FREE can come while they are."""
        if process is not None:
            watch = process_watch(process)
            over = f"{watch.name} has ended already" if process.exited else None
        elif gpu is not None:
            watch = gpu_watch(gpu)
            over = f"GPU {gpu.index} is FREE now" if gpu.index in free else None
        else:
            return "No GPU to watch yet.", "warning"
        if over is not None and not self.watching(watch):
            return f"{over}: nothing to wait for.", "information"
        if not self.toggle(watch):
            return f"Stopped watching {watch.name}.", "information"
        unknown = None if watch.pid is not None or gpu is None else _unknown(gpu, latest)
        if unknown is not None:
            return (f"Watching {watch.name}, but its processes are unknown ({unknown}): it "
                    "cannot be told FREE while they are (w again: stop).", "warning")  # fmt: skip
        when = "is FREE" if watch.pid is None else "ends"
        said = f"Watching {watch.name}: you will be told when it {when} (w again: stop)."
        return said, "information"

    def gpu_notes(self, sample: Sample | None) -> dict[int, tuple[GpuNote, ...]]:
        """A note source: ``watching`` on each watched GPU."""
        return self.notes()


def _unknown(gpu: GpuStats, sample: Sample | None) -> str | None:
    """Why ``gpu``'s process list is unknown in ``sample``, or ``None``."""
    if gpu.lost:
        return "LOST"
    if sample is None or processes_known(gpu, sample):
        return None
    return gpu.processes_error or "not read"
