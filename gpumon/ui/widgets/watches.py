"""``w``, tell me when: what a dashboard watches until it happens, then says once.

A :class:`Watch` waits for a GPU to become FREE (``pid`` is ``None``) or for a process to end;
in the cluster view it names its node. :class:`Watches` holds them: ``w`` on the same GPU or
process again stops watching it, each watched GPU gets a ``watching`` note on its card, and
:meth:`Watches.finish` hands over (and forgets) the ones a new sample shows done. Each
dashboard decides what done means from its own data (``ui.dashboard.watch``, the cluster
app) and tells the user with :meth:`gpumon.ui.app.MonitorApp.alert`. No Textual here.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gpumon.ui.widgets.gpu_notes import GpuNote


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
