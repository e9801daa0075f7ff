"""Held idle on the dashboard (see :mod:`gpumon.data.idle`): the app's tracker, and the note
``held idle by alice 2h13m`` on each GPU held idle.

The tracker is fed from the app's store, before the screens draw; the screens read its
:attr:`~gpumon.sampling.idle.IdleTracker.view` of the latest sample and hand it down (the
process table's SM% cells, the per-user summary's idle memory).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpumon.data.idle import held_idle_text
from gpumon.data.model import Sample
from gpumon.sampling.idle import IdleTracker, idle_rule
from gpumon.ui.widgets.gpu_notes import GpuNote, NoteSource

if TYPE_CHECKING:
    from gpumon.ui.dashboard.app import GpumonApp


def watch_idleness(app: GpumonApp) -> IdleTracker:
    """A tracker of the app's settings, subscribed to its store, whose GPUs held idle get a
    note (added to the app's note sources). A pause or a stuck poll is a gap nobody saw: the
    tracker is told the interval in force."""
    tracker = IdleTracker(idle_rule(app.settings), interval_s=lambda: app.poller.interval_s)
    app.store.subscribe(tracker.observe)
    app.note_sources.append(held_idle_notes(tracker, app.glyphs.ascii_only))
    return tracker


def held_idle_notes(tracker: IdleTracker, ascii_only: bool) -> NoteSource:
    """A note source: a ``note-warn`` on each GPU that ``tracker`` finds held idle."""

    def notes(sample: Sample | None) -> dict[int, tuple[GpuNote, ...]]:
        if sample is None:
            return {}
        return {
            index: (GpuNote(held_idle_text(held, ascii_only), "note-warn"),)
            for index, held in tracker.view.gpus.items()
        }

    return notes
