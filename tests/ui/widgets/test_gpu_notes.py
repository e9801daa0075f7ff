"""Notes on a GPU (claimed, held idle, watched) show on its card's bottom border and at the
end of its row, in every layout, and cut where there is no room."""

from __future__ import annotations

import pytest

from gpumon.data.notes import GpuNote, gather_notes
from tests.support.ui_helpers import app_for, make_gpu, make_sample, screen_text


def test_notes_are_gathered_per_gpu_in_the_sources_order() -> None:
    claimed = GpuNote("claimed by alice 40 s ago", "note-warn")
    watching = GpuNote("watching")
    notes = gather_notes([lambda s: {1: [claimed]}, lambda s: {1: [watching], 2: []}], None)
    assert notes == {1: (claimed, watching)}


@pytest.mark.parametrize("size", [(200, 50), (120, 24), (80, 24), (60, 15)])
async def test_a_note_shows_on_its_gpu_in_every_layout(size: tuple[int, int]) -> None:
    gpus = tuple(make_gpu(index) for index in range(4))
    app = app_for(make_sample(gpus))
    held = {2: [GpuNote("held idle by bob 2h13m", "note-warn")]}
    app.pipeline.note_sources.append(lambda sample: held)
    async with app.run_test(size=size) as pilot:
        app.receive_sample(make_sample(gpus))
        await pilot.pause()
        lines = [line for line in screen_text(app).splitlines() if "held idle by bob" in line]
        assert len(lines) == 1, screen_text(app)
