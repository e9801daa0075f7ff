"""The dashboard notes a GPU that `gpumon pick` claimed: `claimed by alice 40 s ago` on its
card, read from the claims directory off the event loop; gone once the claimer's job runs
there. The header says how many picks wait in the queue."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest

from gpumon.config import Settings
from gpumon.data import claims as rules
from gpumon.data.notes import GpuNote
from gpumon.data.queue import Request, waiter_text
from gpumon.sources.host.claims import ClaimsDir, user_name
from gpumon.sources.host.queue import process_start_s, write_waiter
from gpumon.ui.dashboard.app import GpumonApp
from gpumon.ui.widgets.gpu_panel import GpuPanel
from tests.support.claims import GPUS, cannot_list, claim
from tests.support.ui_helpers import app_for, make_process, make_sample, screen_text


async def settle(app: GpumonApp) -> None:
    """Wait for the claims read the last sample started (off the loop), if any."""
    pending = app.pipeline.claims.pending
    if pending is not None:
        await asyncio.wrap_future(pending)


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


async def test_claims_that_cannot_be_read_are_said_to_be_unknown_not_shown_as_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The directory cannot be listed: pick would refuse to pick, and the dashboard shows no
    claim; no claim notes must not read as no claims, so it says once, in a notice, why."""
    claims_dir = tmp_path / "claims"
    claim(claims_dir, 2, age_s=40)
    cannot_list(monkeypatch)
    sample = make_sample(GPUS)
    app = app_for(sample, settings=Settings(claims_dir=str(claims_dir)))
    async with app.run_test(size=(200, 50), notifications=True) as pilot:
        for _ in range(3):
            app.receive_sample(sample)
            await pilot.pause()
            await settle(app)
        said = [str(notification.message) for notification in app._notifications]
        assert said == [
            f"Claims cannot be read: cannot list {claims_dir}: Input/output error. GPUs "
            "claimed with gpumon pick are not marked."
        ]
        assert app.dashboard.query_one(GpuPanel).notes == {}


@pytest.mark.slow
async def test_another_users_junk_in_the_claims_directory_hides_no_claim(tmp_path: Path) -> None:
    """10,001 files that are not claims (which once switched claim notes off for everyone)
    change nothing: the claim among them is shown, and no notice is given."""
    claims_dir = tmp_path / "claims"
    claim(claims_dir, 2, age_s=40)
    for number in range(10_001):
        os.close(os.open(claims_dir / f"junk-{number}", os.O_CREAT | os.O_WRONLY, 0o644))
    sample = make_sample(GPUS)
    app = app_for(sample, settings=Settings(claims_dir=str(claims_dir)))
    async with app.run_test(size=(200, 50), notifications=True) as pilot:
        for _ in range(2):
            app.receive_sample(sample)
            await pilot.pause()
            await settle(app)
        app.receive_sample(sample)
        await pilot.pause()
        assert list(app.dashboard.query_one(GpuPanel).notes) == [2]
        assert not app._notifications


async def test_a_touched_claim_shows_the_age_written_in_it(tmp_path: Path) -> None:
    """`touch` moves a claim file's mtime, not its claim: one claimed 40 s ago and touched
    now reads 40 s old, one claimed 20 minutes ago is over however new its mtime; of one
    user's several claims on a GPU the newest is the one shown."""
    claims_dir = tmp_path / "claims"
    claim(claims_dir, 1, age_s=40)
    claim(claims_dir, 1, age_s=90)
    claim(claims_dir, 3, age_s=1200)
    for name in os.listdir(claims_dir):
        os.utime(claims_dir / name)  # touched just now
    sample = make_sample(GPUS)
    app = app_for(sample, settings=Settings(claims_dir=str(claims_dir)))
    me = user_name(os.geteuid())
    async with app.run_test(size=(200, 50)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        await settle(app)
        app.receive_sample(sample)
        await pilot.pause()
        notes = app.dashboard.query_one(GpuPanel).notes
        assert list(notes) == [1] and len(notes[1]) == 1
        assert notes[1][0].text.startswith(f"claimed by {me} 4")  # 40 s ago (41 if slow)


def test_the_note_text() -> None:
    found = rules.Claim("GPU-x", 1000, "alice", "GPU-x.1000.00000000", 100.0, 220.0)
    assert rules.note_text(found, 140.0) == "claimed by alice 40 s ago"
    assert rules.note_text(found, 100.0 + 185) == "claimed by alice 3 min ago"
    assert GpuNote(rules.note_text(found, 140.0), "note-warn").style == "note-warn"


async def test_the_header_says_how_many_picks_wait_in_the_queue(tmp_path: Path) -> None:
    """Two live `pick --wait` entries in the claims directory: `2 waiting` beside the free
    count in the header, at 80 columns; gone once they leave."""
    claims_dir = tmp_path / "claims"
    sample = make_sample(GPUS)
    other = subprocess.Popen(["sleep", "60"])  # a second waiting process
    with ClaimsDir.open(str(claims_dir), create=True) as directory:
        names = [write_waiter(directory, Request(count=2), time.time()), "@wait.0.0123456789ab"]
        text = waiter_text(Request(count=1), time.time(), other.pid, process_start_s(other.pid))
        directory.write_file(names[1], text)
    app = app_for(sample, settings=Settings(claims_dir=str(claims_dir)))
    async with app.run_test(size=(80, 24)) as pilot:
        app.receive_sample(sample)
        await pilot.pause()
        await settle(app)
        app.receive_sample(sample)
        await pilot.pause()
        header = screen_text(app).splitlines()[0]
        assert ", 2 waiting" in header, header
        for name in names:
            os.unlink(claims_dir / name)
        app.pipeline.claims._next_read_at = None  # the next sample reads again at once
        app.receive_sample(sample)
        await pilot.pause()
        await settle(app)
        app.receive_sample(sample)
        await pilot.pause()
        assert "waiting" not in screen_text(app).splitlines()[0]
    other.kill()
    other.wait()
