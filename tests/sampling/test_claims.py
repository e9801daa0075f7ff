"""ClaimsReader: the claims directory is read off the loop, rarely when it is unchanged, slow
or failing, and never more than a small share of a core."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gpumon.data import claims as rules
from gpumon.sampling.claims import ClaimsReader
from tests.support.claims import GPUS, cannot_list, claim


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
