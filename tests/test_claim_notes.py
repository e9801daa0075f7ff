"""The dashboard notes a GPU that `gpumon pick` claimed: `claimed by alice 40 s ago` on its
card, read from the claims directory off the event loop; gone once the claimer's job runs
there."""

from __future__ import annotations

import os
import time
from pathlib import Path

from gpumon.data import claims as rules
from gpumon.settings import Settings
from gpumon.sources.host.claims import ClaimsDir, user_name
from gpumon.ui.dashboard.app import GpumonApp
from gpumon.ui.dashboard.claim_notes import ClaimNotes
from gpumon.ui.widgets.gpu_notes import GpuNote
from gpumon.ui.widgets.gpu_panel import GpuPanel
from tests.ui_helpers import app_for, make_gpu, make_process, make_sample, screen_text

GPUS = tuple(make_gpu(index) for index in range(4))


def claim(claims_dir: Path, index: int, age_s: float) -> None:
    key = rules.claim_key(GPUS[index].uuid)
    assert key is not None
    with ClaimsDir.open(str(claims_dir), create=True) as directory:
        made = time.time() - age_s
        name = directory.write(key, made, made + 120)
        os.utime(name, (made, made), dir_fd=directory.fd)


async def settle(app: GpumonApp) -> None:
    """Wait for the claims read the last redraw started (off the loop), if any."""
    notes = next(source for source in app.note_sources if isinstance(source, ClaimNotes))
    if notes.pending is not None:
        await notes.pending


async def test_a_claimed_gpu_says_who_claimed_it_on_its_card(tmp_path: Path) -> None:
    claim(tmp_path / "claims", 2, age_s=40)
    sample = make_sample(GPUS)
    app = app_for(sample, settings=Settings(claims_dir=str(tmp_path / "claims")))
    me = user_name(os.geteuid())
    async with app.run_test(size=(200, 50)) as pilot:
        app.receive_sample(sample)  # the first redraw starts the read, off the loop
        await pilot.pause()
        await settle(app)
        app.receive_sample(sample)
        await pilot.pause()
        notes = app.dashboard.query_one(GpuPanel).notes
        assert list(notes) == [2] and notes[2][0].style == "note-warn"
        assert notes[2][0].text.startswith(f"claimed by {me} 4")  # 40 s ago (41 if slow)
        lines = [line for line in screen_text(app).splitlines() if f"claimed by {me}" in line]
        assert len(lines) == 1, screen_text(app)
        # Its job has started on GPU 2: the claim is over, and so is the note.
        running = make_sample(GPUS, (make_process(GPUS[2], 4242, user=me, elapsed_s=1.0),))
        app.receive_sample(running)
        await pilot.pause()
        assert app.dashboard.query_one(GpuPanel).notes == {}
        assert "claimed by" not in screen_text(app)


async def test_simulated_gpus_and_a_missing_directory_have_no_claim_notes(tmp_path: Path) -> None:
    claim(tmp_path / "claims", 0, age_s=5)
    app = app_for(make_sample(GPUS), settings=Settings(claims_dir=str(tmp_path / "nowhere")))
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(2):
            app.receive_sample(make_sample(GPUS))
            await pilot.pause()
            await settle(app)
        assert app.dashboard.query_one(GpuPanel).notes == {}
    app = app_for(make_sample(GPUS), settings=Settings(claims_dir=str(tmp_path / "claims")))
    async with app.run_test(size=(120, 40)) as pilot:
        for _ in range(2):
            app.receive_sample(make_sample(GPUS, simulated=True))
            await pilot.pause()
            await settle(app)
        assert app.dashboard.query_one(GpuPanel).notes == {}


def test_the_note_text() -> None:
    found = rules.Claim("GPU-x", 1000, "alice", "GPU-x.1000.00000000", 100.0, 100.0, 220.0)
    assert rules.note_text(found, 140.0) == "claimed by alice 40 s ago"
    assert rules.note_text(found, 100.0 + 185) == "claimed by alice 3 min ago"
    assert GpuNote(rules.note_text(found, 140.0), "note-warn").style == "note-warn"
