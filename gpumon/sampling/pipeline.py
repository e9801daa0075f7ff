"""A sample's way to the screen: ordered headless steps, then one state for the screens.

:class:`DashboardPipeline` runs each new sample through its steps, in this order: select
(``--only``, ``--only-visible``), store (history), idle, watches, claims. Each step is a plain
callable that may cut the sample (returning it) and keeps what it found; none refers to an
app. :meth:`DashboardPipeline.state` then says everything a screen draws in one
:class:`DashboardState`. :func:`stall_of` is how both dashboards tell that the latest sample is
no longer current.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from gpumon.config import Settings
from gpumon.data.free import free_summary, processes_known
from gpumon.data.idle import IdleView
from gpumon.data.model import Sample
from gpumon.data.notes import GpuNote, NoteSource, gather_notes, unknown_process_notes
from gpumon.data.selection import GpuSelection, Selected, select_gpus, selection_from
from gpumon.sampling.claims import ClaimsReader
from gpumon.sampling.idle import IdleTracker, held_idle_notes, idle_rule
from gpumon.sampling.poller import Poller
from gpumon.sampling.store import Store
from gpumon.sampling.watches import WatchCheck

#: A step: takes the sample, returns it cut (or ``None``: passed on as it is).
Step = Callable[[Sample], Sample | None]

STALL_NOT_ANSWERING = "NVML not answering"
STALL_READS_FAILING = "reads failing"


@dataclass(frozen=True, slots=True)
class Stall:
    """The latest sample is no longer current: for ``seconds``, because of ``reason``."""

    seconds: int
    reason: str = STALL_NOT_ANSWERING

    def __str__(self) -> str:
        """``NVML not answering for 12 s``: how both dashboards say it."""
        return f"{self.reason} for {self.seconds} s"

    def text(self, taken_s: float) -> str:
        """``NVML not answering for 12 s: readings of 14:02:03`` (``taken_s``: the sample's)."""
        return f"{self}: readings of {time.strftime('%H:%M:%S', time.localtime(taken_s))}"


def stall_of(
    poller: Poller, *, reads_failing: bool = True, reason: str = STALL_NOT_ANSWERING
) -> Stall | None:
    """The poll in flight has taken three intervals (``reason``: a driver stuck in an
    ioctl), or (with ``reads_failing``) every read has failed for as long; else ``None``."""
    stalled = poller.stalled_s()
    if stalled is not None:
        return Stall(int(stalled), reason)
    failing = poller.failing_s() if reads_failing else None
    return None if failing is None else Stall(int(failing), STALL_READS_FAILING)


class ShownGpus:
    """The step that cuts each sample to the GPUs ``--only``/``--only-visible`` let through,
    so that every view agrees (``gpumon once`` cuts the same way)."""

    def __init__(self, selection: GpuSelection) -> None:
        self.selection = selection
        #: The latest sample's cut (``None`` before the first, or without a filter).
        self.last: Selected | None = None
        self._said: set[str] = set()

    def __call__(self, sample: Sample) -> Sample:
        if not self.selection.active or (sample.unavailable is not None and not sample.gpus):
            return sample  # no filter, or no GPU data at all: nothing to choose from
        self.last = select_gpus(sample, self.selection)
        return self.last.sample

    def notices(self) -> list[str]:
        """What cannot be matched (``--only 9`` on 4 GPUs) or is worth knowing about
        ``CUDA_VISIBLE_DEVICES``, each line once."""
        if self.last is None:
            return []
        new = [line for line in (*self.last.missing, *self.last.notes) if line not in self._said]
        self._said.update(new)
        return new

    @property
    def header_text(self) -> str:
        """``GPUs 0,3 of 8`` while a filter is on, else ``""``."""
        return self.last.describe() if self.last is not None else ""

    @property
    def nothing_shown(self) -> str | None:
        """What the process table says while the filters let no GPU through, else ``None``."""
        if self.last is None or self.last.sample.gpus:
            return None
        why = "; ".join(self.last.missing) or f"the start-up filters leave {self.last.describe()}"
        return f"No GPU shown: {why}."


@dataclass(frozen=True, slots=True, eq=False)
class DashboardState:
    """Everything the dashboard's screens draw, replaced whole (never equal to another: each
    one is news)."""

    sample: Sample | None = None
    stall: Stall | None = None
    paused: bool = False
    interval_s: float = 1.0
    #: Whether a poller runs (tests and snapshots push samples by hand).
    polling: bool = True
    #: The FREE GPUs (none while the sample is stale: stale is not free).
    free: frozenset[int] = frozenset()
    #: What the header says of them, longest form first (``FREE 3,6,7``, ``3 free of 8``);
    #: nothing while the sample is stale or the lists that would tell are unknown.
    free_text: tuple[str, ...] = ()
    notes: Mapping[int, tuple[GpuNote, ...]] = field(default_factory=dict)
    idle: IdleView = field(default_factory=IdleView)
    #: ``GPUs 0,3 of 8`` while a start-up filter is on.
    selection: str = ""
    #: What the process table says when the filters let no GPU through.
    nothing_shown: str | None = None

    @property
    def stale_text(self) -> str:
        """What a detail screen's title says first while the sample is stale, else ``""``."""
        if self.stall is None or self.sample is None:
            return ""
        return self.stall.text(self.sample.timestamp_s)


def free_texts(sample: Sample, free: frozenset[int]) -> tuple[str, ...]:
    """The header's words for ``free``: the list, then the count where that is shorter."""
    unknown = sum(not processes_known(gpu, sample) for gpu in sample.gpus)
    listed = free_summary(free, len(sample.gpus), unknown)
    counted = free_summary(free, len(sample.gpus), unknown, counted=True)
    if listed is None or counted is None:
        return ()
    return (listed, counted) if len(counted) < len(listed) else (listed,)


class DashboardPipeline:
    """The one-machine dashboard's steps and note sources (see the module docstring).

    Args:
        settings: the filters, thresholds, idle rule and claims directory.
        store: where samples are kept (the app's: its screens read the history).
        interval_s: the interval in force (a pause or a stuck poll is a gap nobody saw).
    """

    def __init__(
        self,
        settings: Settings,
        store: Store,
        interval_s: Callable[[], float],
        *,
        ascii_only: bool = False,
        environ: Mapping[str, str] = os.environ,
    ) -> None:
        self.selection = ShownGpus(
            selection_from(settings.only_gpus, settings.only_visible, environ)
        )
        self.store = store
        self.idle = IdleTracker(idle_rule(settings), interval_s=interval_s)
        self.watches = WatchCheck(settings.free_threshold_mib)
        self.claims = ClaimsReader(settings.claims_dir)
        self.steps: Sequence[Step] = (
            self.selection,
            store.push,
            self.idle.observe,
            self.watches,
            self.claims,
        )
        #: What is said of each GPU beside its readings, in this order.
        self.note_sources: list[NoteSource] = [
            unknown_process_notes,
            self.watches.gpu_notes,
            self.claims.notes,
            held_idle_notes(self.idle, ascii_only),
        ]

    def run(self, sample: Sample) -> Sample:
        """Run ``sample`` through the steps, in order; returns it as the store took it."""
        for step in self.steps:
            cut = step(sample)
            if cut is not None:
                sample = cut
        return sample

    def state(
        self, *, stall: Stall | None, stale: bool, paused: bool, interval_s: float, polling: bool
    ) -> DashboardState:
        """What the screens draw now (``stale``: the latest sample is no longer current)."""
        sample = self.store.latest
        free = frozenset() if stale else self.watches.free  # the latest sample's
        return DashboardState(
            sample=sample,
            stall=stall,
            paused=paused,
            interval_s=interval_s,
            polling=polling,
            free=free,
            free_text=()
            if stale or sample is None
            else self.claims.with_waiting(free_texts(sample, free)),
            notes=gather_notes(self.note_sources, sample),
            idle=self.idle.view,
            selection=self.selection.header_text,
            nothing_shown=self.selection.nothing_shown,
        )
