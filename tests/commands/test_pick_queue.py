"""`gpumon pick --wait` queues, first come first served across users: the older waiter gets the
GPU that frees, a killed waiter leaves the queue, an entry another user forged never jumps it,
an older waiter that wants more GPUs than are free does not hold up a smaller request, and
`pick --queue` says who waits for what. Each pick is a real forked process, as root or as
nobody (tests/support/queue_waiters.py)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpumon.cli import main
from gpumon.commands import pick_queue
from gpumon.data import queue as rules
from gpumon.sources.host.claims import ClaimsDir
from gpumon.sources.host.queue import process_start_s, write_waiter
from tests.support.queue_waiters import (
    NOBODY,
    Running,
    set_free,
    shared_place,
    start,
    start_pick,
    until,
    waiter_files,
)

ME = os.geteuid()
pytestmark = pytest.mark.skipif(ME != 0, reason="a waiter of another user needs a second uid")
WAIT = ("--wait", "60", "--interval", "0.25")
FREE_ONE = rules.Request(count=1, free_below_bytes=1024**3)  # one FREE GPU


@pytest.fixture
def place() -> Iterator[Path]:
    with shared_place() as made:
        yield made


@pytest.fixture
def running() -> Iterator[list[Running]]:
    """Processes a test started: killed at its end, whatever happened."""
    started: list[Running] = []
    yield started
    for process in started:
        process.kill()


def queue(place: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[str, str]:
    assert main(["pick", "--queue", *argv, "--claims-dir", str(place / "claims")]) == 0
    out, err = capsys.readouterr()
    return out, err


def test_the_older_waiter_gets_the_gpu_that_frees_first(
    place: Path, running: list[Running], capsys: pytest.CaptureFixture[str]
) -> None:
    """nobody waits first (looking only every 2 s), then root (every 0.25 s): GPU 0 frees and
    goes to nobody; root waits on, and gets GPU 1 when that frees."""
    set_free(place, 2, ())
    running.append(start_pick(place, "nobody", NOBODY, "--wait", "60", "--interval", "2"))
    until(lambda: waiter_files(place, NOBODY))
    time.sleep(0.05)  # a later change time than nobody's entry
    running.append(root := start_pick(place, "root", ME, *WAIT))
    until(lambda: waiter_files(place, ME))
    out, _ = queue(place, capsys)
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["#", "USER", "WAITED"], out
    assert lines[1].split()[:2] == ["1", "nobody"] and "1 GPU, FREE" in lines[1], out
    assert lines[2].split()[:2] == ["2", "root"], out

    set_free(place, 2, (0,))
    assert running[0].result()[:2] == (0, "0\n")
    assert not root.finished(1.0), root.err()  # GPU 0 went to nobody
    set_free(place, 2, (0, 1))  # nobody's claim still holds GPU 0
    code, out, err = root.result()
    assert (code, out) == (0, "1\n"), err
    assert waiter_files(place) == []  # each left the queue when it got its GPU
    assert queue(place, capsys)[0] == "no one waits\n"


def test_a_killed_waiter_leaves_the_queue(
    place: Path, running: list[Running], capsys: pytest.CaptureFixture[str]
) -> None:
    """nobody's waiting pick is killed (SIGKILL, no clean-up): the queue no longer lists it,
    root's waiter gets the GPU, and nobody's next pick removes the file it left."""
    set_free(place, 1, ())
    running.append(nobody := start_pick(place, "nobody", NOBODY, *WAIT))
    until(lambda: waiter_files(place, NOBODY))
    running.append(root := start_pick(place, "root", ME, *WAIT))
    until(lambda: waiter_files(place, ME))
    nobody.kill()
    out, _ = queue(place, capsys)
    assert [line.split()[1] for line in out.splitlines()[1:]] == ["root"], out

    set_free(place, 1, (0,))
    assert root.result()[:2] == (0, "0\n")
    assert len(waiter_files(place, NOBODY)) == 1  # root never removes another user's file
    running.append(again := start_pick(place, "again", NOBODY))
    assert again.result()[0] == 1  # GPU 0 is root's now
    assert waiter_files(place, NOBODY) == []


def plant(place: Path, name: str, text: bytes) -> None:
    with ClaimsDir.open(str(place / "claims"), create=False) as directory:
        directory.write_file(name, text)


def forge(place: Path) -> int:
    """As nobody: entries that try to jump the queue."""
    request = FREE_ONE
    me, started = os.getpid(), process_start_s(os.getpid())
    year_ago = time.time() - 365 * 86400
    plant(place, rules.file_name(0, "aa" * 8), rules.waiter_text(request, year_ago, me, started))
    future = time.time() + 3600
    plant(place, rules.file_name(NOBODY, "bb" * 8), rules.waiter_text(request, future, me, started))
    one = process_start_s(1)  # init, root's process
    plant(place, rules.file_name(NOBODY, "cc" * 8), rules.waiter_text(request, year_ago, 1, one))
    os.symlink("/etc/passwd", place / "claims" / rules.file_name(NOBODY, "dd" * 8))
    plant(place, rules.file_name(NOBODY, "ee" * 8), b"gpumon-wait 1\n" + b"x" * 100_000)
    return 0


def test_entries_another_user_forged_never_jump_the_queue(
    place: Path, running: list[Running], capsys: pytest.CaptureFixture[str]
) -> None:
    """nobody plants waiter files: one named for root, one dated in the future, one naming
    root's process 1, a symlink, a huge one. root's pick gets the GPU at once, and says
    it ignored them; --queue lists none of them, and --json says why each was ignored."""
    set_free(place, 1, (0,))
    running.append(forger := start(place, "forger", NOBODY, lambda: forge(place)))
    assert forger.result()[0] == 0
    running.append(root := start_pick(place, "root", ME))
    code, out, err = root.result()
    assert (code, out) == (0, "0\n"), err
    assert "ignored 5 entries of nobody (uid 65534) in " in err, err
    out, err = queue(place, capsys)
    assert out == "no one waits\n"
    assert "ignored 5 entries of nobody (uid 65534) in " in err, err
    out, _ = queue(place, capsys, "--json")
    said = {entry["name"]: entry["why"] for entry in json.loads(out)["ignored"]}
    assert len(said) == 5, said
    for why in (
        "owned by nobody, not the uid 0 its name says",
        "dated in the future",
        "its process 1 is run by root, not by its owner",
        "a symbolic link",
        "too large",
    ):
        assert any(why in each for each in said.values()), said


def test_a_time_written_long_ago_does_not_put_a_later_entry_first(
    place: Path, running: list[Running], capsys: pytest.CaptureFixture[str]
) -> None:
    """root waits; then nobody enters a live process of theirs, twice, with a time a year
    back: the queue goes by when each entry was written and counts a process once, so root
    is first and still gets the GPU."""
    set_free(place, 1, ())
    running.append(root := start_pick(place, "root", ME, *WAIT))
    until(lambda: waiter_files(place, ME))

    def enter_with_an_old_time() -> int:
        with ClaimsDir.open(str(place / "claims"), create=False) as directory:
            write_waiter(directory, FREE_ONE, 1.0)
            write_waiter(directory, FREE_ONE, 1.0)
        time.sleep(60)  # alive, in the queue, never taking a GPU
        return 0

    running.append(start(place, "old", NOBODY, enter_with_an_old_time))
    until(lambda: len(waiter_files(place, NOBODY)) == 2)
    out, err = queue(place, capsys)
    assert [line.split()[1] for line in out.splitlines()[1:]] == ["root", "nobody"], out
    assert "a second entry of process" in err, err
    set_free(place, 1, (0,))
    code, out, err = root.result()
    assert (code, out) == (0, "0\n"), err


def test_an_older_waiter_for_more_gpus_than_are_free_does_not_hold_up_one_for_fewer(
    place: Path, running: list[Running]
) -> None:
    """nobody waits for 2 GPUs of 3 with 1 FREE: root's pick of 1 gets it now (backfill);
    an older waiter for 1 GPU keeps it: root's pick says for whom, and offers only what it
    could get."""
    set_free(place, 3, (2,))
    running.append(big := start_pick(place, "big", NOBODY, "-n", "2", *WAIT))
    until(lambda: waiter_files(place, NOBODY))
    running.append(small := start_pick(place, "small", ME))
    assert small.result()[:2] == (0, "2\n")
    left = waiter_files(place, NOBODY)
    big.kill()

    set_free(place, 3, ())
    running.append(start_pick(place, "one", NOBODY, "--wait", "60", "--interval", "60"))
    until(lambda: waiter_files(place, NOBODY) not in ([], left))  # big's file tidied by one
    set_free(place, 3, (1,))
    running.append(late := start_pick(place, "late", ME))
    code, out, err = late.result()
    assert (code, out) == (1, ""), err
    assert "GPU 1: kept for nobody (waiting since " in err, err
    assert "would help: --busy-ok (shares the freest: GPU 0)" in err, err  # not the kept one


def test_a_waiter_that_never_takes_its_gpu_is_passed_over(
    place: Path, running: list[Running], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live process of nobody's in the queue that is no pick (it never takes the GPU kept for
    it) holds root's waiter up for a while, not for ever."""
    monkeypatch.setattr(pick_queue, "MIN_HOLD_S", 1.0)
    set_free(place, 1, (0,))

    def sit_in_the_queue() -> int:
        with ClaimsDir.open(str(place / "claims"), create=False) as directory:
            write_waiter(directory, FREE_ONE, time.time())
        time.sleep(60)
        return 0

    running.append(start(place, "sitter", NOBODY, sit_in_the_queue))
    until(lambda: waiter_files(place, NOBODY))
    running.append(root := start_pick(place, "root", ME, *WAIT))
    code, out, err = root.result()
    assert (code, out) == (0, "0\n"), err
    assert "nobody's pick waiting since" in err and "passed over" in err, err


def test_the_queue_as_json(
    place: Path, running: list[Running], capsys: pytest.CaptureFixture[str]
) -> None:
    """--queue --json: each waiter's user, count, what it wants and since when."""
    set_free(place, 1, ())
    running.append(start_pick(place, "nobody", NOBODY, "--min-free-memory", "20G", *WAIT))
    until(lambda: waiter_files(place, NOBODY))
    out, _ = queue(place, capsys, "--json")
    shown = json.loads(out)
    (waiter,) = shown["waiting"]
    assert waiter["user"] == "nobody" and waiter["count"] == 1 and waiter["position"] == 1
    assert waiter["min_free_bytes"] == 20 * 1024**3 and not waiter["free_only"]
    assert waiter["wants"] == "1 GPU, 20.0G free memory"
    assert 0 <= waiter["waited_s"] < 60 and abs(waiter["since_s"] - time.time()) < 60


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_waiter_ended_by_a_signal_leaves_the_queue_at_once(
    place: Path, running: list[Running], signum: int
) -> None:
    """SIGTERM (``kill``, a batch system) or SIGHUP (the SSH session closed) end a waiting pick
    as Ctrl+C does: its file is gone at once, not left for its owner's next pick."""
    set_free(place, 1, ())
    running.append(nobody := start_pick(place, "nobody", NOBODY, *WAIT))
    until(lambda: waiter_files(place, NOBODY))
    os.kill(nobody.pid, signum)
    assert nobody.finished(10)
    assert waiter_files(place) == []
