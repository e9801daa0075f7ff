"""What ``gpumon pick`` adds when too few GPUs are FREE: the GPUs held idle (by whom, for how
long) and the options that would pick something now (``--busy-ok``, ``--min-free-memory``)
or later (``--wait``).

Idleness is the dashboard's: an :class:`~gpumon.sampling.idle.IdleTracker` fed every look,
its quiet spells' starts read from the history database where one is readable; without one
a single look knows nobody idle, and says nothing rather than guess.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from gpumon.data import format as fmt
from gpumon.data.free import MIB
from gpumon.data.idle import held_idle_text
from gpumon.data.model import Sample
from gpumon.data.ranking import Candidate, qualify
from gpumon.sampling.history.reader import HistoryError
from gpumon.sampling.idle import IdleTracker, RecordedKey, idle_rule
from gpumon.sampling.usage_history import history_path, open_reader

if TYPE_CHECKING:
    from gpumon.config import Settings

PREFIX = "gpumon pick: "
GIB = 1024 * MIB


class IdleWatch:
    """Who holds each GPU idle, over the looks of one pick."""

    def __init__(self, settings: Settings) -> None:
        self.tracker = IdleTracker(idle_rule(settings))
        self.path = history_path(settings)
        self._asked: set[RecordedKey] = set()

    def lines(self, sample: Sample, skip: Sequence[Candidate]) -> list[str]:
        """``gpumon pick: held idle: GPU 3 by alice 2h13m``: the GPUs of ``sample`` held idle
        (none of ``skip``), or nothing when none is known to be."""
        self._read_history(sample)
        self.tracker.observe(sample)
        taken = {candidate.gpu_index for candidate in skip}
        ascii_only = not fmt.locale_is_utf8()
        held = [
            f"GPU {index} {held_idle_text(gpu, ascii_only)}"
            for index, gpu in sorted(self.tracker.view.gpus.items())
            if index not in taken
        ]
        return [f"{PREFIX}{', '.join(held)}"] if held else []

    def _read_history(self, sample: Sample) -> None:
        """Hand the tracker when the history database says each quiet process's spell began
        (each process asked once; a database that is absent or unreadable says nothing)."""
        rule = self.tracker.rule
        quiet = [
            process
            for process in sample.processes
            if process.gpu_uuid is not None
            and rule.quiet(process.sm_utilization_pct)
            and rule.holds(process)
            and (process.gpu_uuid, process.pid, process.create_time_s) not in self._asked
        ]
        if not quiet:
            return
        self._asked.update((p.gpu_uuid, p.pid, p.create_time_s) for p in quiet)
        try:
            reader = open_reader(self.path)
            if reader is None:
                return
            with reader:
                for process in quiet:
                    assert process.gpu_uuid is not None
                    since = reader.idle_since(process.gpu_uuid, process.pid, process.create_time_s)
                    if since is not None:
                        key = (process.gpu_uuid, process.pid, process.create_time_s)
                        self.tracker.recorded_since[key] = since
        except HistoryError:
            return


def size_text(size_bytes: int) -> str:
    """A size ``--min-free-memory`` reads, rounded down: ``39G``, ``512M``."""
    return f"{size_bytes // GIB}G" if size_bytes >= GIB else f"{size_bytes // MIB}M"


def help_line(
    sample: Sample,
    n: int,
    output_format: str,
    *,
    claimed: Collection[int] = (),
    waiting: bool,
    hopeless: bool,
) -> str:
    """``gpumon pick: would help: --busy-ok (...), --min-free-memory 39G (...), --wait``: what
    would pick ``n`` GPUs of ``sample`` that are not FREE, never one of ``claimed`` (NVML
    indices another pick holds); "" when nothing would."""
    found, _ = qualify(sample, n=n, output_format=output_format)
    every = [candidate for candidate in found if candidate.gpu_index not in claimed]
    options = []
    if len(every) >= n:
        shared = ", ".join(candidate.label for candidate in every[:n])
        options.append(f"--busy-ok (shares the freest: {shared})")
    roomy = sorted(
        (c for c in every if c.memory_free_bytes is not None),
        key=lambda candidate: -(candidate.memory_free_bytes or 0),
    )
    if len(roomy) >= n and (roomy[n - 1].memory_free_bytes or 0) >= MIB:
        last = roomy[n - 1]
        assert last.memory_free_bytes is not None
        have = f"{last.label} has {fmt.bytes_short(last.memory_free_bytes)} free"
        options.append(f"--min-free-memory {size_text(last.memory_free_bytes)} ({have})")
    if not waiting and not hopeless:
        options.append("--wait (until one is free)" if n == 1 else f"--wait (until {n} are free)")
    return f"{PREFIX}would help: {', '.join(options)}" if options else ""
