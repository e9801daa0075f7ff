"""What is said of a GPU beside its readings: claimed by a user's pick, held idle, watched,
its processes unknown.

The dashboard hands :class:`GpuNote` objects down to the GPU panel (``GpuPanel.notes``), which
draws them in a card's bottom border or at the end of a row. No Textual here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpumon.data.free import processes_known
from gpumon.data.model import Sample

#: The note on a GPU whose process list could not be read (refused, unsupported): its
#: readings may look idle, but who uses it is not known, so it is never FREE.
UNKNOWN_PROCESSES = "procs ?"


@dataclass(frozen=True, slots=True)
class GpuNote:
    """One note on one GPU: ``claimed by alice 40 s ago``, ``held idle by bob 2h13m``."""

    text: str
    #: The panel's style: ``note-warn`` (needs a look: claimed, held idle) or ``note-info``.
    style: str = "note-info"


#: Where notes come from: a function of the latest sample (None before the first) giving
#: NVML index -> notes. The dashboard asks each of its sources on every redraw.
NoteSource = Callable[[Sample | None], Mapping[int, Sequence[GpuNote]]]


def gather_notes(
    sources: Iterable[NoteSource], sample: Sample | None
) -> dict[int, tuple[GpuNote, ...]]:
    """Every source's notes, per GPU: warnings first (a short line keeps the first notes),
    then in the sources' order."""
    gathered: dict[int, list[GpuNote]] = {}
    for source in sources:
        for index, notes in source(sample).items():
            gathered.setdefault(index, []).extend(notes)
    return {
        index: tuple(sorted(notes, key=lambda note: note.style != "note-warn"))
        for index, notes in gathered.items()
        if notes
    }


def unknown_process_notes(sample: Sample | None) -> dict[int, tuple[GpuNote, ...]]:
    """A note source: ``procs ?`` on each GPU whose process list is unknown (a LOST GPU
    says LOST already)."""
    if sample is None:
        return {}
    note = (GpuNote(UNKNOWN_PROCESSES, "note-warn"),)
    return {
        gpu.index: note for gpu in sample.gpus if not gpu.lost and not processes_known(gpu, sample)
    }
