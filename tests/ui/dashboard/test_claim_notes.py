"""The dashboard notes a GPU that `gpumon pick` claimed: `claimed by alice 40 s ago` on its
card, read from the claims directory off the event loop; gone once the claimer's job runs
there."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from gpumon.data import claims as rules
from gpumon.data.notes import GpuNote
from gpumon.sampling.claims import ClaimsReader
from gpumon.settings import Settings
from gpumon.sources.host import claims as host_claims
from gpumon.sources.host.claims import ClaimsDir, user_name
from gpumon.ui.dashboard.app import GpumonApp
from gpumon.ui.widgets.gpu_panel import GpuPanel
from tests.support.ui_helpers import app_for, make_gpu, make_process, make_sample, screen_text

GPUS = tuple(make_gpu(index) for index in range(4))


def claim(claims_dir: Path, index: int, age_s: float) -> None:
    key = rules.claim_key(GPUS[index].uuid)
    assert key is not None
    with ClaimsDir.open(str(claims_dir), create=True) as directory:
        made = time.time() - age_s
        name = directory.write(key, made, made + 120)
        os.utime(name, (made, made), dir_fd=directory.fd)


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


def cannot_list(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Listing the claims directory fails (an I/O error); returns the count of tries."""
    tries = [0]

    def scan(self: ClaimsDir, *args: object, **options: object) -> object:
        tries[0] += 1
        raise host_claims.ClaimsOff(f"cannot list {self.path}: Input/output error")

    monkeypatch.setattr(ClaimsDir, "scan", scan)
    return tries


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


class Clocks:
    """The wall clock and the monotonic clock a ClaimsReader reads, moved by hand."""

    def __init__(self) -> None:
        self.wall = time.time() + 60.0  # the directory's last change is a minute old
        self.mono = 1000.0

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


def notes_read_by(clocks: Clocks, claims_dir: Path, **options: object) -> ClaimsReader:
    """Claim notes of ``claims_dir`` on ``clocks``, read by hand."""
    return ClaimsReader(
        path=str(claims_dir),
        clock=lambda: clocks.wall,
        monotonic=lambda: clocks.mono,
        **options,  # type: ignore[arg-type]
    )


def test_an_unchanged_claims_directory_is_not_read_again_each_second(tmp_path: Path) -> None:
    """Any local user may fill the shared directory with ten thousand files: reading them
    all every second in every dashboard cost ~0.18 s of CPU a second. An unchanged directory
    is looked at, not read; a new claim (a rename into it) is read at once."""
    claims_dir = tmp_path / "claims"
    claim(claims_dir, 1, age_s=5)
    clocks = Clocks()
    notes = notes_read_by(clocks, claims_dir)
    notes.read()
    assert notes.full_reads == 1 and [c.key for c in notes.claims] == [
        rules.claim_key(GPUS[1].uuid)
    ]
    for _ in range(5):
        clocks.advance(1.0)
        notes.read()
    assert notes.full_reads == 1 and len(notes.claims) == 1  # the claims stand
    claim(claims_dir, 3, age_s=1)  # changes the directory (and its time stamp is new)
    clocks.wall = time.time()
    clocks.mono += 1.0
    notes.read()
    assert notes.full_reads == 2 and len(notes.claims) == 2
    # Changed less than RECENT_CHANGE_S ago: a second change could hide in the same time
    # stamp, so it is read whole again.
    clocks.mono += 1.0
    notes.read()
    assert notes.full_reads == 3
    # A claim file rewritten in place changes no directory: read again every FULL_READ_S.
    clocks.advance(60.0)
    notes.read()
    assert notes.full_reads == 4
    for _ in range(3):
        clocks.advance(1.0)
        notes.read()
    assert notes.full_reads == 4
    clocks.advance(30.0)
    notes.read()
    assert notes.full_reads == 5
    # The directory goes: no claims, at once.
    for name in os.listdir(claims_dir):
        os.unlink(claims_dir / name)
    claims_dir.rmdir()
    clocks.advance(1.0)
    notes.read()
    assert notes.claims == ()


def test_a_claim_in_the_same_time_stamp_tick_as_the_last_read_is_not_hidden(
    tmp_path: Path,
) -> None:
    """The last read came just after a change (the directory's time stamp then new); a second
    claim lands within the same tick of that stamp (`pick -n 4` renames several files within
    microseconds), so the stamp does not move. The next read, seconds later, must read the
    files again: the stamp was not settled when the last one was read."""
    claims_dir = tmp_path / "claims"
    claim(claims_dir, 1, age_s=5)
    stamp_s = time.time()
    os.utime(claims_dir, (stamp_s, stamp_s))
    clocks = Clocks()
    clocks.wall = stamp_s + 0.001
    notes = notes_read_by(clocks, claims_dir)
    notes.read()
    assert notes.full_reads == 1 and len(notes.claims) == 1
    claim(claims_dir, 3, age_s=1)
    os.utime(claims_dir, (stamp_s, stamp_s))  # the same tick: the stamp is as it was
    clocks.advance(2.5)
    notes.read()
    assert notes.full_reads == 2 and len(notes.claims) == 2
    clocks.advance(1.0)  # read when settled: now an unchanged stamp stands
    notes.read()
    assert notes.full_reads == 2


def test_a_slow_claims_directory_is_read_less_often(tmp_path: Path) -> None:
    """A read that took a quarter of a second of CPU (a directory of thousands of files,
    changed all the time) waits 12.5 s before the next: reads take at most 2 % of a core.
    Wall time does not count (a busy machine), and no wait is longer than FULL_READ_S."""
    claims_dir = tmp_path / "claims"
    claim(claims_dir, 0, age_s=5)
    clocks = Clocks()
    clocks.wall = time.time()  # a directory changed just now: read whole every time
    cpu = [0.0]

    def thread_time() -> float:
        cpu[0] += 0.125  # each look at the CPU clock during a read: an eighth of a second
        return cpu[0]

    notes = notes_read_by(clocks, claims_dir, thread_time=thread_time)
    notes.read()
    assert notes.full_reads == 1
    assert notes._next_read_at == clocks.mono + 0.125 / 0.02
    cpu[0] = 0.0

    def slower() -> float:
        cpu[0] += 5.0
        return cpu[0]

    notes.thread_time = slower
    notes.read()
    assert notes._next_read_at == clocks.mono + 30.0  # FULL_READ_S at most


def test_a_claims_directory_on_a_slow_file_system_is_read_less_often(tmp_path: Path) -> None:
    """A read that waited three quarters of a second on the file system (NFS) and took next
    to no CPU waits 7.5 s before the next: reads take at most a tenth of the time, and are
    not made back to back."""
    claims_dir = tmp_path / "claims"
    claim(claims_dir, 0, age_s=5)
    clocks = Clocks()
    clocks.wall = time.time()  # a directory changed just now: read whole every time
    began = clocks.mono

    def monotonic() -> float:
        clocks.mono += 0.75  # each look at the clock: three quarters of a second later
        return clocks.mono

    notes = notes_read_by(clocks, claims_dir)
    notes.monotonic = monotonic
    notes.read()
    assert notes.full_reads == 1
    assert notes._next_read_at == pytest.approx(began + 0.75 + 0.75 / 0.1)


def test_a_claims_directory_that_cannot_be_listed_is_not_listed_again_each_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A listing that fails counts as a read: tried again when the directory changes, or
    after FULL_READ_S, not every second."""
    claims_dir = tmp_path / "claims"
    claim(claims_dir, 0, age_s=5)
    tries = cannot_list(monkeypatch)
    clocks = Clocks()
    notes = notes_read_by(clocks, claims_dir)
    notes.read()
    assert tries == [1] and notes.claims == () and notes.off is not None
    for _ in range(3):
        clocks.advance(1.0)
        notes.read()
    assert tries == [1]
